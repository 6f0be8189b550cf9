//! Flights exported to the formats other tools open: MCAP with the `ros2` profile (Foxglove,
//! PlotJuggler, `ros2 bag`) and the ROS 1 bag format 2.0 (ROS 1 tools, Foxglove,
//! PlotJuggler).
//!
//! - [`flight`]: the input, a `.ulg` or a session directory, as one ULog byte stream.
//! - [`walk`]: the one pass over the stream every format shares: which samples and strings
//!   go, on which topic, with which type; a [`Sink`] writes them.
//! - [`mcap`], [`bag`]: the writers.
//!
//! Topics are the Foxglove server's (`/NAME`, `/NAME/N`, `/log`), with the same types
//! ([`crate::ros::ros2`], and [`crate::ros::ros1`] for ROS 1), so that a recording and the live
//! view look alike.

pub mod bag;
pub mod flight;
pub mod mcap;

use std::collections::{BTreeMap, HashMap};

use crate::ros::ros2::Ros2Type;
use crate::ulog::glob;
use crate::ulog::summary::OwnedValue;
use crate::ulog::{Decoder, Message, Reader};

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
    /// Channels (topic instances with at least one message, and `/log`).
    pub channels: usize,
    /// Samples written.
    pub samples: u64,
    /// Logged strings written to `/log`.
    pub log_messages: u64,
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
    #[error("cannot write the bag: {0}")]
    Write(#[from] std::io::Error),
}

/// The info and parameters of a flight, as text (`ulog_info`, `ulog_initial_parameters`,
/// `ulog_changed_parameters` keyed `NAME@TIME_US`).
#[derive(Debug, Clone, Default)]
pub struct FlightMetadata {
    pub info: BTreeMap<String, String>,
    pub initial_parameters: BTreeMap<String, String>,
    pub changed_parameters: BTreeMap<String, String>,
}

/// Where [`walk`] puts what it exports.
pub trait Sink {
    /// A topic instance's first exported sample comes: its channel's number for [`sample`].
    ///
    /// [`sample`]: Sink::sample
    fn channel(&mut self, topic: &str, ty: &Ros2Type) -> Result<u32, ExportError>;
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
}

/// Reads the ULog stream `ulog` and hands `sink` what `options` export; returns the counts and
/// the flight's info and parameters.
pub fn walk(
    ulog: &[u8],
    options: &ExportOptions,
    sink: &mut impl Sink,
) -> Result<(ExportStats, FlightMetadata), ExportError> {
    let mut reader = Reader::new();
    let mut decoder = Decoder::new();
    reader.push(ulog);
    reader.finish();
    let mut stats = ExportStats::default();
    let mut metadata = FlightMetadata::default();
    // Channel of each (message id, format name, multi id); types by format name, compiled as
    // subscriptions appear.
    let mut channels: HashMap<(u16, u8), (String, u32)> = HashMap::new();
    let mut types: HashMap<String, Ros2Type> = HashMap::new();
    let mut in_data = false;
    let mut log_channel = false;
    let wants_log = options.wants("log");
    while let Some(item) = reader.next_record() {
        let record = item?;
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
            Message::AddLogged { name, .. } => {
                in_data = true;
                if !types.contains_key(*name)
                    && let Ok(ty) = Ros2Type::compile(name, decoder.formats())
                {
                    types.insert((*name).to_owned(), ty);
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
            continue;
        }
        let latest = decoder.last_timestamp();
        let Ok(Some(sample)) = decoder.handle(&record.message) else {
            continue;
        };
        let timestamp = sample.timestamp.unwrap_or(latest);
        let name = sample.name();
        if !options.in_window(timestamp) || !options.wants(name) {
            continue;
        }
        // A format ROS types cannot express (never in PX4's logs) is left out.
        let Some(ty) = types.get(name) else { continue };
        let key = (sample.msg_id, sample.multi_id);
        let channel = match channels.get(&key) {
            Some((topic_name, channel)) if topic_name == name => *channel,
            // New, or the message id now stands for another topic.
            _ => {
                let topic = match sample.multi_id {
                    0 => format!("/{name}"),
                    n => format!("/{name}/{n}"),
                };
                let channel = sink.channel(&topic, ty)?;
                channels.insert(key, (name.to_owned(), channel));
                stats.channels += 1;
                channel
            }
        };
        sink.sample(channel, ty, timestamp, sample.data)?;
        stats.samples += 1;
    }
    Ok((stats, metadata))
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
