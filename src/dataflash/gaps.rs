//! Gaps in a DataFlash stream marked in the log itself. DataFlash has no dropout record, so
//! the mark is a `MSG` record (the text messages every tool lists) that says
//! `ulog-recv: dropout of N ms` at the log time of the first message after the gap, N being
//! the time between the last message before it and that one: the two times the log itself
//! tells. The messages after a gap are held until one carries a time (at most
//! [`MAX_HELD`] bytes: then the mark says the duration is unknown); they go out before the
//! mark, which they may define (a gap in the startup's FMT records).
//!
//! The link session's marker holds: which log the messages after a gap belong to is known
//! only at the next time (one that went back is another boot's, and opens a new log). A
//! store's marker writes through ([`GapMarker::writing_through`]): it keeps nothing it was
//! handed in memory, where a sync cannot reach it, for a time that may never come.
//!
//! The same record read back ([`dropout_ms`]) is how a split's summary counts its dropouts,
//! so a split read after a crash says what the daemon said while writing it.

use crate::dataflash::format::{Format, HEADER, is_sample, put_text, text, time_us};
use crate::dataflash::framer::Framer;

/// Most bytes held after a gap while waiting for a message with a time.
pub const MAX_HELD: usize = 256 << 10;

/// How far a log's time must go back across a gap to be another boot's. ArduPilot's
/// messages are timed by the task that writes each, so consecutive ones may go back by a few
/// milliseconds; a reboot starts the clock again near zero.
pub const REBOOT_BACK_US: u64 = 1_000_000;

/// What every dropout mark's text begins with.
pub const DROPOUT_PREFIX: &str = "ulog-recv: dropout of ";

/// A gap whose duration is now known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resolved {
    /// Blocks the link lost there (0 when unknown).
    pub lost_blocks: u64,
    /// `None` when no time came after the gap.
    pub duration_ms: Option<u64>,
}

/// See the module docs.
#[derive(Debug, Default)]
pub struct GapMarker {
    /// The log time of the last message with one.
    last_time_us: Option<u64>,
    /// A gap waits for the next time: the blocks it lost and the messages held since.
    open_gap: Option<(u64, Vec<u8>)>,
    /// The log time went back across the last gap (the vehicle rebooted).
    went_back: bool,
    /// Nothing is held: see [`writing_through`](Self::writing_through).
    write_through: bool,
}

impl GapMarker {
    pub fn new() -> Self {
        Self::default()
    }

    /// A marker that holds nothing after a gap: the messages until the first sample go out at
    /// once (before the mark, as they would anyway), and only the gap waits for a sample's
    /// time. A record that is no sample ([`is_sample`]: a format, a parameter, a text, a mode)
    /// does not resolve it: what a store kept of a run of dropped samples gets one mark, before
    /// the first sample after it.
    pub fn writing_through() -> Self {
        Self {
            write_through: true,
            ..Self::default()
        }
    }

    /// The log time of the last message with one.
    pub fn last_time_us(&self) -> Option<u64> {
        self.last_time_us
    }

    /// True while a gap waits for the next time.
    pub fn is_holding(&self) -> bool {
        self.open_gap.is_some()
    }

    /// Bytes of the whole messages held behind a gap (none when writing through).
    pub fn held_bytes(&self) -> usize {
        self.open_gap.as_ref().map_or(0, |(_, held)| held.len())
    }

    /// True when the last gap was resolved by a time more than [`REBOOT_BACK_US`] before the
    /// one ahead of it: the log after the gap is another boot's.
    pub fn went_back(&self) -> bool {
        self.went_back
    }

    /// `lost_blocks` were lost before the next message (several gaps before a time add up).
    pub fn gap(&mut self, lost_blocks: u64) {
        match &mut self.open_gap {
            Some((n, _)) => *n += lost_blocks,
            None => self.open_gap = Some((lost_blocks, Vec::new())),
        }
    }

    /// Something went missing before the next message, since a time not known (messages
    /// this marker saw may be lost too): the mark says its duration is unknown.
    pub fn gap_since_unknown(&mut self, lost_blocks: u64) {
        self.gap(lost_blocks);
        self.last_time_us = None;
    }

    /// One whole message of the log: to `out`, after the mark of a gap it resolves.
    pub fn message(
        &mut self,
        message: &[u8],
        format: &Format,
        framer: &Framer,
        out: &mut Vec<u8>,
    ) -> Option<Resolved> {
        let time = time_us(format, message);
        let Some((lost, held)) = &mut self.open_gap else {
            if time.is_some() {
                self.last_time_us = time;
            }
            out.extend_from_slice(message);
            return None;
        };
        if self.write_through && (time.is_none() || !is_sample(format)) {
            out.extend_from_slice(message);
            return None;
        }
        if time.is_none() && held.len() + message.len() <= MAX_HELD {
            held.extend_from_slice(message);
            return None;
        }
        let (lost, held) = (*lost, std::mem::take(held));
        self.open_gap = None;
        self.went_back =
            matches!((self.last_time_us, time), (Some(a), Some(b)) if b + REBOOT_BACK_US < a);
        let duration_ms = match (self.last_time_us, time) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a) / 1000),
            _ => None,
        };
        // The held messages first: they may define the MSG type the mark is written as.
        out.extend_from_slice(&held);
        if !self.went_back {
            let at = time.or(self.last_time_us).unwrap_or(0);
            mark(framer, at, duration_ms, out);
        }
        out.extend_from_slice(message);
        if time.is_some() {
            self.last_time_us = time;
        }
        Some(Resolved {
            lost_blocks: lost,
            duration_ms,
        })
    }

    /// The end of the log: a gap still open is marked with its duration unknown.
    pub fn finish(&mut self, framer: &Framer, out: &mut Vec<u8>) -> Option<Resolved> {
        let (lost, held) = self.open_gap.take()?;
        out.extend_from_slice(&held);
        mark(framer, self.last_time_us.unwrap_or(0), None, out);
        Some(Resolved {
            lost_blocks: lost,
            duration_ms: None,
        })
    }

    /// Forgets the log time (a new log begins).
    pub fn reset(&mut self) {
        *self = Self {
            write_through: self.write_through,
            ..Self::default()
        };
    }
}

/// The log's `MSG` type, when it is the usual `TimeUS,Message` (`QZ`).
fn msg_format(framer: &Framer) -> Option<&Format> {
    framer
        .formats()
        .find(|f| f.name == "MSG" && f.format == "QZ")
}

/// Appends a dropout mark at log time `at_us`; nothing when the log has no `MSG` type.
fn mark(framer: &Framer, at_us: u64, duration_ms: Option<u64>, out: &mut Vec<u8>) {
    let Some(f) = msg_format(framer) else {
        return;
    };
    let mut m = vec![0u8; f.length as usize];
    m[..2].copy_from_slice(&HEADER);
    m[2] = f.type_id;
    m[3..11].copy_from_slice(&at_us.to_le_bytes());
    let words = match duration_ms {
        Some(ms) => format!("{DROPOUT_PREFIX}{ms} ms"),
        None => format!("{DROPOUT_PREFIX}unknown length"),
    };
    put_text(&mut m[11..], &words);
    out.extend_from_slice(&m);
}

/// The dropout a message marks, if it is one of our marks: `Some(Some(ms))`, or
/// `Some(None)` for one of unknown length.
pub fn dropout_ms(message: &[u8], format: &Format) -> Option<Option<u64>> {
    if format.name != "MSG" || format.format != "QZ" || message.len() < 11 {
        return None;
    }
    let words = text(&message[11..]);
    let rest = words.strip_prefix(DROPOUT_PREFIX)?;
    Some(rest.strip_suffix(" ms").and_then(|n| n.parse().ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// FMT, the MSG type, a timed type `TST` and an untimed one `UNT`.
    fn framer_and_formats() -> (Framer, Vec<u8>) {
        let defs = [
            Format {
                type_id: 91,
                length: 3 + 8 + 64,
                name: "MSG".into(),
                format: "QZ".into(),
                labels: vec!["TimeUS".into(), "Message".into()],
            },
            Format {
                type_id: 7,
                length: 12,
                name: "TST".into(),
                format: "QB".into(),
                labels: vec!["TimeUS".into(), "V".into()],
            },
            Format {
                type_id: 8,
                length: 4,
                name: "UNT".into(),
                format: "B".into(),
                labels: vec!["V".into()],
            },
        ];
        let bytes: Vec<u8> = defs.iter().flat_map(|f| f.to_bytes()).collect();
        let mut framer = Framer::new();
        framer.push(&bytes, |_, _| {});
        (framer, bytes)
    }

    fn tst(t: u64) -> Vec<u8> {
        let mut m = vec![0xA3, 0x95, 7];
        m.extend_from_slice(&t.to_le_bytes());
        m.push(1);
        m
    }

    #[test]
    fn a_gap_is_marked_with_the_time_the_log_tells() {
        let (framer, _) = framer_and_formats();
        let (tst_f, unt_f) = (framer.format(7).unwrap(), framer.format(8).unwrap());
        let mut g = GapMarker::new();
        let mut out = Vec::new();
        assert_eq!(g.message(&tst(1_000_000), tst_f, &framer, &mut out), None);
        g.gap(3);
        // An untimed message after the gap is held until the time comes.
        assert_eq!(
            g.message(&[0xA3, 0x95, 8, 5], unt_f, &framer, &mut out),
            None
        );
        assert_eq!(out.len(), 12);
        let r = g
            .message(&tst(1_250_000), tst_f, &framer, &mut out)
            .unwrap();
        assert_eq!(
            r,
            Resolved {
                lost_blocks: 3,
                duration_ms: Some(250)
            }
        );
        // The held message (it may define the mark's type), then the mark, then the timed
        // one.
        let msg_f = framer.format(91).unwrap();
        assert_eq!(&out[12..16], &[0xA3, 0x95, 8, 5]);
        let mark = &out[16..16 + 75];
        assert_eq!(dropout_ms(mark, msg_f), Some(Some(250)));
        assert_eq!(
            u64::from_le_bytes(mark[3..11].try_into().unwrap()),
            1_250_000
        );
        assert_eq!(out.len(), 12 + 75 + 4 + 12);
        // A time a few ms back (another task's message) is the same boot: a mark of 0 ms.
        g.gap(1);
        let mut out = Vec::new();
        g.message(&tst(1_249_000), tst_f, &framer, &mut out)
            .unwrap();
        assert!(!g.went_back());
        assert_eq!(dropout_ms(&out[..75], msg_f), Some(Some(0)));
        // A time that goes back further is another boot: no mark, and it says so.
        g.gap(1);
        let mut out = Vec::new();
        g.message(&tst(5), tst_f, &framer, &mut out).unwrap();
        assert!(g.went_back());
        assert_eq!(out, tst(5));
        // A gap left open at the end is marked as of unknown length.
        g.gap(2);
        let mut out = Vec::new();
        let r = g.finish(&framer, &mut out).unwrap();
        assert_eq!(r.duration_ms, None);
        assert_eq!(dropout_ms(&out, msg_f), Some(None));
    }

    #[test]
    fn a_gap_since_a_time_not_known_is_marked_as_of_unknown_length() {
        let (framer, _) = framer_and_formats();
        let (tst_f, msg_f) = (framer.format(7).unwrap(), framer.format(91).unwrap());
        let mut g = GapMarker::new();
        let mut out = Vec::new();
        g.message(&tst(1_000_000), tst_f, &framer, &mut out);
        g.gap_since_unknown(0);
        let mut out = Vec::new();
        let r = g
            .message(&tst(9_000_000), tst_f, &framer, &mut out)
            .unwrap();
        assert_eq!(r.duration_ms, None);
        assert_eq!(dropout_ms(&out[..75], msg_f), Some(None));
        assert_eq!(&out[75..], &tst(9_000_000)[..]);
    }

    #[test]
    fn a_marker_writing_through_holds_nothing_and_marks_the_same_place() {
        let (framer, _) = framer_and_formats();
        let (tst_f, unt_f) = (framer.format(7).unwrap(), framer.format(8).unwrap());
        let msg_f = framer.format(91).unwrap();
        let mut g = GapMarker::writing_through();
        let mut out = Vec::new();
        g.message(&tst(1_000_000), tst_f, &framer, &mut out);
        g.gap(2);
        let untimed = [0xA3, 0x95, 8, 5];
        assert_eq!(g.message(&untimed, unt_f, &framer, &mut out), None);
        // Out at once: a sync after it makes it durable, whether a time comes or not.
        assert_eq!(&out[12..], &untimed);
        // A text has a time but is no sample: out at once too, and the gap still open.
        let mut text = vec![0u8; 75];
        text[..3].copy_from_slice(&[0xA3, 0x95, 91]);
        text[3..11].copy_from_slice(&1_050_000u64.to_le_bytes());
        put_text(&mut text[11..], "kept while samples were dropped");
        assert_eq!(g.message(&text, msg_f, &framer, &mut out), None);
        assert_eq!(&out[16..], &text[..]);
        assert!(g.is_holding());
        let r = g.message(&tst(1_100_000), tst_f, &framer, &mut out);
        assert_eq!(r.map(|r| r.duration_ms), Some(Some(100)));
        let at = 16 + 75;
        assert_eq!(dropout_ms(&out[at..at + 75], msg_f), Some(Some(100)));
        assert_eq!(&out[at + 75..], &tst(1_100_000)[..]);
        g.reset();
        g.gap(1);
        let mut out = Vec::new();
        g.message(&untimed, unt_f, &framer, &mut out);
        assert_eq!(out, untimed, "a reset marker still writes through");
    }
}
