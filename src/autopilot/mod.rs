//! The two autopilots a receiver meets and the log format each streams: PX4 streams ULog
//! (LOGGING_DATA / LOGGING_DATA_ACKED), ArduPilot its DataFlash log (REMOTE_LOG_DATA_BLOCK).
//! Told apart by the `autopilot` field of the vehicle's HEARTBEAT, or set by the operator.

use std::fmt;

/// An autopilot whose log stream the receiver speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Autopilot {
    /// PX4: ULog streaming.
    Px4,
    /// ArduPilot: DataFlash remote logging.
    ArduPilot,
}

/// `MAV_AUTOPILOT_ARDUPILOTMEGA` in a HEARTBEAT.
pub const MAV_AUTOPILOT_ARDUPILOTMEGA: u8 = 3;
/// `MAV_AUTOPILOT_PX4` in a HEARTBEAT.
pub const MAV_AUTOPILOT_PX4: u8 = 12;

impl Autopilot {
    /// The autopilot a HEARTBEAT's `autopilot` value names; `None` for one whose log stream
    /// we do not speak (a generic autopilot is taken for PX4, whose protocol is MAVLink's
    /// common one).
    pub fn from_heartbeat(autopilot: u8) -> Option<Self> {
        match autopilot {
            MAV_AUTOPILOT_ARDUPILOTMEGA => Some(Autopilot::ArduPilot),
            MAV_AUTOPILOT_PX4 | 0 => Some(Autopilot::Px4),
            _ => None,
        }
    }

    /// The format of the log it streams.
    pub fn log_format(self) -> LogFormat {
        match self {
            Autopilot::Px4 => LogFormat::ULog,
            Autopilot::ArduPilot => LogFormat::DataFlash,
        }
    }

    /// Its name as the operator writes it (`--autopilot`, `info`, the metrics' label).
    pub fn name(self) -> &'static str {
        match self {
            Autopilot::Px4 => "px4",
            Autopilot::ArduPilot => "ardupilot",
        }
    }
}

impl fmt::Display for Autopilot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Autopilot::Px4 => "PX4",
            Autopilot::ArduPilot => "ArduPilot",
        })
    }
}

/// The format of a log, and so of its splits on disk.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// PX4's ULog (`.ulg`).
    #[default]
    ULog,
    /// ArduPilot's DataFlash (`.bin`).
    DataFlash,
}

impl LogFormat {
    /// The extension of its files, without the dot.
    pub fn extension(self) -> &'static str {
        match self {
            LogFormat::ULog => "ulg",
            LogFormat::DataFlash => "bin",
        }
    }

    /// The format a split file's name says.
    pub fn of_file_name(name: &str) -> Option<Self> {
        let ext = name.rsplit_once('.')?.1;
        [LogFormat::ULog, LogFormat::DataFlash]
            .into_iter()
            .find(|f| f.extension() == ext)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heartbeats_name_the_autopilot_and_its_format() {
        assert_eq!(Autopilot::from_heartbeat(3), Some(Autopilot::ArduPilot));
        assert_eq!(Autopilot::from_heartbeat(12), Some(Autopilot::Px4));
        assert_eq!(Autopilot::from_heartbeat(8), None);
        assert_eq!(Autopilot::ArduPilot.log_format().extension(), "bin");
        assert_eq!(
            LogFormat::of_file_name("split_0001.bin"),
            Some(LogFormat::DataFlash)
        );
        assert_eq!(
            LogFormat::of_file_name("split_0001.ulg"),
            Some(LogFormat::ULog)
        );
        assert_eq!(LogFormat::of_file_name("manifest.json"), None);
    }
}
