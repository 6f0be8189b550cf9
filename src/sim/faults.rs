//! Flights with something going wrong in them, written with our own [`Writer`]: the topics a
//! flight's diagnostics read (`vehicle_status`, `battery_status`, `estimator_status`,
//! `vehicle_gps_position`, `actuator_outputs`, `input_rc`) in PX4's formats (no trailing
//! padding, as PX4 logs them) and rates, over a
//! quiet 40 s flight of a quad on a 4S pack, with one [`Fault`] 15 s in. What the detectors
//! ([`crate::diagnose`]) are held to, against Flight Review v2's, and what `ulog-recv sim
//! --synthetic --fault` streams.
//!
//! Values come from a seeded PRNG and plain IEEE arithmetic, so a flight's bytes are the same
//! everywhere.

use std::fmt;
use std::str::FromStr;

use crate::sim::synth::Rng;
use crate::ulog::message::msg_type;
use crate::ulog::{Message, WriteError, Writer};

/// Log start, µs since boot.
pub const START_US: u64 = 20_000_000;
/// Length of the flight, µs of log time.
pub const FLIGHT_US: u64 = 40_000_000;
/// When the fault begins, µs after the log's start.
pub const FAULT_AFTER_US: u64 = 15_000_000;
/// UTC at the vehicle's boot, µs since the epoch (the GPS's time).
const UTC_AT_BOOT_US: u64 = 1_790_000_000_000_000;
/// Armed from this long after the start ...
const ARM_AFTER_US: u64 = 2_000_000;
/// ... to this long after it.
const DISARM_AFTER_US: u64 = 38_000_000;

/// What goes wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Nothing.
    None,
    /// The pack sags to 3.2 V a cell for 5 s.
    BatterySag,
    /// The velocity innovation test ratio stays above 1 for this many ms.
    Innovation { ms: u32 },
    /// EPH and EPV jump and the satellites used halve, for 4 s.
    GpsJam,
    /// Motor 2's output falls to 0 and stays there.
    MotorDrop,
    /// Motor 1's output stays at 1950 (the top) for 3 s.
    MotorSaturated,
    /// `input_rc.rc_lost` for this many ms.
    RcLoss { ms: u32 },
}

impl Fault {
    /// Every fault the tests fly, by the name [`FromStr`] takes.
    pub const ALL: [Fault; 9] = [
        Fault::None,
        Fault::BatterySag,
        Fault::Innovation { ms: 2000 },
        Fault::Innovation { ms: 5000 },
        Fault::GpsJam,
        Fault::MotorDrop,
        Fault::MotorSaturated,
        Fault::RcLoss { ms: 600 },
        Fault::RcLoss { ms: 6000 },
    ];
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::None => f.write_str("none"),
            Fault::BatterySag => f.write_str("battery"),
            Fault::Innovation { ms } => write!(f, "ekf:{ms}"),
            Fault::GpsJam => f.write_str("gps"),
            Fault::MotorDrop => f.write_str("motor"),
            Fault::MotorSaturated => f.write_str("saturated"),
            Fault::RcLoss { ms } => write!(f, "rc:{ms}"),
        }
    }
}

/// Why a fault's name is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "'{0}' is not a fault: none, battery, ekf:MS, gps, motor, saturated or rc:MS (MS: how long)"
)]
pub struct UnknownFault(String);

impl FromStr for Fault {
    type Err = UnknownFault;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || UnknownFault(s.to_owned());
        let ms = |v: &str| v.parse::<u32>().ok().filter(|ms| *ms <= 20_000);
        Ok(match s.split_once(':') {
            None => match s {
                "none" => Fault::None,
                "battery" => Fault::BatterySag,
                "gps" => Fault::GpsJam,
                "motor" => Fault::MotorDrop,
                "saturated" => Fault::MotorSaturated,
                _ => return Err(bad()),
            },
            Some(("ekf", v)) => Fault::Innovation {
                ms: ms(v).ok_or_else(bad)?,
            },
            Some(("rc", v)) => Fault::RcLoss {
                ms: ms(v).ok_or_else(bad)?,
            },
            Some(_) => return Err(bad()),
        })
    }
}

/// What to fly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultFlight {
    pub fault: Fault,
    /// Armed from 2 s to 38 s; else never armed (the fault happens on the ground).
    pub armed: bool,
    pub seed: u64,
    /// `input_rc.rc_lost` logged as `uint8_t`, as no PX4 logs it (PX4's is a `bool`): the
    /// only type Flight Review v2's RC loss reads.
    pub rc_lost_as_uint8: bool,
}

const FORMATS: &[&str] = &[
    "vehicle_status:uint64_t timestamp;uint64_t armed_time;uint8_t arming_state;uint8_t nav_state;bool failsafe;",
    "battery_status:uint64_t timestamp;float voltage_v;float current_a;float discharged_mah;float remaining;uint8_t cell_count;bool connected;uint8_t warning;",
    "estimator_status:uint64_t timestamp;float vel_test_ratio;float pos_test_ratio;float hgt_test_ratio;float mag_test_ratio;",
    "vehicle_gps_position:uint64_t timestamp;uint64_t time_utc_usec;int32_t lat;int32_t lon;int32_t alt;float eph;float epv;float noise_per_ms;uint8_t fix_type;uint8_t satellites_used;",
    "actuator_outputs:uint64_t timestamp;uint32_t noutputs;float[16] output;",
    "input_rc:uint64_t timestamp;uint64_t timestamp_last_signal;int32_t rssi;uint16_t rc_lost_frame_count;uint16_t rc_total_frame_count;uint16_t[18] values;uint8_t channel_count;bool rc_failsafe;bool rc_lost;uint8_t input_source;",
];

/// Topics by message id (the order of [`FORMATS`]), each with its period in 10 ms ticks.
const TOPICS: [(&str, u64); 6] = [
    ("vehicle_status", 20),
    ("battery_status", 10),
    ("estimator_status", 10),
    ("vehicle_gps_position", 20),
    ("actuator_outputs", 2),
    ("input_rc", 10),
];

/// Generates the flight.
pub fn fault_flight(flight: FaultFlight) -> Vec<u8> {
    build(flight).expect("these messages are far below the size limits")
}

fn build(flight: FaultFlight) -> Result<Vec<u8>, WriteError> {
    let mut rng = Rng(flight.seed);
    let mut w = Writer::new();
    w.header(1, START_US);
    w.flag_bits([0; 8], [0; 8], [0; 3])?;
    for f in FORMATS {
        let f = match flight.rc_lost_as_uint8 {
            true => f.replace("bool rc_lost;", "uint8_t rc_lost;"),
            false => f.to_string(),
        };
        w.message(msg_type::FORMAT, &[f.as_bytes()])?;
    }
    w.info_string("sys_name", "PX4")?;
    w.info_string("ver_hw", "ULOG_RECV_FAULTS")?;
    w.info_string("ver_sw", "0123456789abcdef0123456789abcdef01234567")?;
    w.info_string("fault", &flight.fault.to_string())?;
    for (msg_id, (name, _)) in TOPICS.iter().enumerate() {
        w.write(&Message::AddLogged {
            multi_id: 0,
            msg_id: msg_id as u16,
            name,
        })?;
    }
    let fault_at = START_US + FAULT_AFTER_US;
    let during = |t: u64, ms: u32| t >= fault_at && t <= fault_at + u64::from(ms) * 1000;
    let mut t = START_US + 10_000;
    let mut tick = 1u64;
    while t < START_US + FLIGHT_US {
        let since_start = t - START_US;
        let armed = flight.armed && (ARM_AFTER_US..DISARM_AFTER_US).contains(&since_start);
        for (msg_id, &(_, period)) in TOPICS.iter().enumerate() {
            if !tick.is_multiple_of(period) {
                continue;
            }
            let mut p = Vec::with_capacity(80);
            p.extend_from_slice(&(msg_id as u16).to_le_bytes());
            p.extend_from_slice(&t.to_le_bytes());
            match msg_id {
                0 => {
                    let armed_time = if armed { START_US + ARM_AFTER_US } else { 0 };
                    p.extend_from_slice(&armed_time.to_le_bytes());
                    p.extend_from_slice(&[if armed { 2 } else { 1 }, 2, 0]);
                }
                1 => {
                    let sagging = flight.fault == Fault::BatterySag && during(t, 5000);
                    let v = match sagging {
                        true => 12.8 - 0.1 * rng.fraction(),
                        false => 16.4 - since_start as f32 * 2e-8 - 0.05 * rng.fraction(),
                    };
                    let current = if armed { 12.0 + rng.fraction() } else { 0.4 };
                    for x in [v, current, since_start as f32 * 1e-4, 0.9] {
                        p.extend_from_slice(&x.to_le_bytes());
                    }
                    p.extend_from_slice(&[4, 1, 0]);
                }
                2 => {
                    let vel = match flight.fault {
                        Fault::Innovation { ms } if during(t, ms) => 1.6,
                        _ => 0.3 * rng.fraction(),
                    };
                    for x in [vel, 0.2 * rng.fraction(), 0.4 * rng.fraction(), 0.1] {
                        p.extend_from_slice(&x.to_le_bytes());
                    }
                }
                3 => {
                    let jammed = flight.fault == Fault::GpsJam && during(t, 4000);
                    let (eph, epv, sats) = match jammed {
                        true => (8.0 + 4.0 * rng.fraction(), 15.0, 6u8),
                        false => (0.7 + 0.2 * rng.fraction(), 1.1 + 0.2 * rng.fraction(), 14u8),
                    };
                    p.extend_from_slice(&(UTC_AT_BOOT_US + t).to_le_bytes());
                    for x in [473_977_420i32, 85_455_940, 488_000] {
                        p.extend_from_slice(&x.to_le_bytes());
                    }
                    for x in [eph, epv, 120.0] {
                        p.extend_from_slice(&x.to_le_bytes());
                    }
                    p.extend_from_slice(&[3, sats]);
                }
                4 => {
                    p.extend_from_slice(&16u32.to_le_bytes());
                    for motor in 0..16 {
                        let out = match (motor, armed) {
                            (4.., _) => 0.0,
                            (_, false) => 1000.0,
                            (2, true) if flight.fault == Fault::MotorDrop && t >= fault_at => 0.0,
                            (1, true)
                                if flight.fault == Fault::MotorSaturated && during(t, 3000) =>
                            {
                                1950.0
                            }
                            (_, true) => 1450.0 + 100.0 * rng.fraction(),
                        };
                        p.extend_from_slice(&f32::to_le_bytes(out));
                    }
                }
                _ => {
                    let lost = matches!(flight.fault, Fault::RcLoss { ms } if during(t, ms));
                    let last_signal = if lost { fault_at } else { t };
                    p.extend_from_slice(&last_signal.to_le_bytes());
                    p.extend_from_slice(&(if lost { 0i32 } else { 100 }).to_le_bytes());
                    p.extend_from_slice(&[0; 4]);
                    for _ in 0..18 {
                        p.extend_from_slice(&1500u16.to_le_bytes());
                    }
                    p.extend_from_slice(&[if lost { 0 } else { 8 }, lost as u8, lost as u8, 3]);
                }
            }
            w.message(msg_type::DATA, &[&p])?;
        }
        t += 10_000;
        tick += 1;
    }
    Ok(w.take())
}
