//! Marks where a ULog message stream lost something with a dropout ('O') whose duration the
//! samples around the gap tell, sans-IO. The link session marks chunks lost on the link; the
//! store marks samples it had to drop when the disk could not keep up.
//!
//! After a gap the messages are held until the first timestamped sample: the dropout then
//! says the time from the last sample before the gap to that one, and goes out before the
//! held messages. A gap at the end of the log, or one followed by more than `max_held` bytes
//! without a timestamp, is written with a duration of 0 (the event says it is unknown).
//!
//! A marker that writes through ([`GapMarker::writing_through`], the store's) holds nothing:
//! what comes after a gap until the first sample goes out at once, and the dropout after it,
//! just before that sample. What a store was handed is never kept back in memory, where a
//! sync cannot reach it, for a sample that may never come (a vehicle gone quiet).

use bytes::BytesMut;

use crate::ulog::message::FILE_HEADER_LEN;
use crate::ulog::{Decoder, FileHeader, Message};

/// A dropout written into the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dropout {
    /// What the caller said was lost (chunks, samples), all gaps before it summed.
    pub lost: u64,
    /// From the last sample before the gap to the first after it; `None` when no sample
    /// came after it.
    pub duration_ms: Option<u64>,
}

/// A gap waiting for the first timestamp after it.
#[derive(Debug, Clone, Copy)]
struct Pending {
    /// The last sample's time before the gap; `None` when what was lost is not known (the
    /// dropout's duration is not either).
    before_us: Option<u64>,
    lost: u64,
}

/// See the module docs.
#[derive(Debug)]
pub struct GapMarker {
    decoder: Decoder,
    pending: Option<Pending>,
    /// Messages after a gap, until it is resolved.
    held: Vec<u8>,
    max_held: usize,
    /// Nothing is held: see [`writing_through`](Self::writing_through).
    write_through: bool,
}

impl GapMarker {
    /// A marker for one log; past `max_held` bytes held after a gap, the dropout goes out
    /// without a duration.
    pub fn new(max_held: usize) -> Self {
        Self {
            decoder: Decoder::new(),
            pending: None,
            held: Vec::new(),
            max_held,
            write_through: false,
        }
    }

    /// A marker that holds nothing after a gap: the messages until the first sample go out at
    /// once, the dropout after them, just before that sample (for a store, which must not
    /// keep what it was handed from its syncs).
    pub fn writing_through() -> Self {
        Self {
            write_through: true,
            ..Self::new(0)
        }
    }

    /// The log's file header (before any message).
    pub fn header(&mut self, header: &[u8; FILE_HEADER_LEN]) {
        if let Some(h) = FileHeader::parse(header) {
            let _ = self.decoder.handle(&Message::Header(h));
        }
    }

    /// `lost` (chunks, samples) went missing before the next message.
    pub fn gap(&mut self, lost: u64) {
        match &mut self.pending {
            Some(p) => p.lost += lost,
            None => {
                self.pending = Some(Pending {
                    before_us: Some(self.decoder.last_timestamp()),
                    lost,
                })
            }
        }
    }

    /// Something went missing before the next message, since a time not known (messages
    /// this marker saw may be lost too): the dropout says its duration is unknown.
    pub fn gap_since_unknown(&mut self, lost: u64) {
        self.gap(lost);
        if let Some(p) = &mut self.pending {
            p.before_us = None;
        }
    }

    /// True while a gap waits for its duration.
    pub fn is_pending(&self) -> bool {
        self.pending.is_some()
    }

    /// Bytes of the whole messages held behind a gap (none when writing through).
    pub fn held_bytes(&self) -> usize {
        self.held.len()
    }

    /// Takes one whole message; appends what goes out now to `out`. Returns the dropout this
    /// message resolved, if any.
    pub fn message(&mut self, message: &[u8], out: &mut BytesMut) -> Option<Dropout> {
        let timestamp = self
            .decoder
            .timestamp_of(Message::parse_framed(message).as_ref());
        if self.pending.is_none() || (self.write_through && timestamp.is_none()) {
            out.extend_from_slice(message);
            return None;
        }
        match timestamp {
            Some(after) => {
                let dropout = self.resolve(Some(after), out);
                out.extend_from_slice(message);
                dropout
            }
            None => {
                self.held.extend_from_slice(message);
                if self.held.len() > self.max_held {
                    self.resolve(None, out)
                } else {
                    None
                }
            }
        }
    }

    /// The log ends: a pending gap goes out with an unknown duration, then what it held.
    pub fn finish(&mut self, out: &mut BytesMut) -> Option<Dropout> {
        self.resolve(None, out)
    }

    /// Writes the dropout for the pending gap, then the messages held behind it.
    fn resolve(&mut self, after_us: Option<u64>, out: &mut BytesMut) -> Option<Dropout> {
        let p = self.pending.take()?;
        let duration_ms = after_us
            .zip(p.before_us)
            .map(|(a, b)| a.saturating_sub(b) / 1000);
        // 'O' carries a u16 of milliseconds. One is enough: a longer span between the
        // timestamps around a gap is a jump of the vehicle's clock (or corrupt data): a log
        // ends after seconds without data.
        let d = (duration_ms.unwrap_or(0).min(u16::MAX as u64) as u16).to_le_bytes();
        out.extend_from_slice(&[2, 0, b'O', d[0], d[1]]);
        out.extend_from_slice(&self.held);
        self.held.clear();
        Some(Dropout {
            lost: p.lost,
            duration_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ulog::Writer;

    /// A header, a format and subscription, then samples at the given times (µs).
    fn messages(times: &[u64]) -> (Vec<u8>, Vec<Vec<u8>>) {
        let mut w = Writer::new();
        w.header(1, 0);
        let header = w.take();
        w.write(&Message::Format("t:uint64_t timestamp;")).unwrap();
        let mut out = vec![w.take()];
        w.write(&Message::AddLogged {
            multi_id: 0,
            msg_id: 0,
            name: "t",
        })
        .unwrap();
        out.push(w.take());
        for t in times {
            w.write(&Message::Data {
                msg_id: 0,
                data: &t.to_le_bytes(),
            })
            .unwrap();
            out.push(w.take());
        }
        (header, out)
    }

    /// A logged string at `timestamp` (µs).
    fn logged(timestamp: u64, text: &[u8]) -> Vec<u8> {
        let mut w = Writer::new();
        w.write(&Message::Logging {
            level: b'6',
            timestamp,
            text,
        })
        .unwrap();
        w.take()
    }

    #[test]
    fn a_gap_becomes_a_dropout_as_long_as_the_samples_around_it_say() {
        let (header, msgs) = messages(&[1_000_000, 1_250_000, 1_900_000]);
        let mut m = GapMarker::new(1 << 20);
        m.header(header[..16].try_into().unwrap());
        let mut out = BytesMut::new();
        for msg in &msgs[..4] {
            assert_eq!(m.message(msg, &mut out), None);
        }
        m.gap(3);
        m.gap(2);
        // A logged string after the gap has a timestamp of its own but is no sample: held.
        let text = logged(1_500_000, b"held");
        assert_eq!(m.message(&text, &mut out), None);
        let before = out.len();
        assert_eq!(
            m.message(&msgs[4], &mut out),
            Some(Dropout {
                lost: 5,
                duration_ms: Some(650)
            })
        );
        // The dropout, then the held string, then the sample.
        let tail = &out[before..];
        assert_eq!(tail[..5], [2, 0, b'O', 0x8a, 0x02]);
        assert_eq!(&tail[5..5 + text.len()], &text[..]);
        assert_eq!(&tail[5 + text.len()..], &msgs[4][..]);
        // A gap at the end: duration unknown, written as 0.
        m.gap(1);
        let before = out.len();
        assert_eq!(
            m.finish(&mut out),
            Some(Dropout {
                lost: 1,
                duration_ms: None
            })
        );
        assert_eq!(out[before..], [2, 0, b'O', 0, 0]);
        assert_eq!(m.finish(&mut out), None);
    }

    #[test]
    fn a_gap_since_a_time_not_known_has_a_dropout_of_a_duration_not_known() {
        let (header, msgs) = messages(&[1_000_000, 1_250_000, 9_000_000]);
        let mut m = GapMarker::new(1 << 20);
        m.header(header[..16].try_into().unwrap());
        let mut out = BytesMut::new();
        for msg in &msgs[..4] {
            m.message(msg, &mut out);
        }
        m.gap_since_unknown(0);
        let before = out.len();
        assert_eq!(
            m.message(&msgs[4], &mut out),
            Some(Dropout {
                lost: 0,
                duration_ms: None
            })
        );
        assert_eq!(out[before..before + 5], [2, 0, b'O', 0, 0]);
        // The next gap is timed again.
        m.gap(1);
        let (_, later) = messages(&[9_500_000]);
        let got = m.message(&later[2], &mut out).expect("resolved");
        assert_eq!(got.duration_ms, Some(500));
    }

    #[test]
    fn a_marker_writing_through_holds_nothing_and_marks_just_before_the_next_sample() {
        let (header, msgs) = messages(&[1_000_000, 1_400_000]);
        let mut m = GapMarker::writing_through();
        m.header(header[..16].try_into().unwrap());
        let mut out = BytesMut::new();
        for msg in &msgs[..3] {
            m.message(msg, &mut out);
        }
        m.gap(7);
        let text = logged(1_200_000, b"kept");
        let before = out.len();
        // Out at once: a sync after it makes it durable, whether a sample comes or not.
        assert_eq!(m.message(&text, &mut out), None);
        assert_eq!(&out[before..], &text[..]);
        assert!(m.is_pending());
        let got = m.message(&msgs[3], &mut out).expect("resolved");
        assert_eq!((got.lost, got.duration_ms), (7, Some(400)));
        let tail = &out[before + text.len()..];
        assert_eq!(tail[..5], [2, 0, b'O', 0x90, 0x01]);
        assert_eq!(&tail[5..], &msgs[3][..]);
    }
}
