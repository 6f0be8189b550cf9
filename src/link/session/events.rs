//! What the session hands out besides frames: its [`Event`]s (log bytes, logs opened and
//! closed, dropouts, the vehicle found and lost, refusals and link problems) and its counters
//! ([`SessionStats`]).

use std::time::Duration;

use bytes::Bytes;
use mavlink::dialects::ardupilotmega::MavResult;

use crate::autopilot::{Autopilot, LogFormat};
use crate::link::frames::FrameStats;
use crate::link::ftp::{FtpError, FtpReply};
use crate::link::signing::SigningStats;

/// Why a log ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum CloseReason {
    /// No chunk for the stream timeout while the vehicle was still there.
    Stalled,
    /// No heartbeat for the vehicle timeout.
    VehicleLost,
    /// The vehicle began a new log (a new header at sequence 0).
    NewLog,
    /// [`Session::shutdown`](super::Session::shutdown).
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
        /// Whose log stream it speaks (its HEARTBEAT's `autopilot`, or as configured).
        autopilot: Autopilot,
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
    /// A new log begins; its bytes follow (a ULog's file header first; a DataFlash log's
    /// FMT records).
    LogOpened {
        number: u32,
        format: LogFormat,
    },
    /// The next bytes of the open log: whole messages (ULog or DataFlash, as the log was
    /// opened), as the vehicle logged them, plus our dropout marks.
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
    /// An FTP operation ([`Session::ftp_start`](super::Session::ftp_start)) finished.
    Ftp(Result<FtpReply, FtpError>),
}

impl std::fmt::Display for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Event::VehicleFound {
                system_id,
                component_id,
                autopilot,
            } => write!(
                f,
                "vehicle found: {autopilot}, system {system_id}, component {component_id}"
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
            Event::LogOpened { number, format } => {
                write!(f, "log {number} opened ({})", format.extension())
            }
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
    /// NACKs sent for ArduPilot's missing blocks.
    pub nacks_sent: u64,
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
    /// STATUSTEXTs sent to the ground station, and those dropped by the rate limit.
    pub status_texts: u64,
    pub status_texts_dropped: u64,
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
