//! ULog stream reassembly from in-order chunks (sans-IO).
//!
//! Chunks carry the .ulg byte stream cut at arbitrary points; `first_message_offset` says
//! where the first message starting in a chunk begins (255: none does). The assembler emits
//! only complete ULog messages (and the 16-byte file header first), so that a gap never leaves
//! half a message in the output:
//! - after a gap, the partial message is discarded and output resumes at the next chunk's
//!   `first_message_offset` (chunks with 255 are skipped whole);
//! - in sync, every `first_message_offset` is checked against the framing; a mismatch, or a
//!   message header that cannot be real, discards the partial message and resynchronises on
//!   the offset the vehicle gave, counting the bytes thrown away.
//!
//! The framing itself is the one [`Framer`]'s; a message header must pass the reader's
//! plausibility check ([`plausible_header`]).

use std::ops::ControlFlow;

use crate::ulog::framer::{Framer, Unit};
use crate::ulog::message::{FILE_HEADER_LEN, FILE_MAGIC, MSG_HEADER_LEN, plausible_header};

/// `first_message_offset` of a chunk in which no message starts.
pub const NO_MESSAGE_START: u8 = 255;

/// Counters; all monotonic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct AssemblerStats {
    /// Bytes handed out (complete messages and the file header).
    pub bytes_out: u64,
    /// Complete messages handed out (the file header not counted).
    pub messages: u64,
    /// Bytes of partial messages dropped at gaps, and bytes skipped while out of sync.
    pub discarded_bytes: u64,
    /// Times the framing disagreed with a chunk's `first_message_offset`, or a header was
    /// impossible.
    pub framing_errors: u64,
}

/// See the module docs.
#[derive(Debug)]
pub struct Assembler {
    framer: Framer,
    /// False after a gap or a framing error, until a chunk gives a message start.
    synced: bool,
    /// The file header was lost or broken: nothing of this log can be used.
    header_lost: bool,
    stats: AssemblerStats,
}

impl Default for Assembler {
    fn default() -> Self {
        Self::new()
    }
}

impl Assembler {
    /// An assembler at the start of a log: the first chunk begins with the file header.
    pub fn new() -> Self {
        Self {
            framer: Framer::file(),
            synced: true,
            header_lost: false,
            stats: AssemblerStats::default(),
        }
    }

    pub fn stats(&self) -> AssemblerStats {
        self.stats
    }

    /// True once the file header has been handed out.
    pub fn has_file_header(&self) -> bool {
        !self.framer.before_header()
    }

    /// Takes the next in-order chunk; appends every message it completes to `out`.
    pub fn chunk(&mut self, data: &[u8], first_message_offset: u8, out: &mut Vec<u8>) {
        let start = (first_message_offset != NO_MESSAGE_START)
            .then_some(first_message_offset as usize)
            .filter(|&s| s <= data.len());
        let need_file_header = self.framer.before_header();
        if self.header_lost || (!self.synced && need_file_header) {
            // The file header itself was lost: nothing after it can make a valid log. The
            // session restarts the stream instead.
            self.stats.discarded_bytes += data.len() as u64;
            return;
        }
        if !self.synced {
            match start {
                Some(s) => {
                    self.stats.discarded_bytes += s as u64;
                    self.synced = true;
                    self.feed(&data[s..], out);
                }
                None => self.stats.discarded_bytes += data.len() as u64,
            }
            return;
        }
        if let Some(s) = start {
            // The message in progress must end exactly where the vehicle says the next one
            // starts. (During the file header, offset 0 of the first chunk is the header.)
            let completes_at = self.framer.completes_at(data);
            if completes_at != Some(s) && !(need_file_header && s == 0) {
                if need_file_header {
                    // The file header is incomplete and cannot be: the log is lost.
                    self.lose_file_header(data.len());
                    return;
                }
                self.stats.framing_errors += 1;
                tracing::warn!(
                    expected = ?completes_at,
                    first_message_offset = s,
                    "log stream framing disagrees with the chunk; resynchronising"
                );
                let dropped = self.framer.clear();
                self.stats.discarded_bytes += (dropped + s) as u64;
                self.feed(&data[s..], out);
                return;
            }
        }
        self.feed(data, out);
    }

    /// Chunks were lost: drops the partial message and waits for the next message start.
    /// Returns the bytes dropped.
    pub fn gap(&mut self) -> usize {
        let dropped = self.framer.clear();
        self.stats.discarded_bytes += dropped as u64;
        self.synced = false;
        dropped
    }

    /// Appends `data` to the stream, moving complete messages to `out`; an impossible unit
    /// loses the sync (or, for the file header, the log).
    fn feed(&mut self, data: &[u8], out: &mut Vec<u8>) {
        let carried = self.framer.carried().len();
        let out_before = out.len();
        let stats = &mut self.stats;
        let mut broken_header = false;
        let flow = self.framer.push(data, |unit| match unit {
            Unit::Header(h) if h[..FILE_MAGIC.len()] != FILE_MAGIC => {
                broken_header = true;
                ControlFlow::Break(())
            }
            Unit::Header(h) => {
                out.extend_from_slice(h);
                stats.bytes_out += FILE_HEADER_LEN as u64;
                ControlFlow::Continue(())
            }
            Unit::Message(m)
                if !plausible_header(m[2], m.len() - MSG_HEADER_LEN, stats.messages == 0) =>
            {
                ControlFlow::Break(())
            }
            Unit::Message(m) => {
                out.extend_from_slice(m);
                stats.bytes_out += m.len() as u64;
                stats.messages += 1;
                ControlFlow::Continue(())
            }
        });
        if flow.is_break() {
            // What this push brought but did not hand out, and what was carried into it.
            let lost = carried + data.len() - (out.len() - out_before);
            if broken_header {
                self.lose_file_header(lost);
            } else {
                self.lose_sync(lost);
            }
        }
    }

    /// The file header cannot be completed (a framing error inside it, or no magic): nothing
    /// of this log can make a valid file, so everything is discarded from here on (the session
    /// restarts the stream). `unread` bytes (the chunk in hand, what was carried) go too.
    fn lose_file_header(&mut self, unread: usize) {
        self.stats.framing_errors += 1;
        tracing::warn!("the log's file header is broken; discarding the log");
        self.stats.discarded_bytes += (self.framer.clear() + unread) as u64;
        self.synced = false;
        self.header_lost = true;
    }

    /// An impossible message header: `lost` bytes go, and output waits for the next message
    /// start the vehicle gives.
    fn lose_sync(&mut self, lost: usize) {
        self.stats.framing_errors += 1;
        tracing::warn!("impossible ULog message header in the log stream; resynchronising");
        self.stats.discarded_bytes += lost as u64;
        self.framer.clear();
        self.synced = false;
    }
}
