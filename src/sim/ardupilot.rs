//! A simulated ArduPilot that streams a DataFlash log as `AP_Logger`'s MAVLink backend does,
//! sans-IO (bytes and `now` in, frames out): the receiver's side of ArduPilot's "remote
//! logging", for the tests and `ulog-recv sim`.
//!
//! It plays a `.bin` log in its own time (each message is written when its `TimeUS` comes)
//! and behaves as `AP_Logger_MAVLink` does (`../shared/docs/ardupilot-remote-logging.md`):
//! - HEARTBEAT every second (an ArduCopter).
//! - A START (`REMOTE_LOG_BLOCK_STATUS` with seqno `MAV_REMOTE_LOG_DATA_BLOCK_START`, status
//!   ACK) while it serves nobody: the sender is its client, the stream begins at seqno 0 with
//!   the log's startup records (FMT for every type written so far, the units, the version,
//!   the startup texts, the parameters and the mode, timed now). No answer: the first block
//!   is one. A START while it serves a client is ignored; STOP ends the stream.
//! - The log in 200-byte `REMOTE_LOG_DATA_BLOCK`s from component 155, with a sequence counter
//!   of their own; every block is kept until it is acked, sent again after 100 ms, and at
//!   once (before new ones) on a NACK.
//! - Its buffer holds [`ArduPilotConfig::buffer_blocks`] blocks (`LOG_MAV_BUFSIZE`): a
//!   message written while it is full is dropped at the source and counted
//!   ([`ArduPilotStats::dropped_messages`]), and its own `DMS` records say so, once a second
//!   of log time, as a real one's do (`Dp`: the count since the stream began); those of the
//!   log played, another stream's, are left out. The startup records are never dropped:
//!   data is, while they go out. As `AP_Logger` does, a type's FMT goes into a stream before
//!   the type's first message; a FMT dropped is tried again before the next one.
//!   `ArduPilotConfig::speed` plays the log faster than its own time.
//! - A client that acked or nacked nothing for 10 s while blocks were out is dropped; the
//!   next START begins again at seqno 0 with the startup records (same boot: the log time
//!   goes on).
//! - With a signing key ([`ArduPilotConfig::signing`]) it signs every frame, blocks
//!   included, and drops every incoming frame whose signature does not verify or whose
//!   timestamp is not new, and every unsigned one but RADIO_STATUS, as `GCS_MAVLINK`'s
//!   signing does.
//!
//! The link is impaired as [`Impairment`] says, from one seeded RNG
//! ([`crate::sim::impaired`]).

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use mavlink::MavHeader;
use mavlink::dialects::ardupilotmega::{
    HEARTBEAT_DATA, MavAutopilot, MavMessage, MavModeFlag, MavRemoteLogDataBlockStatuses, MavState,
    MavType,
};

use crate::dataflash::format::time_us;
use crate::dataflash::{FMT_LEN, FMT_TYPE, Format, Framer, HEADER, Preamble};
use crate::link::SigningSetup;
use crate::link::frames::{FrameDecoder, encode};
use crate::link::log_block::{
    BLOCK_BYTES, BLOCK_START, BLOCK_STOP, LOG_COMPONENT, LogBlock, encode_block,
};
use crate::link::signing::{Signer, SigningStats};
use crate::sim::config::Impairment;
use crate::sim::impaired::ImpairedLink;
use crate::sim::signing::{Policy, authentic};

/// A block unacked this long is sent again (AP_Logger_MAVLink's 10 Hz resend task).
pub const RESEND_AFTER: Duration = Duration::from_millis(100);
/// A client silent this long while blocks are out is dropped.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);
/// Wire bytes of a REMOTE_LOG_DATA_BLOCK frame (MAVLink 2, no trailing zeros trimmed).
const BLOCK_WIRE_BYTES: f64 = 218.0;
/// A DMS record is written this often (log time, µs), as ArduPilot's MAVLink backend does.
const DMS_INTERVAL_US: u64 = 1_000_000;
/// Blocks sent per poll without a link rate (AP_Logger_MAVLink's most per push).
const BURST: usize = 9;

/// The simulated ArduPilot's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct ArduPilotConfig {
    pub system_id: u8,
    pub component_id: u8,
    /// The link's rate in bytes per second (its serial port's); `None`: as fast as the
    /// caller polls, nine blocks a poll.
    pub link_rate: Option<u64>,
    /// Blocks its buffer holds (`LOG_MAV_BUFSIZE` 8 KB: 37 blocks of 216 bytes).
    pub buffer_blocks: usize,
    pub heartbeat_interval: Duration,
    pub impairment: Impairment,
    pub seed: u64,
    /// The log plays this many times faster than its own time (1: as the vehicle flew).
    pub speed: u32,
    /// Keep what each stream put into blocks ([`SimArduPilot::streams`]): the truth a
    /// test holds a receiver's log to. Off, nothing is kept.
    pub record_streams: bool,
    /// MAVLink 2 signing: its key, the link id of its signatures, and its signing clock at
    /// power-up (a vehicle keeps its clock across reboots: start the next boot's at
    /// [`SimArduPilot::signing_timestamp`] or above).
    pub signing: Option<SigningSetup>,
}

impl Default for ArduPilotConfig {
    fn default() -> Self {
        Self {
            system_id: 1,
            component_id: 1,
            link_rate: Some(92_160),
            buffer_blocks: 37,
            heartbeat_interval: Duration::from_secs(1),
            impairment: Impairment::NONE,
            seed: 1,
            speed: 1,
            record_streams: false,
            signing: None,
        }
    }
}

/// Counters; all monotonic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ArduPilotStats {
    pub starts: u64,
    pub stops: u64,
    /// Blocks sent for the first time.
    pub blocks_sent: u64,
    /// Blocks sent again (after 100 ms, or on a NACK).
    pub resends: u64,
    pub nacks: u64,
    /// Messages written while the buffer was full: dropped at the source.
    pub dropped_messages: u64,
    /// Clients dropped for 10 s of silence.
    pub client_timeouts: u64,
    /// Messages written while it served no client: in no stream (the card has them).
    pub unserved_messages: u64,
    /// Blocks sent and never acked, given up when their stream ended (a client dropped, a
    /// STOP): what the receiver may honestly miss besides the messages dropped at the source.
    pub abandoned_blocks: u64,
    pub frames_sent: u64,
    pub frames_dropped: u64,
    /// Received frames dropped for their signature (with a key).
    pub refused_frames: u64,
}

/// A whole DataFlash message of the log and when it is written (log time, µs).
#[derive(Debug, Clone)]
struct Written {
    at_us: u64,
    bytes: Vec<u8>,
}

/// See the module docs.
pub struct SimArduPilot {
    config: ArduPilotConfig,
    /// Every type's format (the framer that read the whole log).
    formats: Framer,
    /// The messages after the startup, in order.
    messages: Vec<Written>,
    /// The log time at power-up.
    first_us: u64,
    /// Messages written so far.
    written: usize,
    /// What a restart of the stream sends first.
    preamble: Preamble,
    client: Option<(u8, u8)>,
    /// Bytes written to the stream, not yet in blocks.
    pending: Vec<u8>,
    next_seqno: u32,
    sent: BTreeMap<u32, (LogBlock, Instant)>,
    retry: VecDeque<u32>,
    last_heard: Instant,
    next_block: Instant,
    epoch: Instant,
    next_heartbeat: Instant,
    tx_sequence: u8,
    block_sequence: u8,
    frames: FrameDecoder,
    link: ImpairedLink,
    stats: ArduPilotStats,
    /// Messages dropped at the source since the stream began (what its DMS records say).
    stream_dropped: u32,
    /// The log's DMS type, when it defines one with its `TimeUS` and `Dp`.
    dms_type: Option<u8>,
    /// When the next DMS record is written (log time, µs).
    next_dms_us: u64,
    /// The types whose FMT the running stream has carried.
    emitted: HashSet<u8>,
    /// With [`ArduPilotConfig::record_streams`], the bytes each stream put into blocks.
    streams: Vec<Vec<u8>>,
    signer: Option<Signer>,
}

impl SimArduPilot {
    /// A vehicle powered up at `now` with `log` (a `.bin` file's bytes) to play, not
    /// streaming. What is not a whole message in `log` (a torn end) is left out.
    pub fn new(log: Vec<u8>, config: ArduPilotConfig, now: Instant) -> Self {
        let mut framer = Framer::new();
        let mut preamble = Preamble::new();
        let mut messages = Vec::new();
        let mut last_us = None;
        framer.push(&log, |m, format| {
            if messages.is_empty() && crate::dataflash::preamble::is_startup(&format.name) {
                preamble.observe(m, format);
                return;
            }
            last_us = time_us(format, m).or(last_us);
            messages.push(Written {
                at_us: last_us.unwrap_or(0),
                bytes: m.to_vec(),
            });
        });
        let first_us = messages.first().map_or(0, |m| m.at_us);
        let dms_type = (framer.formats())
            .find(|f| f.name == "DMS" && f.field("TimeUS").is_some() && f.field("Dp").is_some())
            .map(|f| f.type_id);
        let signer = (config.signing.as_ref())
            .map(|s| Signer::new(s.key.clone(), s.link_id, s.timestamp, now));
        Self {
            signer,
            link: ImpairedLink::new(config.impairment, config.seed, now),
            config,
            formats: framer,
            messages,
            first_us,
            written: 0,
            preamble,
            client: None,
            pending: Vec::new(),
            next_seqno: 0,
            sent: BTreeMap::new(),
            retry: VecDeque::new(),
            last_heard: now,
            next_block: now,
            epoch: now,
            next_heartbeat: now,
            tx_sequence: 0,
            block_sequence: 0,
            frames: FrameDecoder::new(),
            stats: ArduPilotStats::default(),
            stream_dropped: 0,
            dms_type,
            next_dms_us: 0,
            emitted: HashSet::new(),
            streams: Vec::new(),
        }
    }

    /// With [`ArduPilotConfig::record_streams`]: the bytes each stream of this boot put
    /// into blocks (sent at least once; acked or not), one per START it began, in order.
    pub fn streams(&self) -> &[Vec<u8>] {
        &self.streams
    }

    pub fn stats(&self) -> ArduPilotStats {
        ArduPilotStats {
            frames_sent: self.link.frames_sent,
            frames_dropped: self.link.frames_dropped,
            ..self.stats
        }
    }

    /// With a signing key: its signing clock at `now` (where a reboot's clock goes on from).
    pub fn signing_timestamp(&self, now: Instant) -> Option<u64> {
        self.signer.as_ref().map(|s| s.timestamp(now))
    }

    /// With a signing key: what its signature checks refused, by cause.
    pub fn signing_stats(&self) -> Option<SigningStats> {
        self.signer.as_ref().map(Signer::stats)
    }

    /// From now on its link is impaired as `impairment` says (a fault schedule's change).
    pub fn set_impairment(&mut self, impairment: Impairment) {
        self.link.set_impairment(impairment);
    }

    /// True while it serves a client.
    pub fn streaming(&self) -> bool {
        self.client.is_some()
    }

    /// True once every message was written, and sent and acked if a client is served.
    pub fn finished(&self) -> bool {
        self.written == self.messages.len() && self.pending.is_empty() && self.sent.is_empty()
    }

    /// The next frame on the wire to the receiver.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.link.poll_transmit()
    }

    /// When [`handle_timeout`](Self::handle_timeout) next has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut t = self.next_heartbeat;
        if let Some(m) = self.messages.get(self.written) {
            t = t.min(self.at(m.at_us));
        }
        if self.client.is_some() {
            if !self.retry.is_empty() || self.pending.len() >= BLOCK_BYTES || self.last_block_due()
            {
                t = t.min(self.next_block);
            }
            if let Some(oldest) = self.sent.values().map(|(_, at)| *at).min() {
                t = t.min((oldest + RESEND_AFTER).max(self.next_block));
                t = t.min(self.last_heard + CLIENT_TIMEOUT);
            }
        }
        Some(self.link.next_release().map_or(t, |r| t.min(r)))
    }

    /// When log time `us` comes.
    fn at(&self, us: u64) -> Instant {
        self.epoch + Duration::from_micros(us.saturating_sub(self.first_us) / self.speed())
    }

    /// The log time at `now`, µs.
    fn log_time(&self, now: Instant) -> u64 {
        let elapsed = now.saturating_duration_since(self.epoch).as_micros() as u64;
        self.first_us + elapsed * self.speed()
    }

    fn speed(&self) -> u64 {
        u64::from(self.config.speed.max(1))
    }

    /// Bytes from the receiver.
    pub fn handle_bytes(&mut self, bytes: &[u8], now: Instant) {
        self.frames.push(bytes);
        while let Some(frame) = self.frames.next_frame() {
            if self.link.lost_inbound(now, false) {
                continue;
            }
            if !authentic(self.signer.as_mut(), Policy::ArduPilot, &frame, now) {
                self.stats.refused_frames += 1;
                continue;
            }
            let from = (frame.header.system_id as u8, frame.header.component_id);
            if let Some(MavMessage::REMOTE_LOG_BLOCK_STATUS(s)) = frame.message.mav()
                && s.target_system == self.config.system_id
            {
                let ack = s.status == MavRemoteLogDataBlockStatuses::MAV_REMOTE_LOG_DATA_BLOCK_ACK;
                self.block_status(from, s.seqno, ack, now);
            }
        }
    }

    fn block_status(&mut self, from: (u8, u8), seqno: u32, ack: bool, now: Instant) {
        match seqno {
            BLOCK_START if ack && self.client.is_none() => {
                self.client = Some(from);
                self.stream_dropped = 0;
                self.pending = self.startup_records(now);
                self.emitted = defined_types(&self.pending);
                self.next_seqno = 0;
                self.sent.clear();
                self.retry.clear();
                self.last_heard = now;
                self.next_block = now;
                self.stats.starts += 1;
                if self.config.record_streams {
                    self.streams.push(Vec::new());
                }
            }
            BLOCK_START => {}
            BLOCK_STOP => {
                if self.client.take().is_some() {
                    self.stats.stops += 1;
                }
                self.drop_stream();
            }
            _ if self.client.is_none() => {}
            _ if ack => {
                self.sent.remove(&seqno);
                self.last_heard = now;
            }
            _ => {
                if self.sent.contains_key(&seqno) && !self.retry.contains(&seqno) {
                    self.retry.push_back(seqno);
                    self.stats.nacks += 1;
                }
                self.last_heard = now;
            }
        }
    }

    /// What a START writes first: FMT for every type written so far, then the units, the
    /// version, the startup texts, the parameters and the mode, each timed now (the log
    /// time goes on).
    fn startup_records(&self, now: Instant) -> Vec<u8> {
        let now_us = self.log_time(now);
        let mut records = self.preamble.bytes();
        let mut at = 0;
        while at + 3 <= records.len() {
            let Some(format) = self.formats.format(records[at + 2]) else {
                break;
            };
            let len = format.length as usize;
            if format.has_time_us() && at + 11 <= records.len() {
                records[at + 3..at + 11].copy_from_slice(&now_us.to_le_bytes());
            }
            at += len;
        }
        records
    }

    fn drop_stream(&mut self) {
        self.stats.abandoned_blocks += self.sent.len() as u64;
        self.pending.clear();
        self.sent.clear();
        self.retry.clear();
    }

    /// Writes what is due at `now`, and sends: heartbeat, NACKed blocks, resends, new blocks.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.link.release(Some(now));
        if now >= self.next_heartbeat {
            self.send(self.heartbeat(), now);
            self.next_heartbeat = now + self.config.heartbeat_interval;
        }
        self.write_due(now);
        if self.client.is_some()
            && !self.sent.is_empty()
            && now.saturating_duration_since(self.last_heard) >= CLIENT_TIMEOUT
        {
            tracing::info!("sim: the client was silent for 10 s: dropped");
            self.client = None;
            self.stats.client_timeouts += 1;
            self.drop_stream();
        }
        let Some(client) = self.client else {
            return;
        };
        // The link carries a block every `interval`; a caller that wakes late (a timer's
        // millisecond) sends what the link could have carried meanwhile, a push at most.
        let interval = (self.config.link_rate)
            .map(|rate| Duration::from_secs_f64(BLOCK_WIRE_BYTES / rate.max(1) as f64));
        let mut budget = match interval {
            Some(_) if now < self.next_block => 0,
            Some(i) => {
                let late = now.duration_since(self.next_block).as_nanos();
                (1 + late / i.as_nanos().max(1)).min(BURST as u128) as usize
            }
            None => BURST,
        };
        while budget > 0 {
            let seqno = if let Some(s) = self.retry.pop_front() {
                Some(s)
            } else {
                (self.sent.iter())
                    .find(|(_, (_, at))| now.saturating_duration_since(*at) >= RESEND_AFTER)
                    .map(|(s, _)| *s)
            };
            match seqno {
                Some(seqno) => {
                    let Some((block, at)) = self.sent.get_mut(&seqno) else {
                        continue;
                    };
                    *at = now;
                    let block = block.clone();
                    self.stats.resends += 1;
                    self.send_block(&block, now);
                }
                None if self.pending.len() >= BLOCK_BYTES || self.last_block_due() => {
                    let mut block = LogBlock {
                        target_system: client.0,
                        target_component: client.1,
                        seqno: self.next_seqno,
                        ..LogBlock::default()
                    };
                    // The log's last block is whatever is left, zeros after it.
                    let n = self.pending.len().min(BLOCK_BYTES);
                    block.data[..n].copy_from_slice(&self.pending[..n]);
                    if let Some(stream) = self.streams.last_mut() {
                        stream.extend_from_slice(&self.pending[..n]);
                    }
                    self.pending.drain(..n);
                    self.next_seqno += 1;
                    self.stats.blocks_sent += 1;
                    self.send_block(&block, now);
                    self.sent.insert(block.seqno, (block, now));
                }
                None => break,
            }
            budget -= 1;
            if let Some(i) = interval {
                let earliest = now.checked_sub(i * BURST as u32).unwrap_or(now);
                self.next_block = self.next_block.max(earliest) + i;
            }
        }
    }

    /// The whole file is written and less than a block of it is left: it goes out as the
    /// last block.
    fn last_block_due(&self) -> bool {
        self.written == self.messages.len() && !self.pending.is_empty()
    }

    /// The messages whose time has come: into the stream while there is room, dropped at
    /// the source when the buffer is full (none while no client is served: the card has
    /// them).
    fn write_due(&mut self, now: Instant) {
        while let Some(m) = self.messages.get(self.written) {
            if self.at(m.at_us) > now {
                break;
            }
            let (at_us, type_id) = (m.at_us, m.bytes[2]);
            self.written += 1;
            // The log's own DMS were another stream's: this vehicle writes its own.
            if self.dms_type == Some(type_id) {
                continue;
            }
            if self.dms_type.is_some() && at_us >= self.next_dms_us {
                self.next_dms_us = at_us + DMS_INTERVAL_US;
                let dms = self.dms_record(at_us);
                self.write_message(dms);
            }
            let m = self.messages[self.written - 1].bytes.clone();
            // Followed for the startup records a restart sends.
            if let Some(format) = self.formats.format(type_id) {
                self.preamble.observe(&m, format);
            }
            self.write_message(m);
        }
    }

    /// Queues message `m` for the stream as `AP_Logger` writes one: a type's FMT goes
    /// first, once per stream (a FMT dropped is tried again before the type's next message,
    /// which is dropped with it).
    fn write_message(&mut self, m: Vec<u8>) {
        if self.client.is_none() {
            self.stats.unserved_messages += 1;
            return;
        }
        if m[2] == FMT_TYPE {
            let defined = m.get(3).copied().unwrap_or(0);
            if !self.emitted.contains(&defined) && self.write(m) {
                self.emitted.insert(defined);
            }
            return;
        }
        if !self.emitted.contains(&m[2]) {
            let Some(fmt) = self.formats.format(m[2]).map(Format::to_bytes) else {
                return;
            };
            if !self.write(fmt) {
                // Counted once: the message goes with its FMT.
                return;
            }
            self.emitted.insert(m[2]);
        }
        self.write(m);
    }

    /// Queues `m` for the stream, or drops it at the source when the buffer is full
    /// (nothing while no client is served: the card has it). True when queued.
    fn write(&mut self, m: Vec<u8>) -> bool {
        if self.client.is_none() {
            return false;
        }
        let blocks = self.sent.len() + (self.pending.len() + m.len()).div_ceil(BLOCK_BYTES);
        if blocks > self.config.buffer_blocks {
            self.write_dropped();
            return false;
        }
        self.pending.extend_from_slice(&m);
        true
    }

    fn write_dropped(&mut self) {
        self.stats.dropped_messages += 1;
        self.stream_dropped = self.stream_dropped.saturating_add(1);
    }

    /// A DMS record at log time `at_us`: the stream's drops at the source (`Dp`), blocks
    /// sent (`N`) and resent (`RS`) so far, the rest zero.
    fn dms_record(&self, at_us: u64) -> Vec<u8> {
        let format = (self.dms_type)
            .and_then(|t| self.formats.format(t))
            .expect("a DMS type");
        let mut m = vec![0u8; usize::from(format.length)];
        m[..3].copy_from_slice(&[HEADER[0], HEADER[1], format.type_id]);
        let mut put = |label: &str, value: u64| match format.field(label) {
            Some((at, b'Q')) if at + 8 <= m.len() => {
                m[at..at + 8].copy_from_slice(&value.to_le_bytes())
            }
            Some((at, b'I')) if at + 4 <= m.len() => {
                let v = u32::try_from(value).unwrap_or(u32::MAX);
                m[at..at + 4].copy_from_slice(&v.to_le_bytes())
            }
            _ => {}
        };
        put("TimeUS", at_us);
        put("N", self.stats.blocks_sent);
        put("Dp", u64::from(self.stream_dropped));
        put("RS", self.stats.resends);
        m
    }

    fn heartbeat(&self) -> MavMessage {
        MavMessage::HEARTBEAT(HEARTBEAT_DATA {
            custom_mode: 0,
            mavtype: MavType::MAV_TYPE_QUADROTOR,
            autopilot: MavAutopilot::MAV_AUTOPILOT_ARDUPILOTMEGA,
            base_mode: MavModeFlag::MAV_MODE_FLAG_CUSTOM_MODE_ENABLED,
            system_status: MavState::MAV_STATE_STANDBY,
            mavlink_version: 3,
        })
    }

    fn send(&mut self, message: MavMessage, now: Instant) {
        let header = MavHeader {
            system_id: self.config.system_id as _,
            component_id: self.config.component_id,
            sequence: self.tx_sequence,
        };
        self.tx_sequence = self.tx_sequence.wrapping_add(1);
        let mut frame = Vec::with_capacity(64);
        match &mut self.signer {
            Some(signer) => signer.sign(header, &message, now, &mut frame),
            None => encode(header, &message, &mut frame),
        }
        self.link.send(frame, now, false);
    }

    fn send_block(&mut self, block: &LogBlock, now: Instant) {
        let header = MavHeader {
            system_id: self.config.system_id as _,
            component_id: LOG_COMPONENT,
            sequence: self.block_sequence,
        };
        self.block_sequence = self.block_sequence.wrapping_add(1);
        let mut frame = Vec::with_capacity(230);
        match &mut self.signer {
            Some(signer) => signer.sign_data(header, block, now, &mut frame),
            None => encode_block(header, block, &mut frame),
        }
        self.link.send(frame, now, false);
    }
}

/// The types the FMT records at the head of `records` (a stream's startup) define.
fn defined_types(records: &[u8]) -> HashSet<u8> {
    records
        .chunks_exact(FMT_LEN)
        .take_while(|r| r[..2] == HEADER && r[2] == FMT_TYPE)
        .map(|r| r[3])
        .collect()
}
