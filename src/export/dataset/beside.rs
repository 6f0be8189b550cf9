//! The tables beside the topics, in the same layout and with the same flight columns:
//!
//! - `log_messages`: every string PX4 logged ('L', and tagged 'C'): `timestamp`,
//!   `timestamp_utc`, `level` (syslog's 0 emergency … 7 debug), `tag` (null when untagged),
//!   `message`; sorted by timestamp.
//! - `params`: the parameters the log starts with (`timestamp` null, `changed` false), then
//!   each change with its log time (`changed` true): `name`, `value` (a double: PX4's
//!   parameters are int32 or float, both exact in it).
//! - `dropouts`: each dropout left in the stream (after a fill): `timestamp`, `duration_ms`.
//! - `events`: the receiver's events (`ulog-recv event`, triggers, diagnostics): `name`,
//!   `source`, `detail`.
//! - `diagnostics` ([`diagnostics`]): what the flight diagnostics find in the exported
//!   flight, a row per finding, its evidence as columns.
//! - `flights` ([`super::flights`]): one row per flight.

use std::sync::Arc;

use arrow_array::builder::{BooleanBuilder, Float64Builder, Int32Builder, Int64Builder};
use arrow_array::{ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};

use super::columns::{IDENTITY, flight_fields, utc_field};
use super::table::{FlightIdentity, TableError, flight_arrays, utc_array};
use crate::diagnose::{Evidence, Finding};
use crate::export::FlightMetadata;
use crate::store::events::EventRecord;

/// The logged strings' table.
pub const LOG_MESSAGES: &str = "log_messages";
/// The parameters' table.
pub const PARAMS: &str = "params";

/// One logged string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRow {
    pub timestamp: u64,
    /// Its syslog level (0 emergency … 7 debug); `None` where the log says none
    /// (ArduPilot's texts).
    pub level: Option<u8>,
    pub tag: Option<u16>,
    pub message: String,
}

/// The `log_messages` table of the flight `id` (rows sorted by timestamp, log order kept
/// among equal ones).
pub fn log_messages(id: &FlightIdentity, rows: &mut [LogRow]) -> Result<RecordBatch, TableError> {
    rows.sort_by_key(|r| r.timestamp);
    let mut fields = flight_fields();
    fields.extend([
        Field::new(IDENTITY[4], DataType::Int64, false),
        utc_field(),
        Field::new("level", DataType::Int32, true),
        Field::new("tag", DataType::Int32, true),
        Field::new("message", DataType::Utf8, false),
    ]);
    let mut arrays = flight_arrays(id, rows.len());
    let mut timestamps = Int64Builder::with_capacity(rows.len());
    let mut levels = Int32Builder::with_capacity(rows.len());
    let mut tags = Int32Builder::with_capacity(rows.len());
    for row in rows.iter() {
        timestamps.append_value(row.timestamp as i64);
        levels.append_option(row.level.map(i32::from));
        tags.append_option(row.tag.map(i32::from));
    }
    arrays.push(Arc::new(timestamps.finish()));
    arrays.push(utc_array(id, rows.iter().map(|r| Some(r.timestamp))));
    arrays.push(Arc::new(levels.finish()));
    arrays.push(Arc::new(tags.finish()));
    arrays.push(Arc::new(StringArray::from_iter_values(
        rows.iter().map(|r| &r.message),
    )));
    Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)?)
}

/// The `params` table of the flight `id`: the initial parameters by name, then the changes
/// by time.
pub fn params(id: &FlightIdentity, metadata: &FlightMetadata) -> Result<RecordBatch, TableError> {
    let initial =
        (metadata.initial_parameters.iter()).map(|(name, value)| (None, name.as_str(), value));
    let mut changes: Vec<(Option<u64>, &str, &String)> = (metadata.changed_parameters.iter())
        .filter_map(|(key, value)| {
            let (name, time) = key.rsplit_once('@')?;
            Some((Some(time.parse().ok()?), name, value))
        })
        .collect();
    changes.sort_by_key(|(time, _, _)| *time);
    let rows: Vec<_> = initial.chain(changes).collect();
    let mut fields = flight_fields();
    fields.extend([
        Field::new(IDENTITY[4], DataType::Int64, true),
        utc_field(),
        Field::new("name", DataType::Utf8, false),
        Field::new("value", DataType::Float64, true),
        Field::new("changed", DataType::Boolean, false),
    ]);
    let mut arrays = flight_arrays(id, rows.len());
    let mut timestamps = Int64Builder::with_capacity(rows.len());
    let mut values = Float64Builder::with_capacity(rows.len());
    let mut changed = BooleanBuilder::with_capacity(rows.len());
    for (time, _, value) in &rows {
        timestamps.append_option(time.map(|t| t as i64));
        values.append_option(value.parse::<f64>().ok());
        changed.append_value(time.is_some());
    }
    let names: ArrayRef = Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.1)));
    arrays.push(Arc::new(timestamps.finish()));
    arrays.push(utc_array(id, rows.iter().map(|r| r.0)));
    arrays.push(names);
    arrays.push(Arc::new(values.finish()));
    arrays.push(Arc::new(changed.finish()));
    Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)?)
}

/// The dropouts' table.
pub const DROPOUTS: &str = "dropouts";
/// Our events' table.
pub const EVENTS: &str = "events";
/// The flight diagnostics' table.
pub const DIAGNOSTICS: &str = "diagnostics";

/// The `dropouts` table of the flight `id`: each dropout left in the stream, at the log time
/// of the sample before it, with its length (`duration_ms`, as the logger measured it).
pub fn dropouts(id: &FlightIdentity, rows: &[(u64, u16)]) -> Result<RecordBatch, TableError> {
    let mut fields = flight_fields();
    fields.extend([
        Field::new(IDENTITY[4], DataType::Int64, false),
        utc_field(),
        Field::new("duration_ms", DataType::Int32, false),
    ]);
    let mut arrays = flight_arrays(id, rows.len());
    arrays.push(Arc::new(Int64Array::from_iter_values(
        rows.iter().map(|r| r.0 as i64),
    )));
    arrays.push(utc_array(id, rows.iter().map(|r| Some(r.0))));
    arrays.push(Arc::new(Int32Array::from_iter_values(
        rows.iter().map(|r| i32::from(r.1)),
    )));
    Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)?)
}

/// The `events` table of the flight `id`: the receiver's events (asked for, or triggered by
/// a logged string or a field), by log time: `name`, `source` (`request`, `logged_text`,
/// `field`), `detail` (what fired it; null when nothing did).
pub fn events(id: &FlightIdentity, events: &[EventRecord]) -> Result<RecordBatch, TableError> {
    let mut rows: Vec<&EventRecord> = events.iter().collect();
    rows.sort_by_key(|e| e.at_us);
    let mut fields = flight_fields();
    fields.extend([
        Field::new(IDENTITY[4], DataType::Int64, false),
        utc_field(),
        Field::new("name", DataType::Utf8, false),
        Field::new("source", DataType::Utf8, false),
        Field::new("detail", DataType::Utf8, true),
    ]);
    let source = |e: &EventRecord| match serde_json::to_value(e.source) {
        Ok(serde_json::Value::String(s)) => s,
        _ => format!("{:?}", e.source),
    };
    let mut arrays = flight_arrays(id, rows.len());
    arrays.push(Arc::new(Int64Array::from_iter_values(
        rows.iter().map(|e| e.at_us as i64),
    )));
    arrays.push(utc_array(id, rows.iter().map(|e| Some(e.at_us))));
    arrays.push(Arc::new(StringArray::from_iter_values(
        rows.iter().map(|e| &e.name),
    )));
    arrays.push(Arc::new(StringArray::from_iter_values(
        rows.iter().map(|e| source(e)),
    )));
    arrays.push(Arc::new(StringArray::from_iter(
        rows.iter()
            .map(|e| Some(e.detail.as_str()).filter(|d| !d.is_empty())),
    )));
    Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)?)
}

/// The `diagnostics` table of the flight `id`: one row per finding of the flight diagnostics
/// ([`crate::diagnose`]), by start: `timestamp` (its start), `timestamp_utc`, `end_timestamp`
/// (null for a point in time), `analyzer`, `severity` (`warning`, `critical`), `summary`,
/// then the evidence as columns, each null where its analyzer has no such evidence:
/// `motor_index`, `pwm_value`, `failure_mode`, `flight_mode` (motor failure); `eph_m`,
/// `epv_m`, `num_satellites` (GPS interference); `voltage_v`, `critical_threshold_v`,
/// `current_a` (battery brownout); `innovation`, `test_ratio`, `threshold` (EKF failure);
/// `last_signal_timestamp`, `signal_lost_ms` (RC loss); last `vehicle_said`: what the vehicle
/// itself logged of the same moment (an ArduPilot's `ERR` and `EV` records, in words; null
/// for PX4, and where it logged nothing).
pub fn diagnostics(
    id: &FlightIdentity,
    findings: &[Finding],
    vehicle_said: &dyn Fn(&Finding) -> Option<String>,
) -> Result<RecordBatch, TableError> {
    let mut rows: Vec<&Finding> = findings.iter().collect();
    rows.sort_by_key(|f| f.timestamp_us);
    let n = rows.len();
    let mut fields = flight_fields();
    fields.extend([
        Field::new(IDENTITY[4], DataType::Int64, false),
        utc_field(),
        Field::new("end_timestamp", DataType::Int64, true),
        Field::new("analyzer", DataType::Utf8, false),
        Field::new("severity", DataType::Utf8, false),
        Field::new("summary", DataType::Utf8, false),
    ]);
    let mut arrays = flight_arrays(id, n);
    arrays.push(Arc::new(Int64Array::from_iter_values(
        rows.iter().map(|f| f.timestamp_us as i64),
    )));
    arrays.push(utc_array(id, rows.iter().map(|f| Some(f.timestamp_us))));
    arrays.push(Arc::new(Int64Array::from_iter(
        rows.iter().map(|f| f.end_timestamp_us.map(|t| t as i64)),
    )));
    arrays.push(Arc::new(StringArray::from_iter_values(
        rows.iter().map(|f| f.id.as_str()),
    )));
    arrays.push(Arc::new(StringArray::from_iter_values(
        rows.iter().map(|f| f.severity.as_str()),
    )));
    arrays.push(Arc::new(StringArray::from_iter_values(
        rows.iter().map(|f| &f.summary),
    )));
    // The evidence, a column per field of every analyzer's.
    let mut ints: [(&str, Int64Builder); 4] = [
        ("motor_index", Int64Builder::with_capacity(n)),
        ("num_satellites", Int64Builder::with_capacity(n)),
        ("last_signal_timestamp", Int64Builder::with_capacity(n)),
        ("signal_lost_ms", Int64Builder::with_capacity(n)),
    ];
    let mut floats: [(&str, Float64Builder); 8] = [
        ("pwm_value", Float64Builder::with_capacity(n)),
        ("eph_m", Float64Builder::with_capacity(n)),
        ("epv_m", Float64Builder::with_capacity(n)),
        ("voltage_v", Float64Builder::with_capacity(n)),
        ("critical_threshold_v", Float64Builder::with_capacity(n)),
        ("current_a", Float64Builder::with_capacity(n)),
        ("test_ratio", Float64Builder::with_capacity(n)),
        ("threshold", Float64Builder::with_capacity(n)),
    ];
    let mut texts: [(&str, Vec<Option<String>>); 3] = [
        ("failure_mode", Vec::with_capacity(n)),
        ("flight_mode", Vec::with_capacity(n)),
        ("innovation", Vec::with_capacity(n)),
    ];
    for f in &rows {
        let mut i: [Option<i64>; 4] = Default::default();
        let mut x: [Option<f32>; 8] = Default::default();
        let mut t: [Option<&str>; 3] = Default::default();
        match &f.evidence {
            Evidence::MotorFailure {
                motor_index,
                pwm_value,
                failure_mode,
                flight_mode,
            } => {
                i[0] = Some(i64::from(*motor_index));
                x[0] = Some(*pwm_value);
                t[0] = Some(failure_mode);
                t[1] = Some(flight_mode);
            }
            Evidence::GpsInterference {
                eph_m,
                epv_m,
                num_satellites,
                ..
            } => {
                i[1] = Some(i64::from(*num_satellites));
                (x[1], x[2]) = (Some(*eph_m), Some(*epv_m));
            }
            Evidence::BatteryBrownout {
                voltage_v,
                critical_threshold_v,
                current_a,
            } => {
                (x[3], x[4], x[5]) = (Some(*voltage_v), Some(*critical_threshold_v), *current_a);
            }
            Evidence::EkfFailure {
                innovation,
                test_ratio,
                threshold,
            } => {
                t[2] = Some(innovation);
                (x[6], x[7]) = (Some(*test_ratio), Some(*threshold));
            }
            Evidence::RcLoss {
                last_signal_timestamp_us,
                signal_lost_duration_ms,
            } => {
                i[2] = Some(*last_signal_timestamp_us as i64);
                i[3] = Some(*signal_lost_duration_ms as i64);
            }
        }
        for (column, v) in ints.iter_mut().zip(i) {
            column.1.append_option(v);
        }
        for (column, v) in floats.iter_mut().zip(x) {
            // Through its shortest decimal: 12.7 stays 12.7, not 12.699999809265137.
            column
                .1
                .append_option(v.and_then(|v| v.to_string().parse::<f64>().ok()));
        }
        for (column, v) in texts.iter_mut().zip(t) {
            column.1.push(v.map(str::to_owned));
        }
    }
    for (name, mut b) in ints {
        fields.push(Field::new(name, DataType::Int64, true));
        arrays.push(Arc::new(b.finish()));
    }
    for (name, mut b) in floats {
        fields.push(Field::new(name, DataType::Float64, true));
        arrays.push(Arc::new(b.finish()));
    }
    for (name, values) in texts {
        fields.push(Field::new(name, DataType::Utf8, true));
        arrays.push(Arc::new(StringArray::from(values)));
    }
    fields.push(Field::new("vehicle_said", DataType::Utf8, true));
    arrays.push(Arc::new(StringArray::from_iter(
        rows.iter().map(|f| vehicle_said(f)),
    )));
    Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)?)
}
