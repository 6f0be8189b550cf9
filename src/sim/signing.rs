//! The simulated autopilots' MAVLink 2 signing: what each takes unsigned once it has a key
//! (PX4's and ArduPilot's own lists), and the clock a vehicle's signer starts from after a
//! reboot (the timestamp it last stored).

use std::time::Instant;

use mavlink::dialects::ardupilotmega::MavMessage;

use crate::link::frames::Frame;
use crate::link::signing::{Check, Signer, TIMESTAMP_UNITS_PER_S};

/// How often a simulated vehicle stores its signing clock (MAVLink asks for at least once a
/// minute, and a start from the stored one when no clock says later).
pub const SIGNING_STORED_EVERY: u64 = 60 * TIMESTAMP_UNITS_PER_S;

/// The timestamp a vehicle whose signing clock reads `timestamp` last stored: after a reboot
/// its clock starts there, up to a minute behind the frames it signed before.
pub fn stored_signing_timestamp(timestamp: u64) -> u64 {
    timestamp - timestamp % SIGNING_STORED_EVERY
}

/// Whose rule decides what a signing vehicle takes unsigned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// HEARTBEAT, RADIO_STATUS, ADSB_VEHICLE and COLLISION.
    Px4,
    /// RADIO_STATUS alone (`GCS_MAVLINK::accept_unsigned_callback`).
    ArduPilot,
}

/// Whether a vehicle with `signer` (none: it does not sign) takes `frame` at `now`: a valid
/// signature with a new timestamp, or an unsigned message its `policy` lets through.
pub fn authentic(signer: Option<&mut Signer>, policy: Policy, frame: &Frame, now: Instant) -> bool {
    let Some(signer) = signer else {
        return true;
    };
    match (frame.raw_v2()).map_or(Check::Unsigned, |r| signer.check(r, now)) {
        Check::Valid => true,
        Check::Unsigned => match policy {
            Policy::Px4 => matches!(
                frame.message.mav(),
                Some(MavMessage::HEARTBEAT(_))
                    | Some(MavMessage::RADIO_STATUS(_))
                    | Some(MavMessage::ADSB_VEHICLE(_))
                    | Some(MavMessage::COLLISION(_))
            ),
            Policy::ArduPilot => matches!(frame.message.mav(), Some(MavMessage::RADIO_STATUS(_))),
        },
        Check::BadSignature | Check::Replayed | Check::TooOld => false,
    }
}
