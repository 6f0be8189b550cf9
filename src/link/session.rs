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
//! - Puts chunks back in order ([`ReorderBuffer`]), reassembles whole ULog messages
//!   ([`Assembler`]) and follows formats and subscriptions ([`Decoder`](crate::ulog::Decoder)) to know the
//!   timestamps. After a confirmed gap it holds the messages that follow until the first
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

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use mavlink::MavHeader;
use mavlink::dialects::common::{
    COMMAND_LONG_DATA, FILE_TRANSFER_PROTOCOL_DATA, HEARTBEAT_DATA, LOGGING_ACK_DATA, MavAutopilot,
    MavCmd, MavMessage, MavModeFlag, MavResult, MavState, MavType,
};

use crate::link::assembler::Assembler;
use crate::link::frames::{Frame, FrameDecoder, FrameStats, encode};
use crate::link::ftp::{FtpClient, FtpConfig, FtpError, FtpOp, FtpReply, FtpStats};
use crate::link::reorder::{Chunk, Delivery, ReorderBuffer, ReorderConfig, ReorderStats};
use crate::link::signing::{Check, Signer, SigningKey, SigningStats};
use crate::ulog::gaps::{Dropout, GapMarker};
use crate::ulog::message::{FILE_HEADER_LEN, FILE_MAGIC, framed};

/// MAV_COMP_ID_LOG: the component id MAVLink reserves for an onboard logging component.
pub const DEFAULT_COMPONENT_ID: u8 = 155;
/// The system id used in our heartbeats before the vehicle is known, when none is configured
/// (PX4's default MAV_SYS_ID).
pub const FALLBACK_SYSTEM_ID: u8 = 1;

/// A copy of chunk 0 this many chunks into a log cannot be a late duplicate (the vehicle
/// resends chunk 0 for 2.5 s at most, and it does not send chunk 1 before our ack): it starts a
/// new log even when its bytes equal the first one's.
const NEW_LOG_AFTER_CHUNKS: u64 = 1024;

/// STOPs sent without any answer before a START goes out anyway (at a shutdown, STOP is
/// sent again until the stop timeout).
const STOP_TRIES: u32 = 3;

/// A link problem is repeated at most this often while it lasts.
const PROBLEM_REPEAT: Duration = Duration::from_secs(60);

/// MAVLink 2 signing: our key, the link id in our signatures, and where our timestamps start
/// (at the session's creation; at or above any used before, see [`crate::link::signing`]).
#[derive(Debug, Clone)]
pub struct SigningSetup {
    pub key: SigningKey,
    pub link_id: u8,
    pub timestamp: u64,
}

/// How the session behaves; [`Default`] gives the documented defaults.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// Our system id. `None` (the default): the vehicle's, as MAVLink wants for a component on
    /// board the vehicle; [`FALLBACK_SYSTEM_ID`] until the vehicle is known.
    pub system_id: Option<u8>,
    /// Our component id; default [`DEFAULT_COMPONENT_ID`] (155, MAV_COMP_ID_LOG).
    pub component_id: u8,
    /// Only this system is taken as the vehicle; `None`: the first autopilot heard.
    pub target_system: Option<u8>,
    pub heartbeat_interval: Duration,
    /// No vehicle heartbeat for this long: the vehicle is lost (rebooted or out of reach).
    pub vehicle_timeout: Duration,
    /// No log chunk for this long while streaming: STOP and START again.
    pub stream_timeout: Duration,
    /// A command without COMMAND_ACK for this long is sent again.
    pub command_timeout: Duration,
    /// Longest wait for a STOP's ACCEPTED once the vehicle said IN_PROGRESS (it sends its
    /// post-flight data meanwhile).
    pub stop_timeout: Duration,
    /// Longest back-off between start attempts after TEMPORARILY_REJECTED or no answer.
    pub max_backoff: Duration,
    /// Wait after DENIED, UNSUPPORTED or FAILED before trying again.
    pub refused_retry: Duration,
    pub reorder: ReorderConfig,
    /// Bytes held after a gap while waiting for a timestamp; past this the dropout is written
    /// without a duration.
    pub max_held_bytes: usize,
    /// MAVLink 2 signing; `None`: frames go out unsigned and signatures are not checked.
    pub signing: Option<SigningSetup>,
    /// Ask the vehicle for its log stream (default). Off for a session that only reads the
    /// vehicle's files over FTP.
    pub stream: bool,
    /// The FTP client's timeouts and byte budget.
    pub ftp: FtpConfig,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            system_id: None,
            component_id: DEFAULT_COMPONENT_ID,
            target_system: None,
            heartbeat_interval: Duration::from_secs(1),
            vehicle_timeout: Duration::from_secs(5),
            stream_timeout: Duration::from_secs(3),
            command_timeout: Duration::from_millis(1000),
            stop_timeout: Duration::from_secs(5),
            max_backoff: Duration::from_secs(10),
            refused_retry: Duration::from_secs(30),
            reorder: ReorderConfig::default(),
            max_held_bytes: 1 << 20,
            signing: None,
            stream: true,
            ftp: FtpConfig::default(),
        }
    }
}

/// Why a log ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum CloseReason {
    /// No chunk for the stream timeout while the vehicle was still there.
    Stalled,
    /// No heartbeat for the vehicle timeout.
    VehicleLost,
    /// The vehicle began a new log (a new header at sequence 0).
    NewLog,
    /// [`Session::shutdown`].
    Shutdown,
}

/// Something wrong with the link that the user must fix; see its `Display` for the words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkProblem {
    /// The vehicle signs its frames, we have no key, and our commands go unanswered.
    VehicleSignsNoKey { system_id: u8 },
    /// Signed frames arrive that our key does not verify, and none from the vehicle that it
    /// does.
    WrongKey { system_id: u8 },
    /// Frames verify with our key but are over a minute behind our signing clock.
    SigningClockBehind { system_id: u8 },
}

impl std::fmt::Display for LinkProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LinkProblem::VehicleSignsNoKey { system_id } => write!(
                f,
                "vehicle {system_id} signs its MAVLink frames (MAVLink 2 signing) and ignores \
                 our unsigned commands: give ulog-recv the vehicle's key with --signing-key FILE"
            ),
            LinkProblem::WrongKey { system_id } => write!(
                f,
                "frames from system {system_id} are signed with another key than ours: the \
                 --signing-key file does not hold the vehicle's key"
            ),
            LinkProblem::SigningClockBehind { system_id } => write!(
                f,
                "frames from system {system_id} carry signing timestamps over a minute behind \
                 ours: the vehicle's clock (or this computer's) is wrong"
            ),
        }
    }
}

/// What the session reports, in order. Log bytes come between [`Event::LogOpened`] and
/// [`Event::LogClosed`] of the same log.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    VehicleFound {
        system_id: u8,
        component_id: u8,
    },
    VehicleLost,
    /// The vehicle's authentic HEARTBEAT says it is armed (`true`) or disarmed, the first time
    /// it is heard and whenever that changes.
    Armed(bool),
    /// The vehicle accepted LOGGING_START.
    StreamStarted,
    /// TEMPORARILY_REJECTED (it streams to someone, maybe us before a restart): STOP, then
    /// retry after `retry_in`.
    StartRejected {
        retry_in: Duration,
    },
    /// DENIED, UNSUPPORTED or FAILED: `hint` names the likely cause.
    StartRefused {
        result: MavResult,
        hint: &'static str,
        retry_in: Duration,
    },
    /// A link problem the user must fix (repeated at most once a minute while it lasts).
    LinkProblem(LinkProblem),
    /// A new log begins; its bytes follow (the file header first).
    LogOpened {
        number: u32,
    },
    /// The next bytes of the open log: whole ULog messages, as the vehicle logged them, plus
    /// our dropout messages.
    LogBytes(Bytes),
    /// Chunks were lost; a dropout message was written (or will be, once the time after the
    /// gap is known: the event comes then).
    Dropout {
        lost_chunks: u64,
        /// `None` when no timestamp followed the gap (the dropout then says 0 ms).
        duration_ms: Option<u64>,
    },
    LogClosed {
        number: u32,
        reason: CloseReason,
        bytes: u64,
    },
    /// An FTP operation ([`Session::ftp_start`]) finished.
    Ftp(Result<FtpReply, FtpError>),
}

impl std::fmt::Display for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Event::VehicleFound {
                system_id,
                component_id,
            } => write!(
                f,
                "vehicle found: system {system_id}, component {component_id}"
            ),
            Event::VehicleLost => write!(f, "vehicle lost: nothing heard from it"),
            Event::Armed(true) => write!(f, "vehicle armed"),
            Event::Armed(false) => write!(f, "vehicle disarmed"),
            Event::StreamStarted => write!(f, "log streaming started"),
            Event::StartRejected { retry_in } => write!(
                f,
                "start rejected: the vehicle streams already; stopping it, retry in {retry_in:?}"
            ),
            Event::StartRefused {
                result,
                hint,
                retry_in,
            } => write!(
                f,
                "start refused ({result:?}): {hint}; retry in {retry_in:?}"
            ),
            Event::LinkProblem(p) => write!(f, "{p}"),
            Event::LogOpened { number } => write!(f, "log {number} opened"),
            Event::LogBytes(b) => write!(f, "{} log bytes", b.len()),
            Event::Dropout {
                lost_chunks,
                duration_ms,
            } => match duration_ms {
                Some(ms) => write!(f, "dropout: {lost_chunks} chunk(s) lost, {ms} ms of log"),
                None => write!(f, "dropout: {lost_chunks} chunk(s) lost, duration unknown"),
            },
            Event::LogClosed {
                number,
                reason,
                bytes,
            } => write!(f, "log {number} closed ({reason:?}), {bytes} bytes"),
            Event::Ftp(Ok(reply)) => write!(f, "FTP: {}", reply.summary()),
            Event::Ftp(Err(e)) => write!(f, "FTP: {e}"),
        }
    }
}

/// Counters; all monotonic, but for `problem`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SessionStats {
    pub frames: FrameStats,
    /// Frames refused by signing (with a key).
    pub signing: SigningStats,
    /// LOGGING_DATA(_ACKED) addressed to us.
    pub chunks: u64,
    pub acked_chunks: u64,
    pub acks_sent: u64,
    /// Chunks of no open log (before a START, or of someone else's stream).
    pub ignored_chunks: u64,
    pub duplicates: u64,
    /// Chunks held because one before them was missing (late or lost).
    pub reordered: u64,
    /// Late chunks (arrived after a later one) put back in their place.
    pub recovered: u64,
    /// Chunks that came after their gap was declared.
    pub too_late: u64,
    /// Chunks far ahead of the stream (or a chunk 0 in the middle of a log) set aside until
    /// a neighbour confirms them.
    pub suspects: u64,
    /// Suspects never confirmed: dropped as forged or stale.
    pub implausible: u64,
    pub lost_chunks: u64,
    pub gaps: u64,
    pub dropouts: u64,
    /// Bytes of partial messages dropped at gaps.
    pub discarded_bytes: u64,
    pub framing_errors: u64,
    pub log_bytes: u64,
    pub logs: u64,
    pub start_requests: u64,
    /// STOPs the vehicle confirmed (ACCEPTED) and those it did not within the wait.
    pub stops_confirmed: u64,
    pub stops_unconfirmed: u64,
    /// The link problem in force, if any (cleared once a stream starts).
    pub problem: Option<LinkProblem>,
}

/// Rates over an interval, from two readings of [`SessionStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Rates {
    pub log_bytes_per_s: f64,
    pub chunks_per_s: f64,
    /// Chunks lost among those due in the interval (received + lost), in percent.
    pub loss_percent: f64,
}

impl SessionStats {
    /// The rates from `earlier` to `self`, `seconds` apart.
    pub fn rates_since(&self, earlier: &SessionStats, seconds: f64) -> Rates {
        let dt = seconds.max(1e-3);
        let chunks = self.chunks.saturating_sub(earlier.chunks);
        let lost = self.lost_chunks.saturating_sub(earlier.lost_chunks);
        Rates {
            log_bytes_per_s: self.log_bytes.saturating_sub(earlier.log_bytes) as f64 / dt,
            chunks_per_s: chunks as f64 / dt,
            loss_percent: if chunks + lost > 0 {
                100.0 * lost as f64 / (chunks + lost) as f64
            } else {
                0.0
            },
        }
    }

    /// Frames refused by signing, all causes.
    pub fn refused_frames(&self) -> u64 {
        let s = &self.signing;
        s.unsigned_refused + s.bad_signature + s.replayed + s.too_old
    }
}

/// What comes after a STOP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AfterStop {
    /// START (a new stream is wanted).
    Start,
    /// Close the log and the session ([`Session::shutdown`]).
    Close,
}

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
    /// Before the next STOP+START.
    Waiting { until: Instant },
    /// `stall_check`: when to look for a stall (no chunk for `stream_timeout`).
    Streaming { stall_check: Instant },
    /// After [`Session::shutdown`] has completed.
    Closed,
}

#[derive(Debug, Clone, Copy)]
struct Vehicle {
    system_id: u8,
    component_id: u8,
    /// Last time anything came from it (its heartbeat above all).
    last_heartbeat: Instant,
}

/// The fields LOGGING_DATA and LOGGING_DATA_ACKED share.
#[derive(Debug, Clone, Copy)]
struct ChunkFrame<'a> {
    sequence: u16,
    target_system: u8,
    target_component: u8,
    length: u8,
    first_message_offset: u8,
    data: &'a [u8; 249],
}

/// A chunk 0 with a new header in the middle of a log, waiting for the chunk after it.
#[derive(Debug)]
struct PendingNewLog {
    data: Vec<u8>,
    arrived: Instant,
}

/// One log being received.
struct Log {
    number: u32,
    reorder: ReorderBuffer,
    assembler: Assembler,
    /// Marks the gaps with dropouts (and follows formats and subscriptions for the times).
    gaps: GapMarker,
    /// Chunk 0 as received, to tell its duplicates from a new log's first chunk.
    first_chunk: Vec<u8>,
    /// Chunks taken into the reorder buffer.
    chunks: u64,
    /// The file header has been handed out.
    opened: bool,
    bytes: u64,
    /// Assembler output of the chunk in hand.
    scratch: Vec<u8>,
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
        self.log.as_ref().is_some_and(|l| l.opened)
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
        earliest(self.ftp.poll_timeout());
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

    /// Checks one frame's signature and handles its message; true when it is an authentic
    /// frame of the vehicle.
    fn handle_frame(&mut self, frame: Frame, now: Instant) -> bool {
        if self.phase == Phase::Closed {
            return false;
        }
        let system_id = frame.system_id();
        let verified = match &mut self.signer {
            None => {
                if self.is_vehicle(&frame.header) {
                    self.vehicle_signs = frame.is_signed();
                }
                true
            }
            Some(signer) => match frame
                .raw_v2()
                .map_or(Check::Unsigned, |r| signer.check(r, now))
            {
                Check::Valid => true,
                // MAVLink lets these pass unsigned (radios insert them); they never find the
                // vehicle nor steer a reply.
                Check::Unsigned
                    if matches!(
                        frame.message,
                        MavMessage::HEARTBEAT(_) | MavMessage::RADIO_STATUS(_)
                    ) =>
                {
                    false
                }
                Check::Unsigned => {
                    signer.count_unsigned_refused();
                    return false;
                }
                Check::BadSignature => {
                    self.refused_signed(LinkProblem::WrongKey { system_id }, now);
                    return false;
                }
                Check::TooOld => {
                    self.refused_signed(LinkProblem::SigningClockBehind { system_id }, now);
                    return false;
                }
                Check::Replayed => return false,
            },
        };
        let from_vehicle = if verified {
            self.handle_message(frame.header, &frame.message, now);
            self.is_vehicle(&frame.header)
        } else {
            // An unsigned heartbeat or radio status with a key: it may show the vehicle is
            // still there, but never makes one (a forged heartbeat would take its place).
            if let Some(v) = &mut self.vehicle
                && v.system_id as u32 == frame.header.system_id
                && v.component_id == frame.header.component_id
            {
                v.last_heartbeat = now;
            }
            false
        };
        if from_vehicle && self.signer.is_some() {
            self.vehicle_verified = Some(now);
            if matches!(
                self.stats.problem,
                Some(LinkProblem::WrongKey { .. } | LinkProblem::SigningClockBehind { .. })
            ) {
                self.stats.problem = None;
            }
        }
        from_vehicle
    }

    /// A frame signed, but refused: a problem when nothing of the vehicle verified lately.
    fn refused_signed(&mut self, problem: LinkProblem, now: Instant) {
        let verified_lately = self
            .vehicle_verified
            .is_some_and(|t| now.duration_since(t) < self.config.vehicle_timeout);
        if !verified_lately {
            self.report_problem(problem, now);
        }
    }

    /// Puts `problem` in force; reports it now unless the same one was reported within
    /// [`PROBLEM_REPEAT`].
    fn report_problem(&mut self, problem: LinkProblem, now: Instant) {
        let repeat =
            self.stats.problem == Some(problem) && self.problem_repeat_at.is_some_and(|t| now < t);
        self.stats.problem = Some(problem);
        if repeat {
            return;
        }
        self.problem_repeat_at = Some(now + PROBLEM_REPEAT);
        tracing::error!("{problem}");
        self.events.push_back(Event::LinkProblem(problem));
    }

    fn is_vehicle(&self, header: &MavHeader) -> bool {
        self.vehicle.is_some_and(|v| {
            v.system_id as u32 == header.system_id && v.component_id == header.component_id
        })
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

    /// Starts a MAVLink FTP operation on the vehicle (found first); its result comes as
    /// [`Event::Ftp`]. Frames go out with the session's (signed when it signs).
    pub fn ftp_start(&mut self, op: FtpOp, now: Instant) -> Result<(), FtpError> {
        if self.vehicle.is_none() {
            return Err(FtpError::NoVehicle);
        }
        self.ftp.start(op, now)?;
        self.flush_ftp(now);
        Ok(())
    }

    /// The FTP client's counters.
    pub fn ftp_stats(&self) -> FtpStats {
        self.ftp.stats()
    }

    /// Frames the FTP client's requests and hands its results out as events.
    fn flush_ftp(&mut self, now: Instant) {
        let Some(v) = self.vehicle else { return };
        while let Some(request) = self.ftp.poll_request() {
            self.send(
                MavMessage::FILE_TRANSFER_PROTOCOL(FILE_TRANSFER_PROTOCOL_DATA {
                    target_network: 0,
                    target_system: v.system_id,
                    target_component: v.component_id,
                    payload: request.encode(),
                }),
                now,
            );
        }
        while let Some(result) = self.ftp.poll_result() {
            self.events.push_back(Event::Ftp(result));
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
        if let Some(v) = self.vehicle
            && self.phase != Phase::Searching
            && now.duration_since(v.last_heartbeat) >= self.config.vehicle_timeout
        {
            tracing::warn!(system_id = v.system_id, "vehicle lost: no heartbeat");
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

    /// A command got no answer: when the vehicle signs and we cannot, that is why.
    fn unanswered_command(&mut self, now: Instant) {
        if self.signer.is_none()
            && self.vehicle_signs
            && let Some(v) = self.vehicle
        {
            self.report_problem(
                LinkProblem::VehicleSignsNoKey {
                    system_id: v.system_id,
                },
                now,
            );
        }
    }

    /// The vehicle was heard within two heartbeat intervals.
    fn vehicle_heard(&self, now: Instant) -> bool {
        self.vehicle.is_some_and(|v| {
            now.duration_since(v.last_heartbeat) < 2 * self.config.heartbeat_interval
        })
    }

    /// True while the vehicle was heard within the vehicle timeout (a lossy link may drop a
    /// few heartbeats in a row).
    fn vehicle_present(&self, now: Instant) -> bool {
        self.vehicle
            .is_some_and(|v| now.duration_since(v.last_heartbeat) < self.config.vehicle_timeout)
    }

    /// The daemon is going away: STOP to the vehicle, then the STOP handshake (what arrives
    /// until the vehicle confirms, or [`SessionConfig::stop_timeout`] runs out, still goes
    /// into the log), then the log is closed and [`is_closed`](Self::is_closed) turns true.
    /// A vehicle not heard within the vehicle timeout is not waited for. Later input is
    /// ignored.
    pub fn shutdown(&mut self, now: Instant) {
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
        self.phase = Phase::Closed;
    }

    fn after_stop(&mut self, then: AfterStop, now: Instant) {
        match then {
            AfterStop::Start => self.send_start(now),
            AfterStop::Close => self.finish(),
        }
    }

    fn backoff(&self) -> Duration {
        let secs = 1u64 << self.failures.saturating_sub(1).min(4);
        Duration::from_secs(secs).min(self.config.max_backoff)
    }

    fn on_heartbeat(&mut self, header: MavHeader, hb: &HEARTBEAT_DATA, now: Instant) {
        let system_id = header.system_id as u8;
        if !self.is_vehicle(&header) {
            let is_autopilot = hb.autopilot != MavAutopilot::MAV_AUTOPILOT_INVALID
                && !matches!(
                    hb.mavtype,
                    MavType::MAV_TYPE_GCS | MavType::MAV_TYPE_ONBOARD_CONTROLLER
                );
            let wanted = self.config.target_system.is_none_or(|t| t == system_id);
            if !is_autopilot || !wanted || self.phase != Phase::Searching {
                return;
            }
            if self.vehicle.is_none_or(|v| v.system_id != system_id) {
                tracing::info!(
                    system_id,
                    component_id = header.component_id,
                    "vehicle found"
                );
                self.events.push_back(Event::VehicleFound {
                    system_id,
                    component_id: header.component_id,
                });
            }
            self.vehicle = Some(Vehicle {
                system_id,
                component_id: header.component_id,
                last_heartbeat: now,
            });
        }
        if self.is_vehicle(&header) {
            let armed = hb
                .base_mode
                .contains(MavModeFlag::MAV_MODE_FLAG_SAFETY_ARMED);
            if self.armed != Some(armed) {
                self.armed = Some(armed);
                self.events.push_back(Event::Armed(armed));
            }
        }
        if self.phase == Phase::Searching && self.config.stream {
            self.send_stop(now, AfterStop::Start);
        }
    }

    fn on_command_ack(
        &mut self,
        header: MavHeader,
        command: MavCmd,
        result: MavResult,
        now: Instant,
    ) {
        let Some(v) = self.vehicle else { return };
        if header.system_id != v.system_id as u32 {
            return;
        }
        match (self.phase, command) {
            (
                Phase::Stopping {
                    since, tries, then, ..
                },
                MavCmd::MAV_CMD_LOGGING_STOP,
            ) => {
                if result == MavResult::MAV_RESULT_IN_PROGRESS {
                    // Post-flight data follows (acked chunks); the final answer after it.
                    self.phase = Phase::Stopping {
                        deadline: (now + self.config.command_timeout / 2)
                            .min(since + self.config.stop_timeout),
                        since,
                        tries,
                        in_progress: true,
                        then,
                    };
                } else {
                    // ACCEPTED; or refused: then the vehicle was not streaming.
                    tracing::debug!(?result, waited = ?now.duration_since(since), "stop confirmed");
                    self.stats.stops_confirmed += 1;
                    self.after_stop(then, now);
                }
            }
            (Phase::Starting { .. }, MavCmd::MAV_CMD_LOGGING_START) => match result {
                MavResult::MAV_RESULT_ACCEPTED => {
                    tracing::info!("log streaming started");
                    self.stream_started(now);
                }
                MavResult::MAV_RESULT_IN_PROGRESS => {}
                MavResult::MAV_RESULT_TEMPORARILY_REJECTED => {
                    self.failures += 1;
                    let retry_in = self.backoff();
                    tracing::warn!(
                        ?retry_in,
                        "LOGGING_START temporarily rejected: the vehicle is streaming its log \
                         already (to us before a restart, or to another client); stopping it"
                    );
                    self.phase = Phase::Waiting {
                        until: now + retry_in,
                    };
                    self.events.push_back(Event::StartRejected { retry_in });
                }
                other => {
                    let hint = refusal_hint(other);
                    let retry_in = self.config.refused_retry;
                    tracing::error!(result = ?other, ?retry_in, "LOGGING_START refused: {hint}");
                    self.phase = Phase::Waiting {
                        until: now + retry_in,
                    };
                    self.events.push_back(Event::StartRefused {
                        result: other,
                        hint,
                        retry_in,
                    });
                }
            },
            _ => {}
        }
    }

    fn stream_started(&mut self, now: Instant) {
        self.phase = Phase::Streaming {
            stall_check: now + self.config.stream_timeout,
        };
        self.stats.problem = None;
        self.events.push_back(Event::StreamStarted);
    }

    fn on_chunk(&mut self, header: MavHeader, d: ChunkFrame<'_>, acked: bool, now: Instant) {
        let Some(v) = self.vehicle else {
            self.stats.ignored_chunks += 1;
            return;
        };
        if header.system_id != v.system_id as u32
            || d.target_system != self.system_id()
            || d.target_component != self.config.component_id
        {
            self.stats.ignored_chunks += 1;
            return;
        }
        if acked {
            // Before anything else: the vehicle is blocked until this arrives.
            self.send(
                MavMessage::LOGGING_ACK(LOGGING_ACK_DATA {
                    sequence: d.sequence,
                    target_system: v.system_id,
                    target_component: v.component_id,
                }),
                now,
            );
            self.stats.acks_sent += 1;
            self.stats.acked_chunks += 1;
        }
        self.stats.chunks += 1;
        let len = (d.length as usize).min(d.data.len());
        let data = &d.data[..len];
        let streaming = matches!(self.phase, Phase::Streaming { .. });
        // A log open while the STOP handshake of a shutdown runs still takes its chunks.
        let draining = matches!(
            self.phase,
            Phase::Stopping {
                then: AfterStop::Close,
                ..
            }
        ) && self.log.is_some();
        let starts_log = d.sequence == 0
            && d.first_message_offset == 0
            && data.len() >= FILE_MAGIC.len()
            && data[..FILE_MAGIC.len()] == FILE_MAGIC;
        if starts_log && !draining {
            // A copy of chunk 0 (resent while our ack was on its way) is a duplicate; a
            // different chunk 0, or one long after the start, is a new log.
            let duplicate = self
                .log
                .as_ref()
                .is_some_and(|l| l.first_chunk == data && l.chunks < NEW_LOG_AFTER_CHUNKS);
            let after_start = self
                .start_sent
                .is_some_and(|t| now.duration_since(t) < 10 * self.config.command_timeout);
            if !duplicate && (streaming || after_start) {
                if self.is_logging() {
                    // In the middle of a log: a restart of the stream, or a stray frame. The
                    // chunk after it decides.
                    self.stats.suspects += 1;
                    let earlier = self.pending_new_log.replace(PendingNewLog {
                        data: data.to_vec(),
                        arrived: now,
                    });
                    if earlier.is_some() {
                        self.stats.implausible += 1;
                    }
                    return;
                }
                self.begin_log(data, streaming, now);
            }
        } else if let Some(pending) = self.pending_new_log.take() {
            let window = self.config.reorder.max_chunks as u16;
            let expired = now.duration_since(pending.arrived) > self.config.reorder.suspect_wait;
            // The chunk after a restart: early in a stream, and behind the open log's.
            let of_open_log = self
                .log
                .as_ref()
                .is_some_and(|l| d.sequence.wrapping_sub(l.reorder.next_seq()) < 0x8000);
            if !expired && !of_open_log && (1..=window).contains(&d.sequence) {
                // Confirmed: the vehicle restarted its stream.
                self.begin_log(&pending.data, streaming, now);
                self.take_chunk(0, 0, &pending.data, now);
            } else if expired {
                self.stats.implausible += 1;
            } else {
                self.pending_new_log = Some(pending);
            }
        }
        // (A log begun above is streaming now.)
        let streaming = matches!(self.phase, Phase::Streaming { .. });
        if self.log.is_none() || !(streaming || draining) {
            self.stats.ignored_chunks += 1;
            return;
        }
        if streaming {
            self.phase = Phase::Streaming {
                stall_check: now + self.config.stream_timeout,
            };
        }
        self.failures = 0;
        self.take_chunk(d.sequence, d.first_message_offset, data, now);
    }

    /// Closes any open log and opens a new one whose chunk 0 is `first_chunk`.
    fn begin_log(&mut self, first_chunk: &[u8], streaming: bool, now: Instant) {
        if self.log.is_some() {
            self.close_log(CloseReason::NewLog);
        }
        self.logs_opened += 1;
        self.stats.logs += 1;
        self.log = Some(Log {
            number: self.logs_opened,
            reorder: ReorderBuffer::new(0, self.config.reorder),
            assembler: Assembler::new(),
            gaps: GapMarker::new(self.config.max_held_bytes),
            first_chunk: first_chunk.to_vec(),
            chunks: 0,
            opened: false,
            bytes: 0,
            scratch: Vec::new(),
        });
        if !streaming {
            // The START's ACCEPTED was lost, but the stream is here.
            self.stream_started(now);
        }
        self.phase = Phase::Streaming {
            stall_check: now + self.config.stream_timeout,
        };
    }

    /// Puts one chunk of the open log into its reorder buffer and takes what comes out.
    fn take_chunk(&mut self, seq: u16, first_message_offset: u8, data: &[u8], now: Instant) {
        let Some(log) = &mut self.log else { return };
        log.chunks += 1;
        log.reorder.push(
            Chunk {
                seq,
                first_message_offset,
                data: data.to_vec(),
            },
            now,
        );
        self.drain_reorder();
    }

    /// Ends the open log: what the reorder buffer holds goes out, a pending dropout is
    /// resolved, [`Event::LogClosed`] follows (only for a log that was opened).
    fn close_log(&mut self, reason: CloseReason) {
        if self.pending_new_log.take().is_some() {
            self.stats.implausible += 1;
        }
        let Some(log) = &mut self.log else { return };
        log.reorder.flush();
        self.drain_reorder();
        let Some(mut log) = self.log.take() else {
            return;
        };
        // Nothing timestamped came after the last gap, if one is pending.
        let before = self.out.len();
        let dropout = log.gaps.finish(&mut self.out);
        self.count_out(&mut log, before);
        self.dropout_event(dropout);
        add_reorder_stats(&mut self.stats, &log.reorder.stats());
        let a = log.assembler.stats();
        self.stats.discarded_bytes += a.discarded_bytes;
        self.stats.framing_errors += a.framing_errors;
        if log.opened {
            self.flush_out();
            tracing::info!(
                number = log.number,
                ?reason,
                bytes = log.bytes,
                "log closed"
            );
            self.events.push_back(Event::LogClosed {
                number: log.number,
                reason,
                bytes: log.bytes,
            });
        }
    }

    /// Moves everything the reorder buffer releases through the assembler and the decoder.
    fn drain_reorder(&mut self) {
        let Some(mut log) = self.log.take() else {
            return;
        };
        while let Some(d) = log.reorder.pop() {
            match d {
                Delivery::Chunk(c) => {
                    let mut scratch = std::mem::take(&mut log.scratch);
                    scratch.clear();
                    log.assembler
                        .chunk(&c.data, c.first_message_offset, &mut scratch);
                    self.take_messages(&mut log, &scratch);
                    log.scratch = scratch;
                }
                Delivery::Gap { lost } => {
                    log.assembler.gap();
                    if log.opened {
                        log.gaps.gap(lost);
                    }
                }
            }
        }
        self.log = Some(log);
    }

    /// Takes whole messages from the assembler (the file header first in a log).
    fn take_messages(&mut self, log: &mut Log, mut bytes: &[u8]) {
        if !log.opened && bytes.len() >= FILE_HEADER_LEN {
            let header: &[u8; FILE_HEADER_LEN] =
                bytes[..FILE_HEADER_LEN].try_into().expect("16 bytes");
            log.gaps.header(header);
            log.opened = true;
            self.flush_out();
            tracing::info!(number = log.number, "log opened");
            self.events
                .push_back(Event::LogOpened { number: log.number });
            let before = self.out.len();
            self.out.extend_from_slice(header);
            self.count_out(log, before);
            bytes = &bytes[FILE_HEADER_LEN..];
        }
        // The assembler hands out whole messages only.
        let before = self.out.len();
        for message in framed(bytes) {
            if let Some(dropout) = log.gaps.message(message, &mut self.out) {
                self.dropout_event(Some(dropout));
            }
        }
        self.count_out(log, before);
    }

    /// Counts the log bytes appended to `out` since it was `before` long.
    fn count_out(&mut self, log: &mut Log, before: usize) {
        let n = (self.out.len() - before) as u64;
        log.bytes += n;
        self.stats.log_bytes += n;
    }

    /// A dropout was written: counted, told.
    fn dropout_event(&mut self, dropout: Option<Dropout>) {
        let Some(d) = dropout else { return };
        self.stats.dropouts += 1;
        tracing::info!(lost_chunks = d.lost, duration_ms = ?d.duration_ms, "dropout");
        self.events.push_back(Event::Dropout {
            lost_chunks: d.lost,
            duration_ms: d.duration_ms,
        });
    }

    /// Hands the log bytes collected so far out as one event.
    fn flush_out(&mut self) {
        if !self.out.is_empty() {
            self.events
                .push_back(Event::LogBytes(self.out.split().freeze()));
        }
    }

    /// Sends STOP and waits for its answer (see [`Phase::Stopping`]), then does `then`.
    fn send_stop(&mut self, now: Instant, then: AfterStop) {
        self.send_command(MavCmd::MAV_CMD_LOGGING_STOP, now);
        self.phase = Phase::Stopping {
            deadline: now + self.config.command_timeout / 2,
            since: now,
            tries: 1,
            in_progress: false,
            then,
        };
    }

    fn send_start(&mut self, now: Instant) {
        self.send_command(MavCmd::MAV_CMD_LOGGING_START, now);
        self.stats.start_requests += 1;
        self.start_sent = Some(now);
        self.phase = Phase::Starting {
            deadline: now + self.config.command_timeout,
        };
    }

    fn send_command(&mut self, command: MavCmd, now: Instant) {
        let Some(v) = self.vehicle else { return };
        self.send(
            MavMessage::COMMAND_LONG(COMMAND_LONG_DATA {
                command,
                // LOGGING_START: param1 0 asks for ULog.
                param1: 0.0,
                target_system: v.system_id,
                target_component: v.component_id,
                ..Default::default()
            }),
            now,
        );
    }

    fn send_heartbeat(&mut self, now: Instant) {
        self.send(
            MavMessage::HEARTBEAT(HEARTBEAT_DATA {
                custom_mode: 0,
                mavtype: MavType::MAV_TYPE_ONBOARD_CONTROLLER,
                autopilot: MavAutopilot::MAV_AUTOPILOT_INVALID,
                base_mode: MavModeFlag::empty(),
                system_status: MavState::MAV_STATE_ACTIVE,
                mavlink_version: 3,
            }),
            now,
        );
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

/// What DENIED, UNSUPPORTED or FAILED most likely mean on PX4.
fn refusal_hint(result: MavResult) -> &'static str {
    match result {
        MavResult::MAV_RESULT_DENIED => {
            "the vehicle's MAVLink link is configured below 5000 B/s (PX4 refuses log streaming \
             then): raise the link's data rate (MAV_x_RATE) or use a faster link"
        }
        MavResult::MAV_RESULT_UNSUPPORTED => {
            "the vehicle does not support ULog streaming over MAVLink (not PX4, or built \
             without the logger's MAVLink backend)"
        }
        _ => "the vehicle could not start its logger (no logger running, or out of memory)",
    }
}

/// Adds one log's reorder counters to the session's.
fn add_reorder_stats(stats: &mut SessionStats, log: &ReorderStats) {
    stats.duplicates += log.duplicates;
    stats.too_late += log.too_late;
    stats.reordered += log.reordered;
    stats.recovered += log.recovered;
    stats.lost_chunks += log.lost;
    stats.gaps += log.gaps;
    stats.suspects += log.suspects;
    stats.implausible += log.implausible;
}

#[cfg(test)]
mod tests {
    use super::*;
    use mavlink::dialects::common::{COMMAND_ACK_DATA, LOGGING_DATA_ACKED_DATA};

    fn vehicle_frame(msg: MavMessage) -> Vec<u8> {
        let mut f = Vec::new();
        let header = MavHeader {
            system_id: 1,
            component_id: 1,
            sequence: 0,
        };
        encode(header, &msg, &mut f);
        f
    }

    fn heartbeat() -> Vec<u8> {
        vehicle_frame(MavMessage::HEARTBEAT(HEARTBEAT_DATA {
            autopilot: MavAutopilot::MAV_AUTOPILOT_PX4,
            mavtype: MavType::MAV_TYPE_QUADROTOR,
            ..Default::default()
        }))
    }

    fn ack(command: MavCmd, result: MavResult) -> Vec<u8> {
        vehicle_frame(MavMessage::COMMAND_ACK(COMMAND_ACK_DATA {
            command,
            result,
        }))
    }

    fn sent(s: &mut Session) -> Vec<MavMessage> {
        let mut dec = FrameDecoder::new();
        while let Some(f) = s.poll_transmit() {
            dec.push(&f);
        }
        std::iter::from_fn(|| dec.next_frame().map(|f| f.message)).collect()
    }

    fn command_of(m: &MavMessage) -> Option<MavCmd> {
        match m {
            MavMessage::COMMAND_LONG(c) => Some(c.command),
            _ => None,
        }
    }

    /// A session that found the vehicle and had its STOP accepted: START is out.
    fn starting(t0: Instant) -> Session {
        let mut s = Session::new(SessionConfig::default(), t0);
        s.handle_timeout(t0);
        s.handle_bytes(&heartbeat(), t0);
        s.handle_bytes(
            &ack(MavCmd::MAV_CMD_LOGGING_STOP, MavResult::MAV_RESULT_ACCEPTED),
            t0,
        );
        let out = sent(&mut s);
        let commands: Vec<_> = out.iter().filter_map(command_of).collect();
        assert_eq!(
            commands,
            [MavCmd::MAV_CMD_LOGGING_STOP, MavCmd::MAV_CMD_LOGGING_START]
        );
        assert!(
            matches!(out[0], MavMessage::HEARTBEAT(ref h) if h.mavtype == MavType::MAV_TYPE_ONBOARD_CONTROLLER)
        );
        s
    }

    #[test]
    fn temporarily_rejected_backs_off_and_stops_first() {
        let t0 = Instant::now();
        let mut s = starting(t0);
        let mut now = t0;
        for expected in [1, 2, 4, 8, 10, 10] {
            s.handle_bytes(
                &ack(
                    MavCmd::MAV_CMD_LOGGING_START,
                    MavResult::MAV_RESULT_TEMPORARILY_REJECTED,
                ),
                now,
            );
            let retry_in = Duration::from_secs(expected);
            let events: Vec<_> = std::iter::from_fn(|| s.poll_event()).collect();
            assert!(
                events.contains(&Event::StartRejected { retry_in }),
                "{events:?}"
            );
            // Nothing but heartbeats until the back-off has passed.
            let before = now + retry_in - Duration::from_millis(1);
            s.handle_bytes(&heartbeat(), before);
            s.handle_timeout(before);
            assert!(sent(&mut s).iter().all(|m| command_of(m).is_none()));
            now += retry_in;
            s.handle_bytes(&heartbeat(), now);
            s.handle_timeout(now);
            let commands: Vec<_> = sent(&mut s).iter().filter_map(command_of).collect();
            assert_eq!(commands, [MavCmd::MAV_CMD_LOGGING_STOP]);
            s.handle_bytes(
                &ack(
                    MavCmd::MAV_CMD_LOGGING_STOP,
                    MavResult::MAV_RESULT_IN_PROGRESS,
                ),
                now,
            );
            assert!(
                sent(&mut s).is_empty(),
                "START waits for the stop to finish"
            );
            s.handle_bytes(
                &ack(MavCmd::MAV_CMD_LOGGING_STOP, MavResult::MAV_RESULT_ACCEPTED),
                now,
            );
            let commands: Vec<_> = sent(&mut s).iter().filter_map(command_of).collect();
            assert_eq!(commands, [MavCmd::MAV_CMD_LOGGING_START]);
        }
    }

    #[test]
    fn every_acked_chunk_is_acked_first_duplicates_included() {
        let t0 = Instant::now();
        let mut s = starting(t0);
        s.handle_bytes(
            &ack(
                MavCmd::MAV_CMD_LOGGING_START,
                MavResult::MAV_RESULT_ACCEPTED,
            ),
            t0,
        );
        let mut chunk = LOGGING_DATA_ACKED_DATA {
            sequence: 0,
            target_system: 1,
            target_component: DEFAULT_COMPONENT_ID,
            length: 16,
            first_message_offset: 0,
            ..Default::default()
        };
        chunk.data[..7].copy_from_slice(&FILE_MAGIC);
        chunk.data[7] = 1;
        let frame = vehicle_frame(MavMessage::LOGGING_DATA_ACKED(chunk.clone()));
        for copy in 0..3 {
            s.handle_bytes(&frame, t0);
            let out = sent(&mut s);
            assert!(
                matches!(out.first(), Some(MavMessage::LOGGING_ACK(a)) if a.sequence == 0),
                "copy {copy}: {out:?}"
            );
        }
        let st = s.stats();
        assert_eq!((st.acks_sent, st.duplicates, st.logs), (3, 2, 1));
        // Someone else's stream is neither acked nor logged.
        let mut other = chunk;
        other.target_component = 190;
        other.sequence = 1;
        s.handle_bytes(&vehicle_frame(MavMessage::LOGGING_DATA_ACKED(other)), t0);
        assert!(sent(&mut s).is_empty());
        assert_eq!(s.stats().ignored_chunks, 1);
    }
}
