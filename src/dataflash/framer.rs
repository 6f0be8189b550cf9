//! Cuts a DataFlash byte stream, in pieces of any size, into whole messages, learning each
//! type's length from its FMT record as it passes.
//!
//! In step, a message is taken when its header is there and its type is known. Out of step
//! (after [`Framer::gap`], or where the bytes are not a message: garbage, zeros, an unknown
//! type) a candidate is taken only when the bytes right after it begin another message of a
//! known type; the bytes passed over are counted. So a message torn by a lost block never
//! reaches the output whole-looking, and zeros where a block is missing are never read as
//! messages.

use crate::dataflash::format::{FMT_TYPE, Format, HEADER, MSG_HEADER_LEN};

/// Counters; all monotonic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct FramerStats {
    pub messages: u64,
    /// Bytes passed over: partial messages at gaps, garbage, unknown types.
    pub skipped_bytes: u64,
    /// FMT records refused (their fields do not add up to their length).
    pub bad_formats: u64,
}

/// See the module docs.
#[derive(Debug, Clone)]
pub struct Framer {
    formats: Vec<Option<Format>>,
    buf: Vec<u8>,
    /// Where the unread bytes of `buf` begin.
    start: usize,
    /// Out of step: a message is taken only when the next one confirms it.
    hunting: bool,
    stats: FramerStats,
}

impl Default for Framer {
    fn default() -> Self {
        Self::new()
    }
}

impl Framer {
    /// A framer at the start of a log: it knows FMT only.
    pub fn new() -> Self {
        let mut formats = vec![None; 256];
        formats[FMT_TYPE as usize] = Some(Format::fmt());
        Self {
            formats,
            buf: Vec::new(),
            start: 0,
            hunting: false,
            stats: FramerStats::default(),
        }
    }

    pub fn stats(&self) -> FramerStats {
        self.stats
    }

    /// The format of `type_id`, once its FMT has passed.
    pub fn format(&self, type_id: u8) -> Option<&Format> {
        self.formats[type_id as usize].as_ref()
    }

    /// Every format known, by type.
    pub fn formats(&self) -> impl Iterator<Item = &Format> {
        self.formats.iter().flatten()
    }

    /// Bytes held: the start of a message not yet whole.
    pub fn pending(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Bytes are missing before the next ones: the partial message held is dropped (and
    /// counted) and the framer hunts for the next whole message. Returns the bytes dropped.
    pub fn gap(&mut self) -> usize {
        let dropped = self.pending();
        self.stats.skipped_bytes += dropped as u64;
        self.buf.clear();
        self.start = 0;
        self.hunting = true;
        dropped
    }

    /// A new stream of the same log begins at a message boundary (the vehicle restarted its
    /// stream): what is held is dropped, the formats are kept.
    pub fn restart(&mut self) -> usize {
        let dropped = self.gap();
        self.hunting = false;
        dropped
    }

    /// The length of the message `bytes` begin with, read in step with the formats known so
    /// far: `None` when they do not begin with a header and a known type (the whole
    /// message may be longer than `bytes`).
    pub fn length_at(&self, bytes: &[u8]) -> Option<usize> {
        if bytes.len() < MSG_HEADER_LEN || bytes[..2] != HEADER {
            return None;
        }
        self.formats[bytes[2] as usize]
            .as_ref()
            .map(|f| f.length as usize)
    }

    /// Takes the next bytes; hands each whole message (header included) to `each`.
    pub fn push(&mut self, bytes: &[u8], mut each: impl FnMut(&[u8], &Format)) {
        if self.start > 0 && self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
        let mut p = self.start;
        loop {
            let rest = &self.buf[p..];
            if rest.len() < MSG_HEADER_LEN {
                break;
            }
            let known = rest[..2] == HEADER && self.formats[rest[2] as usize].is_some();
            if !known {
                // Not a message here: on to the next header.
                let skip = next_header(&rest[1..]).map_or(rest.len() - 1, |k| k + 1);
                self.stats.skipped_bytes += skip as u64;
                self.hunting = true;
                p += skip;
                continue;
            }
            let len = self.formats[rest[2] as usize]
                .as_ref()
                .map_or(0, |f| f.length as usize);
            if rest.len() < len {
                break;
            }
            if self.hunting {
                let after = &rest[len..];
                if after.len() < MSG_HEADER_LEN {
                    break;
                }
                let confirmed = after[..2] == HEADER && self.formats[after[2] as usize].is_some();
                if !confirmed {
                    self.stats.skipped_bytes += 1;
                    p += 1;
                    continue;
                }
                self.hunting = false;
            }
            let message = &self.buf[p..p + len];
            if message[2] == FMT_TYPE {
                match Format::parse(message) {
                    Ok(f) if f.type_id != FMT_TYPE => {
                        let t = f.type_id as usize;
                        self.formats[t] = Some(f);
                    }
                    Ok(_) => {}
                    Err(e) => {
                        self.stats.bad_formats += 1;
                        tracing::debug!(error = %e, "an FMT record refused");
                    }
                }
            }
            let format = self.formats[message[2] as usize]
                .as_ref()
                .expect("a known type");
            each(message, format);
            self.stats.messages += 1;
            p += len;
        }
        self.start = p;
        // Keep the buffer small: move what is held to its front once it is mostly read.
        if self.start > 64 << 10 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
    }

    /// The end of the stream: what is held is not a whole message; a message held back for
    /// the next one to confirm it is taken if whole. Returns the bytes dropped.
    pub fn finish(&mut self, mut each: impl FnMut(&[u8], &Format)) -> usize {
        let rest = &self.buf[self.start..];
        if rest.len() >= MSG_HEADER_LEN
            && rest[..2] == HEADER
            && let Some(f) = &self.formats[rest[2] as usize]
            && rest.len() == f.length as usize
        {
            each(rest, f);
            self.stats.messages += 1;
            self.buf.clear();
            self.start = 0;
            return 0;
        }
        let dropped = self.pending();
        self.stats.skipped_bytes += dropped as u64;
        self.buf.clear();
        self.start = 0;
        dropped
    }
}

/// Length of the longest prefix of `bytes` that is whole messages, read in step from the
/// start (a file cut by a crash ends in a torn message, zeros or garbage: it ends before;
/// an FMT record that does not add up ends it too, and so does a record of eight bytes or
/// more that is zeros after its header: a page whose size reached the disk before its data,
/// where a power cut kept a header's first bytes and zeros for its type and fields).
pub fn whole_prefix(bytes: &[u8]) -> usize {
    let mut lengths = [0usize; 256];
    lengths[FMT_TYPE as usize] = crate::dataflash::format::FMT_LEN;
    let mut p = 0;
    while let Some(rest) = bytes.get(p..)
        && rest.len() >= MSG_HEADER_LEN
        && rest[..2] == HEADER
    {
        let len = lengths[rest[2] as usize];
        if len == 0 || rest.len() < len {
            break;
        }
        if len >= MSG_HEADER_LEN + 8 && rest[2..len].iter().all(|&b| b == 0) {
            break;
        }
        if rest[2] == FMT_TYPE {
            // An FMT that does not add up is no record a logger wrote: the end of the
            // whole part (a torn header, zeros after it).
            let Ok(f) = Format::parse(&rest[..len]) else {
                break;
            };
            if f.type_id != FMT_TYPE {
                lengths[f.type_id as usize] = f.length as usize;
            }
        }
        p += len;
    }
    p
}

/// Where the next `0xA3 0x95` begins in `bytes`.
fn next_header(bytes: &[u8]) -> Option<usize> {
    memchr::memmem::find(bytes, &HEADER)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataflash::format::put_text;

    /// A tiny log: FMT of a type `TST` (`QB`), then three of them.
    pub(crate) fn tiny_log() -> Vec<u8> {
        let tst = Format {
            type_id: 7,
            length: 3 + 8 + 1,
            name: "TST".into(),
            format: "QB".into(),
            labels: vec!["TimeUS".into(), "V".into()],
        };
        let mut log = Format::fmt().to_bytes();
        log.extend(tst.to_bytes());
        for i in 0..3u8 {
            log.extend_from_slice(&[0xA3, 0x95, 7]);
            log.extend_from_slice(&(1000 * u64::from(i)).to_le_bytes());
            log.push(i);
        }
        log
    }

    fn frame(framer: &mut Framer, pieces: &[&[u8]]) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for p in pieces {
            framer.push(p, |m, _| out.push(m.to_vec()));
        }
        framer.finish(|m, _| out.push(m.to_vec()));
        out
    }

    #[test]
    fn messages_come_whole_from_any_pieces() {
        let log = tiny_log();
        for size in 1..log.len() {
            let mut f = Framer::new();
            let pieces: Vec<&[u8]> = log.chunks(size).collect();
            let out = frame(&mut f, &pieces);
            assert_eq!(out.len(), 5, "piece size {size}");
            assert_eq!(out.concat(), log);
            assert_eq!(f.stats().skipped_bytes, 0);
        }
    }

    #[test]
    fn after_a_gap_a_torn_message_and_zeros_are_passed_over() {
        let log = tiny_log();
        let mut f = Framer::new();
        let mut out = Vec::new();
        // The first two records and half of the third message, then a gap.
        let cut = 2 * 89 + 12 + 5;
        f.push(&log[..cut], |m, _| out.push(m.to_vec()));
        assert_eq!(out.len(), 3);
        assert_eq!(f.gap(), 5);
        // Zeros where a block is missing, the rest of the torn message, then the last one.
        let mut next = vec![0u8; 40];
        next.extend_from_slice(&log[cut..]);
        f.push(&next, |m, _| out.push(m.to_vec()));
        f.finish(|m, _| out.push(m.to_vec()));
        assert_eq!(out.len(), 4);
        assert_eq!(out[3], log[log.len() - 12..]);
        assert_eq!(f.stats().skipped_bytes, 5 + 40 + 7);
    }

    #[test]
    fn a_header_in_the_data_is_not_taken_when_nothing_follows_it() {
        let mut log = tiny_log();
        let mut f = Framer::new();
        let mut out = Vec::new();
        f.push(&log[..2 * 89], |m, _| out.push(m.to_vec()));
        f.gap();
        // Junk holding a lone header of the known type, then a real message.
        let mut junk = vec![1, 2, 0xA3, 0x95, 7, 9, 9, 9];
        junk.extend_from_slice(&log[2 * 89..2 * 89 + 12]);
        f.push(&junk, |m, _| out.push(m.to_vec()));
        f.finish(|m, _| out.push(m.to_vec()));
        assert_eq!(out.len(), 3);
        assert_eq!(out[2], log[2 * 89..2 * 89 + 12]);
        // An FMT whose fields do not add up is refused and counted.
        let mut bad = Format::fmt().to_bytes();
        bad[3] = 9;
        bad[4] = 20;
        put_text(&mut bad[9..25], "Q");
        log = bad;
        let mut f = Framer::new();
        frame(&mut f, &[&log]);
        assert_eq!(f.stats().bad_formats, 1);
        assert!(f.format(9).is_none());
    }
}
