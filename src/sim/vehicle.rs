//! A simulated PX4 vehicle that streams a ULog file, sans-IO (bytes and `now` in, frames out),
//! for `ulog-recv sim`, the demo, the tests and the benchmark.
//!
//! It behaves as PX4's logger and `mavlink_ulog` do in 2026:
//! - HEARTBEAT every second (a PX4 quadrotor).
//! - LOGGING_START (param1 0) → ACCEPTED and the stream begins at sequence 0, addressed to the
//!   sender; param1 ≠ 0 → UNSUPPORTED; while streaming → TEMPORARILY_REJECTED; a link
//!   configured below 5000 B/s → DENIED. [`VehicleConfig::refuse_start`] forces an answer.
//! - Reliable chunks (the definitions, and in flight each 'A' and 'M' run, see
//!   [`crate::sim::chunker`]) go as LOGGING_DATA_ACKED, stop-and-wait: one chunk in flight,
//!   resent every 50 ms, at most 50 tries, and nothing else is sent meanwhile; after the last
//!   try the stream stops (PX4's "Ack timeout"). Acks are matched on the sequence only.
//! - The rest goes as LOGGING_DATA, never resent. PX4's rate limiter: at most
//!   `ceil(0.1 s × 70 % × link rate / 267 B)` chunks per 100 ms window (acked ones count),
//!   spread evenly over the window.
//! - LOGGING_STOP while streaming → IN_PROGRESS; the message in progress and the post-flight
//!   perf counters follow reliably; once the last is acked, ACCEPTED and the stream ends.
//!   LOGGING_STOP when idle → ACCEPTED at once.
//! - At the end of the file it stays silent but "streaming" (as PX4 would until a STOP).
//! - Every stream after the first is a new log: its header says when it started, then come
//!   the definitions and every subscription so far, then the flight from where the logger
//!   is (where the last stream got to): PX4's logger writes a new stream's log from now on,
//!   while its SD card's log holds the whole flight. After a reboot the flight begins again,
//!   header and all: the boot's clock starts anew, and the flight is the same.
//! - With a signing key ([`VehicleConfig::signing`]) it signs every frame and drops every
//!   incoming frame whose signature does not verify, and unsigned ones but HEARTBEAT,
//!   RADIO_STATUS, ADSB_VEHICLE and COLLISION, as PX4 does.
//!
//! The link in between is impaired with a seeded RNG ([`Impairment`]): loss, duplication and
//! reordering of what the vehicle sends, loss of what it receives, and outages both ways.

use std::collections::VecDeque;

use bytes::Bytes;
use std::time::{Duration, Instant, SystemTime};

use mavlink::MavHeader;
use mavlink::dialects::ardupilotmega::{
    COMMAND_ACK_DATA, FILE_TRANSFER_PROTOCOL_DATA, HEARTBEAT_DATA, LOGGING_DATA_ACKED_DATA,
    LOGGING_DATA_DATA, MavAutopilot, MavCmd, MavMessage, MavModeFlag, MavResult, MavState, MavType,
};

use crate::link::frames::{FrameDecoder, encode};
use crate::link::ftp::FtpPayload;
use crate::link::signing::{Signer, SigningStats, timestamp_at};
use crate::sim::chunker::{ChunkedLog, LogChunk, chunk_log};
use crate::sim::config::{Impairment, MIN_LINK_RATE, VehicleConfig, VehicleStats};
use crate::sim::ftp_server::{FtpServer, FtpServerStats, LOG_ROOT};
use crate::sim::impaired::ImpairedLink;
use crate::sim::signing::{Policy, authentic, stored_signing_timestamp};
use crate::ulog::message::{FILE_HEADER_LEN, is_definition, msg_type};

/// Wire bytes of a full FILE_TRANSFER_PROTOCOL frame.
const FTP_WIRE_BYTES: f64 = 266.0;

/// Where PX4 would have written the log it streams: `LOG_ROOT/DATE/HH_MM_SS.ulg` in UTC.
fn sd_log_path(wall_clock: SystemTime) -> String {
    let stamp = humantime::format_rfc3339_seconds(wall_clock).to_string();
    let (date, time) = stamp.split_once('T').unwrap_or(("1970-01-01", "00:00:00Z"));
    let time = time.trim_end_matches('Z').replace(':', "_");
    format!("{LOG_ROOT}/{date}/{time}.ulg")
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
    /// The current stream's log (with its own header time, and post-flight after a STOP).
    log: ChunkedLog,
    /// The flight's log as loaded (the SD card's): every stream is cut from it.
    flight: ChunkedLog,
    /// Where the current stream's data begins: its message `data_start` is the flight's
    /// message `flight_from` (before it: the header, the definitions, the subscriptions).
    data_start: usize,
    flight_from: usize,
    /// Chunks of the current stream's data sent so far (its post-flight ones aside).
    progress: usize,
    /// Rebooted since the last stream began: the next begins the flight again.
    rebooted: bool,
    /// Every stream before the current one, as it went out.
    past_streams: Vec<ChunkedLog>,
    frames: FrameDecoder,
    signer: Option<Signer>,
    stream: Stream,
    /// A STOP is being served: the post-flight data goes out, then ACCEPTED.
    stopping: bool,
    /// Where the post-flight chunks begin, once a STOP cut the stream.
    postflight_from: Option<usize>,
    /// Who asked for the stream.
    client: (u8, u8),
    /// Set by [`SimVehicle::reboot`]: silent until then.
    down_until: Option<Instant>,
    epoch: Instant,
    /// When the rate limiter lets the next chunk go out.
    next_slot: Instant,
    next_heartbeat: Option<Instant>,
    tx_sequence: u8,
    /// The link between it and the receiver, impaired as configured.
    link: ImpairedLink,
    /// Per chunk of the current stream: it went through the link at least once.
    arrived: Vec<bool>,
    ack_round_trips: Vec<Duration>,
    stats: VehicleStats,
    ftp: FtpServer,
    /// FTP replies waiting for the link, each with who asked.
    ftp_out: VecDeque<((u8, u8), FtpPayload)>,
    /// When the link lets the next FTP reply go out.
    ftp_slot: Instant,
}

impl SimVehicle {
    /// A vehicle powered up at `now`, not streaming; `wall_clock` is the time of day at `now`
    /// (its signing clock starts there).
    pub fn new(
        log: ChunkedLog,
        config: VehicleConfig,
        now: Instant,
        wall_clock: SystemTime,
    ) -> Self {
        let signer = config
            .signing
            .clone()
            .map(|key| Signer::new(key, 0, timestamp_at(wall_clock), now));
        let files = config.sd_log.then(|| {
            let sd: Vec<u8> = [&log.stream[..], &log.postflight[..]].concat();
            (sd_log_path(wall_clock), Bytes::from(sd))
        });
        Self {
            ftp: FtpServer::new(files),
            ftp_out: VecDeque::new(),
            ftp_slot: now,
            link: ImpairedLink::new(config.impairment, config.seed, now),
            config,
            arrived: vec![false; log.chunks.len()],
            data_start: definitions_end(&log),
            flight_from: definitions_end(&log),
            progress: 0,
            rebooted: false,
            past_streams: Vec::new(),
            flight: log.clone(),
            log,
            frames: FrameDecoder::new(),
            signer,
            stream: Stream::Idle,
            stopping: false,
            postflight_from: None,
            client: (0, 0),
            down_until: None,
            epoch: now,
            next_slot: now,
            next_heartbeat: Some(now),
            tx_sequence: 0,
            ack_round_trips: Vec::new(),
            stats: VehicleStats::default(),
        }
    }

    /// With a signing key: what its signature checks refused, by cause.
    pub fn signing_stats(&self) -> Option<SigningStats> {
        self.signer.as_ref().map(Signer::stats)
    }

    pub fn stats(&self) -> VehicleStats {
        VehicleStats {
            frames_sent: self.link.frames_sent,
            frames_dropped: self.link.frames_dropped,
            ..self.stats
        }
    }

    /// The log being streamed (after a restart, its header carries the new start time;
    /// after a STOP, it ends with the post-flight data).
    pub fn log(&self) -> &ChunkedLog {
        &self.log
    }

    /// Every stream before the current one, as it went out (each after its STOP with its
    /// post-flight data), oldest first.
    pub fn past_streams(&self) -> &[ChunkedLog] {
        &self.past_streams
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

    /// From now on its link is impaired as `impairment` says (a fault schedule's change).
    pub fn set_impairment(&mut self, impairment: Impairment) {
        self.link.set_impairment(impairment);
    }

    /// From now on answers every LOGGING_START with `result` instead of streaming (`None`:
    /// streams again): a vehicle whose logger stopped after its flight.
    pub fn refuse_starts(&mut self, result: Option<MavResult>) {
        self.config.refuse_start = result;
    }

    /// Reboots: the stream ends and the vehicle says nothing for `downtime`. A signing
    /// vehicle forgets the streams it heard and starts its signing clock again from the
    /// timestamp it last stored ([`stored_signing_timestamp`]).
    pub fn reboot(&mut self, now: Instant, downtime: Duration) {
        if let Some(signer) = &mut self.signer {
            let stored = stored_signing_timestamp(signer.timestamp(now));
            signer.restart(stored, now + downtime);
        }
        self.rebooted = true;
        self.stream = Stream::Idle;
        self.stopping = false;
        self.down_until = Some(now + downtime);
        self.link.clear();
    }

    /// The SD card's log as the FTP server serves it: its path and bytes (the file as loaded,
    /// with the post-flight data PX4 writes at its end).
    pub fn sd_log(&self) -> Option<(&str, &[u8])> {
        self.ftp.files().next()
    }

    pub fn ftp_stats(&self) -> FtpServerStats {
        self.ftp.stats()
    }

    /// The next frame on the wire to the receiver.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.link.poll_transmit()
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
        let ftp = (!self.ftp_out.is_empty()).then_some(self.ftp_slot);
        let t = match (t, ftp) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let t = match (t, self.link.next_release()) {
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
        while let Some(frame) = self.frames.next_frame() {
            let cut = self.is_down(now) || self.cut_off();
            if self.link.lost_inbound(now, cut) {
                continue;
            }
            if !authentic(self.signer.as_mut(), Policy::Px4, &frame, now) {
                self.stats.refused_frames += 1;
                continue;
            }
            if let Some(message) = frame.message.mav() {
                self.handle_message(frame.header, message, now);
            }
        }
    }

    /// Sends what is due at `now`: heartbeat, resends, unacked chunks.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.is_down(now) {
            return;
        }
        self.down_until = None;
        self.link.release(Some(now));
        self.send_ftp(now);
        if self.next_heartbeat.is_none_or(|t| t <= now) {
            self.send(self.heartbeat(now), now);
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
                    self.note_ack_wait(now.duration_since(first_sent));
                    self.stream = Stream::Idle;
                    self.stopping = false;
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
                self.send_unacked(index, now)
            }
            _ => {}
        }
    }

    /// Sends unacked chunks from `index` as the rate limiter allows, up to the next acked one.
    fn send_unacked(&mut self, mut index: usize, now: Instant) {
        // A caller that fell behind does not get a burst beyond 10 ms worth.
        if let Some(earliest) = now.checked_sub(Duration::from_millis(10)) {
            self.next_slot = self.next_slot.max(earliest);
        }
        let interval = self.config.chunk_interval();
        let mut sent = 0;
        while let Some(chunk) = self.log.chunks.get(index) {
            if chunk.acked {
                return self.advance(index, now);
            }
            match interval {
                Some(interval) => {
                    if self.next_slot > now {
                        break;
                    }
                    self.next_slot += interval;
                }
                None if sent == self.config.burst => break,
                None => {}
            }
            self.send_chunk(index, now);
            self.stats.chunks_sent += 1;
            index += 1;
            sent += 1;
        }
        if index == self.log.chunks.len() {
            self.advance(index, now);
        } else {
            self.stream = Stream::Unacked {
                index,
                next_send: self.next_slot.max(now),
            };
        }
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
                        let slow_link = self.config.link_rate.is_some_and(|r| r < MIN_LINK_RATE);
                        let result = if let Some(r) = self.config.refuse_start {
                            r
                        } else if slow_link {
                            MavResult::MAV_RESULT_DENIED
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
                    MavCmd::MAV_CMD_LOGGING_STOP => self.stop(now),
                    _ => {}
                }
            }
            MavMessage::FILE_TRANSFER_PROTOCOL(f) if f.target_system == self.config.system_id => {
                let client = (header.system_id as u8, header.component_id);
                if let Ok(request) = FtpPayload::parse(&f.payload) {
                    // As PX4's: a new request ends a burst still being sent.
                    self.ftp_out.clear();
                    for reply in self.ftp.handle(&request) {
                        self.ftp_out.push_back((client, reply));
                    }
                    self.send_ftp(now);
                }
            }
            MavMessage::LOGGING_ACK(ack) => {
                self.stats.acks_received += 1;
                if let Stream::Acked {
                    index, first_sent, ..
                } = self.stream
                    && self.log.chunks[index].seq == ack.sequence
                {
                    self.stats.chunks_acked += 1;
                    if self.postflight_from.is_some_and(|p| index >= p) {
                        self.stats.postflight_acked += 1;
                    }
                    let waited = now.duration_since(first_sent);
                    self.note_ack_wait(waited);
                    self.ack_round_trips.push(waited);
                    self.advance(index + 1, now);
                }
            }
            _ => {}
        }
    }

    fn note_ack_wait(&mut self, waited: Duration) {
        let ms = waited.as_millis() as u64;
        self.stats.longest_ack_wait_ms = self.stats.longest_ack_wait_ms.max(ms);
    }

    /// LOGGING_STOP: at once when idle; else IN_PROGRESS, and the post-flight data goes out
    /// as soon as no acked chunk is outstanding (the logger is blocked until then).
    fn stop(&mut self, now: Instant) {
        if self.stream == Stream::Idle {
            self.command_ack(
                MavCmd::MAV_CMD_LOGGING_STOP,
                MavResult::MAV_RESULT_ACCEPTED,
                now,
            );
            return;
        }
        if self.stopping {
            // Our IN_PROGRESS was lost: say it again.
            self.command_ack(
                MavCmd::MAV_CMD_LOGGING_STOP,
                MavResult::MAV_RESULT_IN_PROGRESS,
                now,
            );
            return;
        }
        self.stats.stops += 1;
        self.stopping = true;
        self.command_ack(
            MavCmd::MAV_CMD_LOGGING_STOP,
            MavResult::MAV_RESULT_IN_PROGRESS,
            now,
        );
        match self.stream {
            Stream::Unacked { index, .. } => self.write_postflight(index, now),
            Stream::Finished => self.write_postflight(self.log.chunks.len(), now),
            // After the outstanding ack (see `advance`).
            Stream::Acked { .. } | Stream::Idle => {}
        }
    }

    /// Cuts the stream after chunk `sent - 1` and sends the post-flight chunks from there.
    fn write_postflight(&mut self, sent: usize, now: Instant) {
        self.log.stop_after(sent);
        self.arrived.resize(self.log.chunks.len(), false);
        self.postflight_from = Some(sent);
        self.advance(sent, now);
    }

    fn start(&mut self, client: (u8, u8), now: Instant) {
        self.stats.starts += 1;
        if self.stats.starts > 1 {
            let next = if self.rebooted {
                // A new boot: the flight again, as its SD card's log has it. The boot's
                // clock starts anew, so the log's header and records carry the times of
                // the first boot's (a header is never later than its log's records).
                let log = self.flight.clone();
                self.flight_from = definitions_end(&log);
                self.data_start = self.flight_from;
                log
            } else {
                self.flight_from = self.logger_at();
                let previous = u64::from_le_bytes(self.log.stream[8..16].try_into().expect("8"));
                let (log, data_start) = resumed(&self.flight, self.flight_from, previous);
                self.data_start = data_start;
                log
            };
            self.past_streams
                .push(std::mem::replace(&mut self.log, next));
        }
        self.rebooted = false;
        self.progress = 0;
        self.client = client;
        self.stopping = false;
        self.postflight_from = None;
        self.arrived = vec![false; self.log.chunks.len()];
        self.next_slot = now;
        self.advance(0, now);
    }

    /// Moves on to chunk `index`: sends it now when acked, else goes on with unacked ones;
    /// past the last chunk, a STOP being served completes.
    fn advance(&mut self, index: usize, now: Instant) {
        if self.stopping && self.postflight_from.is_none() {
            // The STOP came during an acked chunk's wait: the logger writes its post-flight
            // data now.
            return self.write_postflight(index, now);
        }
        match self.log.chunks.get(index) {
            Some(LogChunk { acked: true, .. }) => {
                // Acked chunks take a slot of the rate limiter too.
                if let Some(interval) = self.config.chunk_interval() {
                    self.next_slot = self.next_slot.max(now) + interval;
                }
                self.send_chunk(index, now);
                self.stats.chunks_sent += 1;
                if self.postflight_from.is_some() {
                    self.stats.postflight_chunks += 1;
                }
                self.stream = Stream::Acked {
                    index,
                    tries: 1,
                    first_sent: now,
                    next_resend: now + self.config.ack_timeout,
                };
            }
            Some(_) => self.send_unacked(index, now),
            None if self.stopping => {
                self.link.flush();
                self.stopping = false;
                self.stream = Stream::Idle;
                self.stats.stops_completed += 1;
                self.command_ack(
                    MavCmd::MAV_CMD_LOGGING_STOP,
                    MavResult::MAV_RESULT_ACCEPTED,
                    now,
                );
            }
            None => {
                self.link.flush();
                self.stream = Stream::Finished;
            }
        }
    }

    fn send_chunk(&mut self, index: usize, now: Instant) {
        if self.postflight_from.is_none_or(|p| index < p) {
            self.progress = self.progress.max(index + 1);
        }
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

    /// Sends the FTP replies the link has room for at `now` (all of them without a link
    /// rate).
    fn send_ftp(&mut self, now: Instant) {
        if let Some(earliest) = now.checked_sub(Duration::from_millis(10)) {
            self.ftp_slot = self.ftp_slot.max(earliest);
        }
        while self.ftp_slot <= now {
            let Some(((system, component), reply)) = self.ftp_out.pop_front() else {
                return;
            };
            if let Some(rate) = self.config.link_rate {
                self.ftp_slot += Duration::from_secs_f64(FTP_WIRE_BYTES / rate.max(1) as f64);
            }
            let message = MavMessage::FILE_TRANSFER_PROTOCOL(FILE_TRANSFER_PROTOCOL_DATA {
                target_network: 0,
                target_system: system,
                target_component: component,
                payload: reply.encode(),
            });
            self.send(message, now);
        }
    }

    fn command_ack(&mut self, command: MavCmd, result: MavResult, now: Instant) {
        self.send(
            MavMessage::COMMAND_ACK(COMMAND_ACK_DATA { command, result }),
            now,
        );
    }

    fn heartbeat(&self, now: Instant) -> MavMessage {
        let since_power_up = now.duration_since(self.epoch);
        let mut base_mode = MavModeFlag::MAV_MODE_FLAG_CUSTOM_MODE_ENABLED;
        if (self.config.armed.as_ref()).is_some_and(|span| span.contains(&since_power_up)) {
            base_mode |= MavModeFlag::MAV_MODE_FLAG_SAFETY_ARMED;
        }
        MavMessage::HEARTBEAT(HEARTBEAT_DATA {
            custom_mode: 0,
            mavtype: MavType::MAV_TYPE_QUADROTOR,
            autopilot: MavAutopilot::MAV_AUTOPILOT_PX4,
            base_mode,
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
        match &mut self.signer {
            Some(signer) => signer.sign(header, &message, now, &mut frame),
            None => encode(header, &message, &mut frame),
        }
        let cut = self.cut_off();
        self.link.send(frame, now, cut)
    }

    /// The flight's message the logger is at: the one after the last the current stream
    /// sent (whole or in part).
    fn logger_at(&self) -> usize {
        let log = &self.log;
        let offset =
            (log.chunks.get(self.progress)).map_or(log.stream.len() as u64, |c| c.stream_offset);
        let sent = log.message_starts.partition_point(|&s| s < offset);
        let data_sent = sent.saturating_sub(self.data_start);
        (self.flight_from + data_sent).min(self.flight.message_starts.len())
    }

    fn is_down(&self, now: Instant) -> bool {
        self.down_until.is_some_and(|t| now < t)
    }

    /// The link is lost for good or until the landing ([`Impairment::lost_from`]).
    ///
    /// [`Impairment::lost_from`]: crate::sim::Impairment::lost_from
    fn cut_off(&self) -> bool {
        let imp = self.link.impairment();
        let Some(share) = imp.lost_from else {
            return false;
        };
        let reached = |index: usize| index as f64 >= share * self.log.chunks.len() as f64;
        match self.stream {
            Stream::Acked { index, .. } | Stream::Unacked { index, .. } => {
                self.postflight_from.is_none() && reached(index)
            }
            Stream::Finished => imp.lost_for_good,
            Stream::Idle => imp.lost_for_good && self.stats.starts > 0,
        }
    }
}

/// The index of a log's first message after its definitions and subscriptions.
fn definitions_end(log: &ChunkedLog) -> usize {
    (1..log.message_starts.len())
        .find(|&i| {
            let ty = log.stream[log.message_starts[i] as usize + 2];
            !(is_definition(ty) || ty == msg_type::ADD_LOGGED)
        })
        .unwrap_or(log.message_starts.len())
}

/// A new stream of `flight` with the logger at its message `at`: a header (stamped just
/// before the first sample from there, and after the `previous` stream's), the definitions
/// and every subscription so far, then the flight from `at`. With the index of its first
/// message from there.
fn resumed(flight: &ChunkedLog, at: usize, previous: u64) -> (ChunkedLog, usize) {
    let starts = &flight.message_starts;
    let message = |i: usize| {
        let end = starts
            .get(i + 1)
            .map_or(flight.stream.len(), |&e| e as usize);
        &flight.stream[starts[i] as usize..end]
    };
    let defs = definitions_end(flight);
    let first_sample = (at..starts.len())
        .map(message)
        .find(|m| m[2] == msg_type::DATA && m.len() >= 13)
        .map(|m| u64::from_le_bytes(m[5..13].try_into().expect("8 bytes")));
    let t = first_sample
        .map_or(previous + 1_000, |ts| ts.saturating_sub(1_000))
        .max(previous + 1);
    let mut file = flight.stream[..FILE_HEADER_LEN].to_vec();
    file[8..16].copy_from_slice(&t.to_le_bytes());
    for i in 1..defs {
        file.extend_from_slice(message(i));
    }
    let mut data_start = defs;
    for i in defs..at.max(defs) {
        if message(i)[2] == msg_type::ADD_LOGGED {
            file.extend_from_slice(message(i));
            data_start += 1;
        }
    }
    let from = starts
        .get(at.max(defs))
        .map_or(flight.stream.len(), |&s| s as usize);
    file.extend_from_slice(&flight.stream[from..]);
    file.extend_from_slice(&flight.postflight);
    let log = chunk_log(&file, 0).expect("a log of the flight's own messages");
    (log, data_start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_limiter_counts_chunks_per_100_ms_as_px4() {
        let at = |rate| VehicleConfig {
            link_rate: Some(rate),
            ..VehicleConfig::default()
        };
        // 57600 baud: 5760 B/s; ceil(0.1 × 0.7 × 5760 / 267) = 2 chunks per 100 ms.
        assert_eq!(at(5760).chunk_interval(), Some(Duration::from_millis(50)));
        // A tiny rate still sends one chunk per window.
        assert_eq!(at(100).chunk_interval(), Some(Duration::from_millis(100)));
        assert_eq!(
            VehicleConfig {
                link_rate: None,
                ..at(1)
            }
            .chunk_interval(),
            None
        );
    }
}
