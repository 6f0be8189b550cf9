//! The bound of the store's queue (sans-IO): what of the log's next bytes may wait for the
//! store, given how many bytes wait already.
//!
//! Under the bound everything goes in. Past it, the samples are stripped and what a reader
//! needs for what follows goes on: a ULog log's definitions, parameters, logged strings and
//! dropouts; a DataFlash log's formats (FMT, FMTU, UNIT, MULT), parameters, version, texts
//! and modes (ArduPilot writes a type's FMT just before its first record, at any time). The store is told how many samples went, and marks
//! the loss there. The network loop never waits, and memory stays bounded whatever the disk
//! does.
//!
//! [`super::thread::StoreThread`] holds one for the daemon's network loop; the whole-receiver
//! simulation holds one for its simulated store thread.

use bytes::Bytes;

use crate::autopilot::LogFormat;
use crate::dataflash::Framer;
use crate::dataflash::format::is_sample;
use crate::ulog::message::{FILE_HEADER_LEN, strip_samples};

/// See the module docs.
#[derive(Debug)]
pub struct QueueBound {
    limit: usize,
    format: LogFormat,
    /// A DataFlash log's formats, learnt from every piece (stripped or not): a piece's records
    /// are told apart by them.
    bin_formats: Framer,
    /// File header bytes of the open log still to come (never stripped).
    header_left: usize,
    /// The last piece lost samples: a run of drops is going on.
    dropping: bool,
    lost_samples: u64,
    drop_runs: u64,
}

/// What of a piece goes in the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admitted {
    /// The bytes that wait for the store (empty when none do).
    pub bytes: Bytes,
    /// Samples taken out of the piece: the store marks a dropout before the next bytes.
    pub lost_samples: u64,
    /// Whether this piece began or ended a run of drops.
    pub change: Option<Keeping>,
}

/// A change in whether the store keeps up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keeping {
    /// The queue is full: samples are dropped from this piece on.
    Dropping,
    /// The queue has room again after a run of drops.
    KeepsUpAgain,
}

impl QueueBound {
    /// At most `limit` bytes of log wait (a piece that would pass it loses its samples).
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            format: LogFormat::ULog,
            bin_formats: Framer::new(),
            header_left: 0,
            dropping: false,
            lost_samples: 0,
            drop_runs: 0,
        }
    }

    /// A new log in `format` begins: its file header is to come.
    pub fn begin(&mut self, format: LogFormat) {
        self.format = format;
        self.bin_formats = Framer::new();
        self.header_left = match format {
            LogFormat::ULog => FILE_HEADER_LEN,
            LogFormat::DataFlash => 0,
        };
        self.dropping = false;
    }

    /// The log's next piece (whole messages; the file header first), with `queued` bytes
    /// waiting already: what of it may wait too.
    pub fn admit(&mut self, queued: usize, bytes: Bytes) -> Admitted {
        let mut admitted = Admitted {
            bytes,
            lost_samples: 0,
            change: None,
        };
        if admitted.bytes.is_empty() {
            return admitted;
        }
        let over = queued + admitted.bytes.len() > self.limit;
        if self.format == LogFormat::DataFlash && !over {
            self.bin_formats.push(&admitted.bytes, |_, _| {});
        }
        if over {
            let (kept, stripped) = match self.format {
                LogFormat::ULog => strip_samples(&admitted.bytes, self.header_left),
                LogFormat::DataFlash => self.strip_records(&admitted.bytes),
            };
            if stripped > 0 {
                self.lost_samples += stripped;
                if !self.dropping {
                    self.dropping = true;
                    self.drop_runs += 1;
                    admitted.change = Some(Keeping::Dropping);
                }
            }
            admitted.bytes = kept;
            admitted.lost_samples = stripped;
        } else if self.dropping {
            self.dropping = false;
            admitted.change = Some(Keeping::KeepsUpAgain);
        }
        self.header_left = self.header_left.saturating_sub(admitted.bytes.len());
        admitted
    }

    /// A DataFlash piece less its samples ([`is_sample`]), and how many were taken out.
    fn strip_records(&mut self, bytes: &[u8]) -> (Bytes, u64) {
        let mut kept = Vec::new();
        let mut stripped = 0;
        self.bin_formats.push(bytes, |m, f| match is_sample(f) {
            true => stripped += 1,
            false => kept.extend_from_slice(m),
        });
        (kept.into(), stripped)
    }

    /// Samples dropped so far.
    pub fn lost_samples(&self) -> u64 {
        self.lost_samples
    }

    /// Runs of drops so far (each a dropout in the log).
    pub fn drop_runs(&self) -> u64 {
        self.drop_runs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ulog::message::msg_type;

    fn message(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut m = (body.len() as u16).to_le_bytes().to_vec();
        m.push(kind);
        m.extend_from_slice(body);
        m
    }

    #[test]
    fn past_the_bound_a_ulog_piece_loses_its_samples_and_keeps_the_rest_and_the_header() {
        let mut bound = QueueBound::new(100);
        bound.begin(LogFormat::ULog);
        let mut piece = b"ULog\x01\x12\x35\x01\0\0\0\0\0\0\0\0".to_vec();
        let info = message(b'I', b"\x04ver_x");
        piece.extend(message(msg_type::DATA, &[1, 0, 9, 9, 9, 9]));
        piece.extend(&info);
        piece.extend(message(msg_type::DATA, &[1, 0, 8, 8, 8, 8]));
        let admitted = bound.admit(95, Bytes::from(piece.clone()));
        assert_eq!(admitted.lost_samples, 2);
        assert_eq!(admitted.change, Some(Keeping::Dropping));
        assert_eq!(&admitted.bytes[..16], &piece[..16]);
        assert_eq!(&admitted.bytes[16..], &info[..]);
        // Still full: the run goes on, one run.
        let sample = Bytes::from(message(msg_type::DATA, &[1, 0, 7, 7, 7, 7]));
        let again = bound.admit(99, sample.clone());
        assert_eq!((again.lost_samples, again.change), (1, None));
        assert!(again.bytes.is_empty());
        // Room again: everything goes in, and the run is over.
        let room = bound.admit(0, sample.clone());
        assert_eq!(room.bytes, sample);
        assert_eq!(
            (room.lost_samples, room.change),
            (0, Some(Keeping::KeepsUpAgain))
        );
        assert_eq!((bound.lost_samples(), bound.drop_runs()), (3, 1));
    }

    /// A DataFlash FMT record defining `name` as type `id` of one u64 `TimeUS`, or with
    /// `format` `QZ` (MSG).
    fn fmt(id: u8, name: &str, format: &str) -> Vec<u8> {
        let length = if format == "QZ" { 3 + 8 + 64 } else { 3 + 8 };
        let labels = if format == "QZ" {
            "TimeUS,Message"
        } else {
            "TimeUS"
        };
        let mut m = vec![0xA3, 0x95, 0x80, id, length];
        let mut field = |text: &str, n: usize| {
            let mut f = text.as_bytes().to_vec();
            f.resize(n, 0);
            m.extend(f);
        };
        field(name, 4);
        field(format, 16);
        field(labels, 64);
        m
    }

    fn record(id: u8, t: u64) -> Vec<u8> {
        let mut m = vec![0xA3, 0x95, id];
        m.extend(t.to_le_bytes());
        m
    }

    #[test]
    fn past_the_bound_a_dataflash_piece_keeps_its_formats_and_texts_and_loses_its_samples() {
        let mut bound = QueueBound::new(1000);
        bound.begin(LogFormat::DataFlash);
        let mut start = fmt(0x80, "FMT", "BBnNZ");
        start.extend(fmt(91, "MSG", "QZ"));
        start.extend(fmt(7, "ATT", "Q"));
        start.extend(record(7, 1));
        assert_eq!(bound.admit(0, Bytes::from(start.clone())).bytes, start);
        // Full: a new type's FMT, written as it is first used, goes on with the text; the
        // samples go, the new type's too.
        let late_fmt = fmt(9, "GPS", "Q");
        let mut text = vec![0xA3, 0x95, 91];
        text.extend(2u64.to_le_bytes());
        text.resize(3 + 8 + 64, b'x');
        let piece = [record(7, 2), late_fmt.clone(), record(9, 2), text.clone()].concat();
        let admitted = bound.admit(1000, Bytes::from(piece));
        assert_eq!(admitted.bytes, [late_fmt, text].concat());
        assert_eq!(admitted.lost_samples, 2);
        // The late type is known from then on: its samples go through, whole.
        let later = Bytes::from([record(9, 3), record(7, 3)].concat());
        assert_eq!(bound.admit(0, later.clone()).bytes, later);
    }

    #[test]
    fn under_the_bound_nothing_changes_and_a_piece_of_definitions_alone_is_no_drop() {
        let mut bound = QueueBound::new(1000);
        bound.begin(LogFormat::ULog);
        let header = Bytes::from_static(b"ULog\x01\x12\x35\x01\0\0\0\0\0\0\0\0");
        let admitted = bound.admit(0, header.clone());
        assert_eq!((admitted.bytes, admitted.lost_samples), (header, 0));
        let info = Bytes::from(message(b'I', b"\x04ver_x"));
        let full = bound.admit(1000, info.clone());
        assert_eq!(
            (full.bytes, full.lost_samples, full.change),
            (info, 0, None)
        );
        assert_eq!(bound.drop_runs(), 0);
    }
}
