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

use crate::export::{ExportError, ExportOptions, ExportStats, Sink, walk};
use crate::ros::ros2::{LOG_SCHEMA, LOG_TYPE, Ros2Type, encode_log};

/// The MCAP profile: ROS 2 types, CDR.
pub const PROFILE: &str = "ros2";

/// Writes the ULog stream `ulog` to `out` as MCAP.
pub fn write<W: Write + Seek>(
    ulog: &[u8],
    options: &ExportOptions,
    out: W,
) -> Result<ExportStats, ExportError> {
    let chunk_size = (ulog.len() as u64 / 200).clamp(16 << 10, 1 << 20);
    let writer = ::mcap::WriteOptions::new()
        .profile(PROFILE)
        .library(concat!("ulog-recv ", env!("CARGO_PKG_VERSION")))
        .compression(Some(::mcap::Compression::Zstd))
        // Chunks this small compress faster on the calling thread than handed to workers.
        .compression_threads(0)
        .chunk_size(Some(chunk_size))
        .create(out)?;
    let mut sink = McapSink {
        writer,
        schemas: HashMap::new(),
        sequences: HashMap::new(),
        log_channel: None,
        buffer: Vec::new(),
    };
    let (stats, metadata) = walk(ulog, options, &mut sink)?;
    for (name, map) in [
        ("ulog_info", metadata.info),
        ("ulog_initial_parameters", metadata.initial_parameters),
        ("ulog_changed_parameters", metadata.changed_parameters),
    ] {
        sink.writer.write_metadata(&::mcap::records::Metadata {
            name: name.to_owned(),
            metadata: map,
        })?;
    }
    sink.writer.finish()?;
    Ok(stats)
}

struct McapSink<W: Write + Seek> {
    writer: ::mcap::Writer<W>,
    /// Schema id of each type name.
    schemas: HashMap<String, u16>,
    /// Next sequence number of each channel.
    sequences: HashMap<u16, u32>,
    log_channel: Option<u16>,
    buffer: Vec<u8>,
}

impl<W: Write + Seek> McapSink<W> {
    fn schema(&mut self, name: &str, text: &str) -> Result<u16, ExportError> {
        if let Some(&id) = self.schemas.get(name) {
            return Ok(id);
        }
        let id = self.writer.add_schema(name, "ros2msg", text.as_bytes())?;
        self.schemas.insert(name.to_owned(), id);
        Ok(id)
    }

    fn put(&mut self, channel: u16, timestamp_us: u64) -> Result<(), ExportError> {
        let sequence = self.sequences.entry(channel).or_insert(0);
        let ns = timestamp_us.saturating_mul(1000);
        self.writer.write_to_known_channel(
            &::mcap::records::MessageHeader {
                channel_id: channel,
                sequence: *sequence,
                log_time: ns,
                publish_time: ns,
            },
            &self.buffer,
        )?;
        *sequence = sequence.wrapping_add(1);
        Ok(())
    }
}

impl<W: Write + Seek> Sink for McapSink<W> {
    fn channel(&mut self, topic: &str, ty: &Ros2Type) -> Result<u32, ExportError> {
        let schema = self.schema(&ty.name, &ty.schema)?;
        Ok(self
            .writer
            .add_channel(schema, topic, "cdr", &BTreeMap::new())?
            .into())
    }

    fn sample(
        &mut self,
        channel: u32,
        ty: &Ros2Type,
        timestamp_us: u64,
        data: &[u8],
    ) -> Result<(), ExportError> {
        if ty.encode(data, &mut self.buffer).is_err() {
            return Ok(());
        }
        self.put(channel as u16, timestamp_us)
    }

    fn log(
        &mut self,
        timestamp_us: u64,
        ulog_level: u8,
        name: &str,
        text: &[u8],
    ) -> Result<(), ExportError> {
        let channel = match self.log_channel {
            Some(id) => id,
            None => {
                let schema = self.schema(LOG_TYPE, LOG_SCHEMA)?;
                let id = self
                    .writer
                    .add_channel(schema, "/log", "cdr", &BTreeMap::new())?;
                *self.log_channel.insert(id)
            }
        };
        encode_log(timestamp_us, ulog_level, name, text, &mut self.buffer);
        self.put(channel, timestamp_us)
    }
}
