//! Cuts a DataFlash log (ArduPilot's `.bin`) into standalone splits, sans-IO: whole
//! messages in (pieces of any size), split boundaries and bytes out through the same
//! [`SplitSink`] and [`SplitSummary`] as ULog's [`Splitter`](crate::store::Splitter), under
//! the same [`SplitPolicy`] (size, duration, a roll asked for).
//!
//! ```text
//! split 0:  the vehicle's own startup (FMT… UNIT… MULT… FMTU… PARM… VER MSG…) | data
//! split N:  FMT… UNIT… MULT… FMTU… VER, the startup MSGs, PARM (in force now)…, MODE | data
//! ```
//!
//! The preamble is the engine's ([`Preamble`]); a split ends only before a timed message
//! that is not a definition, so a split never ends inside a message nor between a type's
//! FMT and its first use. Samples are the timed messages; dropouts are the marks the link
//! wrote ([`crate::dataflash::gaps`]), read back the same way when a crash leaves a split to
//! summarise from its file.

use crate::dataflash::format::time_us;
use crate::dataflash::gaps::dropout_ms;
use crate::dataflash::{Format, Framer, Preamble, SourceDrops};
use crate::store::splitter::{
    INDEX_MIN_BYTES, IndexEntry, LastSummary, SplitPolicy, SplitSink, SplitSummary,
};

/// Types that define others: a split never begins right before one of them.
const DEFINITIONS: &[&str] = &["FMT", "FMTU", "UNIT", "MULT"];

/// The records a split opens with (the vehicle's startup, or the preamble that replays it):
/// the run of them at a split's start is no sample, in the writer as in a file read back.
const OPENING: &[&str] = &["FMT", "FMTU", "UNIT", "MULT", "PARM", "VER", "MSG", "MODE"];

/// See the module docs.
pub struct BinSplitter {
    policy: SplitPolicy,
    framer: Framer,
    preamble: Preamble,
    /// The vehicle's own drops, read from its DMS records.
    drops: SourceDrops,
    current: Option<SplitSummary>,
    next_index: u32,
    roll_requested: bool,
    /// The next message begins a new split, whatever it is (see [`Self::force_roll`]).
    roll_forced: bool,
    next_index_time: u64,
    /// The largest log time so far, µs.
    clock: u64,
    /// The current split is still in its opening records.
    opening: bool,
    /// Messages of the piece in hand.
    scratch: Vec<u8>,
}

impl BinSplitter {
    pub fn new(policy: SplitPolicy) -> Self {
        Self {
            policy,
            framer: Framer::new(),
            preamble: Preamble::new(),
            drops: SourceDrops::default(),
            current: None,
            next_index: 0,
            roll_requested: false,
            roll_forced: false,
            next_index_time: 0,
            clock: 0,
            opening: true,
            scratch: Vec::new(),
        }
    }

    /// The split in progress, if any.
    pub fn current(&self) -> Option<&SplitSummary> {
        self.current.as_ref()
    }

    /// Applies a new policy from the next message on (a config reload).
    pub fn set_policy(&mut self, policy: SplitPolicy) {
        self.policy = policy;
    }

    /// Ends the current split before the next data message (SIGHUP).
    pub fn request_roll(&mut self) {
        self.roll_requested = true;
    }

    /// Ends the current split before the next message, whatever it is and however little
    /// the split holds: what follows must not go to a split whose file is gone (writing
    /// resumes after a full disk).
    pub fn force_roll(&mut self) {
        self.roll_forced = true;
    }

    /// The largest log time so far, µs.
    pub fn log_time(&self) -> u64 {
        self.clock
    }

    /// Takes bytes of the log (whole messages, in pieces of any size).
    pub fn push(&mut self, bytes: &[u8], sink: &mut impl SplitSink) {
        let mut messages = std::mem::take(&mut self.scratch);
        messages.clear();
        self.framer
            .push(bytes, |m, _| messages.extend_from_slice(m));
        let mut rest = messages.as_slice();
        while rest.len() >= 3 {
            let Some(format) = self.framer.format(rest[2]).cloned() else {
                break;
            };
            let (m, tail) = rest.split_at((format.length as usize).min(rest.len()));
            rest = tail;
            self.message(m, &format, sink);
        }
        self.scratch = messages;
    }

    /// The log ended: the current split is complete.
    pub fn finish(&mut self, sink: &mut impl SplitSink) {
        let mut tail = Vec::new();
        self.framer.finish(|m, _| tail.extend_from_slice(m));
        if !tail.is_empty()
            && let Some(format) = self.framer.format(tail[2]).cloned()
        {
            self.message(&tail, &format, sink);
        }
        if let Some(summary) = self.current.take() {
            sink.end(&summary);
        }
    }

    fn message(&mut self, m: &[u8], format: &Format, sink: &mut impl SplitSink) {
        let time = time_us(format, m);
        let name = format.name.as_str();
        let data = time.is_some() && !DEFINITIONS.contains(&name);
        if let Some(t) = time {
            self.clock = self.clock.max(t);
        }
        if self.current.is_none() {
            self.begin_split(sink);
        } else if (data || self.roll_forced) && self.due_for_roll() {
            self.roll(sink);
        }
        self.preamble.observe(m, format);
        self.opening &= OPENING.contains(&name);
        let offset = self.current.as_ref().map_or(0, |c| c.bytes);
        self.write(sink, m);
        let clock = self.clock;
        let dropped = self.drops.observe(m, format);
        let Some(split) = &mut self.current else {
            return;
        };
        *split.dropped_at_source.get_or_insert(0) += dropped;
        if let Some(dropout) = dropout_ms(m, format) {
            split.dropouts += 1;
            split.dropout_ms += dropout.unwrap_or(0);
        } else if data && !self.opening {
            split.samples += 1;
            split.first_timestamp.get_or_insert(clock);
            split.last_timestamp = Some(clock);
            let spaced =
                (split.time_index.last()).is_none_or(|e| offset >= e.offset + INDEX_MIN_BYTES);
            if clock >= self.next_index_time && spaced {
                split.time_index.push(IndexEntry {
                    timestamp: clock,
                    offset,
                });
                self.next_index_time = clock + self.policy.index_interval_us.max(1);
            }
        }
    }

    fn due_for_roll(&self) -> bool {
        let Some(split) = &self.current else {
            return false;
        };
        if self.roll_forced {
            return true;
        }
        if split.samples == 0 {
            return false;
        }
        if self.roll_requested {
            return true;
        }
        let full = self.policy.max_bytes.is_some_and(|max| {
            let data = split.bytes - split.preamble_bytes;
            split.bytes >= max && data >= max / 2
        });
        let long = match (self.policy.max_duration_us, split.first_timestamp) {
            (Some(max), Some(first)) => self.clock.saturating_sub(first) >= max,
            _ => false,
        };
        full || long
    }

    fn roll(&mut self, sink: &mut impl SplitSink) {
        self.roll_requested = false;
        if let Some(summary) = self.current.take() {
            sink.end(&summary);
        }
        self.begin_split(sink);
        let bytes = self.preamble.bytes();
        self.write(sink, &bytes);
        if let Some(split) = &mut self.current {
            split.preamble_bytes = split.bytes;
        }
        self.next_index_time = 0;
    }

    fn begin_split(&mut self, sink: &mut impl SplitSink) {
        self.roll_forced = false;
        let index = self.next_index;
        self.next_index += 1;
        sink.begin(index);
        self.opening = true;
        self.current = Some(SplitSummary {
            index,
            dropped_at_source: Some(0),
            ..SplitSummary::default()
        });
    }

    fn write(&mut self, sink: &mut impl SplitSink, bytes: &[u8]) {
        if let Some(split) = &mut self.current {
            split.bytes += bytes.len() as u64;
        }
        sink.write(bytes);
    }
}

/// What a `.bin` split holds, read from its bytes (after a crash): its whole messages'
/// length, and its summary as the splitter would have made it.
pub fn summarize_bin(bytes: &[u8], index: u32) -> (usize, SplitSummary) {
    let whole = complete_bin_prefix(bytes);
    let mut splitter = BinSplitter::new(SplitPolicy::unlimited());
    let mut sink = LastSummary(None);
    splitter.push(&bytes[..whole], &mut sink);
    splitter.finish(&mut sink);
    let mut summary = sink.0.unwrap_or_default();
    summary.index = index;
    (whole, summary)
}

/// Length of the longest prefix of `bytes` that is whole DataFlash messages.
pub fn complete_bin_prefix(bytes: &[u8]) -> usize {
    crate::dataflash::framer::whole_prefix(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A log of FMT (MSG, PARM, ATT), a PARM, a startup MSG, then `n` ATT at 10 ms apart.
    fn log(n: u64) -> Vec<u8> {
        let def = |t: u8, name: &str, fmt: &str, labels: &str, len: u8| Format {
            type_id: t,
            length: len,
            name: name.into(),
            format: fmt.into(),
            labels: labels.split(',').map(String::from).collect(),
        };
        let msg = def(91, "MSG", "QZ", "TimeUS,Message", 75);
        let parm = def(64, "PARM", "QNf", "TimeUS,Name,Value", 31);
        let att = def(35, "ATT", "Qf", "TimeUS,Roll", 15);
        let mut out: Vec<u8> = [Format::fmt(), msg, parm, att]
            .iter()
            .flat_map(Format::to_bytes)
            .collect();
        let mut p = vec![0xA3, 0x95, 64];
        p.extend_from_slice(&[0; 8]);
        p.extend_from_slice(b"LOG_DISARMED\0\0\0\0");
        p.extend_from_slice(&1f32.to_le_bytes());
        out.extend_from_slice(&p);
        let mut m = vec![0xA3, 0x95, 91];
        m.extend_from_slice(&[0; 8]);
        m.extend_from_slice(&[b'V'; 64]);
        out.extend_from_slice(&m);
        for i in 0..n {
            out.extend_from_slice(&[0xA3, 0x95, 35]);
            out.extend_from_slice(&(10_000 * i).to_le_bytes());
            out.extend_from_slice(&(i as f32).to_le_bytes());
        }
        out
    }

    #[derive(Default)]
    struct Files(Vec<Vec<u8>>, Vec<SplitSummary>);
    impl SplitSink for Files {
        fn begin(&mut self, _: u32) {
            self.0.push(Vec::new());
        }
        fn write(&mut self, b: &[u8]) {
            self.0.last_mut().unwrap().extend_from_slice(b);
        }
        fn end(&mut self, s: &SplitSummary) {
            self.1.push(s.clone());
        }
    }

    #[test]
    fn every_split_opens_with_the_definitions_and_the_data_is_cut_nowhere() {
        let whole = log(1000);
        let policy = SplitPolicy {
            max_duration_us: Some(2_000_000),
            ..SplitPolicy::unlimited()
        };
        for piece in [1, 7, 200, whole.len()] {
            let mut s = BinSplitter::new(policy.clone());
            let mut files = Files::default();
            for p in whole.chunks(piece) {
                s.push(p, &mut files);
            }
            s.finish(&mut files);
            // 10 s of ATT in splits of 2 s.
            assert_eq!(files.0.len(), 5, "piece {piece}");
            // The vehicle's startup (FMT, PARM, MSG) opens the first split; the others open
            // with the same records in ArduPilot's own order (FMT, the startup texts, PARM).
            let startup = &whole[..whole.len() - 1000 * 15];
            let (fmts, rest) = startup.split_at(4 * 89);
            let (parm, msg) = rest.split_at(31);
            let preamble = [fmts, msg, parm].concat();
            let mut data = Vec::new();
            for (k, (f, sum)) in files.0.iter().zip(&files.1).enumerate() {
                let opening: &[u8] = if k == 0 { startup } else { &preamble };
                assert!(
                    f.starts_with(opening),
                    "split {k} opens with the definitions"
                );
                assert_eq!(sum.bytes, f.len() as u64);
                assert_eq!(
                    sum.preamble_bytes,
                    if k == 0 { 0 } else { opening.len() as u64 }
                );
                let (whole_len, mut again) = summarize_bin(f, k as u32);
                assert_eq!(whole_len, f.len());
                // Only the writer tells its preamble from the data.
                again.preamble_bytes = sum.preamble_bytes;
                assert_eq!(&again, sum, "split {k} summarised from its file");
                data.extend_from_slice(&f[opening.len()..]);
            }
            assert_eq!(data, whole[startup.len()..]);
            // The startup's PARM and MSG open the first split: no samples.
            assert_eq!(files.1.iter().map(|s| s.samples).sum::<u64>(), 1000);
        }
        // A file cut inside a message is whole up to that message.
        let cut = &whole[..whole.len() - 4];
        assert_eq!(complete_bin_prefix(cut), whole.len() - 15);
        let mut zeros = whole.clone();
        zeros.extend_from_slice(&[0; 100]);
        assert_eq!(complete_bin_prefix(&zeros), whole.len());
        // A torn page from just after a header's first two bytes: its type byte zero, which
        // a log may define (ArduPilot's CTUN is type 0), and its fields zeros.
        let mut ctun = whole.clone();
        let ctun_format = crate::dataflash::testing::df_format(0, "CTUN", "Qf", "TimeUS,ThO");
        ctun.extend_from_slice(&ctun_format.to_bytes());
        let defined = ctun.len();
        ctun.extend_from_slice(&[0xA3, 0x95]);
        ctun.extend_from_slice(&[0; 13]);
        assert_eq!(complete_bin_prefix(&ctun), defined);
    }

    #[test]
    fn each_split_counts_the_drops_the_vehicle_reported_in_it() {
        use crate::dataflash::testing::{df, df_format};
        let dms = df_format(92, "DMS", "QII", "TimeUS,N,Dp");
        let att = df_format(35, "ATT", "Qf", "TimeUS,Roll");
        let mut whole: Vec<u8> = [Format::fmt(), dms.clone(), att.clone()]
            .iter()
            .flat_map(Format::to_bytes)
            .collect();
        for i in 0..1000u64 {
            let t = 10_000 * i;
            whole.extend(df(&att, &[&t.to_le_bytes()[..], &[0; 4]].concat()));
            if i % 100 == 99 {
                // Each second the vehicle says it dropped 3 more (a running count).
                let dp = 3 * (i as u32 / 100 + 1);
                let body = [&t.to_le_bytes()[..], &[0; 4], &dp.to_le_bytes()].concat();
                whole.extend(df(&dms, &body));
            }
        }
        let mut s = BinSplitter::new(SplitPolicy {
            max_duration_us: Some(2_000_000),
            ..SplitPolicy::unlimited()
        });
        let mut files = Files::default();
        s.push(&whole, &mut files);
        s.finish(&mut files);
        let counts: Vec<_> = files.1.iter().map(|s| s.dropped_at_source).collect();
        assert_eq!(counts, vec![Some(6); 5]);
    }

    #[test]
    fn a_forced_roll_ends_the_split_before_the_next_record_however_little_it_holds() {
        let whole = log(10);
        // The startup only (4 FMT, a PARM, a MSG): no sample yet.
        let startup = whole.len() - 10 * 15;
        let mut s = BinSplitter::new(SplitPolicy::unlimited());
        let mut files = Files::default();
        s.push(&whole[..startup], &mut files);
        s.force_roll();
        s.push(&whole[startup..], &mut files);
        s.finish(&mut files);
        assert_eq!(files.0.len(), 2);
        assert_eq!(files.0[0], whole[..startup]);
        let preamble = files.1[1].preamble_bytes as usize;
        assert!(preamble > 0);
        assert_eq!(files.0[1][preamble..], whole[startup..]);
    }
}
