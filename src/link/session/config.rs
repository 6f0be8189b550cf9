//! The session's configuration: our identity on the link, its timeouts, signing, and
//! whether to ask for the log stream. [`Default`] gives the documented defaults.

use std::time::Duration;

use crate::autopilot::Autopilot;
use crate::link::ftp::FtpConfig;
use crate::link::reorder::ReorderConfig;
use crate::link::signing::SigningKey;

/// MAV_COMP_ID_LOG: the component id MAVLink reserves for an onboard logging component.
pub const DEFAULT_COMPONENT_ID: u8 = 155;

/// The system id used in our heartbeats before the vehicle is known, when none is configured
/// (PX4's default MAV_SYS_ID).
pub const FALLBACK_SYSTEM_ID: u8 = 1;

/// MAVLink 2 signing: our key, the link id in our signatures, and where our timestamps start
/// (at the session's creation; at or above any used before, see [`crate::link::signing`]).
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// The autopilot whose protocol to speak; `None` (the default): told by the vehicle's
    /// HEARTBEAT.
    pub autopilot: Option<Autopilot>,
    /// How long an ArduPilot log waits for a lost vehicle to come back and stream on into
    /// it (ArduPilot drops a client silent for 10 s and starts again from seqno 0).
    pub rejoin_timeout: Duration,
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
            autopilot: None,
            rejoin_timeout: Duration::from_secs(30),
        }
    }
}
