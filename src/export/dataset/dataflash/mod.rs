//! An ArduPilot flight (DataFlash: a `.bin`, or an ArduPilot session's splits in order) as
//! the dataset's tables, in the layout and with the identity columns of a PX4 flight's
//! ([`super`]), so that one query reads both:
//!
//! - one table per message type, named by its FMT (`parquet/v1/BAT/…`), its instances in it
//!   as PX4's are (`multi_id`: the field FMTU marks as the instance, `#` in its units; 0 for
//!   a type without one);
//! - a column per field, named by its FMT label (`Volt`; `TimeUS` is the table's
//!   `timestamp`), a type without `TimeUS` stamped with the latest one logged before it;
//! - values as FMTU says: a field stored scaled by its character (`c`, `C`, `e`, `E`: hundredths;
//!   `L`: degrees times 10⁷) is that value; another numeric field with a multiplier in FMTU
//!   (`CurrTot` in mAh: `F`, 0.001, for Ah) is its value times the multiplier, as a double;
//!   the rest keep their type as PX4's columns do ([`columns`](super::columns)). Each column's
//!   metadata names its label, its character, its unit (FMTU's, by `UNIT`) and the multiplier
//!   applied;
//! - `MSG` goes to `log_messages` (no level: ArduPilot logs none), `PARM` to `params` (a
//!   name's first value is initial, a later different one a change), the receiver's dropout
//!   marks to `dropouts`; the definitions (`FMT`, `FMTU`, `UNIT`, `MULT`) to none;
//! - the flight diagnostics ([`crate::diagnose::dataflash`]) to `diagnostics`, each finding
//!   with what the vehicle's own `ERR` and `EV` records said of the same moment
//!   (`vehicle_said`), and the flight's row of `flights` (`autopilot` `ardupilot`).
//!
//! The identity ([`bin_flight_identity`]): the day of the log's start in UTC by its `GPS`
//! week and milliseconds at the first 3D fix (GPS time less its 18 leap seconds), else by
//! the session's manifest or the file's modification time; the vehicle `sysN` by the
//! manifest, else by `SYSID_THISMAV`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parquet::file::metadata::KeyValue;

mod columns;

use crate::dataflash::state::{LogState, Passing};
use columns::TypeColumns;

use super::beside::LogRow;
use super::columns::Column;
use super::flights::{FlightStats, planar_distance};
use super::{
    FlightFacts, FlightIdentity, Gathered, OpenTable, TableSpec, TableWritten, buffer_sample,
    commit, flight_day, flight_id_of, flight_key_values,
};
use crate::autopilot::Autopilot;
use crate::dataflash::format::{Format, MSG_HEADER_LEN, field_size, text, time_us};
use crate::dataflash::gaps::dropout_ms;
use crate::dataflash::values::{Value, fields, value};
use crate::diagnose::BinFollower;
use crate::diagnose::dataflash::names::is_failsafe;
use crate::export::flight::each_dataflash_message;
use crate::export::{ExportError, ExportOptions, FlightMetadata};
use crate::store::manifest::read_manifest;
use crate::store::output::Filer;

/// The field metadata key holding a column's FMT label (`Volt`).
pub const DATAFLASH_LABEL: &str = "dataflash_label";
/// The field metadata key holding a column's FMT character (`f`).
pub const DATAFLASH_TYPE: &str = "dataflash_type";
/// The field metadata key holding a column's unit, as FMTU and UNIT name it (`V`).
pub const UNIT: &str = "unit";
/// The field metadata key holding the multiplier a column's values were scaled by.
pub const MULTIPLIER: &str = "multiplier";

/// GPS time's start (1980-01-06) in Unix seconds, and its lead on UTC since 2017.
const GPS_EPOCH_S: i64 = 315_964_800;
const GPS_LEAP_S: i64 = 18;
/// `GPS.Status` of a 3D fix.
const GPS_FIX_3D: u64 = 3;
/// `ORGN.Type` of home.
const ORGN_HOME: u64 = 1;

/// The field `label` of `m` (of format `f`), scaled as pymavlink reads it.
fn field_value<'m>(f: &Format, m: &'m [u8], label: &str) -> Option<Value<'m>> {
    let (offset, c) = f.field(label)?;
    value(c, m.get(offset..offset + field_size(c)?)?)
}

/// The field `label` of `m` (of format `f`) as a number, scaled as pymavlink reads it.
fn number(f: &Format, m: &[u8], label: &str) -> Option<f64> {
    field_value(f, m, label)?.as_f64()
}

/// The identity of the ArduPilot flight `input` names, whose DataFlash `files` these are
/// (see the module docs).
pub fn bin_flight_identity(input: &Path, files: &[PathBuf]) -> Result<FlightIdentity, ExportError> {
    let manifest = read_manifest(input).ok();
    let mut utc_offset_us = None;
    let mut log_start_us = None;
    let mut system_id = None;
    each_dataflash_message(files, |m, f| {
        if let Some(t) = time_us(f, m) {
            log_start_us.get_or_insert(t);
        }
        match f.name.as_str() {
            "PARM" if system_id.is_none() => {
                if let Some(Value::Text(name)) = fields(f, m).nth(1).map(|(_, _, v)| v)
                    && name == b"SYSID_THISMAV"
                {
                    system_id = number(f, m, "Value").map(|v| v as u8);
                }
            }
            "GPS" => {
                let fixed = number(f, m, "Status").is_some_and(|s| s as u64 >= GPS_FIX_3D);
                let week = number(f, m, "GWk").unwrap_or(0.0) as i64;
                let ms = number(f, m, "GMS").unwrap_or(0.0) as i64;
                if let (true, true, Some(t)) = (fixed, week > 0, time_us(f, m)) {
                    let unix_ms = (GPS_EPOCH_S - GPS_LEAP_S) * 1000 + week * 604_800_000 + ms;
                    utc_offset_us = Some(unix_ms * 1000 - t as i64);
                    return false;
                }
            }
            _ => {}
        }
        true
    })?;
    let flight_id = flight_id_of(input, manifest.as_ref());
    let vehicle_uid = (manifest.as_ref().map(|m| m.system_id))
        .or(system_id)
        .map_or_else(|| "unknown".to_owned(), |id| format!("sys{id}"));
    let flight_date_days = flight_day(input, manifest.as_ref(), utc_offset_us, log_start_us);
    Ok(FlightIdentity {
        flight_id,
        vehicle_uid,
        flight_date_days,
        utc_offset_us,
        log_start_us,
    })
}

/// What becomes of a type's messages, found at its first one (again after its FMT).
#[derive(Debug, Clone, Copy)]
enum Route {
    /// Left out: a definition, a type `--topics` does not name, a type of no field.
    Skip,
    Table {
        index: usize,
        instance: Option<(usize, u8)>,
    },
    Text,
    Parameter,
}

/// What the flight's row of `flights` reads of a type, found at its first message.
#[derive(Debug, Clone, Copy)]
enum Watch {
    None,
    Arm,
    Event,
    Battery,
    Position,
    Origin,
    Version,
}

impl Watch {
    fn of(f: &Format) -> Self {
        match f.name.as_str() {
            "ARM" => Watch::Arm,
            "EV" => Watch::Event,
            "BAT" => Watch::Battery,
            "POS" => Watch::Position,
            "ORGN" => Watch::Origin,
            "VER" => Watch::Version,
            _ => Watch::None,
        }
    }
}

/// The walk over an ArduPilot flight's messages, gathering its tables.
struct BinWalk<'a> {
    options: &'a ExportOptions,
    root: &'a Path,
    filer: &'a mut Filer,
    identity: Arc<FlightIdentity>,
    tables: Vec<OpenTable>,
    /// Table of each type, by its name and columns: a type defined again with other
    /// fields gets a table of its own.
    by_type: HashMap<(String, Vec<Column>), usize>,
    routes: Vec<Option<Route>>,
    watches: Vec<Option<Watch>>,
    state: LogState,
    buffered: usize,
    follower: BinFollower,
    stats: FlightStats,
    home: Option<(f64, f64)>,
    metadata: FlightMetadata,
    /// Each parameter's latest value, as text.
    parameters: HashMap<String, String>,
    log_rows: Vec<LogRow>,
    dropouts: Vec<(u64, u16)>,
    error: Option<ExportError>,
}

impl BinWalk<'_> {
    /// The log's next whole message `m`, of format `f`.
    fn message(&mut self, m: &[u8], f: &Format) {
        self.follower.message(m, f);
        let timestamp = match self.state.pass(m, f) {
            Passing::Defined(t) => {
                self.routes[usize::from(t)] = None;
                self.watches[usize::from(t)] = None;
                return;
            }
            Passing::Definition => return,
            Passing::Data { timestamp } => timestamp,
        };
        if !self.options.in_window(timestamp) {
            return;
        }
        self.stats.time(timestamp);
        let watch = *self.watches[usize::from(f.type_id)].get_or_insert_with(|| Watch::of(f));
        self.watch(watch, timestamp, f, m);
        let route = match self.routes[usize::from(f.type_id)] {
            Some(route) => route,
            None => match self.route(f) {
                Ok(route) => *self.routes[usize::from(f.type_id)].insert(route),
                Err(e) => return self.fail(e),
            },
        };
        match route {
            Route::Skip => {}
            Route::Table { index, instance } => {
                let multi_id = instance.map_or(0, |(at, c)| {
                    let bytes = m.get(at..at + field_size(c).unwrap_or(0));
                    let v = bytes.and_then(|b| value(c, b)).and_then(|v| v.as_f64());
                    v.map_or(0, |v| v.clamp(0.0, 255.0) as u8)
                });
                let pushed = buffer_sample(
                    &mut self.tables,
                    &mut self.buffered,
                    index,
                    multi_id,
                    timestamp,
                    &m[MSG_HEADER_LEN..],
                );
                if let Err(e) = pushed {
                    self.fail(e);
                }
            }
            Route::Text => self.text(timestamp, f, m),
            Route::Parameter => self.parameter(timestamp, f, m),
        }
    }

    fn fail(&mut self, e: ExportError) {
        self.error.get_or_insert(e);
    }

    /// The route of `f`'s messages (its table opened now if it is new).
    fn route(&mut self, f: &Format) -> Result<Route, ExportError> {
        match f.name.as_str() {
            "MSG" => return Ok(Route::Text),
            "PARM" => return Ok(Route::Parameter),
            _ => {}
        }
        if !self.options.wants(&f.name) {
            return Ok(Route::Skip);
        }
        let TypeColumns { columns, instance } = TypeColumns::new(f, &self.state.units);
        if columns.columns.is_empty() {
            return Ok(Route::Skip);
        }
        let lookup = (f.name.clone(), columns.columns.clone());
        let index = match self.by_type.get(&lookup) {
            Some(&index) => index,
            None => {
                let variant = (self.by_type.keys())
                    .filter(|(name, _)| *name == f.name)
                    .count();
                let (unit_ids, mult_ids) = self.state.units.of_type(f.type_id);
                let (unit_ids, mult_ids) = (text(&unit_ids), text(&mult_ids));
                let metadata = vec![
                    KeyValue::new("dataflash.message".into(), f.name.clone()),
                    KeyValue::new("dataflash.format".into(), f.format.clone()),
                    KeyValue::new("dataflash.labels".into(), f.labels.join(",")),
                    KeyValue::new("dataflash.units".into(), unit_ids),
                    KeyValue::new("dataflash.multipliers".into(), mult_ids),
                ];
                let size = usize::from(f.length).saturating_sub(MSG_HEADER_LEN);
                let spec = TableSpec {
                    topic: &f.name,
                    variant,
                    columns,
                    sample_size: size,
                    metadata,
                };
                self.tables.push(OpenTable::open(
                    spec,
                    &self.identity,
                    self.root,
                    self.filer,
                )?);
                self.by_type.insert(lookup, self.tables.len() - 1);
                self.tables.len() - 1
            }
        };
        Ok(Route::Table { index, instance })
    }

    /// What the flight's row reads of a message.
    fn watch(&mut self, watch: Watch, timestamp: u64, f: &Format, m: &[u8]) {
        let n = |label| number(f, m, label);
        match watch {
            Watch::None => {}
            Watch::Arm => {
                if let Some(state) = n("ArmState") {
                    self.stats.armed(timestamp, state != 0.0);
                }
            }
            Watch::Event => match n("Id").map(|id| id as u64) {
                Some(10) => self.stats.armed(timestamp, true),
                Some(11) => self.stats.armed(timestamp, false),
                _ => {}
            },
            Watch::Battery => {
                if n("Inst").unwrap_or(0.0) == 0.0 {
                    let remaining = n("RemPct").map(|p| p / 100.0);
                    self.stats.battery(n("Volt"), remaining);
                }
            }
            Watch::Position => {
                self.stats.altitude(n("Alt"));
                self.stats.height(n("RelHomeAlt"));
                if let (Some(home), Some(lat), Some(lng)) = (self.home, n("Lat"), n("Lng")) {
                    self.stats.distance(Some(metres_between(home, (lat, lng))));
                }
            }
            Watch::Version => {
                let info = &mut self.metadata.info;
                // `ArduCopter V4.6.0-dev (ed261168)`: the firmware, its release, its commit.
                if let Some(Value::Text(firmware)) = field_value(f, m, "FWS") {
                    let firmware = String::from_utf8_lossy(firmware);
                    let mut words = firmware.split_whitespace();
                    if let (Some(name), Some(release)) = (words.next(), words.next()) {
                        info.insert("sys_name".into(), name.to_owned());
                        info.insert("ver_sw_release".into(), release.to_owned());
                    }
                }
                if let Some(hash) = n("GH") {
                    info.insert("ver_sw".into(), format!("{:08x}", hash as u32));
                }
            }
            Watch::Origin => {
                if n("Type").map(|t| t as u64) == Some(ORGN_HOME)
                    && let (Some(lat), Some(lng)) = (n("Lat"), n("Lng"))
                {
                    self.home = Some((lat, lng));
                }
            }
        }
    }

    /// A `MSG`: a logged string, or the receiver's dropout mark.
    fn text(&mut self, timestamp: u64, f: &Format, m: &[u8]) {
        if let Some(ms) = dropout_ms(m, f) {
            if self.options.wants("dropouts") {
                let ms = u16::try_from(ms.unwrap_or(0)).unwrap_or(u16::MAX);
                self.stats.dropout(ms);
                self.dropouts.push((timestamp, ms));
            }
            return;
        }
        if !self.options.wants("log") {
            return;
        }
        let message = match fields(f, m).nth(1).map(|(_, _, v)| v) {
            Some(Value::Text(t)) => String::from_utf8_lossy(t).into_owned(),
            _ => return,
        };
        self.log_rows.push(LogRow {
            timestamp,
            level: None,
            tag: None,
            message,
        });
    }

    /// A `PARM`: a name's first value is initial, a later different one a change.
    fn parameter(&mut self, timestamp: u64, f: &Format, m: &[u8]) {
        let mut values = fields(f, m).map(|(_, _, v)| v).skip(1);
        let (Some(Value::Text(name)), Some(v)) = (values.next(), values.next()) else {
            return;
        };
        let name = String::from_utf8_lossy(name).into_owned();
        let text = match v {
            // Through its shortest decimal: 0.1 stays 0.1.
            Value::F32(v) => v.to_string(),
            other => other.as_f64().unwrap_or(f64::NAN).to_string(),
        };
        let metadata = &mut self.metadata;
        match self.parameters.get(&name) {
            None => {
                metadata
                    .initial_parameters
                    .insert(name.clone(), text.clone());
                self.parameters.insert(name, text);
            }
            Some(latest) if *latest != text => {
                let key = format!("{name}@{timestamp}");
                metadata.changed_parameters.insert(key, text.clone());
                self.parameters.insert(name, text);
            }
            Some(_) => {}
        }
    }
}

/// Metres between two points (degrees of latitude, longitude) a flight apart: the plane
/// tangent at the first.
fn metres_between(a: (f64, f64), b: (f64, f64)) -> f64 {
    const EARTH_RADIUS_M: f64 = 6_371_000.0;
    let north = (b.0 - a.0).to_radians() * EARTH_RADIUS_M;
    let east = (b.1 - a.1).to_radians() * a.0.to_radians().cos() * EARTH_RADIUS_M;
    planar_distance(north, east)
}

/// Writes the tables of the ArduPilot flight in the DataFlash `files` (in log order), as
/// `options` select its window and types, under `root`; see the module docs. As
/// [`super::write_dataset`] does for a PX4 flight, with which it shares the layout.
pub fn write_bin_dataset(
    files: &[PathBuf],
    options: &ExportOptions,
    identity: FlightIdentity,
    facts: &FlightFacts,
    root: &Path,
) -> Result<Vec<TableWritten>, ExportError> {
    let mut filer = Filer::spawn()?;
    let mut walk = BinWalk {
        options,
        root,
        filer: &mut filer,
        identity: Arc::new(identity),
        tables: Vec::new(),
        by_type: HashMap::new(),
        routes: vec![None; 256],
        watches: vec![None; 256],
        state: LogState::default(),
        buffered: 0,
        follower: BinFollower::new(options.diagnostics),
        stats: FlightStats::default(),
        home: None,
        metadata: FlightMetadata::default(),
        parameters: HashMap::new(),
        log_rows: Vec::new(),
        dropouts: Vec::new(),
        error: None,
    };
    each_dataflash_message(files, |m, f| {
        walk.message(m, f);
        walk.error.is_none()
    })?;
    if let Some(e) = walk.error {
        return Err(e);
    }
    let BinWalk {
        identity,
        tables,
        follower,
        mut stats,
        metadata,
        mut log_rows,
        dropouts,
        ..
    } = walk;
    let detectors = follower.into_detectors();
    let in_window = |t: u64| options.in_window(t);
    stats.failsafe(false);
    for record in (detectors.vehicle_records().iter()).filter(|r| in_window(r.timestamp_us)) {
        if let (Some(subsystem), Some(code)) = (record.subsystem, record.code)
            && code != 0
        {
            stats.error();
            stats.failsafe(is_failsafe(subsystem));
        }
    }
    let findings: Vec<_> = (detectors.findings().iter())
        .filter(|f| in_window(f.timestamp_us))
        .cloned()
        .collect();
    let mut flight_metadata = flight_key_values(&identity);
    for key in ["sys_name", "ver_sw_release"] {
        if let Some(value) = metadata.info.get(key) {
            let kv = KeyValue::new(format!("ardupilot.{key}"), value.clone());
            flight_metadata.push(kv);
        }
    }
    let vehicle_said = |f: &crate::diagnose::Finding| {
        let said = detectors.vehicle_said(f);
        (!said.is_empty()).then(|| said.join("; "))
    };
    let gathered = Gathered {
        autopilot: Autopilot::ArduPilot,
        identity,
        tables,
        flight_metadata,
        metadata,
        log_rows: &mut log_rows,
        dropouts: &dropouts,
        stats: &stats,
        findings: &findings,
        vehicle_said: &vehicle_said,
    };
    commit(gathered, filer, facts, options, root)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metres_between_two_points_a_flight_apart() {
        let home = (-35.363262, 149.165237);
        let north = metres_between(home, (home.0 + 0.001, home.1));
        assert!((north - 111.2).abs() < 0.1, "{north}");
        let east = metres_between(home, (home.0, home.1 + 0.001));
        assert!((east - 90.7).abs() < 0.2, "{east}");
    }
}
