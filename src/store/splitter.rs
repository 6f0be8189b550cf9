//! Cuts one log's message stream into standalone splits (sans-IO: whole ULog messages in,
//! split boundaries and bytes out through a [`SplitSink`]).
//!
//! The splitter follows the log as it passes: the header, flag bits, formats, info, multi-info,
//! parameters (initial values, replaced by later changes), defaults, subscriptions, and the
//! last sample of each latched topic. When a split is full ([`SplitPolicy`], or on request) it
//! ends the split before the next data message and opens the next one with a preamble built
//! from that state, so that every split is a ULog file of its own:
//!
//! ```text
//! header (timestamp = time of the split's start) | B | F… | I… | M… | P (in force now)… | Q…
//! | A (subscriptions alive now)… | D (last sample of each latched topic)… | the split's data
//! ```
//!
//! For each split it also counts what the manifest needs ([`SplitSummary`]): first and last
//! sample time, bytes, samples, dropouts, and a sparse time index (log time → offset of a
//! message boundary).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::ControlFlow;

use crate::ulog::Decoder;
use crate::ulog::framer::{Framer, Unit};
use crate::ulog::message::{
    FILE_HEADER_LEN, FILE_MAGIC, FileHeader, MSG_HEADER_LEN, Message, msg_type,
};

/// When a split is full. Both limits may be set; the first reached wins.
#[derive(Debug, Clone, Default)]
pub struct SplitPolicy {
    /// Bytes of a split, preamble included (but a split holds at least half of it in data
    /// after its preamble); `None`: no size limit.
    pub max_bytes: Option<u64>,
    /// Microseconds of log time between a split's first and last sample; `None`: no limit.
    pub max_duration_us: Option<u64>,
    /// Topics whose last sample is replayed at the start of every split (by format name).
    pub latched: HashSet<String>,
    /// Log time between two entries of the time index, microseconds.
    pub index_interval_us: u64,
}

/// Least bytes between two entries of a split's time index (keeps the manifest small for
/// logs that pack little data into a lot of time).
pub const INDEX_MIN_BYTES: u64 = 64 << 10;

/// Topics latched by default: the state a reader of any split needs to make sense of it.
pub const DEFAULT_LATCHED: &[&str] = &[
    "vehicle_status",
    "vehicle_control_mode",
    "home_position",
    "vehicle_land_detected",
    "battery_status",
    "vehicle_gps_position",
    "mission",
];

impl SplitPolicy {
    /// No limits, the default latched topics, an index entry per second.
    pub fn unlimited() -> Self {
        Self {
            max_bytes: None,
            max_duration_us: None,
            latched: DEFAULT_LATCHED.iter().map(|s| s.to_string()).collect(),
            index_interval_us: 1_000_000,
        }
    }
}

/// One entry of a split's time index: the data message at byte `offset` of the split is the
/// first one after log time reached `timestamp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IndexEntry {
    pub timestamp: u64,
    pub offset: u64,
}

/// What one split holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SplitSummary {
    /// 0 for the first split of a log.
    pub index: u32,
    pub bytes: u64,
    /// Bytes of the preamble (header, definitions, replayed latched samples); 0 for the first
    /// split, whose definitions are the vehicle's own.
    pub preamble_bytes: u64,
    /// Data samples, the replayed latched ones included.
    pub samples: u64,
    /// Latched samples replayed in the preamble.
    pub latched_samples: u64,
    pub dropouts: u64,
    /// The dropouts' durations added up, ms (what the log says it lost there).
    #[serde(default)]
    pub dropout_ms: u64,
    /// Messages the vehicle itself dropped before they reached its stream, as its own
    /// records count them in this split (ArduPilot's `DMS.Dp`; a split read back after a
    /// crash counts from its stream's start). `None` for a log whose vehicle counts none
    /// (ULog). Never the link's losses: those are the dropouts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dropped_at_source: Option<u64>,
    pub first_timestamp: Option<u64>,
    pub last_timestamp: Option<u64>,
    pub time_index: Vec<IndexEntry>,
}

/// Where the splitter's output goes.
pub trait SplitSink {
    /// A new split begins; its bytes follow.
    fn begin(&mut self, index: u32);
    fn write(&mut self, bytes: &[u8]);
    /// The split is complete.
    fn end(&mut self, summary: &SplitSummary);
}

/// A splitter's sink that keeps only the summary of the (one) split it closes: a split
/// file summarised again from its bytes.
pub struct LastSummary(pub Option<SplitSummary>);

impl SplitSink for LastSummary {
    fn begin(&mut self, _: u32) {}
    fn write(&mut self, _: &[u8]) {}
    fn end(&mut self, s: &SplitSummary) {
        self.0 = Some(s.clone());
    }
}

/// See the module docs.
pub struct Splitter {
    policy: SplitPolicy,
    decoder: Decoder,
    /// Cuts the input (in pieces of any size) into the header and whole messages.
    framer: Framer,
    header: Option<[u8; FILE_HEADER_LEN]>,
    flag_bits: Option<Vec<u8>>,
    formats: Vec<Vec<u8>>,
    /// Info by key, in first-seen order.
    info: Vec<Vec<u8>>,
    info_index: HashMap<Vec<u8>, usize>,
    multi_info: Vec<Vec<u8>>,
    /// Parameters in force by key, in first-seen order.
    params: Vec<Vec<u8>>,
    param_index: HashMap<Vec<u8>, usize>,
    defaults: Vec<Vec<u8>>,
    /// 'A' messages of live subscriptions, by message id.
    subscriptions: BTreeMap<u16, Vec<u8>>,
    /// Message ids of latched topics, and their last sample.
    latched_ids: HashSet<u16>,
    latched_samples: BTreeMap<u16, Vec<u8>>,
    current: Option<SplitSummary>,
    next_index: u32,
    roll_requested: bool,
    /// The next message begins a new split, whatever it is (see [`Self::force_roll`]).
    roll_forced: bool,
    next_index_time: u64,
}

impl Splitter {
    pub fn new(policy: SplitPolicy) -> Self {
        Self {
            policy,
            decoder: Decoder::new(),
            framer: Framer::file(),
            header: None,
            flag_bits: None,
            formats: Vec::new(),
            info: Vec::new(),
            info_index: HashMap::new(),
            multi_info: Vec::new(),
            params: Vec::new(),
            param_index: HashMap::new(),
            defaults: Vec::new(),
            subscriptions: BTreeMap::new(),
            latched_ids: HashSet::new(),
            latched_samples: BTreeMap::new(),
            current: None,
            next_index: 0,
            roll_requested: false,
            roll_forced: false,
            next_index_time: 0,
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

    /// Takes bytes of the log: the file header first, then messages, in pieces of any size.
    pub fn push(&mut self, bytes: &[u8], sink: &mut impl SplitSink) {
        let mut framer = std::mem::take(&mut self.framer);
        let _ = framer.push(bytes, |unit| {
            match unit {
                Unit::Header(header) => {
                    if let Some(h) = FileHeader::parse(header) {
                        let _ = self.decoder.handle(&Message::Header(h));
                    }
                    self.header = Some(*header);
                    self.begin_split(sink);
                    self.write(sink, header);
                }
                Unit::Message(message) => self.message(message, sink),
            }
            ControlFlow::Continue(())
        });
        self.framer = framer;
    }

    /// The log ended: the current split is complete.
    pub fn finish(&mut self, sink: &mut impl SplitSink) {
        if let Some(summary) = self.current.take() {
            sink.end(&summary);
        }
    }

    fn message(&mut self, message: &[u8], sink: &mut impl SplitSink) {
        let ty = message[2];
        let parsed = Message::parse_framed(message);
        let timestamp = self.decoder.timestamp_of(parsed.as_ref());
        // Log time as a clock: the largest sample time so far. Topics are not logged in time
        // order (and some stamp 0), so single samples make a poor clock.
        let clock = timestamp.map(|_| self.decoder.last_timestamp());
        if (ty == msg_type::DATA || self.roll_forced) && self.due_for_roll(clock) {
            self.roll(sink, clock);
        }
        self.follow(ty, message, parsed.as_ref());
        let offset = self.current.as_ref().map_or(0, |c| c.bytes);
        self.write(sink, message);
        let Some(split) = &mut self.current else {
            return;
        };
        match ty {
            msg_type::DATA => {
                split.samples += 1;
                if let Some(ts) = clock {
                    split.first_timestamp.get_or_insert(ts);
                    split.last_timestamp = Some(ts);
                    let spaced = split
                        .time_index
                        .last()
                        .is_none_or(|e| offset >= e.offset + INDEX_MIN_BYTES);
                    if ts >= self.next_index_time && spaced {
                        split.time_index.push(IndexEntry {
                            timestamp: ts,
                            offset,
                        });
                        self.next_index_time = ts + self.policy.index_interval_us.max(1);
                    }
                }
            }
            msg_type::DROPOUT => {
                split.dropouts += 1;
                if let Some(Message::Dropout { duration_ms }) = parsed {
                    split.dropout_ms += u64::from(duration_ms);
                }
            }
            _ => {}
        }
    }

    fn due_for_roll(&self, timestamp: Option<u64>) -> bool {
        let Some(split) = &self.current else {
            return false;
        };
        if self.roll_forced {
            return true;
        }
        // A split holds at least one sample beyond its preamble.
        if split.samples <= split.latched_samples {
            return false;
        }
        if self.roll_requested {
            return true;
        }
        // The size counts the preamble, but a split always carries at least half the size in
        // data of its own (a real log's definitions take 100-300 KB).
        let full = self.policy.max_bytes.is_some_and(|max| {
            let data = split.bytes - split.preamble_bytes;
            split.bytes >= max && data >= max / 2
        });
        let long = match (
            self.policy.max_duration_us,
            split.first_timestamp,
            timestamp,
        ) {
            (Some(max), Some(first), Some(ts)) => ts.saturating_sub(first) >= max,
            _ => false,
        };
        full || long
    }

    /// Records what a message changes in the state a preamble replays.
    fn follow(&mut self, ty: u8, message: &[u8], parsed: Option<&Message<'_>>) {
        let key_of = |m: &[u8], skip: usize| -> Vec<u8> {
            let p = &m[MSG_HEADER_LEN + skip..];
            let len = p.first().copied().unwrap_or(0) as usize;
            p.get(1..1 + len).unwrap_or(&[]).to_vec()
        };
        match ty {
            msg_type::FLAG_BITS if self.flag_bits.is_none() => {
                self.flag_bits = Some(message.to_vec())
            }
            msg_type::FORMAT => self.formats.push(message.to_vec()),
            msg_type::INFO => {
                let key = key_of(message, 0);
                match self.info_index.get(&key) {
                    Some(&i) => self.info[i] = message.to_vec(),
                    None => {
                        self.info_index.insert(key, self.info.len());
                        self.info.push(message.to_vec());
                    }
                }
            }
            msg_type::INFO_MULTIPLE => self.multi_info.push(message.to_vec()),
            msg_type::PARAMETER => {
                let key = key_of(message, 0);
                match self.param_index.get(&key) {
                    Some(&i) => self.params[i] = message.to_vec(),
                    None => {
                        self.param_index.insert(key, self.params.len());
                        self.params.push(message.to_vec());
                    }
                }
            }
            msg_type::PARAMETER_DEFAULT => self.defaults.push(message.to_vec()),
            msg_type::ADD_LOGGED => {
                if let Some(Message::AddLogged { msg_id, name, .. }) = parsed {
                    self.subscriptions.insert(*msg_id, message.to_vec());
                    if self.policy.latched.contains(*name) {
                        self.latched_ids.insert(*msg_id);
                    } else {
                        self.latched_ids.remove(msg_id);
                    }
                    self.latched_samples.remove(msg_id);
                }
            }
            msg_type::REMOVE_LOGGED => {
                if let Some(Message::RemoveLogged { msg_id }) = parsed {
                    self.subscriptions.remove(msg_id);
                    self.latched_ids.remove(msg_id);
                    self.latched_samples.remove(msg_id);
                }
            }
            msg_type::DATA => {
                if let Some(Message::Data { msg_id, .. }) = parsed
                    && self.latched_ids.contains(msg_id)
                {
                    self.latched_samples.insert(*msg_id, message.to_vec());
                }
            }
            _ => {}
        }
    }

    fn roll(&mut self, sink: &mut impl SplitSink, timestamp: Option<u64>) {
        self.roll_requested = false;
        if let Some(summary) = self.current.take() {
            sink.end(&summary);
        }
        self.begin_split(sink);
        let start = timestamp.unwrap_or_else(|| self.decoder.last_timestamp());
        let (bytes, latched_count) = self.preamble(start);
        self.write(sink, &bytes);
        if let Some(split) = &mut self.current {
            split.samples += latched_count;
            split.latched_samples = latched_count;
            split.preamble_bytes = split.bytes;
        }
        self.next_index_time = 0;
    }

    /// The start of a standalone file at log time `start` (µs) from the state followed so
    /// far: the header stamped `start`, flag bits, formats, info, multi-info, the parameters
    /// in force, defaults, live subscriptions, and the last sample of each latched topic.
    /// Returns the bytes and how many latched samples they hold.
    pub fn preamble(&self, start: u64) -> (Vec<u8>, u64) {
        let mut header = self.header.unwrap_or_else(|| {
            let mut h = [0u8; FILE_HEADER_LEN];
            h[..7].copy_from_slice(&FILE_MAGIC);
            h[7] = 1;
            h
        });
        header[8..16].copy_from_slice(&start.to_le_bytes());
        let mut bytes = header.to_vec();
        let parts = self
            .flag_bits
            .iter()
            .chain(&self.formats)
            .chain(&self.info)
            .chain(&self.multi_info)
            .chain(&self.params)
            .chain(&self.defaults)
            .chain(self.subscriptions.values())
            .chain(self.latched_samples.values());
        for m in parts {
            bytes.extend_from_slice(m);
        }
        (bytes, self.latched_samples.len() as u64)
    }

    /// The largest sample time followed so far, µs (the header's before any sample).
    pub fn log_time(&self) -> u64 {
        self.decoder.last_timestamp()
    }

    /// Follows one whole message (or, first, the 16-byte file header) without producing
    /// output; returns its sample timestamp for a data message that has one.
    pub fn observe(&mut self, message: &[u8]) -> Option<u64> {
        if self.header.is_none() {
            let header: [u8; FILE_HEADER_LEN] = message.get(..FILE_HEADER_LEN)?.try_into().ok()?;
            if let Some(h) = FileHeader::parse(&header) {
                let _ = self.decoder.handle(&Message::Header(h));
            }
            self.header = Some(header);
            return None;
        }
        if message.len() < MSG_HEADER_LEN {
            return None;
        }
        let parsed = Message::parse_framed(message);
        let timestamp = self.decoder.timestamp_of(parsed.as_ref());
        self.follow(message[2], message, parsed.as_ref());
        timestamp
    }

    fn begin_split(&mut self, sink: &mut impl SplitSink) {
        self.roll_forced = false;
        let index = self.next_index;
        self.next_index += 1;
        sink.begin(index);
        self.current = Some(SplitSummary {
            index,
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
