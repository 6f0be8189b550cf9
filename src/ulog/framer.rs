//! Incremental ULog framing, sans-IO: a byte stream pushed in pieces of any size, cut into
//! whole units: the 16-byte file header (when the stream is a file's), then messages (a
//! 3-byte header, `size` and `type`, then `size` bytes). The one mechanism behind every
//! place that frames a ULog stream as it comes: the link's assembler, the store's writes, its
//! splitter and its crash recovery, the live socket's publisher. The reader, a validating
//! parser that looks ahead and behind on a buffer of its own to resynchronise, shares the
//! framing rule ([`message_len`]) and the plausibility check
//! ([`crate::ulog::message::plausible_header`]).
//!
//! Units that lie whole in a pushed piece are handed out borrowed from it (no copy); only an
//! incomplete unit at the end of a piece is carried over (at most one message: 65 538 bytes).

use std::ops::ControlFlow;

use crate::ulog::message::{FILE_HEADER_LEN, MSG_HEADER_LEN};

/// One whole unit of the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit<'a> {
    /// The file header (first, in a file's stream).
    Header(&'a [u8; FILE_HEADER_LEN]),
    /// A whole message, its 3-byte header included.
    Message(&'a [u8]),
}

/// Length of the message whose first bytes are `head`, once its size field is there.
pub fn message_len(head: &[u8]) -> Option<usize> {
    Some(MSG_HEADER_LEN + u16::from_le_bytes([*head.first()?, *head.get(1)?]) as usize)
}

/// See the module docs.
#[derive(Debug, Default, Clone)]
pub struct Framer {
    /// The incomplete unit carried to the next push.
    carry: Vec<u8>,
    /// The file header is still to come.
    header_next: bool,
    /// Bytes handed out as whole units so far.
    framed: u64,
}

impl Framer {
    /// A framer for a stream of messages (no file header).
    pub fn messages() -> Self {
        Self::default()
    }

    /// A framer for a file's stream: the file header first.
    pub fn file() -> Self {
        Self {
            header_next: true,
            ..Self::default()
        }
    }

    /// Bytes handed out as whole units so far (where the next unit starts in the stream).
    pub fn framed_bytes(&self) -> u64 {
        self.framed
    }

    /// The incomplete unit carried over.
    pub fn carried(&self) -> &[u8] {
        &self.carry
    }

    /// True while the file header has not been handed out.
    pub fn before_header(&self) -> bool {
        self.header_next
    }

    /// Forgets the carried unit (a gap in the stream); returns how many bytes it had.
    pub fn clear(&mut self) -> usize {
        let n = self.carry.len();
        self.carry.clear();
        n
    }

    /// How long the unit starting with `head` is, once that can be told.
    fn unit_len(&self, head: &[u8]) -> Option<usize> {
        if self.header_next {
            Some(FILE_HEADER_LEN)
        } else {
            message_len(head)
        }
    }

    /// Where in `data` (the next piece) the carried unit would end: `Some(0)` when nothing
    /// is carried, `None` when it would end past `data` (or its length is not known within
    /// it).
    pub fn completes_at(&self, data: &[u8]) -> Option<usize> {
        if self.carry.is_empty() {
            return Some(0);
        }
        let len = if self.header_next {
            FILE_HEADER_LEN
        } else {
            let mut head = [0u8; 2];
            for (i, b) in head.iter_mut().enumerate() {
                *b = *self
                    .carry
                    .get(i)
                    .or_else(|| data.get(i - self.carry.len()))?;
            }
            message_len(&head)?
        };
        let rest = len.checked_sub(self.carry.len())?;
        (rest <= data.len()).then_some(rest)
    }

    /// Cuts `bytes`, after what was carried, into whole units and hands each to `each`, in
    /// order. When `each` breaks, framing stops there: the rest of `bytes` is neither handed
    /// out nor carried (the caller decides what comes next), and `Break` is returned.
    pub fn push(
        &mut self,
        mut bytes: &[u8],
        mut each: impl FnMut(Unit<'_>) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        if !self.carry.is_empty() {
            // Complete the carried unit first: its length, then its bytes.
            loop {
                // Until the size field is there, its two bytes; then the whole unit.
                let need = match self.unit_len(&self.carry) {
                    Some(len) if self.carry.len() >= len => break,
                    Some(len) => len,
                    None => 2,
                };
                if bytes.is_empty() {
                    return ControlFlow::Continue(());
                }
                let take = (need - self.carry.len()).min(bytes.len());
                self.carry.extend_from_slice(&bytes[..take]);
                bytes = &bytes[take..];
            }
            let unit = std::mem::take(&mut self.carry);
            let flow = self.deliver(&unit, &mut each);
            self.carry = unit;
            self.carry.clear();
            flow?;
        }
        while let Some(len) = self.unit_len(bytes) {
            if len > bytes.len() {
                break;
            }
            let (unit, rest) = bytes.split_at(len);
            self.deliver(unit, &mut each)?;
            bytes = rest;
        }
        self.carry.extend_from_slice(bytes);
        ControlFlow::Continue(())
    }

    fn deliver(
        &mut self,
        unit: &[u8],
        each: &mut impl FnMut(Unit<'_>) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        self.framed += unit.len() as u64;
        if self.header_next {
            self.header_next = false;
            each(Unit::Header(unit.try_into().expect("a header's length")))
        } else {
            each(Unit::Message(unit))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file: header, then messages of the given payload sizes.
    fn file(sizes: &[u16]) -> Vec<u8> {
        let mut b = crate::ulog::message::FILE_MAGIC.to_vec();
        b.extend_from_slice(&[1; 9]);
        for (i, &s) in sizes.iter().enumerate() {
            b.extend_from_slice(&s.to_le_bytes());
            b.push(b'A' + i as u8);
            b.extend(std::iter::repeat_n(i as u8, s as usize));
        }
        b
    }

    fn units(framer: &mut Framer, bytes: &[u8], piece: usize) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for p in bytes.chunks(piece) {
            let _ = framer.push(p, |u| {
                out.push(match u {
                    Unit::Header(h) => h.to_vec(),
                    Unit::Message(m) => m.to_vec(),
                });
                ControlFlow::Continue(())
            });
        }
        out
    }

    #[test]
    fn any_piece_size_gives_the_same_units() {
        let bytes = file(&[0, 1, 2, 300, 7, 65_535]);
        let whole = units(&mut Framer::file(), &bytes, bytes.len());
        assert_eq!(whole.len(), 7);
        assert_eq!(whole[0].len(), FILE_HEADER_LEN);
        assert_eq!(whole[4].len(), 303);
        assert_eq!(whole.concat(), bytes);
        for piece in [1, 2, 3, 5, 16, 17, 299, 4096] {
            let mut f = Framer::file();
            assert_eq!(units(&mut f, &bytes, piece), whole, "piece {piece}");
            assert_eq!(f.framed_bytes(), bytes.len() as u64);
            assert!(f.carried().is_empty());
        }
        // Without a header, a message stream.
        let messages = &bytes[FILE_HEADER_LEN..];
        assert_eq!(units(&mut Framer::messages(), messages, 7), whole[1..]);
    }

    #[test]
    fn an_incomplete_unit_is_carried_told_and_cleared() {
        let bytes = file(&[10, 20]);
        let mut f = Framer::file();
        let cut = FILE_HEADER_LEN + 13 + 5;
        assert_eq!(units(&mut f, &bytes[..cut], cut).len(), 2);
        assert_eq!(f.carried().len(), 5);
        // The carried message ends 18 bytes into what comes next.
        assert_eq!(f.completes_at(&bytes[cut..]), Some(18));
        assert_eq!(f.completes_at(&bytes[cut..cut + 10]), None);
        assert_eq!(f.clear(), 5);
        assert_eq!(f.completes_at(&[]), Some(0));
    }

    #[test]
    fn breaking_stops_the_framing_there() {
        let bytes = file(&[1, 2, 3]);
        let mut f = Framer::file();
        let mut seen = 0;
        let flow = f.push(&bytes, |u| {
            seen += 1;
            if matches!(u, Unit::Message(m) if m[2] == b'B') {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        });
        assert_eq!(flow, ControlFlow::Break(()));
        assert_eq!(seen, 3);
        assert!(f.carried().is_empty());
        assert_eq!(f.framed_bytes(), (FILE_HEADER_LEN + 4 + 5) as u64);
    }
}
