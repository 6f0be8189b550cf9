//! A ULog stream as an MCAP file, profile `ros2`: one channel per topic instance (`/NAME`,
//! `/NAME/N`) with its `ros2msg` schema and CDR messages, `/log` as `rcl_interfaces/msg/Log`,
//! log time (and publish time) the sample's ULog timestamp in ns; zstd-compressed chunks with
//! message indexes and a summary section (so a reader fetches a time window through the
//! index); the ULog info and parameters as metadata records `ulog_info`,
//! `ulog_initial_parameters` and `ulog_changed_parameters`. Written with the `mcap` crate.
//!
//! Chunks hold about 1/200 of the log's size in messages, so that a window of a long flight
//! touches few of them, but at least 256 KB and at most 1 MB: smaller chunks compress worse
//! and slower (on sample.ulg, 4 MB: 16 KB chunks ran at 0.8x the speed of 256 KB ones, 64 KB
//! at 0.85x, 1 MB at 1.03x). zstd runs at level 1: level 3 took 1.1x the time for 2 % less
//! output.
//!
//! Nearly all the time is the `mcap` writer's: each message goes to zstd's streaming
//! compressor as seven small writes (opcode, length, four header fields, data), each a call
//! into zstd, and those calls cost as much as the compression itself. Decoding and CDR are a
//! quarter at most (a ROS 2 bag, the same decoding and CDR, exports at 4x the speed). So more
//! threads do not pay: handing the writer batches from a second thread, or
//! zstd's own worker thread, measured the same speed as one thread (141-148 MB/s on sample.ulg
//! all three), and LZ4 chunks 1.15x for 18 % more output.

use std::collections::{BTreeMap, HashMap};
use std::io::{Seek, Write};

use crate::export::{ExportError, ExportOptions, ExportStats, Sink, walk};
use crate::ros::ros2::{LOG_SCHEMA, LOG_TYPE, Ros2Type, encode_log};

/// The MCAP profile: ROS 2 types, CDR.
pub const PROFILE: &str = "ros2";

/// zstd level of the chunks (see the module docs).
const ZSTD_LEVEL: u32 = 1;

/// Writes the ULog stream `ulog` to `out` as MCAP.
pub fn write<W: Write + Seek>(
    ulog: &[u8],
    options: &ExportOptions,
    out: W,
) -> Result<ExportStats, ExportError> {
    let chunk_size = (ulog.len() as u64 / 200).clamp(256 << 10, 1 << 20);
    let writer = ::mcap::WriteOptions::new()
        .profile(PROFILE)
        .library(concat!("ulog-recv ", env!("CARGO_PKG_VERSION")))
        .compression(Some(::mcap::Compression::Zstd))
        .compression_level(ZSTD_LEVEL)
        // zstd's worker threads do not pay (see the module docs).
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
