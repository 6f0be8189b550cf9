//! The `flights` table: one row per flight, what a fleet asks of a flight before opening it
//! (how long, how high, how far, the battery's lowest, errors, failsafes, dropouts, where its
//! logs are).
//!
//! `FlightStats` follows the messages it needs as they pass on their way to the topic tables
//! (no second read of the log), by field name, so any version's formats do. A PX4 flight's
//! row comes from its topics, an ArduPilot flight's from its DataFlash messages
//! ([`super::dataflash`]):
//!
//! | column | PX4 | ArduPilot |
//! |---|---|---|
//! | `autopilot` | `px4` | `ardupilot` |
//! | `log_start_us`, `log_end_us`, `duration_s` | the log's header (or `--from`, if later), and its latest sample | its first and latest `TimeUS` |
//! | `start_utc`, `end_utc` | the same by the GPS's UTC reference (`utc_source` `gps`), else from the session's start by the receiver's clock (`receiver`) | the same (`GPS` week and ms at its first 3D fix) |
//! | `armed_s` | `vehicle_status.arming_state` (2: armed): log time from each sample that says armed to the next `vehicle_status` (to the log's last sample after the last one) | `ARM.ArmState`, else `EV` 10 and 11 (armed, disarmed), the same way |
//! | `failsafe` | `vehicle_status.failsafe` true in any sample | an `ERR` of a failsafe subsystem (radio 5, battery 6, GCS 8, EKF 17, ...) saying it occurred |
//! | `max_altitude_m` | `vehicle_global_position.alt` (AMSL) | `POS.Alt` |
//! | `max_height_m` | `-vehicle_local_position.z` (above the local origin) | `POS.RelHomeAlt` (above home) |
//! | `max_distance_m` | horizontal distance of `vehicle_local_position` (x, y) from the latest `home_position` (x, y) logged before it | of `POS` (Lat, Lng) from the latest home (`ORGN` type 1) logged before it |
//! | `min_battery_v` | `battery_status.voltage_v` above 0 (0: no battery read) | the first battery's `BAT.Volt` above 0 |
//! | `min_battery_remaining` | `battery_status.remaining` from 0 to 1 (-1: unknown) | its `BAT.RemPct` / 100 |
//! | `errors`, `warnings` | logged strings of syslog level 0 to 3, and 4 | `ERR` records of a code other than 0; null (its texts have no level) |
//! | `dropouts`, `dropout_ms` | the dropouts left in the exported stream (after a fill) | the receiver's dropout marks left in it |
//! | `ANALYZER_findings`, `ANALYZER_worst` | the flight diagnostics' findings of each analyzer (`motor_failure`, `gps_interference`, `battery_brownout`, `ekf_failure`, `rc_loss`) in the exported stream: how many, and the worst severity (null when none) | the same |
//!
//! A column whose topic the log lacks is null, never 0. The rest comes from the log's info
//! and parameters (PX4: `ver_*`, `sys_name`, `SYS_AUTOSTART`, `MAV_TYPE`, `MAV_SYS_ID`;
//! ArduPilot: `VER`'s firmware string and git hash, `SYSID_THISMAV`) and from what the
//! receiver knows of the session ([`FlightFacts`]: its manifest and uploads).

use std::sync::Arc;
use std::time::SystemTime;

use arrow_array::builder::{ListBuilder, StringBuilder};
use arrow_array::types::TimestampMicrosecondType;
use arrow_array::{
    ArrayRef, BooleanArray, Float64Array, Int32Array, Int64Array, PrimitiveArray, RecordBatch,
    StringArray,
};
use arrow_schema::{Field, Schema};

use super::columns::flight_fields;
use super::table::{FlightIdentity, TableError, flight_arrays};
use crate::autopilot::Autopilot;
use crate::diagnose::{AnalyzerId, Finding};
use crate::export::{FlightMetadata, release_text};
use crate::store::Manifest;
use crate::store::events::EventRecord;
use crate::ulog::Layout;
use crate::ulog::layout::Field as LeafField;
use crate::ulog::message::syslog_level;

/// The flights' table.
pub const FLIGHTS: &str = "flights";

/// PX4's `vehicle_status.arming_state` when armed (the same in every version).
const ARMED: f64 = 2.0;

/// What the receiver knows of a flight beyond its log: the session's manifest, and where its
/// logs were uploaded. Empty for a bare `.ulg`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FlightFacts {
    /// The vehicle's MAVLink system id.
    pub system_id: Option<u8>,
    /// The session's start by the receiver's clock.
    pub receiver_start: Option<SystemTime>,
    /// Dropouts as the stream was received, before any fill.
    pub dropouts_received: Option<u64>,
    /// Dropouts the fill could not fill.
    pub unfilled_dropouts: Option<u64>,
    /// Our events (`ulog-recv event`, triggers), for the `events` table.
    pub events: Vec<EventRecord>,
    /// The keys of the session's `.ulg` objects in the bucket (splits, amendments).
    pub ulg_keys: Vec<String>,
    /// The flight's page on Flight Review.
    pub flight_review_url: Option<String>,
}

impl FlightFacts {
    /// What a session's `manifest` says (no uploads: see [`FlightFacts::ulg_keys`]).
    pub fn from_manifest(manifest: &Manifest) -> Self {
        Self {
            system_id: Some(manifest.system_id),
            receiver_start: humantime::parse_rfc3339(&manifest.started_utc).ok(),
            dropouts_received: Some(manifest.all_splits().map(|s| s.summary.dropouts).sum()),
            unfilled_dropouts: Some(manifest.unfilled.len() as u64),
            events: manifest.events.clone(),
            ulg_keys: Vec::new(),
            flight_review_url: None,
        }
    }
}

/// A topic the flight's row is computed from, with its fields' places in a sample.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Watched {
    Status {
        arming_state: Option<LeafField>,
        failsafe: Option<LeafField>,
    },
    Battery {
        voltage: Option<LeafField>,
        remaining: Option<LeafField>,
    },
    GlobalPosition {
        alt: Option<LeafField>,
    },
    LocalPosition {
        x: Option<LeafField>,
        y: Option<LeafField>,
        z: Option<LeafField>,
    },
    Home {
        x: Option<LeafField>,
        y: Option<LeafField>,
    },
}

impl Watched {
    /// What of `layout`'s topic the flight's row needs, if anything.
    pub(crate) fn of(layout: &Layout) -> Option<Self> {
        let field = |name: &str| layout.field_index(name).map(|i| layout.fields[i]);
        Some(match layout.name.as_str() {
            "vehicle_status" => Watched::Status {
                arming_state: field("arming_state"),
                failsafe: field("failsafe"),
            },
            "battery_status" => Watched::Battery {
                voltage: field("voltage_v"),
                remaining: field("remaining"),
            },
            "vehicle_global_position" => Watched::GlobalPosition { alt: field("alt") },
            "vehicle_local_position" => Watched::LocalPosition {
                x: field("x"),
                y: field("y"),
                z: field("z"),
            },
            "home_position" => Watched::Home {
                x: field("x"),
                y: field("y"),
            },
            _ => return None,
        })
    }
}

/// The length of the horizontal vector (`dx`, `dy`).
pub(crate) fn planar_distance(dx: f64, dy: f64) -> f64 {
    // Not `hypot`: glibc's is newer than the packages' floor (2.34).
    (dx * dx + dy * dy).sqrt()
}

/// The value of `field` in a sample's `data`, as a double.
fn read(field: Option<LeafField>, data: &[u8]) -> Option<f64> {
    field?.value_in(data)
}

/// `a` and `b`'s larger (or smaller), `b` being a finite value.
fn keep(a: &mut Option<f64>, b: Option<f64>, larger: bool) {
    let Some(b) = b.filter(|b| b.is_finite()) else {
        return;
    };
    *a = Some(match *a {
        Some(a) if larger => a.max(b),
        Some(a) => a.min(b),
        None => b,
    });
}

/// The flight's row, accumulated sample by sample; see the module docs.
#[derive(Debug, Default)]
pub(crate) struct FlightStats {
    /// The earliest and latest sample.
    first_us: Option<u64>,
    last_us: Option<u64>,
    /// The last `vehicle_status`: its time and whether it said armed.
    status: Option<(u64, bool)>,
    armed_us: u64,
    failsafe: Option<bool>,
    max_altitude: Option<f64>,
    max_height: Option<f64>,
    max_distance: Option<f64>,
    home: Option<(f64, f64)>,
    min_voltage: Option<f64>,
    min_remaining: Option<f64>,
    errors: u64,
    warnings: u64,
    dropouts: u64,
    dropout_ms: u64,
}

impl FlightStats {
    /// A sample stamped `timestamp` (µs of log time), of a `watched` topic or not.
    pub(crate) fn sample(&mut self, watched: Option<&Watched>, timestamp: u64, data: &[u8]) {
        self.time(timestamp);
        let Some(watched) = watched else {
            return;
        };
        match *watched {
            Watched::Status {
                arming_state,
                failsafe,
            } => {
                self.armed(timestamp, read(arming_state, data) == Some(ARMED));
                if let Some(f) = read(failsafe, data) {
                    self.failsafe(f != 0.0);
                }
            }
            Watched::Battery { voltage, remaining } => {
                self.battery(read(voltage, data), read(remaining, data));
            }
            Watched::GlobalPosition { alt } => self.altitude(read(alt, data)),
            Watched::LocalPosition { x, y, z } => {
                self.height(read(z, data).map(|z| -z));
                if let (Some((hx, hy)), Some(x), Some(y)) =
                    (self.home, read(x, data), read(y, data))
                {
                    self.distance(Some(planar_distance(x - hx, y - hy)));
                }
            }
            Watched::Home { x, y } => {
                if let (Some(x), Some(y)) = (read(x, data), read(y, data))
                    && x.is_finite()
                    && y.is_finite()
                {
                    self.home = Some((x, y));
                }
            }
        }
    }

    /// Any message stamped `timestamp`: the flight's first and last.
    pub(crate) fn time(&mut self, timestamp: u64) {
        self.first_us = Some(self.first_us.map_or(timestamp, |f| f.min(timestamp)));
        self.last_us = Some(self.last_us.map_or(timestamp, |l| l.max(timestamp)));
    }

    /// The vehicle says at `timestamp` whether it is armed: the time since its last word
    /// counts as armed if that said so.
    pub(crate) fn armed(&mut self, timestamp: u64, armed: bool) {
        if let Some((then, true)) = self.status {
            self.armed_us += timestamp.saturating_sub(then);
        }
        self.status = Some((timestamp, armed));
    }

    /// Whether a failsafe is on (once on, the flight had one).
    pub(crate) fn failsafe(&mut self, on: bool) {
        self.failsafe = Some(self.failsafe.unwrap_or(false) || on);
    }

    /// A battery reading: its voltage (kept above 0: 0 is no reading) and remaining charge
    /// (0 to 1; anything else is unknown).
    pub(crate) fn battery(&mut self, voltage: Option<f64>, remaining: Option<f64>) {
        keep(&mut self.min_voltage, voltage.filter(|v| *v > 0.0), false);
        keep(
            &mut self.min_remaining,
            remaining.filter(|r| (0.0..=1.0).contains(r)),
            false,
        );
    }

    /// An altitude above mean sea level, m.
    pub(crate) fn altitude(&mut self, amsl: Option<f64>) {
        keep(&mut self.max_altitude, amsl, true);
    }

    /// A height above the local origin (or home), m.
    pub(crate) fn height(&mut self, height: Option<f64>) {
        keep(&mut self.max_height, height, true);
    }

    /// A horizontal distance from home, m.
    pub(crate) fn distance(&mut self, distance: Option<f64>) {
        keep(&mut self.max_distance, distance, true);
    }

    /// An error the vehicle logged.
    pub(crate) fn error(&mut self) {
        self.errors += 1;
    }

    /// A logged string of ULog level `ulog_level`.
    pub(crate) fn logged(&mut self, ulog_level: u8) {
        match syslog_level(ulog_level) {
            0..=3 => self.errors += 1,
            4 => self.warnings += 1,
            _ => {}
        }
    }

    /// A dropout of `duration_ms`.
    pub(crate) fn dropout(&mut self, duration_ms: u16) {
        self.dropouts += 1;
        self.dropout_ms += u64::from(duration_ms);
    }

    /// Log time armed, µs; `None` without `vehicle_status`.
    fn armed_us(&self) -> Option<u64> {
        let (then, armed) = self.status?;
        let tail = match (armed, self.last_us) {
            (true, Some(last)) => last.saturating_sub(then),
            _ => 0,
        };
        Some(self.armed_us + tail)
    }
}

/// A one-row table being built, column by column (every value column nullable: a flight
/// without the topic has none).
struct Row {
    fields: Vec<Field>,
    arrays: Vec<ArrayRef>,
}

impl Row {
    fn push(&mut self, name: &str, array: ArrayRef) {
        self.fields
            .push(Field::new(name, array.data_type().clone(), true));
        self.arrays.push(array);
    }

    fn text(&mut self, name: &str, v: Option<String>) {
        self.push(name, Arc::new(StringArray::from(vec![v])));
    }

    fn float(&mut self, name: &str, v: Option<f64>) {
        self.push(name, Arc::new(Float64Array::from(vec![v])));
    }

    fn int32(&mut self, name: &str, v: Option<i32>) {
        self.push(name, Arc::new(Int32Array::from(vec![v])));
    }

    fn int64(&mut self, name: &str, v: Option<i64>) {
        self.push(name, Arc::new(Int64Array::from(vec![v])));
    }

    fn time(&mut self, name: &str, v: Option<i64>) {
        let utc = PrimitiveArray::<TimestampMicrosecondType>::from(vec![v]).with_timezone("UTC");
        self.push(name, Arc::new(utc));
    }
}

/// The `flights` table's one row for the flight `id`, of `autopilot`'s log.
pub(crate) fn flights(
    autopilot: Autopilot,
    id: &FlightIdentity,
    stats: &FlightStats,
    findings: &[Finding],
    metadata: &FlightMetadata,
    facts: &FlightFacts,
    from_us: Option<u64>,
) -> Result<RecordBatch, TableError> {
    let info = |key: &str| metadata.info.get(key).cloned();
    let param = |key: &str| {
        let value = metadata.initial_parameters.get(key)?;
        value.parse::<f64>().ok().map(|v| v as i32)
    };
    let start_us = match (id.log_start_us, from_us) {
        (Some(header), from) => Some(header.max(from.unwrap_or(0))),
        (None, _) => stats.first_us,
    };
    // Start and end in UTC: by the GPS reference, else by the receiver's clock.
    let from_gps = id.utc_offset_us.zip(start_us);
    let from_receiver = facts.receiver_start.map(|t| {
        let us = t
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as i64);
        (us, "receiver")
    });
    let start = from_gps
        .map(|(offset, first)| (offset + first as i64, "gps"))
        .or(from_receiver);
    let duration_us = start_us
        .zip(stats.last_us)
        .map(|(s, l)| l.saturating_sub(s));
    let end = start.zip(duration_us).map(|((s, _), d)| s + d as i64);
    let mav_type = param("MAV_TYPE");
    let vehicle_type = mav_type.and_then(|t| {
        use num_traits::FromPrimitive;
        let ty = mavlink::dialects::ardupilotmega::MavType::from_i32(t)?;
        Some(
            format!("{ty:?}")
                .trim_start_matches("MAV_TYPE_")
                .to_lowercase(),
        )
    });
    let system_id = facts
        .system_id
        .map(i32::from)
        .or_else(|| param("MAV_SYS_ID"))
        .or_else(|| param("SYSID_THISMAV"));
    let release = match autopilot {
        Autopilot::Px4 => info("ver_sw_release")
            .and_then(|r| r.parse::<u32>().ok())
            .map(release_text),
        // ArduPilot's version is text already (`V4.6.0-dev`).
        Autopilot::ArduPilot => info("ver_sw_release"),
    };

    let seconds = |us: Option<u64>| us.map(|us| us as f64 / 1e6);
    let us = |v: Option<u64>| v.map(|v| v as i64);
    let count = |n: u64| Some(n as i64);

    let mut row = Row {
        fields: flight_fields(),
        arrays: flight_arrays(id, 1),
    };
    row.text("autopilot", Some(autopilot.name().to_owned()));
    row.int32("system_id", system_id);
    row.time("start_utc", start.map(|s| s.0));
    row.time("end_utc", end);
    row.text("utc_source", start.map(|s| s.1.to_owned()));
    row.int64("log_start_us", us(start_us));
    row.int64("log_end_us", us(stats.last_us));
    row.float("duration_s", seconds(duration_us));
    row.text("sys_name", info("sys_name"));
    row.text("ver_hw", info("ver_hw"));
    row.text("ver_sw", info("ver_sw"));
    row.text("ver_sw_release", release);
    row.int32("airframe", param("SYS_AUTOSTART"));
    row.int32("mav_type", mav_type);
    row.text("vehicle_type", vehicle_type);
    row.float("armed_s", seconds(stats.armed_us()));
    row.push(
        "failsafe",
        Arc::new(BooleanArray::from(vec![stats.failsafe])),
    );
    row.float("max_altitude_m", stats.max_altitude);
    row.float("max_height_m", stats.max_height);
    row.float("max_distance_m", stats.max_distance);
    row.float("min_battery_v", stats.min_voltage);
    row.float("min_battery_remaining", stats.min_remaining);
    row.int64("errors", count(stats.errors));
    // ArduPilot's texts carry no severity: its warnings are unknown.
    let warnings = match autopilot {
        Autopilot::Px4 => count(stats.warnings),
        Autopilot::ArduPilot => None,
    };
    row.int64("warnings", warnings);
    row.int64("dropouts", count(stats.dropouts));
    row.int64("dropout_ms", count(stats.dropout_ms));
    row.int64("dropouts_received", facts.dropouts_received.and_then(count));
    row.int64("unfilled_dropouts", facts.unfilled_dropouts.and_then(count));
    let mut keys = ListBuilder::new(StringBuilder::new());
    keys.append_value(facts.ulg_keys.iter().map(Some));
    row.push("ulg_keys", Arc::new(keys.finish()));
    row.text("flight_review_url", facts.flight_review_url.clone());
    for analyzer in AnalyzerId::ALL {
        let of = || findings.iter().filter(move |f| f.id == analyzer);
        row.int64(&format!("{analyzer}_findings"), count(of().count() as u64));
        let worst = of().map(|f| f.severity).max();
        row.text(&format!("{analyzer}_worst"), worst.map(|s| s.to_string()));
    }
    let Row { fields, arrays } = row;
    Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)?)
}
