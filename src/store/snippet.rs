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
use crate::store::manifest::{Manifest, SplitEntry, read_manifest};
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
        let Some(cut) = cut else {
            continue;
        };
        stats.splits_read += cut.stats.splits_read;
        stats.samples += cut.stats.samples;
        stats.latched_samples += cut.stats.latched_samples;
        cuts.push(cut.bytes);
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

/// The window cut out of one column.
pub(crate) struct ColumnCut<'m> {
    /// The cut as one standalone ULog.
    pub bytes: Vec<u8>,
    pub stats: SnippetStats,
    /// Bytes of `bytes` before its first message from a split: the preamble.
    pub preamble_len: usize,
    /// Where the rest of `bytes` comes from: per split that contributed, the bytes `[start,
    /// end)` (of the split as [`read_split`] reads them) from its first message in the cut to
    /// its last, in order: (index into `splits`, start, end). Followed by a [`WindowFollower`]
    /// from the preamble, the spans give the rest of `bytes` back.
    pub spans: Vec<(usize, u64, u64)>,
    /// The splits read, in order.
    pub splits: Vec<&'m SplitEntry>,
}

/// Cuts the window out of one column's closed `splits`; `None` when no sample of it lies in
/// the window.
pub(crate) fn cut_column<'m>(
    session_dir: &Path,
    manifest: &Manifest,
    splits: &[&'m SplitEntry],
    from_us: u64,
    to_us: u64,
    latched: &SplitPolicy,
) -> Result<Option<ColumnCut<'m>>, SnippetError> {
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
    let (spans, preamble_len) = (std::mem::take(&mut cutter.spans), cutter.preamble_len);
    Ok(cutter.finish().map(|(bytes, samples, latched_samples)| {
        stats.samples = samples;
        stats.latched_samples = latched_samples;
        ColumnCut {
            bytes,
            stats,
            preamble_len,
            spans,
            splits: splits[first..=last].to_vec(),
        }
    }))
}

/// Cuts the window `[from_us, to_us]` out of a whole ULog stream (a snippet's, read back).
pub fn cut_stream(
    stream: &[u8],
    from_us: u64,
    to_us: u64,
    latched: &SplitPolicy,
) -> Result<(Vec<u8>, SnippetStats), SnippetError> {
    if to_us < from_us {
        return Err(SnippetError::EmptyWindow { from_us, to_us });
    }
    let mut cutter = Cutter::new(from_us, to_us, latched.clone());
    cutter.feed(stream, 0);
    let (mut bytes, samples, latched_samples) = cutter.finish().ok_or(SnippetError::NoData)?;
    // A file's appended data (PX4's crash dumps) was read in place: the cut holds it inline.
    crate::ulog::writer::clear_appended_data(&mut bytes);
    Ok((
        bytes,
        SnippetStats {
            splits_read: 0,
            samples,
            latched_samples,
        },
    ))
}

/// The window cut over a message stream (sans-IO).
struct Cutter {
    from_us: u64,
    to_us: u64,
    state: Splitter,
    out: Option<Vec<u8>>,
    samples: u64,
    latched_samples: u64,
    /// Per input that contributed, the bytes from its first message in the cut to the end of
    /// its last: (input, start, end); the inputs count the calls to `feed`.
    spans: Vec<(usize, u64, u64)>,
    /// Bytes of the cut before its first message from the input (its preamble).
    preamble_len: usize,
    fed: usize,
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
            spans: Vec::new(),
            preamble_len: 0,
            fed: 0,
        }
    }

    /// Notes that `message` (at `offset` of the current input) went into the cut.
    fn take(&mut self, offset: usize, len: usize) {
        let input = self.fed - 1;
        let (start, end) = (offset as u64, (offset + len) as u64);
        match self.spans.last_mut() {
            Some((i, _, e)) if *i == input => *e = end,
            _ => self.spans.push((input, start, end)),
        }
    }

    /// Takes a split's bytes; `skip` bytes of preamble are left out (not the first split's).
    fn feed(&mut self, bytes: &[u8], skip: usize) {
        self.fed += 1;
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
            let offset = message.as_ptr() as usize - bytes.as_ptr() as usize;
            let is_data = message[2] == msg_type::DATA;
            let timestamp = self.state.observe(message);
            let in_window = in_window(timestamp, self.from_us, self.to_us);
            if self.out.is_none() {
                if !(is_data && in_window) {
                    continue;
                }
                let start = timestamp.unwrap_or(self.from_us);
                // The state before this sample, stamped with its time.
                let (mut preamble, latched) = self.preamble_before(message, start);
                self.latched_samples = latched;
                self.preamble_len = preamble.len();
                self.take(offset, message.len());
                preamble.extend_from_slice(message);
                self.samples += 1;
                self.out = Some(preamble);
                continue;
            }
            if !in_cut(is_data, in_window) {
                continue;
            }
            if is_data {
                self.samples += 1;
            }
            self.take(offset, message.len());
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

fn in_window(timestamp: Option<u64>, from_us: u64, to_us: u64) -> bool {
    timestamp.is_some_and(|t| t >= from_us && t <= to_us)
}

/// Whether a message after a cut's first sample belongs to the cut: all but the samples
/// stamped outside the window.
fn in_cut(is_data: bool, in_window: bool) -> bool {
    !is_data || in_window
}

/// Continues a cut from its preamble (sans-IO): given the bytes that followed the preamble in
/// the splits ([`ColumnCut::spans`]), keeps what the cut kept.
pub(crate) struct WindowFollower {
    state: Splitter,
    from_us: u64,
    to_us: u64,
}

impl WindowFollower {
    /// Starts from a cut's `preamble` (header and messages) and its window.
    pub fn new(preamble: &[u8], from_us: u64, to_us: u64) -> Self {
        let mut state = Splitter::new(SplitPolicy::unlimited());
        if preamble.len() >= FILE_HEADER_LEN {
            state.observe(&preamble[..FILE_HEADER_LEN]);
            for message in framed(&preamble[FILE_HEADER_LEN..]) {
                state.observe(message);
            }
        }
        Self {
            state,
            from_us,
            to_us,
        }
    }

    /// Appends to `out` the messages of `bytes` (whole messages) that the cut kept.
    pub fn follow(&mut self, bytes: &[u8], out: &mut Vec<u8>) {
        for message in framed(bytes) {
            let is_data = message[2] == msg_type::DATA;
            let timestamp = self.state.observe(message);
            if in_cut(is_data, in_window(timestamp, self.from_us, self.to_us)) {
                out.extend_from_slice(message);
            }
        }
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
