//! ArduPilot's numbers by name, as its own `AP_Logger.h` and the vehicles' `mode.h` give
//! them: the `ERR` records' subsystems and codes, the `EV` records' events and the flight
//! modes of Copter, Plane and Rover.

/// The vehicle a DataFlash log is from, by its firmware's name (the log's first `MSG`,
/// `ArduCopter V4.6.0 (…)`): it tells what a mode number means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Vehicle {
    Copter,
    Plane,
    Rover,
    #[default]
    Unknown,
}

impl Vehicle {
    /// The vehicle a startup text names, if it names one.
    pub fn named_in(text: &str) -> Option<Vehicle> {
        let first = text.split_whitespace().next()?;
        Some(match first {
            "ArduCopter" | "APM:Copter" => Vehicle::Copter,
            "ArduPlane" | "APM:Plane" => Vehicle::Plane,
            "ArduRover" | "APM:Rover" | "Rover" => Vehicle::Rover,
            _ => return None,
        })
    }
}

/// A flight mode's name (`MODE.Mode`) on `vehicle`; `Unknown` for a number it does not have.
pub fn mode_name(vehicle: Vehicle, mode: u8) -> &'static str {
    let name = match vehicle {
        Vehicle::Copter => match mode {
            0 => "Stabilize",
            1 => "Acro",
            2 => "AltHold",
            3 => "Auto",
            4 => "Guided",
            5 => "Loiter",
            6 => "RTL",
            7 => "Circle",
            9 => "Land",
            11 => "Drift",
            13 => "Sport",
            14 => "Flip",
            15 => "AutoTune",
            16 => "PosHold",
            17 => "Brake",
            18 => "Throw",
            19 => "Avoid_ADSB",
            20 => "Guided_NoGPS",
            21 => "Smart_RTL",
            22 => "FlowHold",
            23 => "Follow",
            24 => "ZigZag",
            25 => "SystemID",
            26 => "Heli_Autorotate",
            27 => "Auto RTL",
            28 => "Turtle",
            _ => "",
        },
        Vehicle::Plane => match mode {
            0 => "Manual",
            1 => "Circle",
            2 => "Stabilize",
            3 => "Training",
            4 => "Acro",
            5 => "FlyByWireA",
            6 => "FlyByWireB",
            7 => "Cruise",
            8 => "Autotune",
            10 => "Auto",
            11 => "RTL",
            12 => "Loiter",
            13 => "Takeoff",
            14 => "Avoid_ADSB",
            15 => "Guided",
            17 => "QStabilize",
            18 => "QHover",
            19 => "QLoiter",
            20 => "QLand",
            21 => "QRTL",
            22 => "QAutotune",
            23 => "QAcro",
            24 => "Thermal",
            25 => "Loiter to QLand",
            _ => "",
        },
        Vehicle::Rover => match mode {
            0 => "Manual",
            1 => "Acro",
            3 => "Steering",
            4 => "Hold",
            5 => "Loiter",
            6 => "Follow",
            7 => "Simple",
            8 => "Dock",
            9 => "Circle",
            10 => "Auto",
            11 => "RTL",
            12 => "SmartRTL",
            15 => "Guided",
            _ => "",
        },
        Vehicle::Unknown => "",
    };
    if name.is_empty() { "Unknown" } else { name }
}

/// An `ERR` record's subsystem (`Subsys`) by name.
pub fn subsystem_name(subsystem: u8) -> Option<&'static str> {
    Some(match subsystem {
        1 => "main",
        2 => "radio",
        3 => "compass",
        4 => "optical flow",
        5 => "radio failsafe",
        6 => "battery failsafe",
        7 => "GPS failsafe",
        8 => "GCS failsafe",
        9 => "fence failsafe",
        10 => "flight mode",
        11 => "GPS",
        12 => "crash check",
        13 => "flip",
        14 => "autotune",
        15 => "parachute",
        16 => "EKF check",
        17 => "EKF failsafe",
        18 => "barometer",
        19 => "CPU",
        20 => "ADS-B failsafe",
        21 => "terrain",
        22 => "navigation",
        23 => "terrain failsafe",
        24 => "EKF primary",
        25 => "thrust loss check",
        26 => "sensors failsafe",
        27 => "leak failsafe",
        28 => "pilot input",
        29 => "vibration failsafe",
        30 => "internal error",
        31 => "dead reckoning failsafe",
        _ => return None,
    })
}

/// Whether `subsystem` is one of the failsafes, whose codes are 1 (occurred) and 0
/// (resolved).
pub fn is_failsafe(subsystem: u8) -> bool {
    matches!(
        subsystem,
        5 | 6 | 7 | 8 | 9 | 17 | 20 | 23 | 26 | 27 | 29 | 31
    )
}

/// An `ERR` record in words: its subsystem and what its code says there
/// (`radio failsafe: occurred`, `EKF check: bad variance`, `flight mode: could not enter
/// mode 6`).
pub fn error_text(subsystem: u8, code: u8) -> String {
    let name = match subsystem_name(subsystem) {
        Some(n) => n.to_owned(),
        None => format!("subsystem {subsystem}"),
    };
    let what: String = match (subsystem, code) {
        (s, 1) if is_failsafe(s) => "occurred".into(),
        (s, 0) if is_failsafe(s) => "resolved".into(),
        (10, mode) => format!("could not enter mode {mode}"),
        (24, core) => format!("core {core} is now the primary"),
        (16, 0) => "variance cleared".into(),
        (_, 0) => "resolved".into(),
        (1, 1) => "INS delay".into(),
        (2, 2) => "late frame".into(),
        (11 | 18, 2) => "glitch".into(),
        (12, 1) => "crash".into(),
        (12, 2) => "loss of control".into(),
        (13, 2) => "abandoned".into(),
        (15, 2) => "too low".into(),
        (15, 3) => "landed".into(),
        (16, 2) => "bad variance".into(),
        (18, 3) => "bad depth".into(),
        (21, 2) => "missing terrain data".into(),
        (22, 2) => "failed to set destination".into(),
        (22, 3) => "restarted RTL".into(),
        (22, 4) => "failed circle init".into(),
        (22, 5) => "destination outside fence".into(),
        (22, 6) => "RTL missing rangefinder".into(),
        (25, 1) => "thrust loss".into(),
        (30, 1) => "internal errors detected".into(),
        (_, 1) => "failed to initialise".into(),
        (_, 4) => "unhealthy".into(),
        (_, c) => format!("code {c}"),
    };
    format!("{name}: {what}")
}

/// An `EV` record's event (`Id`) by name.
pub fn event_name(id: u8) -> Option<&'static str> {
    Some(match id {
        10 => "armed",
        11 => "disarmed",
        15 => "auto armed",
        17 => "land complete maybe",
        18 => "land complete",
        19 => "lost GPS",
        21 => "flip start",
        22 => "flip end",
        25 => "set home",
        28 => "not landed",
        38 => "save trim",
        41 => "fence enabled",
        42 => "fence disabled",
        49 => "parachute disabled",
        50 => "parachute enabled",
        51 => "parachute released",
        52 => "landing gear deployed",
        53 => "landing gear retracted",
        54 => "motors emergency stopped",
        55 => "motors emergency stop cleared",
        56 => "motors interlock disabled",
        57 => "motors interlock enabled",
        58 => "rotor run-up complete",
        59 => "rotor speed below critical",
        60 => "EKF altitude reset",
        61 => "landing cancelled by pilot",
        62 => "EKF yaw reset",
        67 => "GPS primary changed",
        85 => "EKF3 sources primary",
        86 => "EKF3 sources secondary",
        87 => "EKF3 sources tertiary",
        90 => "airspeed primary changed",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_and_modes_read_as_ardupilot_names_them() {
        assert_eq!(error_text(5, 1), "radio failsafe: occurred");
        assert_eq!(error_text(5, 0), "radio failsafe: resolved");
        assert_eq!(error_text(2, 2), "radio: late frame");
        assert_eq!(error_text(3, 0), "compass: resolved");
        assert_eq!(error_text(16, 2), "EKF check: bad variance");
        assert_eq!(error_text(10, 6), "flight mode: could not enter mode 6");
        assert_eq!(error_text(200, 9), "subsystem 200: code 9");
        assert_eq!(event_name(10), Some("armed"));
        assert_eq!(event_name(250), None);
        let copter = Vehicle::named_in("ArduCopter V4.6.0-dev (d1f2a3b4)");
        assert_eq!(copter, Some(Vehicle::Copter));
        assert_eq!(mode_name(Vehicle::Copter, 6), "RTL");
        assert_eq!(mode_name(Vehicle::Plane, 6), "FlyByWireB");
        assert_eq!(mode_name(Vehicle::Unknown, 6), "Unknown");
        assert_eq!(Vehicle::named_in("ChibiOS: 1234"), None);
    }
}
