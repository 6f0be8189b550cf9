//! Fills a closed ArduPilot session from the vehicle's card (the shell around
//! [`crate::fill::dataflash`]): reads the session's `.bin` splits, runs the filler over the
//! card through `read` (any source of its bytes: a file, MAVLink FTP), and writes what it
//! recovered as one amendment beside the splits (`amend_NNNN.bin`, durable before the
//! manifest names it), the gaps it could not fill in the manifest. A session filled once is
//! not filled again.

use std::path::Path;

use sha2::{Digest, Sha256};

use crate::autopilot::LogFormat;
use crate::fill::dataflash::stream::BinStream;
use crate::fill::dataflash::{BinFiller, BinOutcome, amendment};
use crate::store::amend::{AmendmentEntry, UnfilledGap, bin_amendment_name};
use crate::store::files::{hex, read_manifest, update_manifest, write_file_durably};

/// Why an ArduPilot session could not be filled.
#[derive(Debug, thiserror::Error)]
pub enum BinFillError {
    #[error("cannot read or write the session: {0}")]
    Io(#[from] std::io::Error),
    #[error("the session is still being recorded (its manifest is not closed)")]
    NotClosed,
    #[error("not an ArduPilot session")]
    NotDataFlash,
    #[error("the card's log is not this flight's: {0}")]
    WrongLog(String),
    #[error("cannot read the card's log: {0}")]
    Card(String),
}

/// What a fill of an ArduPilot session did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct BinFillReport {
    /// Gaps filled, of them marked by the receiver (the others: the vehicle's drops at the
    /// source), and the records recovered with their bytes.
    pub filled: usize,
    pub marked: usize,
    pub records: u64,
    pub record_bytes: u64,
    /// Stretches of the stream the card could not fill, with why.
    pub unfilled: Vec<String>,
    /// Bytes of the card read.
    pub fetched_bytes: u64,
    /// The amendment written, if any.
    pub amendment: Option<String>,
    /// The session was filled before: nothing was done.
    pub filled_before: bool,
}

/// Fills the closed ArduPilot session in `dir` from the card log `source` of `len` bytes,
/// whose bytes `read(offset, count)` gives (fewer at its end).
pub fn fill_bin_session(
    dir: &Path,
    source: &str,
    len: u64,
    mut read: impl FnMut(u64, u64) -> Result<Vec<u8>, String>,
) -> Result<BinFillReport, BinFillError> {
    let manifest = read_manifest(dir)?;
    if manifest.log_format != LogFormat::DataFlash {
        return Err(BinFillError::NotDataFlash);
    }
    if !manifest.closed {
        return Err(BinFillError::NotClosed);
    }
    let mut report = BinFillReport::default();
    if manifest.fill.as_deref() == Some("done") {
        report.filled_before = true;
        return Ok(report);
    }
    let splits: Vec<(String, Vec<u8>, u64)> = manifest
        .splits
        .iter()
        .map(|s| {
            Ok((
                s.file.clone(),
                std::fs::read(dir.join(&s.file))?,
                s.summary.preamble_bytes,
            ))
        })
        .collect::<std::io::Result<_>>()?;
    let scanned: Vec<(&[u8], u64)> = splits.iter().map(|(_, b, p)| (&b[..], *p)).collect();
    let stream = BinStream::scan(&scanned);
    let mut filler = BinFiller::new(&stream, len);
    let mut outcomes = Vec::new();
    while let Some((at, n)) = filler.next_read() {
        let data = read(at, n).map_err(BinFillError::Card)?;
        report.fetched_bytes += data.len() as u64;
        filler.handle_read(at, &data);
        outcomes.extend(std::iter::from_fn(|| filler.poll()));
    }
    outcomes.extend(std::iter::from_fn(|| filler.poll()));
    if let Some(why) = filler.wrong_log() {
        return Err(BinFillError::WrongLog(why.to_owned()));
    }
    let names: Vec<String> = splits.iter().map(|(n, _, _)| n.clone()).collect();
    let mut fills = Vec::new();
    let mut unfilled = Vec::new();
    for outcome in outcomes {
        match outcome {
            BinOutcome::Filled(f) => {
                report.filled += 1;
                report.marked += usize::from(f.marked);
                report.records += f.count;
                report.record_bytes += f.records.len() as u64;
                fills.push(f);
            }
            BinOutcome::Unfilled(u) => {
                report
                    .unfilled
                    .push(format!("{} at {}: {}", names[u.split], u.offset, u.reason));
                unfilled.push(UnfilledGap {
                    split: names[u.split].clone(),
                    offset: u.offset,
                    reason: u.reason,
                });
            }
        }
    }
    let mut added = None;
    if !fills.is_empty() {
        let (bytes, entries) = amendment::build(&stream, &names, filler.card_formats(), &fills);
        let name = bin_amendment_name(manifest.amendments.len());
        write_file_durably(dir, &name, &bytes)?;
        added = Some(AmendmentEntry {
            file: name.clone(),
            sha256: hex(&Sha256::digest(&bytes)),
            source: source.to_owned(),
            fills: entries,
        });
        report.amendment = Some(name);
    }
    update_manifest(dir, |m| {
        m.fill = Some("done".into());
        m.unfilled = unfilled;
        m.amendments.extend(added);
    })?;
    Ok(report)
}
