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

use crate::ulog::message::{FILE_HEADER_LEN, FILE_MAGIC, MSG_HEADER_LEN};

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
    /// The 16-byte file header has not been completed yet.
    need_file_header: bool,
    /// Bytes of the message (or file header) in progress.
    partial: Vec<u8>,
    /// False after a gap or a framing error, until a chunk gives a message start.
    synced: bool,
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
            need_file_header: true,
            partial: Vec::with_capacity(64 * 1024),
            synced: true,
            stats: AssemblerStats::default(),
        }
    }

    pub fn stats(&self) -> AssemblerStats {
        self.stats
    }

    /// True once the file header has been handed out.
    pub fn has_file_header(&self) -> bool {
        !self.need_file_header
    }

    /// Takes the next in-order chunk; appends every message it completes to `out`.
    pub fn chunk(&mut self, data: &[u8], first_message_offset: u8, out: &mut Vec<u8>) {
        let start = (first_message_offset != NO_MESSAGE_START)
            .then_some(first_message_offset as usize)
            .filter(|&s| s <= data.len());
        if !self.synced && self.need_file_header {
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
            let completes_at = self.bytes_to_boundary(data);
            if completes_at != Some(s) && !(self.need_file_header && s == 0) {
                if self.need_file_header {
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
                self.stats.discarded_bytes += (self.partial.len() + s) as u64;
                self.partial.clear();
                self.feed(&data[s..], out);
                return;
            }
        }
        self.feed(data, out);
    }

    /// Chunks were lost: drops the partial message and waits for the next message start.
    /// Returns the bytes dropped.
    pub fn gap(&mut self) -> usize {
        let dropped = self.partial.len();
        self.stats.discarded_bytes += dropped as u64;
        self.partial.clear();
        self.synced = false;
        dropped
    }

    /// Where in `data` the message in progress would end, if it ends inside it or at its
    /// start: `Some(0)` when no message is in progress. `None` when it runs past `data` or
    /// its header is still incomplete past `data`.
    fn bytes_to_boundary(&self, data: &[u8]) -> Option<usize> {
        if self.partial.is_empty() {
            return Some(0);
        }
        let total = if self.need_file_header {
            FILE_HEADER_LEN
        } else {
            let mut header = [0u8; MSG_HEADER_LEN];
            let have = self.partial.len().min(MSG_HEADER_LEN);
            header[..have].copy_from_slice(&self.partial[..have]);
            let more = MSG_HEADER_LEN - have;
            if data.len() < more {
                return None;
            }
            header[have..].copy_from_slice(&data[..more]);
            MSG_HEADER_LEN + u16::from_le_bytes([header[0], header[1]]) as usize
        };
        let rest = total.checked_sub(self.partial.len())?;
        (rest <= data.len()).then_some(rest)
    }

    /// Appends `data` to the stream, moving complete messages to `out`.
    fn feed(&mut self, mut data: &[u8], out: &mut Vec<u8>) {
        while !data.is_empty() {
            if !self.synced {
                self.stats.discarded_bytes += data.len() as u64;
                return;
            }
            // Fast path: whole messages straight from `data` when nothing is in progress.
            if self.partial.is_empty() && !self.need_file_header {
                let mut at = 0;
                while data.len() - at >= MSG_HEADER_LEN {
                    let size = u16::from_le_bytes([data[at], data[at + 1]]) as usize;
                    if !data[at + 2].is_ascii_uppercase() {
                        break;
                    }
                    let end = at + MSG_HEADER_LEN + size;
                    if end > data.len() {
                        break;
                    }
                    self.stats.messages += 1;
                    at = end;
                }
                out.extend_from_slice(&data[..at]);
                self.stats.bytes_out += at as u64;
                data = &data[at..];
                if data.is_empty() {
                    return;
                }
            }
            // Slow path: grow the message in progress.
            let total = if self.need_file_header {
                FILE_HEADER_LEN
            } else {
                if self.partial.len() < MSG_HEADER_LEN {
                    let take = (MSG_HEADER_LEN - self.partial.len()).min(data.len());
                    self.partial.extend_from_slice(&data[..take]);
                    data = &data[take..];
                    if self.partial.len() < MSG_HEADER_LEN {
                        return;
                    }
                    if !self.partial[2].is_ascii_uppercase() {
                        self.lose_sync();
                        continue;
                    }
                }
                MSG_HEADER_LEN + u16::from_le_bytes([self.partial[0], self.partial[1]]) as usize
            };
            let take = (total - self.partial.len()).min(data.len());
            self.partial.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.partial.len() == total {
                if self.need_file_header && self.partial[..FILE_MAGIC.len()] != FILE_MAGIC {
                    self.lose_file_header(data.len());
                    return;
                }
                out.extend_from_slice(&self.partial);
                self.stats.bytes_out += total as u64;
                if self.need_file_header {
                    self.need_file_header = false;
                } else {
                    self.stats.messages += 1;
                }
                self.partial.clear();
            }
        }
    }

    /// The file header cannot be completed (a framing error inside it, or no magic): nothing
    /// of this log can make a valid file, so everything is discarded from here on (the session
    /// restarts the stream). `unread` bytes of the chunk in hand go too.
    fn lose_file_header(&mut self, unread: usize) {
        self.stats.framing_errors += 1;
        tracing::warn!("the log's file header is broken; discarding the log");
        self.stats.discarded_bytes += (self.partial.len() + unread) as u64;
        self.partial.clear();
        self.synced = false;
    }

    fn lose_sync(&mut self) {
        self.stats.framing_errors += 1;
        tracing::warn!("impossible ULog message header in the log stream; resynchronising");
        self.stats.discarded_bytes += self.partial.len() as u64;
        self.partial.clear();
        self.synced = false;
    }
}
