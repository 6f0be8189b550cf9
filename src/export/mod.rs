//! Flights exported to the formats other tools open: MCAP with the `ros2` profile (Foxglove,
//! PlotJuggler, `ros2 bag`), the ROS 1 bag formats 2.0 and 1.2 (ROS 1 tools, Foxglove,
//! PlotJuggler) and TIDE 2.0 (the seed's self-describing log format).
//!
//! - [`flight`]: the input, a `.ulg` or a session directory, as one ULog byte stream.
//! - [`walk`]: the one pass over the stream every format shares: which samples and strings
//!   go, on which topic, with which type; a [`Sink`] writes them.
//! - [`mcap`], [`bag`], [`tide`]: the writers ([`tide`] also reads its files back).
//! - [`dataset`]: the flight as Parquet tables, one per topic, in the fleet's layout.
//! - [`signals`]: a few of its signals, thinned for a plot (the web page's flight view).
//!
//! The walk also runs the flight diagnostics ([`crate::diagnose`]) over every sample, for the
//! sinks that take findings (MCAP's `/diagnostics` channel, the tables' `diagnostics`).
//!
//! Topics are the Foxglove server's (`/NAME`, `/NAME/N`, `/log`, `/diagnostics`), with the same types
//! ([`crate::ros::ros2`], and [`crate::ros::ros1`] for ROS 1), so that a recording and the live
//! view look alike.

pub mod bag;
pub mod dataset;
pub mod flight;
pub mod mcap;
pub mod signals;
pub mod tide;

use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use crate::diagnose::{Detectors, Finding, Selection};
use crate::ros::ros2::Ros2Type;
use crate::ulog::format::{FieldType, Formats};
use crate::ulog::glob;
use crate::ulog::summary::OwnedValue;
use crate::ulog::{Decoder, Message, Reader, Sample, Value};

/// What to export.
#[derive(Debug, Clone, Default)]
pub struct ExportOptions {
    /// Log time window in µs (inclusive); `None`: from the start / to the end.
    pub from_us: Option<u64>,
    pub to_us: Option<u64>,
    /// Topic name patterns (`*`, `?`); empty: every topic. `/log` is kept unless patterns are
    /// given that do not match `log`.
    pub topics: Vec<String>,
    /// A session's column to read alone (`main`, or a column's name); `None`: every column,
    /// joined.
    pub column: Option<String>,
    /// The flight diagnostics' analyzers to run (all by default), for the sinks that take
    /// findings. They watch the whole flight; the findings made in the window are exported.
    pub diagnostics: Selection,
}

impl ExportOptions {
    /// Whether a sample or string stamped `timestamp` lies in the window.
    pub fn in_window(&self, timestamp: u64) -> bool {
        self.from_us.is_none_or(|f| timestamp >= f) && self.to_us.is_none_or(|t| timestamp <= t)
    }

    /// Whether the topic (format) `name` is exported.
    pub fn wants(&self, name: &str) -> bool {
        self.topics.is_empty() || self.topics.iter().any(|p| glob::matches(p, name))
    }
}

/// What an export wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExportStats {
    /// Channels (topic instances with at least one message, and `/log`; `/diagnostics` is
    /// counted in `findings`).
    pub channels: usize,
    /// Samples written.
    pub samples: u64,
    /// Logged strings written to `/log`.
    pub log_messages: u64,
    /// Findings of the flight diagnostics handed to a sink that takes them (`/diagnostics`).
    pub findings: u64,
}

/// Why an export failed.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Session(#[from] crate::store::snippet::SnippetError),
    #[error(transparent)]
    Reading(#[from] crate::store::reading::SessionError),
    #[error(transparent)]
    Reference(#[from] crate::store::reference::ReferenceError),
    #[error(transparent)]
    NotULog(#[from] crate::ulog::ReadError),
    #[error(transparent)]
    Input(#[from] crate::store::input::InputError),
    #[error("cannot read the flight: {0}")]
    ReadFlight(#[source] std::io::Error),
    #[error("cannot write the export: {0}")]
    Write(#[from] std::io::Error),
    #[error(transparent)]
    Table(#[from] dataset::TableError),
}

/// The info and parameters of a flight, as text (`ulog_info`, `ulog_initial_parameters`,
/// `ulog_changed_parameters` keyed `NAME@TIME_US`).
#[derive(Debug, Clone, Default)]
pub struct FlightMetadata {
    pub info: BTreeMap<String, String>,
    pub initial_parameters: BTreeMap<String, String>,
    pub changed_parameters: BTreeMap<String, String>,
}

/// Where a channel's samples come from: the ULog topic instance and its formats.
pub struct TopicSource<'a> {
    /// The format (uORB topic) name: `vehicle_status`.
    pub format: &'a str,
    /// The instance: 0 for `/vehicle_status`, N for `/vehicle_status/N`.
    pub multi_id: u8,
    /// The ULog format text of the topic, then of each format it nests (each once), a line
    /// each ([`format_texts`]).
    pub format_texts: &'a str,
    /// The topic's compiled layout.
    pub layout: &'a crate::ulog::Layout,
}

/// The ULog format text of `name`, then of each format it nests (each once, in the order first
/// met), a line each: what a reader needs to read the topic's samples as ULog.
pub fn format_texts(name: &str, formats: &Formats) -> String {
    let mut names = vec![name];
    let mut k = 0;
    while k < names.len() {
        if let Some(def) = formats.get(names[k]) {
            for field in &def.fields {
                if let FieldType::Nested(inner) = &field.ty
                    && !names.contains(&inner.as_str())
                {
                    names.push(inner);
                }
            }
        }
        k += 1;
    }
    let mut text = String::new();
    for def in names.iter().filter_map(|n| formats.get(*n)) {
        text.push_str(&def.to_text());
        text.push('\n');
    }
    text
}

/// Where [`walk`] puts what it exports.
pub trait Sink {
    /// A topic instance's first exported sample comes: its channel's number for [`sample`].
    ///
    /// [`sample`]: Sink::sample
    fn channel(
        &mut self,
        topic: &str,
        ty: &Ros2Type,
        source: &TopicSource<'_>,
    ) -> Result<u32, ExportError>;
    /// A sample of `channel` (its data after the message id), stamped `timestamp_us`.
    fn sample(
        &mut self,
        channel: u32,
        ty: &Ros2Type,
        timestamp_us: u64,
        data: &[u8],
    ) -> Result<(), ExportError>;
    /// A logged string (`name`: `px4`, or `px4/TAG` for a tagged one).
    fn log(
        &mut self,
        timestamp_us: u64,
        ulog_level: u8,
        name: &str,
        text: &[u8],
    ) -> Result<(), ExportError>;
    /// A dropout in the stream, after the sample stamped `timestamp_us`: `duration_ms` of
    /// data the logger lost. Only the tables keep them.
    fn dropout(&mut self, _timestamp_us: u64, _duration_ms: u16) -> Result<(), ExportError> {
        Ok(())
    }
    /// Whether the sink takes findings: only then does [`walk`] run the diagnostics.
    fn takes_findings(&self) -> bool {
        false
    }
    /// A finding of the flight diagnostics, as the walk makes it (in the order made, which is
    /// log time order of when each was made: [`Finding::made_at_us`]).
    fn finding(&mut self, _finding: &Finding) -> Result<(), ExportError> {
        Ok(())
    }
}

/// A flight's ULog stream as the writers read it: in pieces, from the start, as many times as
/// a writer needs (TIDE reads it twice). Bytes in memory (`[u8]`: a session joined, a
/// snippet) or a `.ulg` file read from disk ([`FlightFile`]), so that exporting a file holds
/// a piece of it at a time, never the whole flight.
pub trait Flight {
    /// Bytes in the stream (what the writers size their chunks by).
    fn len(&self) -> u64;
    /// Whether the stream is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The stream from its first byte.
    fn open(&self) -> Result<Box<dyn std::io::Read + '_>, ExportError>;
}

impl Flight for [u8] {
    fn len(&self) -> u64 {
        <[u8]>::len(self) as u64
    }

    fn open(&self) -> Result<Box<dyn std::io::Read + '_>, ExportError> {
        Ok(Box::new(self))
    }
}

impl Flight for Vec<u8> {
    fn len(&self) -> u64 {
        self.as_slice().len() as u64
    }

    fn open(&self) -> Result<Box<dyn std::io::Read + '_>, ExportError> {
        Ok(Box::new(self.as_slice()))
    }
}

/// A `.ulg` file as a [`Flight`]: opened again for each pass, read in pieces.
#[derive(Debug, Clone)]
pub struct FlightFile {
    pub path: std::path::PathBuf,
    pub len: u64,
}

impl Flight for FlightFile {
    fn len(&self) -> u64 {
        self.len
    }

    fn open(&self) -> Result<Box<dyn std::io::Read + '_>, ExportError> {
        let file = std::fs::File::open(&self.path).map_err(|source| ExportError::Read {
            path: self.path.clone(),
            source,
        })?;
        Ok(Box::new(file))
    }
}

/// One column of a session as a [`Flight`]: read split by split, each pass from the start
/// ([`ColumnStream`](crate::store::reading::ColumnStream)), so a long session exports holding
/// one split at a time.
#[derive(Debug, Clone)]
pub struct SessionColumnFlight {
    pub dir: std::path::PathBuf,
    pub column: Option<String>,
    /// Bytes of its split files.
    pub len: u64,
}

impl Flight for SessionColumnFlight {
    fn len(&self) -> u64 {
        self.len
    }

    fn open(&self) -> Result<Box<dyn std::io::Read + '_>, ExportError> {
        match crate::store::reading::ColumnStream::open(&self.dir, self.column.as_deref())? {
            Some(stream) => Ok(Box::new(stream)),
            // The manifest changed between two passes: read it as it is now, whole.
            None => Ok(Box::new(std::io::Cursor::new(
                crate::store::reading::read_session(&self.dir, self.column.as_deref())?,
            ))),
        }
    }
}

/// The decoding side's end of an export's writer ([`with_writer`]).
pub(crate) struct Steps<S> {
    sender: StepSender<S>,
}

/// Bounded to a writer thread; unbounded to a writer that runs once decoding is done.
enum StepSender<S> {
    ToThread(std::sync::mpsc::SyncSender<S>),
    ToLater(std::sync::mpsc::Sender<S>),
}

impl<S> Steps<S> {
    /// Hands `step` to the writer. Fails when the writer thread has stopped on an error,
    /// which [`with_writer`] reports instead of this one.
    pub(crate) fn send(&self, step: S) -> Result<(), ExportError> {
        let sent = match &self.sender {
            StepSender::ToThread(sender) => sender.send(step).is_ok(),
            StepSender::ToLater(sender) => sender.send(step).is_ok(),
        };
        match sent {
            true => Ok(()),
            false => Err(ExportError::Write(std::io::Error::other(
                "the export's writer thread stopped",
            ))),
        }
    }
}

/// Where [`with_writer`] runs the writer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WriterAt {
    /// On a thread of its own, while the next steps are decoded.
    Thread,
    /// On the caller's thread once decoding is done, every step waiting in memory: for a
    /// log of a step or two, which a thread's start would cost more than it saves.
    After,
}

impl WriterAt {
    /// For a log of `ulog_len` bytes in chunks of about `chunk_limit` bytes: after, when the
    /// log makes a chunk or so (its chunks in memory are then about the log's size).
    pub(crate) fn for_chunks(ulog_len: u64, chunk_limit: usize) -> Self {
        match ulog_len <= chunk_limit as u64 {
            true => WriterAt::After,
            false => WriterAt::Thread,
        }
    }
}

/// Runs `decode` on the caller's thread and `write` on a writer thread named `name` (it
/// compresses and writes while the next steps are decoded); `decode` hands it steps through
/// [`Steps`], at most two waiting, so memory stays bounded by a step's size. Returns what
/// `decode` returns, unless the writer failed: its error comes first, as it says why a send
/// failed. With [`WriterAt::After`], `write` runs on the caller's thread after `decode`.
pub(crate) fn with_writer<S: Send, T>(
    name: &str,
    at: WriterAt,
    write: impl FnOnce(std::sync::mpsc::Receiver<S>) -> Result<(), ExportError> + Send,
    decode: impl FnOnce(Steps<S>) -> Result<T, ExportError>,
) -> Result<T, ExportError> {
    if at == WriterAt::After {
        let (sender, received) = std::sync::mpsc::channel::<S>();
        let decoded = decode(Steps {
            sender: StepSender::ToLater(sender),
        });
        // A failed decoding's steps are not written: its error is the one reported.
        return decoded.and_then(|decoded| write(received).map(|()| decoded));
    }
    let (sender, received) = std::sync::mpsc::sync_channel::<S>(2);
    std::thread::scope(|scope| {
        let writer = std::thread::Builder::new()
            .name(name.into())
            .spawn_scoped(scope, move || write(received))
            .map_err(ExportError::Write)?;
        // `decode` owns the sender: when it returns, early or not, the writer's steps end.
        let decoded = decode(Steps {
            sender: StepSender::ToThread(sender),
        });
        let written = writer
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        written.and(decoded)
    })
}

/// Bytes a pass over a [`Flight`] reads at a time.
const PIECE: usize = 256 << 10;

/// The records of `flight`, handed to `each` in order until it returns `false`: the stream
/// read in pieces through the incremental [`Reader`], so a pass holds a piece (and a message
/// it splits), never the whole flight. A record the reader refuses ends the pass with its
/// error.
fn each_record(
    flight: &(impl Flight + ?Sized),
    mut each: impl FnMut(&crate::ulog::Record<'_>) -> Result<bool, ExportError>,
) -> Result<(), ExportError> {
    let mut input = flight.open()?;
    let mut reader = Reader::new();
    let mut piece = vec![0u8; PIECE];
    loop {
        let n = loop {
            match input.read(&mut piece) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(source) => return Err(ExportError::ReadFlight(source)),
            }
        };
        if n == 0 {
            reader.finish();
        } else {
            reader.push(&piece[..n]);
        }
        // By reference: see `Reader::next_record`.
        while let Some(item) = &reader.next_record() {
            let record = item.as_ref().map_err(|e| ExportError::from(e.clone()))?;
            if !each(record)? {
                return Ok(());
            }
        }
        if n == 0 {
            return Ok(());
        }
    }
}

/// Reads the ULog stream of `flight` and hands `sink` what `options` export; returns the
/// counts and the flight's info and parameters.
pub fn walk(
    flight: &(impl Flight + ?Sized),
    options: &ExportOptions,
    sink: &mut impl Sink,
) -> Result<(ExportStats, FlightMetadata), ExportError> {
    let mut decoder = Decoder::new();
    let mut stats = ExportStats::default();
    let mut metadata = FlightMetadata::default();
    // Channel of each topic instance (format name, multi id), whatever message ids it comes
    // under; types by format name, compiled as subscriptions appear.
    let mut channels: HashMap<(String, u8), u32> = HashMap::new();
    let mut types: HashMap<String, Rc<(Ros2Type, String)>> = HashMap::new();
    // What becomes of each message id's samples, found at its first sample in the window and
    // kept until the id is subscribed again: a sample costs no lookup by name.
    let mut routes: Vec<Option<Route>> = Vec::new();
    let mut in_data = false;
    let mut log_channel = false;
    let wants_log = options.wants("log");
    let mut detectors = (sink.takes_findings() && !options.diagnostics.is_empty())
        .then(|| Detectors::new(options.diagnostics));
    each_record(flight, |record| {
        if let Some(d) = &mut detectors {
            d.note(&record.message, decoder.last_timestamp());
        }
        let logged = match &record.message {
            Message::Info(kv) => {
                metadata
                    .info
                    .insert(kv.name.to_owned(), text(&kv.value().into()));
                None
            }
            Message::Parameter(kv) => {
                let value = text(&kv.value().into());
                if in_data {
                    let time = decoder.last_timestamp();
                    metadata
                        .changed_parameters
                        .insert(format!("{}@{time}", kv.name), value);
                } else {
                    metadata
                        .initial_parameters
                        .insert(kv.name.to_owned(), value);
                }
                None
            }
            Message::AddLogged { name, msg_id, .. } => {
                in_data = true;
                if !types.contains_key(*name)
                    && let Ok(ty) = Ros2Type::compile(name, decoder.formats())
                {
                    let texts = format_texts(name, decoder.formats());
                    types.insert((*name).to_owned(), Rc::new((ty, texts)));
                }
                if let Some(route) = routes.get_mut(usize::from(*msg_id)) {
                    *route = None;
                }
                None
            }
            Message::Logging {
                level,
                timestamp,
                text,
            } => Some((*timestamp, *level, "px4".to_owned(), *text)),
            Message::LoggingTagged {
                level,
                tag,
                timestamp,
                text,
            } => Some((*timestamp, *level, format!("px4/{tag}"), *text)),
            Message::Dropout { duration_ms } => {
                let timestamp = decoder.last_timestamp();
                if options.in_window(timestamp) {
                    sink.dropout(timestamp, *duration_ms)?;
                }
                return Ok(true);
            }
            _ => None,
        };
        if let Some((timestamp, level, name, text)) = logged {
            if wants_log && options.in_window(timestamp) {
                if !log_channel {
                    log_channel = true;
                    stats.channels += 1;
                }
                sink.log(timestamp, level, &name, text)?;
                stats.log_messages += 1;
            }
            return Ok(true);
        }
        let latest = decoder.last_timestamp();
        let Ok(Some(sample)) = decoder.handle_record(record) else {
            return Ok(true);
        };
        if let Some(d) = &mut detectors
            && d.reads(sample.msg_id)
        {
            d.observe(&sample);
            for finding in d.take_new() {
                if options.in_window(finding.made_at_us()) {
                    sink.finding(finding)?;
                    stats.findings += 1;
                }
            }
        }
        let timestamp = sample.timestamp.unwrap_or(latest);
        if !options.in_window(timestamp) {
            return Ok(true);
        }
        let at = usize::from(sample.msg_id);
        if routes.len() <= at {
            routes.resize(at + 1, None);
        }
        let route = match &mut routes[at] {
            Some(route) => route,
            empty => empty.insert(route_of(
                &sample,
                &types,
                options,
                &mut channels,
                sink,
                &mut stats,
            )?),
        };
        if let Route::To(channel, ty) = route {
            sink.sample(*channel, &ty.0, timestamp, sample.data)?;
            stats.samples += 1;
        }
        Ok(true)
    })?;
    Ok((stats, metadata))
}

/// What [`walk`] does with a message id's samples: hand them to a sink's channel, with their
/// type (and format text), or leave them out.
#[derive(Debug, Clone)]
enum Route {
    To(u32, Rc<(Ros2Type, String)>),
    Skip,
}

/// Where `sample`'s message id goes until it is subscribed again: its topic instance's
/// channel, opened on `sink` (and counted) the first time the instance is seen, or nowhere
/// when `options` leave its topic out or ROS types cannot express its format (never in PX4's
/// logs).
fn route_of(
    sample: &Sample<'_>,
    types: &HashMap<String, Rc<(Ros2Type, String)>>,
    options: &ExportOptions,
    channels: &mut HashMap<(String, u8), u32>,
    sink: &mut impl Sink,
    stats: &mut ExportStats,
) -> Result<Route, ExportError> {
    let name = sample.name();
    let Some(ty) = types.get(name).filter(|_| options.wants(name)) else {
        return Ok(Route::Skip);
    };
    let key = (name.to_owned(), sample.multi_id);
    if let Some(&channel) = channels.get(&key) {
        return Ok(Route::To(channel, ty.clone()));
    }
    let topic = match sample.multi_id {
        0 => format!("/{name}"),
        n => format!("/{name}/{n}"),
    };
    let source = TopicSource {
        format: name,
        multi_id: sample.multi_id,
        format_texts: &ty.1,
        layout: sample.layout,
    };
    let channel = sink.channel(&topic, &ty.0, &source)?;
    channels.insert(key, channel);
    stats.channels += 1;
    Ok(Route::To(channel, ty.clone()))
}

/// PX4's `ver_sw_release` (0xMMmmppTT: major, minor, patch, type) as `v1.11.2`, with the type
/// when it is not a release (255): `-dev`, `-alpha`, `-beta`, `-rc`.
pub fn release_text(release: u32) -> String {
    let [major, minor, patch, kind] = release.to_be_bytes();
    let kind = match kind {
        255 => "",
        0..=63 => "-dev",
        64..=127 => "-alpha",
        128..=191 => "-beta",
        _ => "-rc",
    };
    format!("v{major}.{minor}.{patch}{kind}")
}

/// An info or parameter value as text: numbers as Rust prints them, strings as they are,
/// bytes as hex.
fn text(value: &OwnedValue) -> String {
    match value {
        OwnedValue::Str(s) => s.clone(),
        OwnedValue::Int(i) => i.to_string(),
        OwnedValue::UInt(u) => u.to_string(),
        OwnedValue::Float(f) => f.to_string(),
        OwnedValue::Bytes(b) => b.iter().map(|x| format!("{x:02x}")).collect(),
    }
}

/// The topics whose `time_utc_usec` field gives a flight its UTC reference (PX4 names the GPS
/// topic one way or the other across versions).
pub const UTC_TOPICS: [&str; 2] = ["vehicle_gps_position", "sensor_gps"];

/// The flight's UTC reference: the µs to add to a log time (µs since boot) for µs since the
/// Unix epoch, from the first GPS sample ([`UTC_TOPICS`]) that carries a UTC time
/// (`time_utc_usec` > 0): its UTC time less its `timestamp`. `None` when no sample has one (no
/// GPS fix, a bench or SITL log without GPS). Only the GPS topics' samples are decoded.
pub fn utc_offset_us(flight: &(impl Flight + ?Sized)) -> Result<Option<i64>, ExportError> {
    let mut decoder = Decoder::new();
    let mut offset = None;
    each_record(flight, |record| {
        if let Message::Data { msg_id, .. } = &record.message {
            let gps = decoder
                .subscription(*msg_id)
                .is_some_and(|s| UTC_TOPICS.contains(&s.name()));
            if !gps {
                return Ok(true);
            }
        }
        let Ok(Some(sample)) = decoder.handle_record(record) else {
            return Ok(true);
        };
        if let (Some(Value::U64(utc)), Some(timestamp)) =
            (sample.get("time_utc_usec"), sample.timestamp)
            && utc > 0
        {
            offset = Some(utc as i64 - timestamp as i64);
            return Ok(false);
        }
        Ok(true)
    })
    .or_else(|e| match e {
        // A stream the walk will refuse says so there; before it, no reference was found.
        ExportError::NotULog(_) => Ok(()),
        other => Err(other),
    })?;
    Ok(offset)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ulog::writer::Writer;

    /// Every channel opened and every sample handed over, as a sink sees them.
    #[derive(Default)]
    struct Recorder {
        channels: Vec<String>,
        samples: Vec<(u32, u64)>,
    }

    impl Sink for Recorder {
        fn channel(
            &mut self,
            topic: &str,
            _ty: &Ros2Type,
            _source: &TopicSource<'_>,
        ) -> Result<u32, ExportError> {
            self.channels.push(topic.to_owned());
            Ok(self.channels.len() as u32 - 1)
        }

        fn sample(
            &mut self,
            channel: u32,
            _ty: &Ros2Type,
            timestamp_us: u64,
            _data: &[u8],
        ) -> Result<(), ExportError> {
            self.samples.push((channel, timestamp_us));
            Ok(())
        }

        fn log(&mut self, _: u64, _: u8, _: &str, _: &[u8]) -> Result<(), ExportError> {
            Ok(())
        }
    }

    /// A log whose message id 0 stands for `alpha`, then `beta`, then `alpha` again, and id
    /// 1 for `beta` instance 1 throughout; one sample each time, stamped in order.
    fn reused_ids() -> Vec<u8> {
        let mut w = Writer::new();
        w.header(1, 0);
        w.flag_bits([0; 8], [0; 8], [0; 3]).unwrap();
        for format in [
            "alpha:uint64_t timestamp;float x",
            "beta:uint64_t timestamp;int32_t n",
        ] {
            w.write(&Message::Format(format)).unwrap();
        }
        let mut stamp = 0u64;
        let mut sample = |w: &mut Writer, msg_id: u16| {
            stamp += 1000;
            let mut data = stamp.to_le_bytes().to_vec();
            data.extend_from_slice(&[0; 4]);
            w.write(&Message::Data {
                msg_id,
                data: &data,
            })
            .unwrap();
        };
        let add = |w: &mut Writer, msg_id: u16, name: &str, multi_id: u8| {
            let add = Message::AddLogged {
                multi_id,
                msg_id,
                name,
            };
            w.write(&add).unwrap();
        };
        add(&mut w, 0, "alpha", 0);
        add(&mut w, 1, "beta", 1);
        sample(&mut w, 0);
        sample(&mut w, 1);
        w.write(&Message::RemoveLogged { msg_id: 0 }).unwrap();
        add(&mut w, 0, "beta", 0);
        sample(&mut w, 0);
        sample(&mut w, 1);
        add(&mut w, 0, "alpha", 0);
        sample(&mut w, 0);
        w.take()
    }

    #[test]
    fn a_message_id_subscribed_again_goes_to_its_new_topics_channel() {
        let log = reused_ids();
        let mut sink = Recorder::default();
        let (stats, _) = walk(&log[..], &ExportOptions::default(), &mut sink).unwrap();
        assert_eq!(sink.channels, ["/alpha", "/beta/1", "/beta"]);
        // alpha's channel again once id 0 is alpha's again, not a fourth.
        assert_eq!(
            sink.samples,
            [(0, 1000), (1, 2000), (2, 3000), (1, 4000), (0, 5000)]
        );
        assert_eq!((stats.samples, stats.channels), (5, 3));

        // Topics left out stay out, whichever id they come under.
        let only_beta = ExportOptions {
            topics: vec!["beta".into()],
            ..ExportOptions::default()
        };
        let mut sink = Recorder::default();
        walk(&log[..], &only_beta, &mut sink).unwrap();
        assert_eq!(sink.channels, ["/beta/1", "/beta"]);
        assert_eq!(sink.samples, [(0, 2000), (1, 3000), (0, 4000)]);
    }
}
