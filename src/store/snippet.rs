//! Snippets: one standalone ULog covering a window of log time, cut from a session's splits.
//!
//! The manifest says which splits the window touches: reading starts at the last split that
//! begins at or before the window (its preamble holds the state in force then), and later
//! splits are read without theirs. Messages before the window only update the state; at the
//! first sample inside it the snippet opens with a preamble built from that state (the
//! parameters in force, the subscriptions, the last sample of each latched topic). Inside the
//! window everything is kept but samples stamped outside it. Amendments are merged (see
//! [`crate::store::amend::read_split`]). A session stored in columns is cut column by column
//! and the cuts joined ([`crate::store::columns::join`]), or one column alone is cut.

use std::io;
use std::path::Path;

use crate::store::amend::read_split;
use crate::store::columns::join;
use crate::store::files::{Manifest, SplitEntry, read_manifest};
use crate::store::reading::{SessionError, selected_columns};
use crate::store::splitter::{SplitPolicy, Splitter};
use crate::ulog::message::{FILE_HEADER_LEN, framed, msg_type};

/// How late (log time) a sample may be logged after the window's end and still be found.
const LATE_SAMPLES_US: u64 = 2_000_000;

/// Why a snippet cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum SnippetError {
    #[error("cannot read the session: {0}")]
    Io(#[from] io::Error),
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error("the window is empty: from {from_us} µs to {to_us} µs")]
    EmptyWindow { from_us: u64, to_us: u64 },
    #[error("no sample of the session lies in the window")]
    NoData,
    #[error(
        "the session has no closed split yet (a split closes at its size or duration, on \
         SIGHUP, or when the log ends)"
    )]
    NoClosedSplit,
}

/// What a snippet holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SnippetStats {
    /// Splits read.
    pub splits_read: usize,
    /// Samples inside the window.
    pub samples: u64,
    /// Latched samples replayed in the preamble (stamped before the window).
    pub latched_samples: u64,
}

/// Cuts the window `[from_us, to_us]` (log time, µs) of the session in `session_dir`: all
/// its columns joined, or `column` alone.
pub fn snippet(
    session_dir: &Path,
    from_us: u64,
    to_us: u64,
    latched: &SplitPolicy,
    column: Option<&str>,
) -> Result<(Vec<u8>, SnippetStats), SnippetError> {
    if to_us < from_us {
        return Err(SnippetError::EmptyWindow { from_us, to_us });
    }
    let manifest = read_manifest(session_dir)?;
    let mut cuts = Vec::new();
    let mut stats = SnippetStats::default();
    let mut any_closed = false;
    for splits in selected_columns(&manifest, column)? {
        // The open split is still being written: closed splits only.
        let splits: Vec<&SplitEntry> = splits.iter().filter(|s| s.closed).collect();
        if splits.is_empty() {
            continue;
        }
        any_closed = true;
        let cut = cut_column(session_dir, &manifest, &splits, from_us, to_us, latched)?;
        let Some((bytes, column_stats)) = cut else {
            continue;
        };
        stats.splits_read += column_stats.splits_read;
        stats.samples += column_stats.samples;
        stats.latched_samples += column_stats.latched_samples;
        cuts.push(bytes);
    }
    if !any_closed {
        return Err(SnippetError::NoClosedSplit);
    }
    let out = match cuts.len() {
        0 => return Err(SnippetError::NoData),
        1 => cuts.pop().unwrap_or_default(),
        _ => {
            let views: Vec<&[u8]> = cuts.iter().map(Vec::as_slice).collect();
            join(&views).ok_or(SnippetError::NoData)?
        }
    };
    Ok((out, stats))
}

/// Cuts the window out of one column's closed `splits`; `None` when no sample of it lies in
/// the window.
fn cut_column(
    session_dir: &Path,
    manifest: &Manifest,
    splits: &[&SplitEntry],
    from_us: u64,
    to_us: u64,
    latched: &SplitPolicy,
) -> Result<Option<(Vec<u8>, SnippetStats)>, SnippetError> {
    // Split start times are log time (the largest sample time so far), so a sample stamped
    // inside the window cannot sit in a split before the last one starting before the window.
    // Samples come a little late at times: read on until a split starts well after it.
    let first = splits
        .iter()
        .rposition(|s| s.summary.first_timestamp.is_some_and(|t| t < from_us))
        .unwrap_or(0);
    let last = splits
        .iter()
        .rposition(|s| {
            s.summary
                .first_timestamp
                .is_some_and(|t| t <= to_us.saturating_add(LATE_SAMPLES_US))
        })
        .unwrap_or(first)
        .max(first);
    let mut cutter = Cutter::new(from_us, to_us, latched.clone());
    let mut stats = SnippetStats::default();
    for (k, split) in splits[first..=last].iter().enumerate() {
        let bytes = read_split(session_dir, &manifest.amendments, &split.file)?;
        // The first split read whole (its preamble is the state at its start), the others
        // without their preamble (which repeats what was followed already).
        let skip = if k == 0 {
            0
        } else {
            split.summary.preamble_bytes as usize
        };
        cutter.feed(&bytes, skip);
        stats.splits_read += 1;
    }
    Ok(cutter.finish().map(|(out, samples, latched_samples)| {
        stats.samples = samples;
        stats.latched_samples = latched_samples;
        (out, stats)
    }))
}

/// The window cut over a message stream (sans-IO).
struct Cutter {
    from_us: u64,
    to_us: u64,
    state: Splitter,
    out: Option<Vec<u8>>,
    samples: u64,
    latched_samples: u64,
}

impl Cutter {
    fn new(from_us: u64, to_us: u64, latched: SplitPolicy) -> Self {
        Self {
            from_us,
            to_us,
            state: Splitter::new(latched),
            out: None,
            samples: 0,
            latched_samples: 0,
        }
    }

    /// Takes a split's bytes; `skip` bytes of preamble are left out (not the first split's).
    fn feed(&mut self, bytes: &[u8], skip: usize) {
        let at = if skip == 0 {
            if bytes.len() < FILE_HEADER_LEN {
                return;
            }
            self.state.observe(&bytes[..FILE_HEADER_LEN]);
            FILE_HEADER_LEN
        } else {
            skip
        };
        for message in framed(bytes.get(at..).unwrap_or(&[])) {
            let is_data = message[2] == msg_type::DATA;
            let timestamp = self.state.observe(message);
            let in_window = timestamp.is_some_and(|t| t >= self.from_us && t <= self.to_us);
            if self.out.is_none() {
                if !(is_data && in_window) {
                    continue;
                }
                let start = timestamp.unwrap_or(self.from_us);
                // The state before this sample, stamped with its time.
                let (mut preamble, latched) = self.preamble_before(message, start);
                self.latched_samples = latched;
                preamble.extend_from_slice(message);
                self.samples += 1;
                self.out = Some(preamble);
                continue;
            }
            if is_data && !in_window {
                continue;
            }
            if is_data {
                self.samples += 1;
            }
            if let Some(out) = &mut self.out {
                out.extend_from_slice(message);
            }
        }
    }

    /// The preamble as it was just before `message` (already observed) was followed: only a
    /// latched topic's last sample can differ, and if `message` replaced it the replay would
    /// duplicate the sample that opens the window, so that replay is dropped.
    fn preamble_before(&self, message: &[u8], start: u64) -> (Vec<u8>, u64) {
        let (bytes, latched) = self.state.preamble(start);
        match find_subslice(&bytes, message) {
            Some(pos) if pos >= FILE_HEADER_LEN => {
                let mut b = bytes[..pos].to_vec();
                b.extend_from_slice(&bytes[pos + message.len()..]);
                (b, latched - 1)
            }
            _ => (bytes, latched),
        }
    }

    fn finish(self) -> Option<(Vec<u8>, u64, u64)> {
        self.out.map(|o| (o, self.samples, self.latched_samples))
    }
}

fn find_subslice(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || needle.len() > hay.len() {
        return None;
    }
    // Latched samples sit at the end of a preamble: search from there.
    (0..=hay.len() - needle.len())
        .rev()
        .find(|&i| &hay[i..i + needle.len()] == needle)
}
