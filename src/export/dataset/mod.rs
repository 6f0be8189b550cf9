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
//! - [`flights`]: the `flights` table, a row per flight.
//!
//! One table per topic, every instance in it (`multi_id`); rows sorted by timestamp within
//! each row group (a topic's samples come in log order, so the file is too, but for instances
//! interleaved a few µs apart across two row groups). Memory stays bounded whatever the
//! flight's length: samples wait as the bytes they came in, a row group per topic at most,
//! and all topics together within [`BUDGET`]; the largest waiting row group is written when
//! the budget is reached.

pub mod beside;
pub mod columns;
pub mod flights;
pub mod table;

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parquet::file::metadata::KeyValue;

use crate::diagnose::Finding;
use crate::export::{ExportError, ExportOptions, Flight, Sink, TopicSource, release_text, walk};
use crate::ros::ros2::Ros2Type;
use crate::store::manifest::read_manifest;
use crate::store::output::{Filer, FilerHandle, FilerStopped, OutputFile};
use crate::ulog::{Message, Reader};
use columns::TopicColumns;
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
    let flight_id = if manifest.is_some() {
        input.file_name()
    } else {
        input.file_stem()
    }
    .map_or_else(|| "flight".to_owned(), |n| key_safe(&n.to_string_lossy()));
    let vehicle_uid = hardware_id(&head)
        .or_else(|| manifest.as_ref().map(|m| format!("sys{}", m.system_id)))
        .unwrap_or_else(|| "unknown".to_owned());
    let log_start_us = start_of(&head);
    let from_gps = utc_offset_us
        .zip(log_start_us)
        .map(|(offset, start)| (offset + start as i64).max(0) as u64)
        .map(|us| days_of(SystemTime::UNIX_EPOCH + Duration::from_micros(us)));
    let from_manifest = || {
        let m = manifest.as_ref()?;
        humantime::parse_rfc3339(&m.started_utc).ok().map(days_of)
    };
    let from_file = || {
        let modified = std::fs::metadata(input).and_then(|m| m.modified()).ok()?;
        Some(days_of(modified))
    };
    let flight_date_days = from_gps
        .or_else(from_manifest)
        .or_else(from_file)
        .unwrap_or(0);
    Ok(FlightIdentity {
        flight_id,
        vehicle_uid,
        flight_date_days,
        utc_offset_us,
        log_start_us,
    })
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
    let mut flight_metadata = vec![
        KeyValue::new(
            "ulog_recv.flight_id".into(),
            sink.identity.flight_id.clone(),
        ),
        KeyValue::new(
            "ulog_recv.vehicle_uid".into(),
            sink.identity.vehicle_uid.clone(),
        ),
    ];
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
    // Committed together at the end: none of the flight's tables appears before all are whole.
    let mut filer = sink.filer;
    let mut jobs: Vec<Encode> = Vec::with_capacity(sink.tables.len() + 6);
    for open in sink.tables {
        let mut kv = flight_metadata.clone();
        kv.push(KeyValue::new("ulog.topic".into(), open.topic.clone()));
        kv.push(KeyValue::new("ulog.format".into(), open.format_texts));
        jobs.push(Encode::Topic {
            key: open.key,
            topic: open.topic,
            table: Box::new(open.table),
            metadata: kv,
        });
    }
    let identity = &sink.identity;
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
            beside::log_messages(identity, &mut sink.log_rows)?,
        ),
        (
            beside::PARAMS,
            beside::PARAMS,
            beside::params(identity, &metadata)?,
        ),
        (
            beside::DROPOUTS,
            beside::DROPOUTS,
            beside::dropouts(identity, &sink.dropouts)?,
        ),
        (
            beside::EVENTS,
            beside::EVENTS,
            beside::events(identity, &events)?,
        ),
        (
            beside::DIAGNOSTICS,
            beside::DIAGNOSTICS,
            beside::diagnostics(identity, &sink.findings)?,
        ),
        (
            flights::FLIGHTS,
            flights::FLIGHTS,
            flights::flights(
                identity,
                &sink.stats,
                &sink.findings,
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
            out: TableOutput::new(root.join(&key)),
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

/// A table left to encode once the walk is over: a topic's last row group and footer, or a
/// table beside the topics whole.
enum Encode {
    Topic {
        key: String,
        topic: String,
        /// Boxed: a table with its writer is far larger than a batch.
        table: Box<TopicTable<TableOutput>>,
        metadata: Vec<KeyValue>,
    },
    Beside {
        key: String,
        name: &'static str,
        out: TableOutput,
        batch: arrow_array::RecordBatch,
        metadata: Vec<KeyValue>,
    },
}

impl Encode {
    /// Bytes to encode: the order that keeps the threads evenly busy.
    fn weight(&self) -> usize {
        match self {
            Encode::Topic { table, .. } => table.buffered_bytes(),
            Encode::Beside { batch, .. } => batch.get_array_memory_size(),
        }
    }

    fn run(self) -> Result<(TableOutput, TableWritten), ExportError> {
        Ok(match self {
            Encode::Topic {
                key,
                topic,
                table,
                metadata,
            } => {
                let (out, rows, row_groups) = table.finish(metadata)?;
                let written = TableWritten {
                    key,
                    topic,
                    rows,
                    row_groups,
                };
                (out, written)
            }
            Encode::Beside {
                key,
                name,
                out,
                batch,
                metadata,
            } => {
                let out = table::write_table(out, &batch, metadata)?;
                let written = TableWritten {
                    key,
                    topic: name.to_owned(),
                    rows: batch.num_rows() as u64,
                    row_groups: 1,
                };
                (out, written)
            }
        })
    }
}

/// Encodes `jobs` on as many threads as the machine has cores, the caller's among them (each
/// table is encoded on its own: a flight's tables take the cores together, the largest
/// first), each thread handing the table it encoded to `filer` itself; returns what was
/// written in the order of `jobs`. The first error ends the work. On one core, the caller
/// encodes them all and starts no thread.
fn encode_all(jobs: Vec<Encode>, filer: &mut Filer) -> Result<Vec<TableWritten>, ExportError> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let count = jobs.len();
    let mut order: Vec<(usize, Encode)> = jobs.into_iter().enumerate().collect();
    order.sort_by_key(|(_, job)| std::cmp::Reverse(job.weight()));
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(count)
        .max(1);
    let queue = std::sync::Mutex::new(order.into_iter());
    let stop = AtomicBool::new(false);
    let (done, finished) = std::sync::mpsc::channel();
    // Takes jobs until none is left or one has failed, handing each table to the filer.
    let work = |done: std::sync::mpsc::Sender<_>, filer: FilerHandle| {
        while !stop.load(Ordering::Relaxed) {
            let next = queue.lock().unwrap_or_else(|p| p.into_inner()).next();
            let Some((index, job)) = next else { break };
            let result = job.run().and_then(|(out, table)| {
                out.hand_to(&filer).map_err(ExportError::Write)?;
                Ok(table)
            });
            stop.fetch_or(result.is_err(), Ordering::Relaxed);
            // Unbounded: the caller reads the results once its own work is done.
            let _ = done.send((index, result));
        }
    };
    std::thread::scope(|scope| {
        for _ in 1..threads {
            let (done, filer) = (done.clone(), filer.handle());
            scope.spawn(move || work(done, filer));
        }
        work(done, filer.handle());
    });
    let mut written: Vec<Option<TableWritten>> = (0..count).map(|_| None).collect();
    for (index, result) in finished.try_iter() {
        match result {
            Ok(table) => written[index] = Some(table),
            // A handover found the filer stopped: why it stopped (a full disk) is the error.
            Err(ExportError::Write(e)) if FilerStopped::is(&e) => {
                return Err(ExportError::Write(filer.stopped()));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(written.into_iter().flatten().collect())
}

/// Encoded bytes a table keeps in memory before they go to its file: a table this small is
/// handed whole to the [`Filer`], which makes, fills and syncs its file while the next table
/// is encoded.
pub const TABLE_IN_MEMORY_BYTES: usize = 4 << 20;

/// A table file's output: in memory up to [`TABLE_IN_MEMORY_BYTES`], then its (temporary)
/// [`OutputFile`].
struct TableOutput {
    path: PathBuf,
    state: TableBytes,
}

enum TableBytes {
    Memory(Vec<u8>),
    /// Written through as parquet's writer buffers.
    File(OutputFile),
}

impl TableOutput {
    fn new(path: PathBuf) -> Self {
        Self {
            path,
            state: TableBytes::Memory(Vec::new()),
        }
    }

    /// The whole table to `filer`, to be synced and committed with the flight's others.
    fn hand_to(self, filer: &FilerHandle) -> std::io::Result<()> {
        match self.state {
            TableBytes::Memory(bytes) => filer.write(self.path, bytes),
            TableBytes::File(file) => filer.sync(file),
        }
    }
}

impl Write for TableOutput {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match &mut self.state {
            TableBytes::File(file) => file.file().write(buf),
            TableBytes::Memory(bytes) if bytes.len() + buf.len() <= TABLE_IN_MEMORY_BYTES => {
                bytes.extend_from_slice(buf);
                Ok(buf.len())
            }
            TableBytes::Memory(bytes) => {
                // Its folder may be in the making on the filer's thread: made twice is made.
                if let Some(dir) = self.path.parent() {
                    std::fs::create_dir_all(dir)?;
                }
                let file = OutputFile::create(&self.path)?;
                file.file().write_all(bytes)?;
                let written = file.file().write(buf)?;
                self.state = TableBytes::File(file);
                Ok(written)
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match &mut self.state {
            TableBytes::File(file) => file.file().flush(),
            TableBytes::Memory(_) => Ok(()),
        }
    }
}

/// A table being written, with what its file's metadata will say.
struct OpenTable {
    key: String,
    topic: String,
    format_texts: String,
    table: TopicTable<TableOutput>,
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

impl DatasetSink {
    /// Writes the largest buffered row group until the buffers fit [`BUDGET`].
    fn keep_budget(&mut self) -> Result<(), ExportError> {
        while self.buffered > BUDGET {
            let Some(largest) = (self.tables.iter_mut()).max_by_key(|t| t.table.buffered_bytes())
            else {
                break;
            };
            let before = largest.table.buffered_bytes();
            largest.table.flush_row_group()?;
            self.buffered -= before;
        }
        Ok(())
    }
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
                let variants = self
                    .by_topic
                    .keys()
                    .filter(|(name, _)| name == source.format)
                    .count();
                let mut key = table_key(source.format, &self.identity);
                if variants > 0 {
                    key = key.replace(".parquet", &format!("_{}.parquet", variants + 1));
                }
                let path = self.root.join(&key);
                if let Some(dir) = path.parent() {
                    self.filer.make_folder(dir.to_owned())?;
                }
                let out = TableOutput::new(path);
                let table =
                    TopicTable::new(columns, source.layout.size, self.identity.clone(), out)?;
                self.tables.push(OpenTable {
                    key,
                    topic: source.format.to_owned(),
                    format_texts: source.format_texts.to_owned(),
                    table,
                });
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
        let table = &mut self.tables[index].table;
        let before = table.buffered_bytes();
        table.push(multi_id, timestamp_us, data);
        if table.row_group_full() {
            table.flush_row_group()?;
            self.buffered -= before;
        } else {
            self.buffered += table.buffered_bytes() - before;
            self.keep_budget()?;
        }
        Ok(())
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
            ulog_level,
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
