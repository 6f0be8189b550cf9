//! A flight as tables: one Parquet file per topic, in the Hive-style layout that Spark,
//! Trino/Athena, DuckDB, Polars and Arrow read in place, across every flight of a fleet:
//!
//! ```text
//! parquet/v1/TOPIC/date=YYYY-MM-DD/vehicle=UID/FLIGHT.parquet
//! ```
//!
//! Topic first (one glob lists one table), then the day (a month's query lists one month's
//! folders), then the vehicle. Keys are deterministic: exporting the same flight again
//! overwrites the same files, never doubles them. Each file is written under a hidden
//! temporary name (which engines skip) and renamed once all the flight's files are whole and
//! synced. The waits on the filesystem (folders made, files written and synced) are a
//! [`Filer`]'s, on threads of its own, while the next table is encoded: a table of up to
//! [`TABLE_IN_MEMORY_BYTES`] is handed over whole, a larger one is written as it is encoded.
//! Once the walk is over, what is left to encode (each topic's last row group and footer, the
//! tables beside the topics) is encoded on every core, a table per thread, largest first.
//!
//! - [`columns`]: a topic's schema (names, types, what is left out), made for the engines.
//! - [`table`]: one topic's file, written a row group at a time.
//! - [`beside`]: the tables beside the topics (`log_messages`, `params`, `dropouts`,
//!   `events`, `diagnostics`).
//! - [`flights`]: the `flights` table, a row per flight, of either autopilot.
//! - [`dataflash`]: an ArduPilot flight's tables, in the same layout.
//! - `encode`: the end of an export: what is left of each table encoded on every core, and
//!   handed to the [`Filer`].
//!
//! One table per topic, every instance in it (`multi_id`); rows sorted by timestamp within
//! each row group (a topic's samples come in log order, so the file is too, but for instances
//! interleaved a few µs apart across two row groups). Memory stays bounded whatever the
//! flight's length: samples wait as the bytes they came in, a row group per topic at most,
//! and all topics together within [`BUDGET`]; the largest waiting row group is written when
//! the budget is reached.

pub mod beside;
pub mod columns;
pub mod dataflash;
mod encode;
pub mod flights;
pub mod table;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parquet::file::metadata::KeyValue;

use crate::autopilot::Autopilot;
use crate::diagnose::Finding;
use crate::export::FlightMetadata;
use crate::export::{ExportError, ExportOptions, Flight, Sink, TopicSource, release_text, walk};
use crate::ros::ros2::Ros2Type;
use crate::store::manifest::read_manifest;
use crate::store::output::Filer;
use crate::ulog::message::syslog_level;
use crate::ulog::{Message, Reader};
use columns::TopicColumns;
pub use dataflash::{bin_flight_identity, write_bin_dataset};
pub use encode::TABLE_IN_MEMORY_BYTES;
use encode::{Encode, TableOutput, encode_all};
pub use flights::FlightFacts;
use flights::{FlightStats, Watched};
pub use table::{FlightIdentity, TableError, TopicTable};

/// The layout's version: the first folder under `parquet/`. A change of schema that breaks
/// queries gets a new one.
pub const LAYOUT_VERSION: &str = "v1";

/// Sample bytes a topic holds before writing them as a row group (rows of 20 to 200 bytes:
/// row groups of 100,000 to 800,000 rows, as scans like them; DuckDB writes 122,880).
pub const ROW_GROUP_BYTES: usize = 16 << 20;

/// Memory all topics' waiting samples may take together before the largest is written.
pub const BUDGET: usize = 32 << 20;

/// One table file written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableWritten {
    /// Its key under the dataset's root: `parquet/v1/TOPIC/date=…/vehicle=…/FLIGHT.parquet`.
    pub key: String,
    pub topic: String,
    pub rows: u64,
    pub row_groups: usize,
}

/// The key of `topic`'s table of the flight `identity` names (`/`-separated).
pub fn table_key(topic: &str, identity: &FlightIdentity) -> String {
    format!(
        "parquet/{LAYOUT_VERSION}/{topic}/date={}/vehicle={}/{}.parquet",
        date_text(identity.flight_date_days),
        identity.vehicle_uid,
        identity.flight_id
    )
}

/// `days` since 1970-01-01 as `YYYY-MM-DD`.
pub fn date_text(days: i32) -> String {
    let seconds = u64::try_from(days).unwrap_or(0) * 86_400;
    let day = SystemTime::UNIX_EPOCH + Duration::from_secs(seconds);
    humantime::format_rfc3339_seconds(day).to_string()[..10].to_owned()
}

/// Days since 1970-01-01 of `time` (UTC).
fn days_of(time: SystemTime) -> i32 {
    let seconds = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    (seconds / 86_400) as i32
}

/// The identity of the flight read from `input` (a `.ulg` or a session directory) as
/// `flight`:
/// - `flight_id`: the session's directory name, or the `.ulg`'s file stem;
/// - `vehicle_uid`: the log's `sys_uuid` ([`hardware_id`]), else `sysN` from a session's
///   manifest, else `unknown`;
/// - the day: of the log's start in UTC when a GPS sample gives the log a UTC reference
///   ([`utc_offset_us`](crate::export::utc_offset_us)), else of the session's start by the
///   receiver's clock (its manifest), else of the `.ulg`'s modification time.
pub fn flight_identity(
    input: &Path,
    flight: &(impl Flight + ?Sized),
) -> Result<FlightIdentity, ExportError> {
    let utc_offset_us = crate::export::utc_offset_us(flight)?;
    let head = read_head(flight)?;
    let manifest = read_manifest(input).ok();
    let flight_id = flight_id_of(input, manifest.as_ref());
    let vehicle_uid = hardware_id(&head)
        .or_else(|| manifest.as_ref().map(|m| format!("sys{}", m.system_id)))
        .unwrap_or_else(|| "unknown".to_owned());
    let log_start_us = start_of(&head);
    let flight_date_days = flight_day(input, manifest.as_ref(), utc_offset_us, log_start_us);
    Ok(FlightIdentity {
        flight_id,
        vehicle_uid,
        flight_date_days,
        utc_offset_us,
        log_start_us,
    })
}

/// The flight's id: a session's directory name, a file's stem, made [`key_safe`].
fn flight_id_of(input: &Path, manifest: Option<&crate::store::Manifest>) -> String {
    match manifest {
        Some(_) => input.file_name(),
        None => input.file_stem(),
    }
    .map_or_else(|| "flight".to_owned(), |n| key_safe(&n.to_string_lossy()))
}

/// The flight's day (days since 1970-01-01): of the log's start (`log_start_us`) in UTC by
/// its GPS reference (`utc_offset_us`), else of the session's start by the receiver's clock
/// (its `manifest`), else of `input`'s modification time; 0 when none says.
fn flight_day(
    input: &Path,
    manifest: Option<&crate::store::Manifest>,
    utc_offset_us: Option<i64>,
    log_start_us: Option<u64>,
) -> i32 {
    let from_gps = utc_offset_us
        .zip(log_start_us)
        .map(|(offset, start)| (offset + start as i64).max(0) as u64)
        .map(|us| days_of(SystemTime::UNIX_EPOCH + Duration::from_micros(us)));
    let from_manifest = || {
        humantime::parse_rfc3339(&manifest?.started_utc)
            .ok()
            .map(days_of)
    };
    let from_file = || {
        let modified = std::fs::metadata(input).and_then(|m| m.modified()).ok()?;
        Some(days_of(modified))
    };
    from_gps
        .or_else(from_manifest)
        .or_else(from_file)
        .unwrap_or(0)
}

/// The first bytes of a log that hold its header and definitions.
const HEAD: u64 = 1 << 20;

/// Up to [`HEAD`] bytes of `flight` from its start.
fn read_head(flight: &(impl Flight + ?Sized)) -> Result<Vec<u8>, ExportError> {
    use std::io::Read;
    let mut head = Vec::new();
    flight
        .open()?
        .take(HEAD)
        .read_to_end(&mut head)
        .map_err(ExportError::ReadFlight)?;
    Ok(head)
}

/// The log's start (µs since boot): its header's timestamp.
fn start_of(head: &[u8]) -> Option<u64> {
    let mut reader = Reader::new();
    reader.push(head);
    // The header is read with the first message.
    let _ = reader.next_record();
    reader.header().map(|h| h.timestamp)
}

/// The `sys_uuid` info in the `head` of a log (its definitions), if it has one and it is
/// usable in a key (letters and digits).
pub fn hardware_id(head: &[u8]) -> Option<String> {
    let mut reader = Reader::new();
    reader.push(head);
    while let Some(Ok(record)) = reader.next_record() {
        if let Message::Info(kv) = &record.message
            && kv.name == "sys_uuid"
        {
            let text = String::from_utf8_lossy(kv.raw_value)
                .trim_end_matches('\0')
                .to_string();
            return (!text.is_empty() && text.chars().all(|c| c.is_ascii_alphanumeric()))
                .then_some(text);
        }
        if matches!(record.message, Message::Data { .. }) {
            return None;
        }
    }
    None
}

/// `name` with anything but letters, digits, `-`, `_` and `.` made `_`: safe in an object
/// key, a partition path and a download's file name.
pub fn key_safe(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Writes the tables of the flight in `input`, as `options` select, under `root`: a PX4
/// flight (a `.ulg`, a session, a snippet) by [`write_dataset`], an ArduPilot one (a `.bin`,
/// an ArduPilot session) by [`write_bin_dataset`]; `facts` is what `flights` says beyond the
/// log.
pub fn export_tables(
    input: &Path,
    options: &ExportOptions,
    facts: &FlightFacts,
    root: &Path,
) -> Result<Vec<TableWritten>, ExportError> {
    if let Some(files) = crate::store::input::dataflash_files(input) {
        let identity = bin_flight_identity(input, &files)?;
        return write_bin_dataset(&files, options, identity, facts, root);
    }
    let flight = crate::export::flight::open(input, options)?;
    let identity = flight_identity(input, flight.as_ref())?;
    write_dataset(flight.as_ref(), options, identity, facts, root)
}

/// Writes the topic tables of `flight` (as `options` select its window and topics) under
/// `root`, each at its [`table_key`], then the tables [`beside`] them and its row of
/// [`flights`] (with what `facts` add); returns what was written, topics in the order they
/// first appeared. A table with no row has no file. `--topics` patterns name the tables
/// beside the topics as `log`, `params`, `dropouts`, `events`, `diagnostics` and `flights`.
pub fn write_dataset(
    flight: &(impl Flight + ?Sized),
    options: &ExportOptions,
    identity: FlightIdentity,
    facts: &FlightFacts,
    root: &Path,
) -> Result<Vec<TableWritten>, ExportError> {
    let mut sink = DatasetSink {
        root: root.to_owned(),
        filer: Filer::spawn()?,
        identity: Arc::new(identity),
        tables: Vec::new(),
        by_topic: HashMap::new(),
        channels: Vec::new(),
        buffered: 0,
        log_rows: Vec::new(),
        dropouts: Vec::new(),
        stats: FlightStats::default(),
        findings: Vec::new(),
    };
    let (_, metadata) = walk(flight, options, &mut sink)?;
    let info = |key: &str| metadata.info.get(key).cloned();
    let mut flight_metadata = flight_key_values(&sink.identity);
    if let Some(release) = info("ver_sw_release").and_then(|r| r.parse::<u32>().ok()) {
        flight_metadata.push(KeyValue::new("px4.version".into(), release_text(release)));
    }
    for key in [
        "ver_sw_release",
        "ver_sw",
        "ver_sw_branch",
        "ver_hw",
        "sys_name",
    ] {
        if let Some(value) = info(key) {
            flight_metadata.push(KeyValue::new(format!("ulog.info.{key}"), value));
        }
    }
    let DatasetSink {
        filer,
        identity,
        tables,
        mut log_rows,
        dropouts,
        stats,
        findings,
        ..
    } = sink;
    let gathered = Gathered {
        autopilot: Autopilot::Px4,
        identity,
        tables,
        flight_metadata,
        metadata,
        log_rows: &mut log_rows,
        dropouts: &dropouts,
        stats: &stats,
        findings: &findings,
        vehicle_said: &|_| None,
    };
    commit(gathered, filer, facts, options, root)
}

/// The key/value metadata every table of the flight `identity` names carries.
fn flight_key_values(identity: &FlightIdentity) -> Vec<KeyValue> {
    vec![
        KeyValue::new("ulog_recv.flight_id".into(), identity.flight_id.clone()),
        KeyValue::new("ulog_recv.vehicle_uid".into(), identity.vehicle_uid.clone()),
    ]
}

/// What a walk over a flight (either autopilot's) gathered for its tables.
pub(crate) struct Gathered<'a> {
    pub autopilot: Autopilot,
    pub identity: Arc<FlightIdentity>,
    /// The topic (or message type) tables, each with its last row group waiting.
    pub tables: Vec<OpenTable>,
    /// The key/value metadata of every file of the flight.
    pub flight_metadata: Vec<KeyValue>,
    /// The log's info and parameters (`params`, `flights`).
    pub metadata: FlightMetadata,
    pub log_rows: &'a mut [beside::LogRow],
    pub dropouts: &'a [(u64, u16)],
    pub stats: &'a FlightStats,
    pub findings: &'a [Finding],
    /// What the vehicle itself logged of a finding's moment, in words (`diagnostics`).
    pub vehicle_said: &'a dyn Fn(&Finding) -> Option<String>,
}

/// Writes the tables beside the topics and the flight's row of `flights` from what the walk
/// `gathered`, encodes what is left of every table on every core, and commits the flight's
/// files together: none appears before all are whole.
fn commit(
    gathered: Gathered<'_>,
    mut filer: Filer,
    facts: &FlightFacts,
    options: &ExportOptions,
    root: &Path,
) -> Result<Vec<TableWritten>, ExportError> {
    let Gathered {
        autopilot,
        identity,
        tables,
        flight_metadata,
        metadata,
        log_rows,
        dropouts,
        stats,
        findings,
        vehicle_said,
    } = gathered;
    let mut jobs: Vec<Encode> = Vec::with_capacity(tables.len() + 6);
    for open in tables {
        let mut kv = flight_metadata.clone();
        kv.extend(open.metadata);
        jobs.push(Encode::Topic {
            key: open.key,
            topic: open.topic,
            table: Box::new(open.table),
            metadata: kv,
        });
    }
    let identity = &identity;
    let in_window = |t: &u64| options.in_window(*t);
    let events: Vec<_> = (facts.events.iter())
        .filter(|e| in_window(&e.at_us))
        .cloned()
        .collect();
    let beside = [
        // The strings are `log` to `--topics`, as for every export (and the walk kept them
        // only if wanted).
        (
            beside::LOG_MESSAGES,
            "log",
            beside::log_messages(identity, log_rows)?,
        ),
        (
            beside::PARAMS,
            beside::PARAMS,
            beside::params(identity, &metadata)?,
        ),
        (
            beside::DROPOUTS,
            beside::DROPOUTS,
            beside::dropouts(identity, dropouts)?,
        ),
        (
            beside::EVENTS,
            beside::EVENTS,
            beside::events(identity, &events)?,
        ),
        (
            beside::DIAGNOSTICS,
            beside::DIAGNOSTICS,
            beside::diagnostics(identity, findings, vehicle_said)?,
        ),
        (
            flights::FLIGHTS,
            flights::FLIGHTS,
            flights::flights(
                autopilot,
                identity,
                stats,
                findings,
                &metadata,
                facts,
                options.from_us,
            )?,
        ),
    ];
    for (name, pattern_name, batch) in beside {
        if batch.num_rows() == 0 || !options.wants(pattern_name) {
            continue;
        }
        let key = table_key(name, identity);
        let mut kv = flight_metadata.clone();
        kv.push(KeyValue::new("ulog.table".into(), name.to_owned()));
        jobs.push(Encode::Beside {
            out: TableOutput::new(root.join(&key), filer.folders()),
            key,
            name,
            batch,
            metadata: kv,
        });
    }
    let written = encode_all(jobs, &mut filer)?;
    filer.commit()?;
    Ok(written)
}

/// A table being written, with what its file's metadata will say.
pub(crate) struct OpenTable {
    key: String,
    topic: String,
    /// What its file's metadata says of its topic (beside what it says of the flight).
    metadata: Vec<KeyValue>,
    table: TopicTable<TableOutput>,
}

/// What a table to open is: see [`OpenTable::open`].
pub(crate) struct TableSpec<'a> {
    /// The format's (or message type's) name.
    pub topic: &'a str,
    /// How many tables of the same name come before it (a format redefined with other
    /// fields gets a file of its own).
    pub variant: usize,
    pub columns: TopicColumns,
    /// Bytes of a sample.
    pub sample_size: usize,
    /// What its file's metadata says of its topic.
    pub metadata: Vec<KeyValue>,
}

impl OpenTable {
    /// The table `spec` describes, of the flight `identity` names, under `root`; its folder
    /// is made on `filer`'s thread.
    fn open(
        spec: TableSpec<'_>,
        identity: &Arc<FlightIdentity>,
        root: &Path,
        filer: &mut Filer,
    ) -> Result<Self, ExportError> {
        let TableSpec {
            topic,
            variant,
            columns,
            sample_size,
            metadata,
        } = spec;
        let mut key = table_key(topic, identity);
        if variant > 0 {
            key = key.replace(".parquet", &format!("_{}.parquet", variant + 1));
        }
        let path = root.join(&key);
        if let Some(dir) = path.parent() {
            filer.make_folder(dir.to_owned())?;
        }
        let table = TopicTable::new(
            columns,
            sample_size,
            identity.clone(),
            TableOutput::new(path, filer.folders()),
        )?;
        Ok(Self {
            key,
            topic: topic.to_owned(),
            metadata,
            table,
        })
    }
}

/// The [`Sink`] that buffers samples into topic tables.
struct DatasetSink {
    root: PathBuf,
    /// Makes the tables' folders as their topics appear, and files the finished tables.
    filer: Filer,
    identity: Arc<FlightIdentity>,
    tables: Vec<OpenTable>,
    /// Table of each topic, by its name and columns: a topic whose format changed within the
    /// log (a redefinition after appended data) gets a table of its own.
    by_topic: HashMap<(String, Vec<columns::Column>), usize>,
    /// Table and instance of each channel, and what of its samples `flights` needs.
    channels: Vec<(usize, u8, Option<Watched>)>,
    /// Sample bytes buffered across tables.
    buffered: usize,
    /// The logged strings, for `log_messages`.
    log_rows: Vec<beside::LogRow>,
    /// The dropouts (log time, ms), for `dropouts`.
    dropouts: Vec<(u64, u16)>,
    /// The flight's row of `flights`, as the samples pass.
    stats: FlightStats,
    /// The flight diagnostics' findings, as the walk makes them.
    findings: Vec<Finding>,
}

/// Buffers a sample of instance `multi_id` stamped `timestamp` in table `index` of
/// `tables`: its row group is written once full, and the largest waiting one while all
/// tables' buffers (`buffered`, kept up to date) exceed [`BUDGET`].
fn buffer_sample(
    tables: &mut [OpenTable],
    buffered: &mut usize,
    index: usize,
    multi_id: u8,
    timestamp: u64,
    data: &[u8],
) -> Result<(), ExportError> {
    let table = &mut tables[index].table;
    let before = table.buffered_bytes();
    table.push(multi_id, timestamp, data);
    if table.row_group_full() {
        table.flush_row_group()?;
        *buffered -= before;
        return Ok(());
    }
    *buffered += table.buffered_bytes() - before;
    while *buffered > BUDGET {
        let Some(largest) = (tables.iter_mut()).max_by_key(|t| t.table.buffered_bytes()) else {
            break;
        };
        let before = largest.table.buffered_bytes();
        largest.table.flush_row_group()?;
        *buffered -= before;
    }
    Ok(())
}

impl Sink for DatasetSink {
    fn channel(
        &mut self,
        _topic: &str,
        _ty: &Ros2Type,
        source: &TopicSource<'_>,
    ) -> Result<u32, ExportError> {
        let columns = TopicColumns::new(source.layout);
        let lookup = (source.format.to_owned(), columns.columns.clone());
        let index = match self.by_topic.get(&lookup) {
            Some(&index) => index,
            None => {
                let variant = self
                    .by_topic
                    .keys()
                    .filter(|(name, _)| name == source.format)
                    .count();
                let metadata = vec![
                    KeyValue::new("ulog.topic".into(), source.format.to_owned()),
                    KeyValue::new("ulog.format".into(), source.format_texts.to_owned()),
                ];
                let spec = TableSpec {
                    topic: source.format,
                    variant,
                    columns,
                    sample_size: source.layout.size,
                    metadata,
                };
                self.tables.push(OpenTable::open(
                    spec,
                    &self.identity,
                    &self.root,
                    &mut self.filer,
                )?);
                self.by_topic.insert(lookup, self.tables.len() - 1);
                self.tables.len() - 1
            }
        };
        self.channels
            .push((index, source.multi_id, Watched::of(source.layout)));
        Ok(self.channels.len() as u32 - 1)
    }

    fn sample(
        &mut self,
        channel: u32,
        _ty: &Ros2Type,
        timestamp_us: u64,
        data: &[u8],
    ) -> Result<(), ExportError> {
        let (index, multi_id, watched) = &self.channels[channel as usize];
        let (index, multi_id) = (*index, *multi_id);
        self.stats.sample(watched.as_ref(), timestamp_us, data);
        let tables = &mut self.tables;
        buffer_sample(
            tables,
            &mut self.buffered,
            index,
            multi_id,
            timestamp_us,
            data,
        )
    }

    fn log(
        &mut self,
        timestamp_us: u64,
        ulog_level: u8,
        name: &str,
        text: &[u8],
    ) -> Result<(), ExportError> {
        self.stats.logged(ulog_level);
        self.log_rows.push(beside::LogRow {
            timestamp: timestamp_us,
            level: Some(syslog_level(ulog_level)),
            tag: name.strip_prefix("px4/").and_then(|t| t.parse().ok()),
            message: String::from_utf8_lossy(text).into_owned(),
        });
        Ok(())
    }

    fn dropout(&mut self, timestamp_us: u64, duration_ms: u16) -> Result<(), ExportError> {
        self.stats.dropout(duration_ms);
        self.dropouts.push((timestamp_us, duration_ms));
        Ok(())
    }

    fn takes_findings(&self) -> bool {
        true
    }

    fn finding(&mut self, finding: &Finding) -> Result<(), ExportError> {
        self.findings.push(finding.clone());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_the_layout() {
        let identity = FlightIdentity {
            flight_id: "2026-11-25T10-00-00Z_sys1".into(),
            vehicle_uid: "0035002B3434511732343031".into(),
            flight_date_days: 20_417,
            utc_offset_us: None,
            log_start_us: None,
        };
        assert_eq!(
            table_key("vehicle_status", &identity),
            "parquet/v1/vehicle_status/date=2025-11-25/vehicle=0035002B3434511732343031/\
             2026-11-25T10-00-00Z_sys1.parquet"
        );
        assert_eq!(date_text(0), "1970-01-01");
        assert_eq!(key_safe("a b/c:d.ulg"), "a_b_c_d.ulg");
    }
}
