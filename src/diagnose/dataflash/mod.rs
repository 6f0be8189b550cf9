//! Flight diagnostics on an ArduPilot log (DataFlash), sans-IO: its messages fed to the same
//! five analyzers as PX4's topics ([`Detectors`]), with the vehicle's own word for what
//! happened, its `ERR` and `EV` records ([`VehicleRecord`]), kept beside the findings.
//!
//! What each analyzer reads (PX4's topic and field in brackets):
//! - armed or not: `ARM.ArmState`, and `EV` 10 and 11 (armed, disarmed) in logs without
//!   `ARM` (`vehicle_status.arming_state`);
//! - the flight mode a motor finding names: `MODE.Mode`, named for the vehicle the log's
//!   startup text names (`vehicle_status.nav_state`);
//! - battery brownout: the first battery's (`Inst` 0) `BAT.Volt` and `BAT.Curr`
//!   (`battery_status`);
//! - EKF failure: the primary core's (`C` = `PI`) velocity, position and height test ratios
//!   `SV`, `SP`, `SH` of `XKF4` (EKF3) or `NKF4` (EKF2) (`estimator_status`);
//! - GPS interference: the first receiver's `GPA.HAcc` and `GPA.VAcc` with `GPS.NSats`, from
//!   its first 3D fix on: ArduPilot logs the receiver before it has one
//!   (`vehicle_gps_position`'s `eph`, `epv`, `satellites_used`);
//! - motor failure: the PWM of `RCOU.C1` to `C14` (`actuator_outputs`);
//! - RC loss: the failsafe bit of `RCI2.Flags` (`input_rc.rc_lost`).
//!
//! Values are read as pymavlink reads them ([`crate::dataflash::values`]). A dropout mark
//! (the receiver's own `MSG`) closes the analyzers' windows as a ULog dropout does.

pub mod names;

use super::analyzers::{ARMED, STANDBY};
use super::{AnalyzerId, Detectors, Finding, Selection};
use crate::dataflash::format::{FMT_TYPE, Format, field_size, text, time_us};
use crate::dataflash::framer::Framer;
use crate::dataflash::gaps::dropout_ms;
use crate::dataflash::values::value;
use names::Vehicle;

/// What the vehicle itself logged of a moment: an `ERR` (a subsystem's error or failsafe,
/// and its end) or an `EV` (an event: armed, landed, ...).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct VehicleRecord {
    /// Log time, µs.
    pub timestamp_us: u64,
    /// `ERR` or `EV`.
    pub record: String,
    /// An `ERR`'s `Subsys` and `ECode`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub subsystem: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub code: Option<u8>,
    /// An `EV`'s `Id`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub id: Option<u8>,
    /// In words: `radio failsafe: occurred`, `armed`.
    pub text: String,
}

/// How far from a finding a record of the vehicle's is of the same moment: an `ERR` this
/// close to the finding's window, an `EV` this close to its start.
pub const BESIDE_US: u64 = 2_000_000;

impl VehicleRecord {
    /// Whether the record is of the same moment as `finding` (see [`BESIDE_US`]).
    pub fn is_beside(&self, finding: &Finding) -> bool {
        let from = finding.timestamp_us.saturating_sub(BESIDE_US);
        let to = match self.record.as_str() {
            "ERR" => finding.made_at_us(),
            _ => finding.timestamp_us,
        }
        .saturating_add(BESIDE_US);
        (from..=to).contains(&self.timestamp_us)
    }
}

/// A field of a type: its byte offset in the message and its character.
type At = Option<(usize, u8)>;

/// The fields of one message type the diagnostics read, found by label at its first message.
#[derive(Debug, Clone)]
enum Read {
    Unread,
    Arm {
        state: At,
    },
    Mode {
        mode: At,
    },
    Battery {
        instance: At,
        volt: At,
        curr: At,
    },
    Ekf {
        core: At,
        primary: At,
        /// Velocity, position, height.
        ratios: [At; 3],
    },
    Gps {
        instance: At,
        status: At,
        satellites: At,
    },
    Accuracy {
        instance: At,
        horizontal: At,
        vertical: At,
    },
    Outputs {
        channels: Vec<(usize, u8)>,
    },
    RcFlags {
        flags: At,
    },
    Error {
        subsystem: At,
        code: At,
    },
    Event {
        id: At,
    },
    Text {
        message: At,
    },
}

/// `RCI2.Flags`: the vehicle is in RC failsafe.
const RC_IN_FAILSAFE: u64 = 2;
/// `GPS.Status` of a 3D fix or better.
const GPS_FIX_3D: u64 = 3;
/// `RCOU`'s channels: `C1` to `C14`.
const OUTPUT_CHANNELS: usize = 14;

impl Read {
    fn of(f: &Format) -> Read {
        let at = |label: &str| f.field(label);
        match f.name.as_str() {
            "ARM" => Read::Arm {
                state: at("ArmState"),
            },
            "MODE" => Read::Mode { mode: at("Mode") },
            "BAT" => Read::Battery {
                instance: at("Inst").or_else(|| at("Instance")),
                volt: at("Volt"),
                curr: at("Curr"),
            },
            "XKF4" | "NKF4" => Read::Ekf {
                core: at("C"),
                primary: at("PI"),
                ratios: [at("SV"), at("SP"), at("SH")],
            },
            "GPS" => Read::Gps {
                instance: at("I"),
                status: at("Status"),
                satellites: at("NSats"),
            },
            "GPA" => Read::Accuracy {
                instance: at("I"),
                horizontal: at("HAcc"),
                vertical: at("VAcc"),
            },
            "RCOU" => Read::Outputs {
                channels: (1..=OUTPUT_CHANNELS)
                    .map_while(|c| at(&format!("C{c}")))
                    .collect(),
            },
            "RCI2" => Read::RcFlags { flags: at("Flags") },
            "ERR" => Read::Error {
                subsystem: at("Subsys"),
                code: at("ECode"),
            },
            "EV" => Read::Event { id: at("Id") },
            "MSG" => Read::Text {
                message: at("Message"),
            },
            _ => Read::Unread,
        }
    }
}

/// A field's value as a number.
fn number(m: &[u8], at: At) -> Option<f64> {
    let (offset, c) = at?;
    value(c, m.get(offset..offset + field_size(c)?)?)?.as_f64()
}

/// A field's value as an unsigned integer (a negative or fractional one is not).
fn unsigned(m: &[u8], at: At) -> Option<u64> {
    number(m, at)
        .filter(|v| *v >= 0.0 && v.fract() == 0.0)
        .map(|v| v as u64)
}

/// Whether the field's value is `instance` (a type without the field has only instance 0).
fn is_instance(m: &[u8], at: At, instance: u64) -> bool {
    match at {
        None => instance == 0,
        Some(_) => unsigned(m, at) == Some(instance),
    }
}

/// Follows a DataFlash log's whole messages, in the log's order, for the diagnostics (see
/// the module docs).
#[derive(Debug)]
pub struct BinFollower {
    detectors: Detectors,
    /// Per type id: what is read of it, found at its first message (again after its FMT).
    reads: Vec<Option<Read>>,
    vehicle: Option<Vehicle>,
    /// The first receiver's satellites at its last `GPS`, and whether it has had a 3D fix.
    satellites: Option<u8>,
    gps_fixed: bool,
    /// The latest log time seen, µs.
    log_time: u64,
}

impl BinFollower {
    pub fn new(selection: Selection) -> Self {
        Self {
            detectors: Detectors::new(selection),
            reads: vec![None; 256],
            vehicle: None,
            satellites: None,
            gps_fixed: false,
            log_time: 0,
        }
    }

    /// The largest log time seen so far, µs.
    pub fn log_time(&self) -> u64 {
        self.log_time
    }

    pub fn detectors(&self) -> &Detectors {
        &self.detectors
    }

    pub fn detectors_mut(&mut self) -> &mut Detectors {
        &mut self.detectors
    }

    pub fn into_detectors(self) -> Detectors {
        self.detectors
    }

    /// The log's next whole message `m` (its header included), of format `f`.
    pub fn message(&mut self, m: &[u8], f: &Format) {
        if f.type_id == FMT_TYPE {
            // A type defined (again): what is read of it is found again.
            if let Some(&t) = m.get(3) {
                self.reads[usize::from(t)] = None;
            }
            return;
        }
        let Some(ts) = time_us(f, m) else {
            return;
        };
        self.log_time = self.log_time.max(ts);
        let read = self.reads[usize::from(f.type_id)].get_or_insert_with(|| Read::of(f));
        let d = &mut self.detectors;
        let sel = d.selection;
        let out = &mut d.findings;
        match read {
            Read::Unread => {}
            Read::Arm { state } => {
                if let Some(s) = unsigned(m, *state) {
                    d.arming(ts, s != 0);
                }
            }
            Read::Event { id } => {
                let Some(id) = unsigned(m, *id).and_then(|i| u8::try_from(i).ok()) else {
                    return;
                };
                match id {
                    10 => d.arming(ts, true),
                    11 => d.arming(ts, false),
                    _ => {}
                }
                d.vehicle_records.push(VehicleRecord {
                    timestamp_us: ts,
                    record: "EV".into(),
                    subsystem: None,
                    code: None,
                    id: Some(id),
                    text: names::event_name(id)
                        .map_or_else(|| format!("event {id}"), str::to_owned),
                });
            }
            Read::Error { subsystem, code } => {
                let byte = |at| unsigned(m, at).and_then(|v| u8::try_from(v).ok());
                let (Some(s), Some(c)) = (byte(*subsystem), byte(*code)) else {
                    return;
                };
                d.vehicle_records.push(VehicleRecord {
                    timestamp_us: ts,
                    record: "ERR".into(),
                    subsystem: Some(s),
                    code: Some(c),
                    id: None,
                    text: names::error_text(s, c),
                });
            }
            Read::Text { message } => {
                if let Some(mark) = dropout_ms(m, f) {
                    d.dropout(ts, mark.unwrap_or(0) * 1000);
                } else if self.vehicle.is_none()
                    && let Some((offset, c)) = *message
                    && let Some(words) = m.get(offset..offset + field_size(c).unwrap_or(0))
                {
                    self.vehicle = Vehicle::named_in(&text(words));
                }
            }
            Read::Mode { mode } => {
                if let Some(n) = unsigned(m, *mode).and_then(|v| u8::try_from(v).ok()) {
                    let vehicle = self.vehicle.unwrap_or_default();
                    d.motors.mode_named(names::mode_name(vehicle, n));
                }
            }
            Read::Battery {
                instance,
                volt,
                curr,
            } if sel.contains(AnalyzerId::BatteryBrownout) && is_instance(m, *instance, 0) => {
                let volt = number(m, *volt).map(|v| v as f32);
                let curr = || number(m, *curr).map(|v| v as f32);
                d.battery.sample(ts, volt, curr, out);
            }
            Read::Ekf {
                core,
                primary,
                ratios,
            } if sel.contains(AnalyzerId::EkfFailure) => {
                let primary = unsigned(m, *primary).unwrap_or(0);
                if is_instance(m, *core, primary) {
                    let ratios = ratios.map(|r| number(m, r).map(|v| v as f32));
                    d.ekf.sample(ts, ratios, out);
                }
            }
            Read::Gps {
                instance,
                status,
                satellites,
            } if is_instance(m, *instance, 0) => {
                self.gps_fixed |= unsigned(m, *status).is_some_and(|s| s >= GPS_FIX_3D);
                self.satellites = unsigned(m, *satellites).map(|s| s.min(255) as u8);
            }
            Read::Accuracy {
                instance,
                horizontal,
                vertical,
            } if sel.contains(AnalyzerId::GpsInterference)
                && self.gps_fixed
                && is_instance(m, *instance, 0) =>
            {
                let eph = number(m, *horizontal).map(|v| v as f32);
                let epv = number(m, *vertical).map(|v| v as f32);
                d.gps.sample(ts, eph, epv, self.satellites, out);
            }
            Read::Outputs { channels } if sel.contains(AnalyzerId::MotorFailure) => {
                let pwm = channels
                    .iter()
                    .map(|&at| number(m, Some(at)).map(|v| v as f32));
                d.motors.sample(ts, pwm, out);
            }
            Read::RcFlags { flags } if sel.contains(AnalyzerId::RcLoss) => {
                if let Some(flags) = unsigned(m, *flags) {
                    let lost = u8::from(flags & RC_IN_FAILSAFE != 0);
                    d.rc.sample(ts, Some(lost), out);
                }
            }
            _ => {}
        }
    }
}

impl Detectors {
    /// The vehicle is armed (or disarmed) at `ts`: every analyzer that cares is told.
    fn arming(&mut self, ts: u64, armed: bool) {
        let state = Some(if armed { ARMED } else { STANDBY });
        if self.selection.contains(AnalyzerId::BatteryBrownout) {
            self.battery.status(state);
        }
        if self.selection.contains(AnalyzerId::MotorFailure) {
            self.motors.status(state, None);
        }
        if self.selection.contains(AnalyzerId::RcLoss) {
            self.rc.status(ts, state, &mut self.findings);
        }
    }
}

/// The diagnostics over a DataFlash log's bytes (a `.bin`, or an ArduPilot session's splits
/// in order): push the bytes in pieces of any size, then take the detectors.
#[derive(Debug)]
pub struct BinDiagnosis {
    framer: Framer,
    follower: BinFollower,
}

impl BinDiagnosis {
    pub fn new(selection: Selection) -> Self {
        Self {
            framer: Framer::new(),
            follower: BinFollower::new(selection),
        }
    }

    /// The log's next bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        let follower = &mut self.follower;
        self.framer.push(bytes, |m, f| follower.message(m, f));
    }

    /// The follower, with what it found so far.
    pub fn follower(&self) -> &BinFollower {
        &self.follower
    }

    pub fn follower_mut(&mut self) -> &mut BinFollower {
        &mut self.follower
    }

    /// The detectors, with what they found and what the vehicle said.
    pub fn finish(mut self) -> Detectors {
        let follower = &mut self.follower;
        self.framer.finish(|m, f| follower.message(m, f));
        self.follower.into_detectors()
    }
}

#[cfg(test)]
mod tests;
