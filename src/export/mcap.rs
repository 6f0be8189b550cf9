//! A ULog stream as an MCAP file, profile `ros2`: one channel per topic instance (`/NAME`,
//! `/NAME/N`) with its `ros2msg` schema and CDR messages, `/log` as `rcl_interfaces/msg/Log`,
//! log time (and publish time) the sample's ULog timestamp in ns; zstd-compressed chunks with
//! message indexes and a summary section (so a reader fetches a time window through the
//! index); the ULog info and parameters as metadata records `ulog_info`,
//! `ulog_initial_parameters` and `ulog_changed_parameters`. Written with the `mcap` crate.
//!
//! Chunks hold about 1/200 of the log (16 KB to 1 MB of messages), so that a window of a long
//! flight touches few of them.

use std::collections::{BTreeMap, HashMap};
use std::io::{Seek, Write};

use crate::export::{ExportError, ExportOptions, ExportStats};
use crate::ros2msg::{LOG_SCHEMA, LOG_TYPE, Ros2Type, encode_log};
use crate::summary::OwnedValue;
use crate::ulog::{Decoder, Message, Reader};

/// The MCAP profile: ROS 2 types, CDR.
pub const PROFILE: &str = "ros2";

/// A topic instance's channel, made at its first exported sample.
struct Channel {
    id: u16,
    sequence: u32,
}

/// Writes the ULog stream `ulog` to `out` as MCAP.
pub fn write<W: Write + Seek>(
    ulog: &[u8],
    options: &ExportOptions,
    out: W,
) -> Result<ExportStats, ExportError> {
    let chunk_size = (ulog.len() as u64 / 200).clamp(16 << 10, 1 << 20);
    let mut writer = ::mcap::WriteOptions::new()
        .profile(PROFILE)
        .library(concat!("ulog-recv ", env!("CARGO_PKG_VERSION")))
        .compression(Some(::mcap::Compression::Zstd))
        // Chunks this small compress faster on the calling thread than handed to workers.
        .compression_threads(0)
        .chunk_size(Some(chunk_size))
        .create(out)?;
    let mut reader = Reader::new();
    let mut decoder = Decoder::new();
    reader.push(ulog);
    reader.finish();
    let mut stats = ExportStats::default();
    // (message id, its subscription's name and multi id) → channel; types by format name.
    let mut channels: HashMap<(u16, String, u8), Channel> = HashMap::new();
    // Types by format name, compiled as subscriptions appear; schema ids once written.
    let mut types: HashMap<String, (Ros2Type, Option<u16>)> = HashMap::new();
    let mut log_channel: Option<Channel> = None;
    let mut info = BTreeMap::new();
    let mut initial_parameters = BTreeMap::new();
    let mut changed_parameters = BTreeMap::new();
    let mut in_data = false;
    let mut cdr = Vec::new();
    let wants_log = options.wants("log");
    while let Some(item) = reader.next_record() {
        let record = item?;
        match &record.message {
            Message::Info(kv) => {
                info.insert(kv.name.to_owned(), text(&kv.value().into()));
            }
            Message::Parameter(kv) => {
                let value = text(&kv.value().into());
                if in_data {
                    // Changes in flight, keyed `NAME@TIME_US` (a name may change often).
                    let time = decoder.last_timestamp();
                    changed_parameters.insert(format!("{}@{time}", kv.name), value);
                } else {
                    initial_parameters.insert(kv.name.to_owned(), value);
                }
            }
            Message::AddLogged { name, .. } => {
                in_data = true;
                if !types.contains_key(*name)
                    && let Ok(ty) = Ros2Type::compile(name, decoder.formats())
                {
                    types.insert((*name).to_owned(), (ty, None));
                }
            }
            Message::Logging {
                level,
                timestamp,
                text,
            } if wants_log && options.in_window(*timestamp) => {
                let channel = log_channel_of(&mut writer, &mut log_channel, &mut stats)?;
                encode_log(*timestamp, *level, "px4", text, &mut cdr);
                write_message(&mut writer, channel, *timestamp, &cdr)?;
                stats.log_messages += 1;
            }
            Message::LoggingTagged {
                level,
                tag,
                timestamp,
                text,
            } if wants_log && options.in_window(*timestamp) => {
                let channel = log_channel_of(&mut writer, &mut log_channel, &mut stats)?;
                encode_log(*timestamp, *level, &format!("px4/{tag}"), text, &mut cdr);
                write_message(&mut writer, channel, *timestamp, &cdr)?;
                stats.log_messages += 1;
            }
            _ => {}
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
        let key = (sample.msg_id, name.to_owned(), sample.multi_id);
        // A format ROS 2 types cannot express (never in PX4's logs) is left out.
        let Some((ty, schema)) = types.get_mut(name) else {
            continue;
        };
        if !channels.contains_key(&key) {
            let schema = match *schema {
                Some(id) => id,
                None => {
                    *schema.insert(writer.add_schema(&ty.name, "ros2msg", ty.schema.as_bytes())?)
                }
            };
            let topic = match sample.multi_id {
                0 => format!("/{name}"),
                n => format!("/{name}/{n}"),
            };
            let id = writer.add_channel(schema, &topic, "cdr", &BTreeMap::new())?;
            channels.insert(key.clone(), Channel { id, sequence: 0 });
            stats.channels += 1;
        }
        if ty.encode(sample.data, &mut cdr).is_err() {
            continue;
        }
        let channel = channels.get_mut(&key).expect("made above");
        write_message(&mut writer, channel, timestamp, &cdr)?;
        stats.samples += 1;
    }
    for (name, map) in [
        ("ulog_info", info),
        ("ulog_initial_parameters", initial_parameters),
        ("ulog_changed_parameters", changed_parameters),
    ] {
        writer.write_metadata(&::mcap::records::Metadata {
            name: name.to_owned(),
            metadata: map,
        })?;
    }
    writer.finish()?;
    Ok(stats)
}

fn log_channel_of<'c, W: Write + Seek>(
    writer: &mut ::mcap::Writer<W>,
    slot: &'c mut Option<Channel>,
    stats: &mut ExportStats,
) -> Result<&'c mut Channel, ExportError> {
    if slot.is_none() {
        let schema = writer.add_schema(LOG_TYPE, "ros2msg", LOG_SCHEMA.as_bytes())?;
        let id = writer.add_channel(schema, "/log", "cdr", &BTreeMap::new())?;
        stats.channels += 1;
        *slot = Some(Channel { id, sequence: 0 });
    }
    Ok(slot.as_mut().expect("made above"))
}

fn write_message<W: Write + Seek>(
    writer: &mut ::mcap::Writer<W>,
    channel: &mut Channel,
    timestamp_us: u64,
    data: &[u8],
) -> Result<(), ExportError> {
    let ns = timestamp_us.saturating_mul(1000);
    writer.write_to_known_channel(
        &::mcap::records::MessageHeader {
            channel_id: channel.id,
            sequence: channel.sequence,
            log_time: ns,
            publish_time: ns,
        },
        data,
    )?;
    channel.sequence = channel.sequence.wrapping_add(1);
    Ok(())
}

/// An info or parameter value as metadata text: numbers as Rust prints them, strings as
/// they are, bytes as hex.
fn text(value: &OwnedValue) -> String {
    match value {
        OwnedValue::Str(s) => s.clone(),
        OwnedValue::Int(i) => i.to_string(),
        OwnedValue::UInt(u) => u.to_string(),
        OwnedValue::Float(f) => f.to_string(),
        OwnedValue::Bytes(b) => b.iter().map(|x| format!("{x:02x}")).collect(),
    }
}
