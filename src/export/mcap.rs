//! A ULog stream as an MCAP file, profile `ros2`: one channel per topic instance (`/NAME`,
//! `/NAME/N`) with its `ros2msg` schema and CDR messages, `/log` as `rcl_interfaces/msg/Log`,
//! log time (and publish time) the sample's ULog timestamp in ns; zstd-compressed chunks with
//! message indexes and a summary section (so a reader fetches a time window through the
//! index); the ULog info and parameters as metadata records `ulog_info`,
//! `ulog_initial_parameters` and `ulog_changed_parameters`. Written with the `mcap` crate.
//!
//! Two threads share the work: the caller's decodes the log and encodes each sample as CDR
//! into batches of about [`BATCH_BYTES`]; a writer thread hands them to the `mcap` writer,
//! which compresses. Compression is most of the time, so the pipeline runs at about the
//! writer's speed (measured: 1.7x one thread on a 4 MB PX4 log, `cargo bench --bench
//! export`). At most two batches wait between them, so memory stays bounded on any log.
//!
//! Chunks hold about 1/200 of the log's size in messages, so that a window of a long flight
//! touches few of them, but at least 256 KB and at most 1 MB: smaller chunks compress worse
//! and slower (on sample.ulg, 4 MB: 64 KB chunks ran at 0.85x the speed of 256 KB ones, 1 MB
//! ones at 1.03x). zstd runs at level 1: level 3 took 1.1x the time for 2 % less output.

use std::collections::BTreeMap;
use std::io::{Seek, Write};
use std::sync::mpsc;

use crate::export::{ExportError, ExportOptions, ExportStats, FlightMetadata, Sink, walk};
use crate::ros::ros2::{LOG_SCHEMA, LOG_TYPE, Ros2Type, encode_log};

/// The MCAP profile: ROS 2 types, CDR.
pub const PROFILE: &str = "ros2";

/// Encoded message bytes per batch handed to the writer thread.
pub const BATCH_BYTES: usize = 256 << 10;
/// zstd level of the chunks (see the module docs).
const ZSTD_LEVEL: u32 = 1;
/// Message bytes per chunk before compression, for a log of `ulog_len` bytes (see the
/// module docs).
fn chunk_bytes(ulog_len: usize) -> u64 {
    (ulog_len as u64 / 200).clamp(256 << 10, 1 << 20)
}

/// Writes the ULog stream `ulog` to `out` as MCAP.
pub fn write<W: Write + Seek + Send>(
    ulog: &[u8],
    options: &ExportOptions,
    out: W,
) -> Result<ExportStats, ExportError> {
    let writer = ::mcap::WriteOptions::new()
        .profile(PROFILE)
        .library(concat!("ulog-recv ", env!("CARGO_PKG_VERSION")))
        .compression(Some(::mcap::Compression::Zstd))
        .compression_level(ZSTD_LEVEL)
        // zstd's own workers wait for each chunk's end: the writer thread overlaps better.
        .compression_threads(0)
        .chunk_size(Some(chunk_bytes(ulog.len())))
        .create(out)?;
    let (batches, received) = mpsc::sync_channel::<Batch>(2);
    let (recycle, recycled) = mpsc::channel::<Batch>();
    std::thread::scope(|scope| {
        let writer = std::thread::Builder::new()
            .name("mcap-writer".into())
            .spawn_scoped(scope, move || write_batches(writer, received, recycle))
            .map_err(ExportError::Write)?;
        let mut sink = BatchSink {
            batches,
            recycled,
            batch: Batch::default(),
            schemas: Vec::new(),
            channels: Vec::new(),
            sequences: Vec::new(),
            log_channel: None,
            buffer: Vec::new(),
        };
        let walked = walk(ulog, options, &mut sink)
            .and_then(|(stats, metadata)| sink.finish(metadata).map(|()| stats));
        drop(sink);
        // The writer's own error says why a send failed: it comes first.
        let written = writer
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        written.and(walked)
    })
}

/// What the writer thread is asked to do, in order.
enum Op {
    Schema {
        id: u16,
        name: String,
        text: String,
    },
    Channel {
        id: u16,
        schema: u16,
        topic: String,
    },
    /// A message whose bytes are the next `len` of the batch's `bytes`.
    Message {
        header: ::mcap::records::MessageHeader,
        len: usize,
    },
    /// The flight's info and parameters, then the summary: the file is complete.
    Finish(FlightMetadata),
}

#[derive(Default)]
struct Batch {
    ops: Vec<Op>,
    bytes: Vec<u8>,
}

/// The writer thread: applies each batch's operations to the MCAP writer, then hands the
/// emptied batch back through `recycle` (reusing its memory spares page faults).
fn write_batches<W: Write + Seek>(
    mut writer: ::mcap::Writer<W>,
    batches: mpsc::Receiver<Batch>,
    recycle: mpsc::Sender<Batch>,
) -> Result<(), ExportError> {
    for mut batch in batches {
        let mut at = 0;
        for op in batch.ops.drain(..) {
            match op {
                Op::Schema { id, name, text } => {
                    writer.add_schema_with_id(id, &name, "ros2msg", text.as_bytes())?;
                }
                Op::Channel { id, schema, topic } => {
                    writer.add_channel_with_id(id, schema, &topic, "cdr", &BTreeMap::new())?;
                }
                Op::Message { header, len } => {
                    writer.write_to_known_channel(&header, &batch.bytes[at..at + len])?;
                    at += len;
                }
                Op::Finish(metadata) => {
                    for (name, map) in [
                        ("ulog_info", metadata.info),
                        ("ulog_initial_parameters", metadata.initial_parameters),
                        ("ulog_changed_parameters", metadata.changed_parameters),
                    ] {
                        writer.write_metadata(&::mcap::records::Metadata {
                            name: name.to_owned(),
                            metadata: map,
                        })?;
                    }
                    writer.finish()?;
                }
            }
        }
        batch.bytes.clear();
        // The decoding side may be gone (it has sent its last batch): nothing to do then.
        let _ = recycle.send(batch);
    }
    Ok(())
}

/// The decoding side: encodes messages into batches and sends them to the writer thread.
struct BatchSink {
    batches: mpsc::SyncSender<Batch>,
    /// Batches the writer thread has emptied.
    recycled: mpsc::Receiver<Batch>,
    batch: Batch,
    /// Type name of each schema; its id is its index + 1 (0 means "no schema" in MCAP).
    schemas: Vec<String>,
    /// Topic of each channel; its id is its index.
    channels: Vec<String>,
    /// Next sequence number of each channel, by id.
    sequences: Vec<u32>,
    log_channel: Option<u16>,
    buffer: Vec<u8>,
}

impl BatchSink {
    /// Sends the batch under way, if it has anything.
    fn send(&mut self) -> Result<(), ExportError> {
        if self.batch.ops.is_empty() {
            return Ok(());
        }
        let next = self.recycled.try_recv().unwrap_or_default();
        let batch = std::mem::replace(&mut self.batch, next);
        self.batches.send(batch).map_err(|_| {
            // The writer thread stopped on an error, which `write` reports instead of this.
            ExportError::Write(std::io::Error::other("the MCAP writer thread stopped"))
        })
    }

    fn finish(&mut self, metadata: FlightMetadata) -> Result<(), ExportError> {
        self.batch.ops.push(Op::Finish(metadata));
        self.send()
    }

    fn schema(&mut self, name: &str, text: &str) -> u16 {
        if let Some(i) = self.schemas.iter().position(|s| s == name) {
            return i as u16 + 1;
        }
        self.schemas.push(name.to_owned());
        let id = self.schemas.len() as u16;
        self.batch.ops.push(Op::Schema {
            id,
            name: name.to_owned(),
            text: text.to_owned(),
        });
        id
    }

    /// The channel of `topic` (the same topic, subscribed again, is the same channel).
    fn channel_of(&mut self, schema: u16, topic: &str) -> u16 {
        if let Some(i) = self.channels.iter().position(|t| t == topic) {
            return i as u16;
        }
        let id = self.channels.len() as u16;
        self.channels.push(topic.to_owned());
        self.sequences.push(0);
        self.batch.ops.push(Op::Channel {
            id,
            schema,
            topic: topic.to_owned(),
        });
        id
    }

    /// Queues the message in `buffer` on `channel`.
    fn put(&mut self, channel: u16, timestamp_us: u64) -> Result<(), ExportError> {
        let sequence = &mut self.sequences[channel as usize];
        let ns = timestamp_us.saturating_mul(1000);
        self.batch.ops.push(Op::Message {
            header: ::mcap::records::MessageHeader {
                channel_id: channel,
                sequence: *sequence,
                log_time: ns,
                publish_time: ns,
            },
            len: self.buffer.len(),
        });
        *sequence = sequence.wrapping_add(1);
        self.batch.bytes.extend_from_slice(&self.buffer);
        if self.batch.bytes.len() >= BATCH_BYTES {
            self.send()?;
        }
        Ok(())
    }
}

impl Sink for BatchSink {
    fn channel(&mut self, topic: &str, ty: &Ros2Type) -> Result<u32, ExportError> {
        let schema = self.schema(&ty.name, &ty.schema);
        Ok(self.channel_of(schema, topic).into())
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
                let schema = self.schema(LOG_TYPE, LOG_SCHEMA);
                let id = self.channel_of(schema, "/log");
                *self.log_channel.insert(id)
            }
        };
        encode_log(timestamp_us, ulog_level, name, text, &mut self.buffer);
        self.put(channel, timestamp_us)
    }
}
