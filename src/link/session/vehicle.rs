//! The vehicle on the other end: found from its HEARTBEAT, kept while anything of it is
//! heard, its armed state; our own HEARTBEAT; the signature check of every frame and the link
//! problems it reveals (a wrong key, a clock behind, a vehicle that signs when we cannot).

use std::time::{Duration, Instant};

use mavlink::MavHeader;
use mavlink::dialects::ardupilotmega::{
    HEARTBEAT_DATA, MavAutopilot, MavMessage, MavModeFlag, MavState, MavType,
};

use super::commands::AfterStop;
use super::{Event, LinkProblem, Phase, Session};
use crate::autopilot::Autopilot;
use crate::link::frames::{Frame, Received};
use crate::link::signing::Check;

/// A link problem is repeated at most this often while it lasts.
const PROBLEM_REPEAT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy)]
pub(super) struct Vehicle {
    pub(super) system_id: u8,
    pub(super) component_id: u8,
    /// Last time anything came from it (its heartbeat above all).
    pub(super) last_heartbeat: Instant,
}

impl Session {
    /// Checks one frame's signature and handles its message; true when it is an authentic
    /// frame of the vehicle.
    pub(super) fn handle_frame(&mut self, frame: Frame, now: Instant) -> bool {
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
                        frame.message.mav(),
                        Some(MavMessage::HEARTBEAT(_) | MavMessage::RADIO_STATUS(_))
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
            match &frame.message {
                Received::Mav(m) => self.handle_message(frame.header, m, now),
                Received::LogBlock(b) => self.on_log_block(frame.header, b, now),
            }
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

    pub(super) fn is_vehicle(&self, header: &MavHeader) -> bool {
        self.vehicle.is_some_and(|v| {
            v.system_id as u32 == header.system_id && v.component_id == header.component_id
        })
    }

    pub(super) fn on_heartbeat(&mut self, header: MavHeader, hb: &HEARTBEAT_DATA, now: Instant) {
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
            // Told by its heartbeat unless configured; an autopilot of another kind is
            // asked as PX4 is, MAVLink's common way.
            let autopilot = self.config.autopilot.unwrap_or_else(|| {
                Autopilot::from_heartbeat(hb.autopilot as u8).unwrap_or(Autopilot::Px4)
            });
            if self.vehicle.is_none_or(|v| v.system_id != system_id)
                || self.autopilot != Some(autopilot)
            {
                tracing::info!(
                    system_id,
                    component_id = header.component_id,
                    %autopilot,
                    "vehicle found"
                );
                self.events.push_back(Event::VehicleFound {
                    system_id,
                    component_id: header.component_id,
                    autopilot,
                });
            }
            self.autopilot = Some(autopilot);
            self.lost_since = None;
            self.vehicle = Some(Vehicle {
                system_id,
                component_id: header.component_id,
                last_heartbeat: now,
            });
        }
        if self.is_vehicle(&header) {
            // Back within the wait: its log goes on (a reboot shows in the log's time).
            self.lost_since = None;
            let armed = hb
                .base_mode
                .contains(MavModeFlag::MAV_MODE_FLAG_SAFETY_ARMED);
            if self.armed != Some(armed) {
                self.armed = Some(armed);
                self.events.push_back(Event::Armed(armed));
            }
        }
        if self.phase == Phase::Searching && self.config.stream {
            if self.autopilot == Some(Autopilot::ArduPilot) {
                self.send_block_start(now);
            } else {
                self.send_stop(now, AfterStop::Start);
            }
        }
    }

    /// A command got no answer: when the vehicle signs and we cannot, that is why.
    pub(super) fn unanswered_command(&mut self, now: Instant) {
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
    pub(super) fn vehicle_heard(&self, now: Instant) -> bool {
        self.vehicle.is_some_and(|v| {
            now.duration_since(v.last_heartbeat) < 2 * self.config.heartbeat_interval
        })
    }

    /// True while the vehicle was heard within the vehicle timeout (a lossy link may drop a
    /// few heartbeats in a row).
    pub(super) fn vehicle_present(&self, now: Instant) -> bool {
        self.vehicle
            .is_some_and(|v| now.duration_since(v.last_heartbeat) < self.config.vehicle_timeout)
    }

    pub(super) fn send_heartbeat(&mut self, now: Instant) {
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
}
