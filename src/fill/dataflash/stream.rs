//! An ArduPilot flight as received, for a fill (sans-IO): the messages of its `.bin` splits
//! in log order, each where it lies (its split and offset there) and where it would lie in
//! the stream the vehicle sent (the splits' own messages back to back, without the
//! preambles the splits after the first replay and without the receiver's dropout marks),
//! each message after a mark knowing the mark. Its formats, for reading the card's log.

use crate::dataflash::drops::SourceDrops;
use crate::dataflash::format::{FMT_TYPE, Format, is_sample, time_us};
use crate::dataflash::framer::Framer;
use crate::dataflash::gaps::dropout_ms;

/// Types each backend writes of itself only: the stream's statistics (`DMS`) never reach
/// the card, the card's (`DSF`) never the stream.
pub const BACKEND_OWN: &[&str] = &["DMS", "DSF"];

/// A receiver's dropout mark in a split: where it lies and what it says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    pub split: usize,
    pub offset: u64,
    pub len: u64,
    /// The gap's length in log time, when the mark knows it.
    pub duration_ms: Option<u64>,
}

/// One message of the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamMessage {
    /// Its split (an index into the splits scanned) and offset there.
    pub split: usize,
    pub offset: u64,
    /// Its offset in the stream the vehicle sent as received: the splits' own messages back
    /// to back, without the stream's own statistics (what the card would hold).
    pub at: u64,
    pub len: u64,
    pub time_us: Option<u64>,
    /// A data sample (not a definition, parameter, text, version or mode) that the card
    /// has too (not a backend's own statistics): what the card is searched for.
    pub anchor: bool,
    /// For the stream's own statistics (`DMS`): the messages the vehicle says it dropped at
    /// the source so far, over all its streams.
    pub dropped_so_far: Option<u64>,
    /// The dropout mark right before it, if any.
    pub mark: Option<Mark>,
}

/// See the module docs.
#[derive(Debug, Clone)]
pub struct BinStream<'a> {
    splits: Vec<&'a [u8]>,
    pub messages: Vec<StreamMessage>,
    /// Every type's FMT record the splits hold, each once, in first-seen order.
    pub format_records: Vec<Vec<u8>>,
}

impl<'a> BinStream<'a> {
    /// Scans `splits`, each `(bytes, preamble bytes)`, in log order (the first split's
    /// preamble is the stream's own startup and is kept).
    pub fn scan(splits: &[(&'a [u8], u64)]) -> Self {
        let mut stream = BinStream {
            splits: splits.iter().map(|(b, _)| *b).collect(),
            messages: Vec::new(),
            format_records: Vec::new(),
        };
        let mut seen_types = [false; 256];
        let mut at = 0u64;
        let mut pending_mark: Option<Mark> = None;
        let mut drops = SourceDrops::default();
        for (split, (bytes, preamble)) in splits.iter().enumerate() {
            let skip = if split == 0 { 0 } else { *preamble };
            let mut framer = Framer::new();
            let mut offset = 0u64;
            let mut each = |m: &[u8], f: &Format| {
                let here = offset;
                let len = m.len() as u64;
                offset += len;
                if m[2] == FMT_TYPE && !seen_types[m[3] as usize] {
                    seen_types[m[3] as usize] = true;
                    stream.format_records.push(m.to_vec());
                }
                if here < skip {
                    return;
                }
                drops.observe(m, f);
                let own = BACKEND_OWN.contains(&f.name.as_str());
                if let Some(duration_ms) = dropout_ms(m, f) {
                    pending_mark = Some(Mark {
                        split,
                        offset: here,
                        len,
                        duration_ms,
                    });
                    return;
                }
                stream.messages.push(StreamMessage {
                    split,
                    offset: here,
                    at,
                    len,
                    time_us: time_us(f, m),
                    anchor: is_sample(f) && f.has_time_us() && !own,
                    dropped_so_far: (f.name == "DMS").then(|| drops.total()),
                    mark: pending_mark.take(),
                });
                // The stream's own statistics take no room on the card.
                if !own {
                    at += len;
                }
            };
            framer.push(bytes, &mut each);
            framer.finish(&mut each);
        }
        stream
    }

    /// The bytes of message `k`.
    pub fn bytes(&self, k: usize) -> &'a [u8] {
        let m = &self.messages[k];
        &self.splits[m.split][m.offset as usize..(m.offset + m.len) as usize]
    }

    /// The stream's bytes per second of log time (its messages between its first and last
    /// timed one); `None` with fewer than two times.
    pub fn bytes_per_s(&self) -> Option<f64> {
        let first = self.messages.iter().find(|m| m.time_us.is_some())?;
        let last = self.messages.iter().rev().find(|m| m.time_us.is_some())?;
        let span_us = last.time_us?.checked_sub(first.time_us?)?;
        (span_us > 0).then(|| (last.at - first.at) as f64 * 1e6 / span_us as f64)
    }
}
