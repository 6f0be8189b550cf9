//! The commands that start and stop the log stream: LOGGING_STOP then LOGGING_START, each
//! retried until its COMMAND_ACK, the back-off after a refusal, and the STOP handshake
//! (IN_PROGRESS, the post-flight data, ACCEPTED).

use std::time::{Duration, Instant};

use mavlink::MavHeader;
use mavlink::dialects::ardupilotmega::{COMMAND_LONG_DATA, MavCmd, MavMessage, MavResult};

use super::{Event, Phase, Session};

/// STOPs sent without any answer before a START goes out anyway (at a shutdown, STOP is
/// sent again until the stop timeout).
pub(super) const STOP_TRIES: u32 = 3;

/// What comes after a STOP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AfterStop {
    /// START (a new stream is wanted).
    Start,
    /// Close the log and the session ([`Session::shutdown`]).
    Close,
}

impl Session {
    pub(super) fn after_stop(&mut self, then: AfterStop, now: Instant) {
        match then {
            AfterStop::Start => self.send_start(now),
            AfterStop::Close => self.finish(),
        }
    }

    pub(super) fn backoff(&self) -> Duration {
        let secs = 1u64 << self.failures.saturating_sub(1).min(4);
        Duration::from_secs(secs).min(self.config.max_backoff)
    }

    pub(super) fn on_command_ack(
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

    pub(super) fn stream_started(&mut self, now: Instant) {
        self.phase = Phase::Streaming {
            stall_check: now + self.config.stream_timeout,
        };
        self.stats.problem = None;
        self.events.push_back(Event::StreamStarted);
    }

    /// Sends STOP and waits for its answer (see [`Phase::Stopping`]), then does `then`.
    pub(super) fn send_stop(&mut self, now: Instant, then: AfterStop) {
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

    pub(super) fn send_command(&mut self, command: MavCmd, now: Instant) {
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
