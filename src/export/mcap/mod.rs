//! A ULog stream as an MCAP file, profile `ros2`: one channel per topic instance (`/NAME`,
//! `/NAME/N`) with its `ros2msg` schema and CDR messages, `/log` as `rcl_interfaces/msg/Log`,
//! `/diagnostics` as `diagnostic_msgs/msg/DiagnosticArray` (the flight diagnostics' findings,
//! [`crate::ros::diagnostics`], each at the log time it was made), log time (and publish time)
//! the sample's ULog timestamp in ns; zstd-compressed chunks with
//! message indexes and a summary section (schemas, channels, statistics, chunk and metadata
//! indexes, summary offsets), so a reader fetches a time window through the index; the ULog
//! info and parameters as metadata records `ulog_info`, `ulog_initial_parameters` and
//! `ulog_changed_parameters`. CRCs: every chunk's records, the data section, the summary.
//!
//! The caller's thread decodes the log and lays each message's record out in the chunk under
//! way (schemas and channels go in the chunk that first uses them); a writer thread writes
//! each full chunk, compressed in one zstd call, with its message indexes. The compression
//! runs on one thread per core, at most four (`Compression`), each chunk going to the next
//! in turn, so that zstd, two thirds of the work, is not left to one core; the file is byte
//! for byte the one a single compressor writes. Memory stays bounded on any log: at most two
//! chunks wait for the writer and one per compressor is in its hands (a 241 MB log: 21.5 MB
//! peak RSS on 2 cores). The writer hands each written chunk back to be filled again: its
//! buffers keep their pages, which a fresh allocation would fault in anew on every chunk. A
//! log of about one chunk is written on the caller's thread once decoded
//! (`WriterAt::After`): a thread's start would cost more than it saves.
//!
//! Why not the `mcap` crate's writer: it hands every message to zstd's streaming compressor
//! as seven small writes, and those calls cost as much as the compression itself; it cannot
//! compress a chunk whole, nor on another thread (its zstd workers measured no faster). On
//! sample.ulg (4 MB) it wrote 143 MB/s of ULog, this writer about 2x that (`cargo bench
//! --bench export`). The files are checked by the Python `mcap` reader (`tests/mcap_read.py`,
//! CRCs validated), not by this code.
//!
//! Chunks hold about 1/200 of the log's size in messages, so that a window of a long flight
//! touches few of them, but at least 256 KB and at most 1 MB: smaller chunks compress worse
//! and slower. zstd runs at level 1: level 3 took 1.1x the time for 2 % less output.
//!
//! This file holds the export's surface and the decoding side (the sink that lays messages
//! out in chunks); `file` the writer thread (the file from its magic to its footer, the
//! summary section), `compress` the compressor threads, `records` the records' encoding.

mod compress;
pub mod dataflash;
mod file;
mod records;
#[cfg(test)]
mod tests;

use std::io::Write;
use std::sync::mpsc;

use self::compress::compressors_for;
use self::file::write_file;
use self::records::{channel_record, schema_record};

use crate::diagnose::Finding;
use crate::export::{
    ExportError, ExportOptions, ExportStats, Flight, FlightMetadata, Sink, Steps, TopicSource,
    WriterAt, walk, with_writer,
};
use crate::ros::diagnostics::{
    DIAGNOSTICS_SCHEMA, DIAGNOSTICS_TOPIC, DIAGNOSTICS_TYPE, PX4_HARDWARE_ID, encode_finding,
};
use crate::ros::ros2::{LOG_SCHEMA, LOG_TYPE, Ros2Type, encode_log};

/// The MCAP profile: ROS 2 types, CDR.
pub const PROFILE: &str = "ros2";
/// The file's first and last bytes.
const MAGIC: &[u8; 8] = b"\x89MCAP0\r\n";
/// zstd level of the chunks (see the module docs).
const ZSTD_LEVEL: i32 = 1;

/// Record opcodes (MCAP specification, version 0).
mod op {
    pub const HEADER: u8 = 0x01;
    pub const FOOTER: u8 = 0x02;
    pub const SCHEMA: u8 = 0x03;
    pub const CHANNEL: u8 = 0x04;
    pub const MESSAGE: u8 = 0x05;
    pub const CHUNK: u8 = 0x06;
    pub const MESSAGE_INDEX: u8 = 0x07;
    pub const CHUNK_INDEX: u8 = 0x08;
    pub const STATISTICS: u8 = 0x0B;
    pub const METADATA: u8 = 0x0C;
    pub const METADATA_INDEX: u8 = 0x0D;
    pub const SUMMARY_OFFSET: u8 = 0x0E;
    pub const DATA_END: u8 = 0x0F;
}

/// Message bytes per chunk, for a log of `ulog_len` bytes (see the module docs).
fn chunk_bytes(ulog_len: u64) -> usize {
    (ulog_len / 200).clamp(256 << 10, 1 << 20) as usize
}

/// Writes the ULog stream of `flight` to `out` as MCAP.
pub fn write<W: Write + Send>(
    flight: &(impl Flight + ?Sized),
    options: &ExportOptions,
    out: W,
) -> Result<ExportStats, ExportError> {
    let chunk_limit = chunk_bytes(flight.len());
    let compressors = compressors_for(flight.len(), chunk_limit);
    let at = WriterAt::for_chunks(flight.len(), chunk_limit);
    write_chunked(flight, options, out, chunk_limit, at, compressors)
}

/// Writes to `out`, as MCAP, what `fill` hands the sink: the messages of a flight of `len`
/// bytes (what the chunks are sized by), with `/diagnostics` named for `hardware_id`'s
/// autopilot.
fn write_sized<W: Write + Send>(
    len: u64,
    options: &ExportOptions,
    hardware_id: &'static str,
    out: W,
    fill: impl FnOnce(&mut ChunkSink) -> Result<(ExportStats, FlightMetadata), ExportError>,
) -> Result<ExportStats, ExportError> {
    let chunk_limit = chunk_bytes(len);
    let compressors = compressors_for(len, chunk_limit);
    let at = WriterAt::for_chunks(len, chunk_limit);
    let layout = ChunkLayout {
        limit: chunk_limit,
        at,
        compressors,
    };
    write_with(layout, options, hardware_id, out, fill)
}

/// How the chunks are made: their size, where they are written, by how many compressors.
struct ChunkLayout {
    limit: usize,
    at: WriterAt,
    compressors: usize,
}

/// [`write`] with chunks of `chunk_limit` bytes, written `at`, compressed by `compressors`
/// threads.
fn write_chunked<W: Write + Send>(
    flight: &(impl Flight + ?Sized),
    options: &ExportOptions,
    out: W,
    chunk_limit: usize,
    at: WriterAt,
    compressors: usize,
) -> Result<ExportStats, ExportError> {
    let layout = ChunkLayout {
        limit: chunk_limit,
        at,
        compressors,
    };
    write_with(layout, options, PX4_HARDWARE_ID, out, |sink| {
        walk(flight, options, sink)
    })
}

/// Writes to `out`, as MCAP in chunks laid out as `layout` says, what `fill` hands the sink.
fn write_with<W: Write + Send>(
    layout: ChunkLayout,
    options: &ExportOptions,
    hardware_id: &'static str,
    out: W,
    fill: impl FnOnce(&mut ChunkSink) -> Result<(ExportStats, FlightMetadata), ExportError>,
) -> Result<ExportStats, ExportError> {
    let ChunkLayout {
        limit: chunk_limit,
        at,
        compressors,
    } = layout;
    let (written, spares) = mpsc::channel();
    with_writer(
        "mcap-writer",
        at,
        move |received| write_file(out, received, written, compressors),
        |chunks| {
            let mut sink = ChunkSink {
                chunk_limit,
                chunks,
                spares,
                chunk: Chunk::with_room(chunk_limit),
                summary: Summary::default(),
                log_channel: None,
                diagnostics_channel: None,
                takes_findings: options.wants("diagnostics"),
                hardware_id,
                buffer: Vec::new(),
            };
            let (stats, metadata) = fill(&mut sink)?;
            sink.send_chunk()?;
            let summary = std::mem::take(&mut sink.summary);
            sink.chunks.send(Step::Finish { summary, metadata })?;
            Ok(stats)
        },
    )
}

/// The uncompressed records of one chunk and what its indexes need.
#[derive(Default)]
struct Chunk {
    records: Vec<u8>,
    /// Log times of its first and last message (earliest, latest).
    times: Option<(u64, u64)>,
    /// By channel id: (log time, offset of the message record in `records`) of each of its
    /// messages in the chunk (channels without any: empty).
    indexes: Vec<Vec<(u64, u64)>>,
}

impl Chunk {
    /// An empty chunk with room for `limit` bytes of records and the message that crosses it.
    fn with_room(limit: usize) -> Self {
        Chunk {
            records: Vec::with_capacity(limit + (64 << 10)),
            ..Chunk::default()
        }
    }

    /// Empties a written chunk for filling again, keeping its buffers' capacity.
    fn clear(&mut self) {
        self.records.clear();
        self.times = None;
        self.indexes.iter_mut().for_each(Vec::clear);
    }
}

/// What the summary section lists, gathered by the decoding side.
#[derive(Default)]
struct Summary {
    /// Schema records' contents, the id being the index + 1 (0 means "no schema").
    schemas: Vec<(String, String)>,
    /// (schema id, topic) per channel, the id being the index.
    channels: Vec<(u16, String)>,
    /// Messages per channel, by id.
    counts: Vec<u64>,
    times: Option<(u64, u64)>,
}

/// What the writer thread is handed, in order.
enum Step {
    Chunk(Chunk),
    Finish {
        summary: Summary,
        metadata: FlightMetadata,
    },
}

/// The decoding side: lays records out in the chunk under way, hands full ones over.
struct ChunkSink {
    chunk_limit: usize,
    chunks: Steps<Step>,
    /// Chunks the writer has written and emptied, to fill again.
    spares: mpsc::Receiver<Chunk>,
    chunk: Chunk,
    summary: Summary,
    log_channel: Option<u16>,
    diagnostics_channel: Option<u16>,
    /// Whether `/diagnostics` is exported (the topic patterns may leave it out).
    takes_findings: bool,
    /// The autopilot a finding's status names (`px4`, `ardupilot`).
    hardware_id: &'static str,
    /// The message being encoded.
    buffer: Vec<u8>,
}

impl ChunkSink {
    /// Hands the chunk under way to the writer, if it holds anything.
    fn send_chunk(&mut self) -> Result<(), ExportError> {
        if self.chunk.records.is_empty() {
            return Ok(());
        }
        let next = (self.spares.try_recv()).unwrap_or_else(|_| Chunk::with_room(self.chunk_limit));
        let chunk = std::mem::replace(&mut self.chunk, next);
        self.chunks.send(Step::Chunk(chunk))
    }

    fn schema(&mut self, name: &str, text: &str) -> u16 {
        if let Some(i) = self.summary.schemas.iter().position(|(n, _)| n == name) {
            return i as u16 + 1;
        }
        self.summary
            .schemas
            .push((name.to_owned(), text.to_owned()));
        let id = self.summary.schemas.len() as u16;
        schema_record(&mut self.chunk.records, id, name, text);
        id
    }

    /// The channel of `topic` (the same topic, subscribed again, is the same channel).
    fn channel_of(&mut self, schema: u16, topic: &str) -> u16 {
        if let Some(i) = self.summary.channels.iter().position(|(_, t)| t == topic) {
            return i as u16;
        }
        let id = self.summary.channels.len() as u16;
        self.summary.channels.push((schema, topic.to_owned()));
        self.summary.counts.push(0);
        channel_record(&mut self.chunk.records, id, schema, topic);
        id
    }

    /// Lays out the message in `buffer` on `channel`.
    fn put(&mut self, channel: u16, timestamp_us: u64) -> Result<(), ExportError> {
        let ns = timestamp_us.saturating_mul(1000);
        // A channel's sequence number is its count of messages so far.
        let count = &mut self.summary.counts[channel as usize];
        let sequence = *count as u32;
        *count += 1;
        let records = &mut self.chunk.records;
        let offset = records.len() as u64;
        // The record's opcode, length, channel, sequence, log and publish times, in one go.
        let mut head = [0u8; 1 + 8 + 2 + 4 + 8 + 8];
        head[0] = op::MESSAGE;
        head[1..9].copy_from_slice(&((2 + 4 + 8 + 8 + self.buffer.len()) as u64).to_le_bytes());
        head[9..11].copy_from_slice(&channel.to_le_bytes());
        head[11..15].copy_from_slice(&sequence.to_le_bytes());
        head[15..23].copy_from_slice(&ns.to_le_bytes());
        head[23..31].copy_from_slice(&ns.to_le_bytes());
        records.reserve(head.len() + self.buffer.len());
        records.extend_from_slice(&head);
        records.extend_from_slice(&self.buffer);
        let indexes = &mut self.chunk.indexes;
        if indexes.len() <= usize::from(channel) {
            indexes.resize_with(usize::from(channel) + 1, Vec::new);
        }
        indexes[usize::from(channel)].push((ns, offset));
        self.chunk.times = Some(widen(self.chunk.times, ns));
        self.summary.times = Some(widen(self.summary.times, ns));
        if self.chunk.records.len() >= self.chunk_limit {
            self.send_chunk()?;
        }
        Ok(())
    }
}

impl Sink for ChunkSink {
    fn channel(
        &mut self,
        topic: &str,
        ty: &Ros2Type,
        _source: &TopicSource<'_>,
    ) -> Result<u32, ExportError> {
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

    fn takes_findings(&self) -> bool {
        self.takes_findings
    }

    fn finding(&mut self, finding: &Finding) -> Result<(), ExportError> {
        let channel = match self.diagnostics_channel {
            Some(id) => id,
            None => {
                let schema = self.schema(DIAGNOSTICS_TYPE, DIAGNOSTICS_SCHEMA);
                let id = self.channel_of(schema, DIAGNOSTICS_TOPIC);
                *self.diagnostics_channel.insert(id)
            }
        };
        encode_finding(finding, self.hardware_id, &mut self.buffer);
        self.put(channel, finding.made_at_us())
    }
}

/// `(earliest, latest)` with `t` taken in.
fn widen(times: Option<(u64, u64)>, t: u64) -> (u64, u64) {
    times.map_or((t, t), |(a, b)| (a.min(t), b.max(t)))
}

/// One chunk index entry, kept for the summary.
struct ChunkIndex {
    times: (u64, u64),
    start: u64,
    length: u64,
    message_indexes: Vec<(u16, u64)>,
    message_indexes_length: u64,
    compressed: u64,
    uncompressed: u64,
}
