//! Amendments: records a fill recovered from the vehicle's SD log, kept beside the splits
//! (`amend_NNNN.ulg`, each a standalone ULog; `amend_NNNN.bin` for an ArduPilot flight) and
//! entered in the manifest with the dropouts they fill. The splits are never rewritten
//! (their SHA-256 stays); readers take a split through [`read_split`], which reads each
//! filled gap (its dropouts and the stream's messages between the anchors around it; a
//! `.bin` split's dropout mark, or the place where the vehicle dropped records unmarked) as
//! the merged records of the amendment, so that the session reads as one flight with each
//! record once.

use std::io;
use std::path::Path;

use crate::fill::amendment::Fill;
use crate::ulog::message::msg_type;

/// One amendment file in the manifest.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AmendmentEntry {
    pub file: String,
    pub sha256: String,
    /// The SD log the records came from.
    pub source: String,
    pub fills: Vec<Fill>,
}

/// A dropout a fill could not fill, and why (the latest attempt's).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct UnfilledGap {
    pub split: String,
    pub offset: u64,
    pub reason: String,
}

/// The name of the `n`th amendment of a PX4 session.
pub fn amendment_name(n: usize) -> String {
    format!("amend_{n:04}.ulg")
}

/// The name of the `n`th amendment of an ArduPilot session.
pub fn bin_amendment_name(n: usize) -> String {
    format!("amend_{n:04}.bin")
}

/// Whether the dropout at `offset` of `split` is filled by one of a session's `amendments`
/// (its manifest's).
pub fn is_filled(amendments: &[AmendmentEntry], split: &str, offset: u64) -> bool {
    amendments
        .iter()
        .flat_map(|a| &a.fills)
        .any(|f| f.split == split && (f.offset == offset || (f.from..f.to).contains(&offset)))
}

/// The bytes of split `file` of the session in `dir` (with the manifest's `amendments`), each
/// gap an amendment fills read as its merged records. A fill that does not point at a
/// dropout (a split or amendment not as the manifest says) is left out with a warning.
pub fn read_split(dir: &Path, amendments: &[AmendmentEntry], file: &str) -> io::Result<Vec<u8>> {
    let bytes = std::fs::read(dir.join(file))?;
    let fills: Vec<(&AmendmentEntry, &Fill)> = amendments
        .iter()
        .flat_map(|a| a.fills.iter().map(move |f| (a, f)))
        .filter(|(_, f)| f.split == file)
        .collect();
    if fills.is_empty() {
        return Ok(bytes);
    }
    // Each edit: a range of the split and what it reads as.
    let mut amendments: Vec<(&str, Vec<u8>)> = Vec::new();
    let mut edits: Vec<(usize, usize, std::ops::Range<usize>, usize)> = Vec::new();
    for (entry, fill) in &fills {
        let (from, to, o) = (fill.from as usize, fill.to as usize, fill.offset as usize);
        let at_dropout = if file.ends_with(".bin") {
            // A DataFlash split: its dropout mark, or where the vehicle dropped records
            // unmarked (nothing replaced), at a record.
            o == from && (from == to || bytes.get(o..o + 2) == Some(&crate::dataflash::HEADER[..]))
        } else {
            bytes.get(o..o + 3) == Some(&[2, 0, msg_type::DROPOUT][..]) && (from..to).contains(&o)
        };
        // The flight's tail without a dropout: its fill ends where the split's messages do;
        // an event buffer's window: its fill starts at the window's first sample.
        let at_tail = o == to;
        let at_window = o == from && from < to;
        if from > to || to > bytes.len() || !(at_dropout || at_tail || at_window) {
            tracing::warn!(
                file,
                offset = o,
                "an amendment's fill is not at a dropout: left out"
            );
            continue;
        }
        if !amendments.iter().any(|(name, _)| *name == entry.file) {
            amendments.push((&entry.file, std::fs::read(dir.join(&entry.file))?));
        }
        let a = amendments
            .iter()
            .position(|(name, _)| *name == entry.file)
            .expect("just read");
        if amendments[a].1.len() < fill.end as usize || fill.start > fill.end {
            tracing::warn!(
                file = entry.file,
                "an amendment is shorter than the manifest says"
            );
            continue;
        }
        edits.push((from, to, fill.start as usize..fill.end as usize, a));
    }
    edits.sort_by_key(|e| e.0);
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0usize;
    for (from, to, range, a) in edits {
        if from < at {
            tracing::warn!(
                file,
                offset = from,
                "amendments overlap: the later one left out"
            );
            continue;
        }
        out.extend_from_slice(&bytes[at..from]);
        out.extend_from_slice(&amendments[a].1[range]);
        at = to;
    }
    out.extend_from_slice(&bytes[at..]);
    Ok(out)
}
