//! The log-streaming session, sans-IO: MAVLink bytes and `now` in; MAVLink frames to send,
//! log bytes and events out. It never touches a socket, a file or the clock.
//!
//! What it does, in the order the vehicle sees it:
//! - Finds the vehicle from its HEARTBEAT (an autopilot, or `target_system` when configured) and
//!   sends its own HEARTBEAT every second.
//! - With a signing key ([`SessionConfig::signing`]) it signs every frame it sends and takes
//!   from the vehicle only frames whose signature verifies (unsigned HEARTBEAT and
//!   RADIO_STATUS excepted, as MAVLink allows); the rest are counted. Without a key, a vehicle
//!   that signs its frames and leaves our commands unanswered raises one clear
//!   [`Event::LinkProblem`] (again at most once a minute), as does a key that does not verify.
//! - Asks for the stream: LOGGING_STOP first (the vehicle may still be streaming to a client that
//!   lost track, us before a restart), then LOGGING_START (param1 0), each retried until a
//!   COMMAND_ACK. A TEMPORARILY_REJECTED start backs off (1, 2, 4, 8, 10 s) and begins again
//!   with a STOP; DENIED, UNSUPPORTED or FAILED raise [`Event::StartRefused`] with the likely
//!   cause, then retry every [`SessionConfig::refused_retry`]. Never a tight loop.
//! - The STOP handshake: a streaming vehicle answers STOP with IN_PROGRESS, sends its
//!   post-flight data as acked chunks, then ACCEPTED. After a STOP the session keeps acking
//!   until the ACCEPTED comes or [`SessionConfig::stop_timeout`] passes; on
//!   [`Session::shutdown`] what arrives meanwhile still goes into the log, which closes after.
//! - Acks every LOGGING_DATA_ACKED as the very first thing it does with it, duplicates
//!   included: a resent chunk means the vehicle lost our ack and is blocked until it gets one.
//! - Puts chunks back in order ([`ReorderBuffer`](crate::link::ReorderBuffer)), reassembles
//!   whole ULog messages ([`Assembler`](crate::link::Assembler)) and follows formats and
//!   subscriptions ([`Decoder`](crate::ulog::Decoder)) to know the timestamps. After a confirmed gap it holds the messages that follow until the first
//!   timestamped sample, then writes a ULog dropout ('O') whose duration is the time between
//!   the last sample before the gap and that first sample after it.
//! - Liveness: no chunk for [`SessionConfig::stream_timeout`] while the vehicle's heartbeat goes
//!   on → the log is closed, STOP and START again. No heartbeat for
//!   [`SessionConfig::vehicle_timeout`] (a reboot, or the link is gone) → the log is closed and
//!   the session waits for the vehicle. A new ULog header at sequence 0 while a log is open
//!   (the vehicle restarted its stream) → the log is closed and a new one begins, once the
//!   chunk after it confirms it: a single stray chunk 0 never ends a log.
//! - A log is opened only when its file header arrives, so there is never a headerless log.
//!
//! Inputs: [`Session::handle_bytes`] (any pieces of a MAVLink byte stream),
//! [`Session::handle_datagram`] (one UDP datagram; it says whether the vehicle spoke in it),
//! [`Session::handle_timeout`] (when [`Session::poll_timeout`] says), [`Session::shutdown`].
//! Outputs: [`Session::poll_transmit`] (one MAVLink frame each) and [`Session::poll_event`].
//! Besides: [`Session::send_status_text`] (a text for the ground station, rate-limited).
//!
//! This file holds the surface (inputs, outputs, timers, the phase the session is in) and
//! hands each message to the concern that owns it: `vehicle` (finding it, heartbeats, signature
//! checks, link problems), `commands` (LOGGING_STOP and LOGGING_START, their answers and
//! retries), `logging` (the chunks, their order, the log bytes and dropouts), `ftp` (MAVLink FTP
//! through the session's frames); `config` and `events` hold what a user of the session sets
//! and gets; `status_text` the texts for the ground station.

mod commands;
mod config;
mod events;
mod ftp;
mod logging;
mod remote_log;
mod status_text;
#[cfg(test)]
mod tests;
mod vehicle;

use std::collections::VecDeque;
use std::time::Instant;

use bytes::BytesMut;
use mavlink::MavHeader;
use mavlink::dialects::ardupilotmega::{MavCmd, MavMessage};

use self::commands::{AfterStop, STOP_TRIES};
use self::logging::{ChunkFrame, Log, PendingNewLog, add_reorder_stats};
use self::remote_log::BlockLog;
use self::status_text::StatusTexts;
use self::vehicle::Vehicle;
use crate::autopilot::Autopilot;
use crate::link::frames::{FrameDecoder, encode};
use crate::link::ftp::FtpClient;
use crate::link::signing::Signer;

pub use self::config::{DEFAULT_COMPONENT_ID, FALLBACK_SYSTEM_ID, SessionConfig, SigningSetup};
pub use self::events::{CloseReason, Event, LinkProblem, Rates, SessionStats};
pub use self::remote_log::{DRAIN, GIVE_UP, MAX_AHEAD, NACK_INTERVAL, START_INTERVAL};
pub use self::status_text::{STATUS_TEXT_BYTES, STATUS_TEXT_INTERVAL, STATUS_TEXT_QUEUE};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// No vehicle (yet, or lost).
    Searching,
    /// STOP sent: wait for its ACCEPTED (acking what comes meanwhile), resend it while
    /// unanswered, then go on with `then`.
    Stopping {
        deadline: Instant,
        /// When the first STOP went out.
        since: Instant,
        tries: u32,
        /// The vehicle said IN_PROGRESS: it is sending its post-flight data.
        in_progress: bool,
        then: AfterStop,
    },
    /// START sent.
    Starting { deadline: Instant },
    /// PX4: before the next STOP+START. ArduPilot: a stream we stopped is going quiet;
    /// START once it has been quiet until `until`.
    Waiting { until: Instant },
    /// `stall_check`: when to look for a stall (no chunk for `stream_timeout`).
    Streaming { stall_check: Instant },
    /// After [`Session::shutdown`] has completed.
    Closed,
}

/// See the module docs.
pub struct Session {
    config: SessionConfig,
    frames: FrameDecoder,
    signer: Option<Signer>,
    phase: Phase,
    vehicle: Option<Vehicle>,
    /// Without a key: the vehicle's last frame was signed.
    vehicle_signs: bool,
    /// The vehicle's armed state as its last authentic HEARTBEAT told it.
    armed: Option<bool>,
    /// When a frame of the vehicle last passed signature verification.
    vehicle_verified: Option<Instant>,
    log: Option<Log>,
    /// Whose protocol the vehicle speaks, once found.
    autopilot: Option<Autopilot>,
    /// ArduPilot's log being received (its blocks, its DataFlash messages).
    blocks: Option<BlockLog>,
    /// When the vehicle of an open ArduPilot log was lost (the log waits for it to come
    /// back, for [`SessionConfig::rejoin_timeout`]).
    lost_since: Option<Instant>,
    /// When we last said that the vehicle streams its log to another client.
    foreign_stream_said: Option<Instant>,
    /// When we last stopped an ArduPilot stream found in its middle (to start it again).
    middle_stopped: Option<Instant>,
    /// Shutting down an ArduPilot stream with blocks still missing: until when they are
    /// awaited before the STOP (see [`remote_log::DRAIN`]).
    draining_until: Option<Instant>,
    pending_new_log: Option<PendingNewLog>,
    next_heartbeat: Option<Instant>,
    /// When the last START went out: a new log's chunk 0 is taken only shortly after one.
    start_sent: Option<Instant>,
    failures: u32,
    logs_opened: u32,
    /// When the link problem in force may be reported again.
    problem_repeat_at: Option<Instant>,
    tx_sequence: u8,
    transmit: VecDeque<Vec<u8>>,
    events: VecDeque<Event>,
    /// Log bytes not yet handed out as [`Event::LogBytes`].
    out: BytesMut,
    stats: SessionStats,
    ftp: FtpClient,
    /// Texts for the ground station, waiting for their turn.
    status_texts: StatusTexts,
}

impl Session {
    /// A session starting at `now`: its first heartbeat is due at once.
    pub fn new(config: SessionConfig, now: Instant) -> Self {
        let config_ftp = config.ftp;
        let signer = config
            .signing
            .as_ref()
            .map(|s| Signer::new(s.key.clone(), s.link_id, s.timestamp, now));
        Self {
            config,
            frames: FrameDecoder::new(),
            signer,
            phase: Phase::Searching,
            vehicle: None,
            vehicle_signs: false,
            armed: None,
            vehicle_verified: None,
            log: None,
            autopilot: None,
            blocks: None,
            lost_since: None,
            foreign_stream_said: None,
            draining_until: None,
            middle_stopped: None,
            pending_new_log: None,
            next_heartbeat: Some(now),
            start_sent: None,
            failures: 0,
            logs_opened: 0,
            problem_repeat_at: None,
            tx_sequence: 0,
            transmit: VecDeque::new(),
            events: VecDeque::new(),
            out: BytesMut::new(),
            stats: SessionStats::default(),
            ftp: FtpClient::new(config_ftp),
            status_texts: StatusTexts::default(),
        }
    }

    pub fn config(&self) -> &SessionConfig {
        &self.config
    }

    /// Counters, those of the open log included.
    pub fn stats(&self) -> SessionStats {
        let mut s = self.stats;
        s.frames = self.frames.stats();
        if let Some(signer) = &self.signer {
            s.signing = signer.stats();
        }
        if let Some(log) = &self.log {
            add_reorder_stats(&mut s, &log.reorder.stats());
        }
        s
    }

    /// LOGGING_ACKs sent so far (what [`stats`](Self::stats) says, without assembling them).
    pub fn acks_sent(&self) -> u64 {
        self.stats.acks_sent
    }

    /// True while a log is open.
    pub fn is_logging(&self) -> bool {
        self.log.as_ref().is_some_and(|l| l.opened) || self.blocks.is_some()
    }

    /// Whose log stream the vehicle speaks, once it is found.
    pub fn autopilot(&self) -> Option<Autopilot> {
        self.autopilot
    }

    fn is_ardupilot(&self) -> bool {
        self.autopilot == Some(Autopilot::ArduPilot)
    }

    /// True once [`shutdown`](Self::shutdown) has completed: the STOP handshake is over (or
    /// its wait ran out) and the log is closed.
    pub fn is_closed(&self) -> bool {
        self.phase == Phase::Closed
    }

    /// The vehicle's (system id, component id), once found.
    pub fn vehicle(&self) -> Option<(u8, u8)> {
        self.vehicle.map(|v| (v.system_id, v.component_id))
    }

    /// Our system id as it goes out in frames.
    pub fn system_id(&self) -> u8 {
        self.config
            .system_id
            .unwrap_or_else(|| self.vehicle.map_or(FALLBACK_SYSTEM_ID, |v| v.system_id))
    }

    /// Our signing clock at `now` (never below a timestamp already used), with a key.
    pub fn signing_timestamp(&self, now: Instant) -> Option<u64> {
        self.signer.as_ref().map(|s| s.timestamp(now))
    }

    /// The next MAVLink frame to send, if any.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.transmit.pop_front()
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.flush_out();
        self.events.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) next has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.phase == Phase::Closed {
            // Shut down: nothing is ever due again.
            return None;
        }
        let mut t = self.next_heartbeat;
        let mut earliest = |x: Option<Instant>| {
            if let Some(x) = x {
                t = Some(t.map_or(x, |t: Instant| t.min(x)));
            }
        };
        match self.phase {
            Phase::Searching | Phase::Closed => {}
            Phase::Stopping { deadline, .. } | Phase::Starting { deadline } => {
                earliest(Some(deadline))
            }
            Phase::Waiting { until } => earliest(Some(until)),
            Phase::Streaming { stall_check } => earliest(Some(stall_check)),
        }
        if !matches!(self.phase, Phase::Closed | Phase::Searching) {
            earliest(
                self.vehicle
                    .map(|v| v.last_heartbeat + self.config.vehicle_timeout),
            );
        }
        earliest(self.log.as_ref().and_then(|l| l.reorder.deadline()));
        earliest(self.blocks.as_ref().and_then(|l| l.deadline()));
        earliest(self.draining_until);
        earliest(self.lost_since.map(|t| t + self.config.rejoin_timeout));
        earliest(self.ftp.poll_timeout());
        earliest(self.status_texts.deadline());
        t
    }

    /// Takes received bytes: any piece of a serial or TCP stream.
    pub fn handle_bytes(&mut self, bytes: &[u8], now: Instant) {
        self.frames.push(bytes);
        while let Some(frame) = self.frames.next_frame() {
            self.handle_frame(frame, now);
        }
    }

    /// Takes one UDP datagram, read on its own (a datagram holds whole frames). True when it
    /// held a frame of the vehicle that passed every check (CRC, and the signature with a
    /// key): only then may the shell answer to where it came from.
    pub fn handle_datagram(&mut self, bytes: &[u8], now: Instant) -> bool {
        let mut frames = std::mem::take(&mut self.frames);
        let mut from_vehicle = false;
        frames.datagram(bytes, |frame| from_vehicle |= self.handle_frame(frame, now));
        self.frames = frames;
        from_vehicle
    }

    /// Takes one decoded MAVLink message, already authenticated (what
    /// [`handle_bytes`](Self::handle_bytes) does for each frame that passes).
    pub fn handle_message(&mut self, header: MavHeader, message: &MavMessage, now: Instant) {
        if self.phase == Phase::Closed {
            return;
        }
        // Anything the vehicle's autopilot sends proves it is there: a lossy link may drop
        // heartbeats while the log streams on.
        if let Some(v) = &mut self.vehicle
            && v.system_id as u32 == header.system_id
            && v.component_id == header.component_id
        {
            v.last_heartbeat = now;
        }
        // The two messages have the same fields but distinct types.
        macro_rules! chunk_frame {
            ($d:expr) => {
                ChunkFrame {
                    sequence: $d.sequence,
                    target_system: $d.target_system,
                    target_component: $d.target_component,
                    length: $d.length,
                    first_message_offset: $d.first_message_offset,
                    data: &$d.data,
                }
            };
        }
        match message {
            MavMessage::LOGGING_DATA_ACKED(d) => self.on_chunk(header, chunk_frame!(d), true, now),
            MavMessage::LOGGING_DATA(d) => self.on_chunk(header, chunk_frame!(d), false, now),
            MavMessage::HEARTBEAT(hb) => self.on_heartbeat(header, hb, now),
            MavMessage::COMMAND_ACK(ack) => {
                self.on_command_ack(header, ack.command, ack.result, now)
            }
            MavMessage::FILE_TRANSFER_PROTOCOL(f)
                if self.is_vehicle(&header) && f.target_system == self.system_id() =>
            {
                self.ftp.handle_reply(&f.payload, now);
                self.flush_ftp(now);
            }
            _ => {}
        }
    }

    /// Runs the timers due at `now`: heartbeat, command retries, liveness, reorder waits.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.phase == Phase::Closed {
            return;
        }
        if self.ftp.poll_timeout().is_some_and(|t| t <= now) {
            self.ftp.handle_timeout(now);
            self.flush_ftp(now);
        }
        if self.next_heartbeat.is_none_or(|t| t <= now) {
            self.send_heartbeat(now);
            self.next_heartbeat = Some(now + self.config.heartbeat_interval);
        }
        self.release_status_texts(now);
        if let Some(v) = self.vehicle
            && self.phase != Phase::Searching
            && now.duration_since(v.last_heartbeat) >= self.config.vehicle_timeout
        {
            tracing::warn!(system_id = v.system_id, "vehicle lost: no heartbeat");
            if self.blocks.is_some() && self.phase != Phase::Closed {
                // ArduPilot's log goes on when the vehicle comes back within the wait.
                self.lost_since = Some(now);
                self.phase = Phase::Searching;
                self.events.push_back(Event::VehicleLost);
            } else {
                let closing = matches!(
                    self.phase,
                    Phase::Stopping {
                        then: AfterStop::Close,
                        ..
                    }
                );
                self.close_log(CloseReason::VehicleLost);
                self.phase = Phase::Searching;
                self.events.push_back(Event::VehicleLost);
                if closing {
                    self.phase = Phase::Closed;
                    return;
                }
            }
        }
        if let Some(t) = self.lost_since
            && now >= t + self.config.rejoin_timeout
        {
            self.lost_since = None;
            self.close_block_log(CloseReason::VehicleLost);
        }
        if self.is_ardupilot() {
            match self.phase {
                Phase::Starting { deadline } if now >= deadline => self.send_block_start(now),
                Phase::Waiting { until } if now >= until => self.send_block_start(now),
                Phase::Streaming { stall_check } if now >= stall_check => {
                    // Quiet: not logging (disarmed), or it dropped us. A START is ignored
                    // while it serves us, and begins a new stream when it does not.
                    if self.vehicle_heard(now) {
                        self.send_block_start(now);
                    } else {
                        self.phase = Phase::Streaming {
                            stall_check: now + self.config.heartbeat_interval,
                        };
                    }
                }
                _ => {}
            }
            self.block_timers(now);
            self.end_drain_when_done(now);
            return;
        }
        match self.phase {
            Phase::Stopping {
                deadline,
                since,
                tries,
                in_progress,
                then,
            } if now >= deadline => {
                let out_of_time = now >= since + self.config.stop_timeout;
                // Before a START, a vehicle that says nothing is most likely not streaming;
                // at a shutdown, the STOP is worth the whole wait while the vehicle is heard.
                let give_up = match then {
                    AfterStop::Start => out_of_time || (!in_progress && tries >= STOP_TRIES),
                    AfterStop::Close => out_of_time || !self.vehicle_present(now),
                };
                let recheck =
                    (now + self.config.command_timeout / 2).min(since + self.config.stop_timeout);
                if !give_up {
                    if !in_progress {
                        self.send_command(MavCmd::MAV_CMD_LOGGING_STOP, now);
                    }
                    self.phase = Phase::Stopping {
                        deadline: recheck,
                        since,
                        tries: tries + u32::from(!in_progress),
                        in_progress,
                        then,
                    };
                } else {
                    if in_progress {
                        tracing::warn!(
                            waited = ?now.duration_since(since),
                            "the vehicle did not confirm the stop of its log stream"
                        );
                    } else {
                        tracing::info!("no answer to LOGGING_STOP; going on");
                        self.unanswered_command(now);
                    }
                    self.stats.stops_unconfirmed += 1;
                    self.after_stop(then, now);
                }
            }
            Phase::Starting { deadline } if now >= deadline => {
                tracing::info!("no answer to LOGGING_START; trying again");
                self.unanswered_command(now);
                self.failures += 1;
                let delay = self.backoff();
                self.phase = Phase::Waiting { until: now + delay };
            }
            Phase::Waiting { until } if now >= until => self.send_stop(now, AfterStop::Start),
            Phase::Streaming { stall_check } if now >= stall_check => {
                // A stall is a silent stream from a vehicle that is still heard; a silent
                // vehicle is left to the vehicle timeout (it may be rebooting).
                if self.vehicle_heard(now) {
                    tracing::warn!("log stream stalled; stopping and starting it again");
                    self.close_log(CloseReason::Stalled);
                    self.failures += 1;
                    self.send_stop(now, AfterStop::Start);
                } else {
                    self.phase = Phase::Streaming {
                        stall_check: now + self.config.heartbeat_interval,
                    };
                }
            }
            _ => {}
        }
        if let Some(log) = &mut self.log {
            log.reorder.poll(now);
        }
        self.drain_reorder();
    }

    /// The daemon is going away: STOP to the vehicle, then the STOP handshake (what arrives
    /// until the vehicle confirms, or [`SessionConfig::stop_timeout`] runs out, still goes
    /// into the log), then the log is closed and [`is_closed`](Self::is_closed) turns true.
    /// A vehicle not heard within the vehicle timeout is not waited for. Later input is
    /// ignored. ArduPilot answers no STOP: its log closes once no block is missing behind
    /// later ones, at most [`DRAIN`] after this, and the STOP goes out then (twice).
    pub fn shutdown(&mut self, now: Instant) {
        if self.is_ardupilot() && self.phase != Phase::Closed {
            // Blocks still missing behind later ones are awaited a moment (NACKed as
            // usual); then the STOP, which the vehicle does not answer.
            if self.vehicle.is_some() && self.draining_until.is_none() {
                self.draining_until = Some(now + remote_log::DRAIN);
            }
            self.end_drain_when_done(now);
            return;
        }
        match self.phase {
            Phase::Closed => {}
            Phase::Stopping { .. } if !self.vehicle_present(now) => self.finish(),
            Phase::Stopping {
                deadline,
                since,
                tries,
                in_progress,
                ..
            } => {
                self.phase = Phase::Stopping {
                    deadline,
                    since,
                    tries,
                    in_progress,
                    then: AfterStop::Close,
                }
            }
            Phase::Searching => self.finish(),
            _ if self.vehicle.is_none() => self.finish(),
            _ => {
                self.send_stop(now, AfterStop::Close);
                if !self.vehicle_present(now) {
                    self.finish();
                }
            }
        }
    }

    /// Flushes and closes the log; nothing more is taken.
    fn finish(&mut self) {
        self.close_log(CloseReason::Shutdown);
        self.lost_since = None;
        self.close_block_log(CloseReason::Shutdown);
        self.phase = Phase::Closed;
    }

    /// Queues one frame, signed when there is a key.
    fn send(&mut self, message: MavMessage, now: Instant) {
        let header = MavHeader {
            system_id: self.system_id() as _,
            component_id: self.config.component_id,
            sequence: self.tx_sequence,
        };
        self.tx_sequence = self.tx_sequence.wrapping_add(1);
        let mut frame = Vec::with_capacity(48);
        match &mut self.signer {
            Some(signer) => signer.sign(header, &message, now, &mut frame),
            None => encode(header, &message, &mut frame),
        }
        self.transmit.push_back(frame);
    }
}
