//! A simulated PX4 vehicle that streams a ULog file, sans-IO (bytes and `now` in, frames out),
//! for `ulog-recv sim`, the demo, the tests and the benchmark.
//!
//! It behaves as PX4's logger and `mavlink_ulog` do:
//! - HEARTBEAT every second (a PX4 quadrotor).
//! - LOGGING_START (param1 0) → ACCEPTED and the stream begins at sequence 0, addressed to the
//!   sender; param1 ≠ 0 → UNSUPPORTED; while streaming → TEMPORARILY_REJECTED.
//!   LOGGING_STOP → IN_PROGRESS, then ACCEPTED. [`VehicleConfig::refuse_start`] makes it answer
//!   DENIED (or anything else) instead, as PX4 does on a slow link.
//! - Phase 1 (header and definitions) as LOGGING_DATA_ACKED, stop-and-wait: one chunk in
//!   flight, resent every 50 ms, at most 50 tries; after the last one the stream stops (PX4's
//!   "Ack timeout"). The vehicle matches acks on the sequence only.
//! - Phase 2 as LOGGING_DATA, never resent, at most [`VehicleConfig::rate_limit`] bytes/s.
//! - At the end of the file it stays silent but "streaming" (as PX4 would until a STOP).
//! - Every stream after the first is a new log: its header says when it started.
//!
//! The link in between is impaired with a seeded RNG ([`Impairment`]): loss, duplication and
//! reordering of what the vehicle sends, loss of what it receives, and outages both ways.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use mavlink::MavHeader;
use mavlink::dialects::common::{
    COMMAND_ACK_DATA, HEARTBEAT_DATA, LOGGING_DATA_ACKED_DATA, LOGGING_DATA_DATA, MavAutopilot,
    MavCmd, MavMessage, MavModeFlag, MavResult, MavState, MavType,
};

use crate::link::chunker::{ChunkedLog, LogChunk};
use crate::link::frames::{FrameDecoder, encode};

/// What the simulated link does to frames. All probabilities in [0, 1].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Impairment {
    /// A frame from the vehicle is lost.
    pub loss: f64,
    /// A frame from the vehicle arrives twice.
    pub duplicate: f64,
    /// A frame from the vehicle is held back behind up to `reorder_depth` later ones.
    pub reorder: f64,
    pub reorder_depth: usize,
    /// A frame to the vehicle (an ack, a command) is lost.
    pub uplink_loss: f64,
    /// Every `outage_every`, nothing gets through either way for `outage_len`.
    pub outage_every: Option<Duration>,
    pub outage_len: Duration,
}

impl Impairment {
    /// A perfect link.
    pub const NONE: Self = Self {
        loss: 0.0,
        duplicate: 0.0,
        reorder: 0.0,
        reorder_depth: 0,
        uplink_loss: 0.0,
        outage_every: None,
        outage_len: Duration::ZERO,
    };
}

impl Default for Impairment {
    fn default() -> Self {
        Self::NONE
    }
}

/// The simulated vehicle's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct VehicleConfig {
    pub system_id: u8,
    pub component_id: u8,
    /// Phase-2 bytes per second on the wire (PX4 caps it at 70 % of the link's rate); `None`:
    /// as fast as the caller polls, [`VehicleConfig::burst`] chunks per poll.
    pub rate_limit: Option<u64>,
    /// Chunks sent per [`SimVehicle::handle_timeout`] without a rate limit.
    pub burst: usize,
    pub ack_timeout: Duration,
    pub max_tries: u32,
    pub heartbeat_interval: Duration,
    /// Answer every LOGGING_START with this instead of streaming (e.g. DENIED).
    pub refuse_start: Option<MavResult>,
    pub impairment: Impairment,
    pub seed: u64,
}

impl Default for VehicleConfig {
    fn default() -> Self {
        Self {
            system_id: 1,
            component_id: 1,
            rate_limit: Some(100_000),
            burst: 64,
            ack_timeout: Duration::from_millis(50),
            max_tries: 50,
            heartbeat_interval: Duration::from_secs(1),
            refuse_start: None,
            impairment: Impairment::NONE,
            seed: 1,
        }
    }
}

/// Counters; all monotonic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct VehicleStats {
    pub starts: u64,
    pub stops: u64,
    /// Chunks sent for the first time.
    pub chunks_sent: u64,
    /// Acked-phase chunks sent again after 50 ms without an ack.
    pub resends: u64,
    pub acks_received: u64,
    /// Streams abandoned after the last try of an acked chunk.
    pub ack_timeouts: u64,
    pub frames_sent: u64,
    /// Frames the impaired link dropped, both ways.
    pub frames_dropped: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stream {
    Idle,
    Acked {
        index: usize,
        tries: u32,
        first_sent: Instant,
        next_resend: Instant,
    },
    Unacked {
        index: usize,
        next_send: Instant,
    },
    /// The whole file went out; PX4 would still be streaming.
    Finished,
}

/// See the module docs.
pub struct SimVehicle {
    config: VehicleConfig,
    log: ChunkedLog,
    rng: fastrand::Rng,
    frames: FrameDecoder,
    stream: Stream,
    /// Who asked for the stream.
    client: (u8, u8),
    /// Set by [`SimVehicle::reboot`]: silent until then.
    down_until: Option<Instant>,
    epoch: Instant,
    /// When the current (or last) stream started.
    last_start: Instant,
    next_heartbeat: Option<Instant>,
    tx_sequence: u8,
    out: VecDeque<Vec<u8>>,
    /// Frames held back by the reordering impairment, with the frames still to pass them.
    delayed: Vec<(usize, Vec<u8>)>,
    /// Per chunk of the current stream: it went through the link at least once.
    arrived: Vec<bool>,
    ack_round_trips: Vec<Duration>,
    stats: VehicleStats,
}

impl SimVehicle {
    /// A vehicle powered up at `now`, not streaming.
    pub fn new(log: ChunkedLog, config: VehicleConfig, now: Instant) -> Self {
        Self {
            rng: fastrand::Rng::with_seed(config.seed),
            config,
            arrived: vec![false; log.chunks.len()],
            log,
            frames: FrameDecoder::new(),
            stream: Stream::Idle,
            client: (0, 0),
            down_until: None,
            epoch: now,
            last_start: now,
            next_heartbeat: Some(now),
            tx_sequence: 0,
            out: VecDeque::new(),
            delayed: Vec::new(),
            ack_round_trips: Vec::new(),
            stats: VehicleStats::default(),
        }
    }

    pub fn stats(&self) -> VehicleStats {
        self.stats
    }

    /// The log being streamed (after a restart, its header carries the new start time).
    pub fn log(&self) -> &ChunkedLog {
        &self.log
    }

    /// Per chunk of the current (or last) stream: whether at least one copy got through the
    /// impaired link. What an ideal receiver could have used.
    pub fn arrived(&self) -> &[bool] {
        &self.arrived
    }

    /// Time from each acked chunk's first send to its ack (the receiver's ack latency plus
    /// the link's round trip and any resends).
    pub fn ack_round_trips(&self) -> &[Duration] {
        &self.ack_round_trips
    }

    /// True once the whole file was sent (the stream is still on, as PX4's would be).
    pub fn finished(&self) -> bool {
        self.stream == Stream::Finished
    }

    /// True while a stream is on (started and neither stopped nor given up).
    pub fn streaming(&self) -> bool {
        self.stream != Stream::Idle
    }

    /// Reboots: the stream ends and the vehicle says nothing for `downtime`.
    pub fn reboot(&mut self, now: Instant, downtime: Duration) {
        self.stream = Stream::Idle;
        self.down_until = Some(now + downtime);
        self.out.clear();
        self.delayed.clear();
    }

    /// The next frame on the wire to the receiver.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.out.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) next has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let stream = match self.stream {
            Stream::Acked { next_resend, .. } => Some(next_resend),
            Stream::Unacked { next_send, .. } => Some(next_send),
            Stream::Idle | Stream::Finished => None,
        };
        let t = match (self.next_heartbeat, stream) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match (t, self.down_until) {
            (Some(t), Some(d)) => Some(t.max(d)),
            (t, _) => t,
        }
    }

    /// Bytes from the receiver.
    pub fn handle_bytes(&mut self, bytes: &[u8], now: Instant) {
        self.frames.push(bytes);
        while let Some((header, message)) = self.frames.next_message() {
            if self.is_down(now)
                || self.in_outage(now)
                || self.chance(self.config.impairment.uplink_loss)
            {
                self.stats.frames_dropped += 1;
                continue;
            }
            self.handle_message(header, &message, now);
        }
    }

    /// Sends what is due at `now`: heartbeat, resends, phase-2 chunks.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.is_down(now) {
            return;
        }
        self.down_until = None;
        if self.next_heartbeat.is_none_or(|t| t <= now) {
            self.send(self.heartbeat(), now);
            self.next_heartbeat = Some(now + self.config.heartbeat_interval);
        }
        match self.stream {
            Stream::Acked {
                index,
                tries,
                first_sent,
                next_resend,
            } if now >= next_resend => {
                if tries >= self.config.max_tries {
                    tracing::warn!(index, "sim: ack timeout, stopping the stream");
                    self.stats.ack_timeouts += 1;
                    self.stream = Stream::Idle;
                } else {
                    self.stats.resends += 1;
                    self.send_chunk(index, now);
                    self.stream = Stream::Acked {
                        index,
                        tries: tries + 1,
                        first_sent,
                        next_resend: now + self.config.ack_timeout,
                    };
                }
            }
            Stream::Unacked { index, next_send } if now >= next_send => {
                self.send_unacked(index, next_send, now)
            }
            _ => {}
        }
    }

    fn send_unacked(&mut self, mut index: usize, mut next_send: Instant, now: Instant) {
        // A caller that fell behind does not get a burst beyond 10 ms worth.
        if let Some(earliest) = now.checked_sub(Duration::from_millis(10)) {
            next_send = next_send.max(earliest);
        }
        let mut sent = 0;
        while index < self.log.chunks.len() {
            match self.config.rate_limit {
                Some(rate) => {
                    if next_send > now {
                        break;
                    }
                    let wire = self.log.chunks[index].data.len() as u64 + 18;
                    next_send += Duration::from_nanos(wire * 1_000_000_000 / rate.max(1));
                }
                None => {
                    if sent == self.config.burst {
                        break;
                    }
                    next_send = now;
                }
            }
            self.send_chunk(index, now);
            self.stats.chunks_sent += 1;
            index += 1;
            sent += 1;
        }
        self.stream = if index == self.log.chunks.len() {
            self.flush_delayed();
            Stream::Finished
        } else {
            Stream::Unacked { index, next_send }
        };
    }

    fn handle_message(&mut self, header: MavHeader, message: &MavMessage, now: Instant) {
        match message {
            MavMessage::COMMAND_LONG(c)
                if c.target_system == self.config.system_id
                    && (c.target_component == self.config.component_id
                        || c.target_component == 0) =>
            {
                let client = (header.system_id as u8, header.component_id);
                match c.command {
                    MavCmd::MAV_CMD_LOGGING_START => {
                        let result = if let Some(r) = self.config.refuse_start {
                            r
                        } else if c.param1 != 0.0 {
                            MavResult::MAV_RESULT_UNSUPPORTED
                        } else if self.stream != Stream::Idle {
                            MavResult::MAV_RESULT_TEMPORARILY_REJECTED
                        } else {
                            MavResult::MAV_RESULT_ACCEPTED
                        };
                        self.command_ack(c.command, result, now);
                        if result == MavResult::MAV_RESULT_ACCEPTED {
                            self.start(client, now);
                        }
                    }
                    MavCmd::MAV_CMD_LOGGING_STOP => {
                        self.command_ack(c.command, MavResult::MAV_RESULT_IN_PROGRESS, now);
                        if self.stream != Stream::Idle {
                            self.stats.stops += 1;
                        }
                        self.stream = Stream::Idle;
                        self.command_ack(c.command, MavResult::MAV_RESULT_ACCEPTED, now);
                    }
                    _ => {}
                }
            }
            MavMessage::LOGGING_ACK(ack) => {
                self.stats.acks_received += 1;
                if let Stream::Acked {
                    index, first_sent, ..
                } = self.stream
                    && self.log.chunks[index].seq == ack.sequence
                {
                    self.ack_round_trips.push(now.duration_since(first_sent));
                    self.advance(index + 1, now);
                }
            }
            _ => {}
        }
    }

    fn start(&mut self, client: (u8, u8), now: Instant) {
        self.stats.starts += 1;
        if self.stats.starts > 1 {
            // A new log: PX4 stamps its header with the time it starts.
            let header = &mut self.log.stream[8..16];
            let t0 = u64::from_le_bytes(header.try_into().expect("8 bytes"));
            let t = t0 + now.duration_since(self.last_start).as_micros() as u64;
            header.copy_from_slice(&t.to_le_bytes());
            self.log.chunks[0].data[8..16].copy_from_slice(&t.to_le_bytes());
        }
        self.last_start = now;
        self.client = client;
        self.arrived.iter_mut().for_each(|a| *a = false);
        self.advance(0, now);
    }

    /// Moves on to chunk `index`: sends it now when acked, else enters phase 2.
    fn advance(&mut self, index: usize, now: Instant) {
        match self.log.chunks.get(index) {
            Some(LogChunk { acked: true, .. }) => {
                self.send_chunk(index, now);
                self.stats.chunks_sent += 1;
                self.stream = Stream::Acked {
                    index,
                    tries: 1,
                    first_sent: now,
                    next_resend: now + self.config.ack_timeout,
                };
            }
            Some(_) => self.send_unacked(index, now, now),
            None => self.stream = Stream::Finished,
        }
    }

    fn send_chunk(&mut self, index: usize, now: Instant) {
        let c = &self.log.chunks[index];
        let mut d = LOGGING_DATA_DATA {
            sequence: c.seq,
            target_system: self.client.0,
            target_component: self.client.1,
            length: c.data.len() as u8,
            first_message_offset: c.first_message_offset,
            ..Default::default()
        };
        d.data[..c.data.len()].copy_from_slice(&c.data);
        let message = if c.acked {
            MavMessage::LOGGING_DATA_ACKED(LOGGING_DATA_ACKED_DATA {
                sequence: d.sequence,
                target_system: d.target_system,
                target_component: d.target_component,
                length: d.length,
                first_message_offset: d.first_message_offset,
                data: d.data,
            })
        } else {
            MavMessage::LOGGING_DATA(d)
        };
        if self.send(message, now) {
            self.arrived[index] = true;
        }
    }

    fn command_ack(&mut self, command: MavCmd, result: MavResult, now: Instant) {
        self.send(
            MavMessage::COMMAND_ACK(COMMAND_ACK_DATA { command, result }),
            now,
        );
    }

    fn heartbeat(&self) -> MavMessage {
        MavMessage::HEARTBEAT(HEARTBEAT_DATA {
            custom_mode: 0,
            mavtype: MavType::MAV_TYPE_QUADROTOR,
            autopilot: MavAutopilot::MAV_AUTOPILOT_PX4,
            base_mode: MavModeFlag::MAV_MODE_FLAG_CUSTOM_MODE_ENABLED,
            system_status: MavState::MAV_STATE_STANDBY,
            mavlink_version: 3,
        })
    }

    /// Puts one frame on the impaired link; true when at least one copy gets through.
    fn send(&mut self, message: MavMessage, now: Instant) -> bool {
        let header = MavHeader {
            system_id: self.config.system_id as _,
            component_id: self.config.component_id,
            sequence: self.tx_sequence,
        };
        self.tx_sequence = self.tx_sequence.wrapping_add(1);
        let mut frame = Vec::with_capacity(280);
        encode(header, &message, &mut frame);
        let imp = self.config.impairment;
        if self.in_outage(now) || self.chance(imp.loss) {
            self.stats.frames_dropped += 1;
            return false;
        }
        let copies = if self.chance(imp.duplicate) { 2 } else { 1 };
        for copy in 1..=copies {
            let frame = if copy == copies {
                std::mem::take(&mut frame)
            } else {
                frame.clone()
            };
            if imp.reorder_depth > 0 && self.chance(imp.reorder) {
                let behind = self.rng.usize(1..=imp.reorder_depth);
                self.delayed.push((behind, frame));
            } else {
                self.push_out(frame);
            }
        }
        true
    }

    /// Sends a frame; frames held back are released once enough have passed them.
    fn push_out(&mut self, frame: Vec<u8>) {
        self.out.push_back(frame);
        self.stats.frames_sent += 1;
        let mut i = 0;
        while i < self.delayed.len() {
            self.delayed[i].0 -= 1;
            if self.delayed[i].0 == 0 {
                let (_, f) = self.delayed.swap_remove(i);
                self.out.push_back(f);
                self.stats.frames_sent += 1;
            } else {
                i += 1;
            }
        }
    }

    fn flush_delayed(&mut self) {
        for (_, f) in self.delayed.drain(..) {
            self.out.push_back(f);
            self.stats.frames_sent += 1;
        }
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.rng.f64() < p
    }

    fn is_down(&self, now: Instant) -> bool {
        self.down_until.is_some_and(|t| now < t)
    }

    fn in_outage(&self, now: Instant) -> bool {
        let imp = &self.config.impairment;
        let epoch = self.epoch;
        match imp.outage_every {
            Some(every) if !every.is_zero() => {
                let t = now.duration_since(epoch).as_nanos() % every.as_nanos();
                // The first period starts with a clear link.
                now.duration_since(epoch) >= every && t < imp.outage_len.as_nanos()
            }
            _ => false,
        }
    }
}
