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
//! Two threads: the caller's decodes the log and lays each message's record out in the chunk
//! under way (schemas and channels go in the chunk that first uses them); a writer thread
//! compresses each full chunk in one zstd call and writes it with its message indexes. At most
//! two chunks wait between them, so memory stays bounded on any log.
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

use std::io::Write;
use std::sync::mpsc;

use crate::diagnose::Finding;
use crate::export::{
    ExportError, ExportOptions, ExportStats, Flight, FlightMetadata, Sink, Steps, TopicSource,
    walk, with_writer_thread,
};
use crate::ros::diagnostics::{
    DIAGNOSTICS_SCHEMA, DIAGNOSTICS_TOPIC, DIAGNOSTICS_TYPE, encode_finding,
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
    with_writer_thread(
        "mcap-writer",
        move |received| write_file(out, received),
        |chunks| {
            let mut sink = ChunkSink {
                chunk_limit: chunk_bytes(flight.len()),
                chunks,
                chunk: Chunk::default(),
                summary: Summary::default(),
                log_channel: None,
                diagnostics_channel: None,
                takes_findings: options.wants("diagnostics"),
                buffer: Vec::new(),
            };
            let (stats, metadata) = walk(flight, options, &mut sink)?;
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
    chunk: Chunk,
    summary: Summary,
    log_channel: Option<u16>,
    diagnostics_channel: Option<u16>,
    /// Whether `/diagnostics` is exported (the topic patterns may leave it out).
    takes_findings: bool,
    /// The message being encoded.
    buffer: Vec<u8>,
}

impl ChunkSink {
    /// Hands the chunk under way to the writer, if it holds anything.
    fn send_chunk(&mut self) -> Result<(), ExportError> {
        if self.chunk.records.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::take(&mut self.chunk);
        self.chunk.records.reserve(self.chunk_limit + (64 << 10));
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
        encode_finding(finding, &mut self.buffer);
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

/// Bytes written so far, their CRC (the data section's) and where they go.
struct Output<W> {
    out: W,
    position: u64,
    crc: crc32fast::Hasher,
}

impl<W: Write> Output<W> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.out.write_all(bytes)?;
        self.crc.update(bytes);
        self.position += bytes.len() as u64;
        Ok(())
    }
}

/// The writer thread: the file from its magic to its footer.
fn write_file<W: Write>(out: W, steps: mpsc::Receiver<Step>) -> Result<(), ExportError> {
    let mut out = Output {
        out,
        position: 0,
        crc: crc32fast::Hasher::new(),
    };
    let mut record = Vec::new();
    out.write(MAGIC)?;
    header_record(&mut record);
    out.write(&record)?;
    let mut chunk_indexes = Vec::new();
    let mut compressor = zstd::bulk::Compressor::new(ZSTD_LEVEL)?;
    for step in steps {
        match step {
            Step::Chunk(chunk) => {
                chunk_indexes.push(write_chunk(&mut out, &mut compressor, &chunk, &mut record)?)
            }
            Step::Finish { summary, metadata } => {
                return finish(out, &summary, metadata, &chunk_indexes);
            }
        }
    }
    // The decoding side stopped early (its error is the one reported).
    Ok(())
}

/// Writes one chunk record and its message index records.
fn write_chunk<W: Write>(
    out: &mut Output<W>,
    compressor: &mut zstd::bulk::Compressor<'_>,
    chunk: &Chunk,
    record: &mut Vec<u8>,
) -> Result<ChunkIndex, ExportError> {
    let compressed = compressor.compress(&chunk.records)?;
    let times = chunk.times.unwrap_or((0, 0));
    let start = out.position;
    record.clear();
    let at = begin(record, op::CHUNK);
    put_u64(record, times.0);
    put_u64(record, times.1);
    put_u64(record, chunk.records.len() as u64);
    put_u32(record, crc32fast::hash(&chunk.records));
    put_str(record, "zstd");
    put_u64(record, compressed.len() as u64);
    let length = record.len() as u64 - 9 + compressed.len() as u64;
    record[at..at + 8].copy_from_slice(&length.to_le_bytes());
    out.write(record)?;
    out.write(&compressed)?;
    let chunk_length = out.position - start;
    let mut message_indexes = Vec::with_capacity(chunk.indexes.len());
    let indexes_start = out.position;
    let channels = (chunk.indexes.iter().enumerate()).filter(|(_, entries)| !entries.is_empty());
    for (channel, entries) in channels {
        let channel = channel as u16;
        message_indexes.push((channel, out.position));
        record.clear();
        let at = begin(record, op::MESSAGE_INDEX);
        put_u16(record, channel);
        put_u32(record, (entries.len() * 16) as u32);
        for &(time, offset) in entries {
            put_u64(record, time);
            put_u64(record, offset);
        }
        end(record, at);
        out.write(record)?;
    }
    Ok(ChunkIndex {
        times,
        start,
        length: chunk_length,
        message_indexes,
        message_indexes_length: out.position - indexes_start,
        compressed: compressed.len() as u64,
        uncompressed: chunk.records.len() as u64,
    })
}

/// Metadata, data end, the summary section, its offsets and the footer.
fn finish<W: Write>(
    mut out: Output<W>,
    summary: &Summary,
    metadata: FlightMetadata,
    chunk_indexes: &[ChunkIndex],
) -> Result<(), ExportError> {
    let mut record = Vec::new();
    let mut metadata_index = Vec::new();
    for (name, map) in [
        ("ulog_info", metadata.info),
        ("ulog_initial_parameters", metadata.initial_parameters),
        ("ulog_changed_parameters", metadata.changed_parameters),
    ] {
        record.clear();
        let at = begin(&mut record, op::METADATA);
        put_str(&mut record, name);
        put_map(
            &mut record,
            map.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        );
        end(&mut record, at);
        metadata_index.push((out.position, record.len() as u64, name));
        out.write(&record)?;
    }
    let data_crc = out.crc.clone().finalize();
    record.clear();
    let at = begin(&mut record, op::DATA_END);
    put_u32(&mut record, data_crc);
    end(&mut record, at);
    out.write(&record)?;

    // The summary, built whole in memory: its CRC runs to the footer's second field.
    let summary_start = out.position;
    let mut s = Vec::new();
    let mut groups = Vec::new();
    let mut group = |s: &mut Vec<u8>, opcode: u8, start: usize| {
        if s.len() > start {
            groups.push((
                opcode,
                summary_start + start as u64,
                (s.len() - start) as u64,
            ));
        }
    };
    let start = s.len();
    for (i, (name, text)) in summary.schemas.iter().enumerate() {
        schema_record(&mut s, i as u16 + 1, name, text);
    }
    group(&mut s, op::SCHEMA, start);
    let start = s.len();
    for (i, (schema, topic)) in summary.channels.iter().enumerate() {
        channel_record(&mut s, i as u16, *schema, topic);
    }
    group(&mut s, op::CHANNEL, start);
    let start = s.len();
    let times = summary.times.unwrap_or((0, 0));
    let at = begin(&mut s, op::STATISTICS);
    put_u64(&mut s, summary.counts.iter().sum());
    put_u16(&mut s, summary.schemas.len() as u16);
    put_u32(&mut s, summary.channels.len() as u32);
    put_u32(&mut s, 0); // attachments
    put_u32(&mut s, metadata_index.len() as u32);
    put_u32(&mut s, chunk_indexes.len() as u32);
    put_u64(&mut s, times.0);
    put_u64(&mut s, times.1);
    put_u32(&mut s, (summary.counts.len() * 10) as u32);
    for (channel, count) in summary.counts.iter().enumerate() {
        put_u16(&mut s, channel as u16);
        put_u64(&mut s, *count);
    }
    end(&mut s, at);
    group(&mut s, op::STATISTICS, start);
    let start = s.len();
    for c in chunk_indexes {
        let at = begin(&mut s, op::CHUNK_INDEX);
        put_u64(&mut s, c.times.0);
        put_u64(&mut s, c.times.1);
        put_u64(&mut s, c.start);
        put_u64(&mut s, c.length);
        put_u32(&mut s, (c.message_indexes.len() * 10) as u32);
        for &(channel, offset) in &c.message_indexes {
            put_u16(&mut s, channel);
            put_u64(&mut s, offset);
        }
        put_u64(&mut s, c.message_indexes_length);
        put_str(&mut s, "zstd");
        put_u64(&mut s, c.compressed);
        put_u64(&mut s, c.uncompressed);
        end(&mut s, at);
    }
    group(&mut s, op::CHUNK_INDEX, start);
    let start = s.len();
    for &(offset, length, name) in &metadata_index {
        let at = begin(&mut s, op::METADATA_INDEX);
        put_u64(&mut s, offset);
        put_u64(&mut s, length);
        put_str(&mut s, name);
        end(&mut s, at);
    }
    group(&mut s, op::METADATA_INDEX, start);
    let summary_offset_start = summary_start + s.len() as u64;
    for (opcode, group_start, group_length) in groups {
        let at = begin(&mut s, op::SUMMARY_OFFSET);
        s.push(opcode);
        put_u64(&mut s, group_start);
        put_u64(&mut s, group_length);
        end(&mut s, at);
    }
    s.push(op::FOOTER);
    put_u64(&mut s, 8 + 8 + 4);
    put_u64(&mut s, summary_start);
    put_u64(&mut s, summary_offset_start);
    let summary_crc = crc32fast::hash(&s);
    put_u32(&mut s, summary_crc);
    s.extend_from_slice(MAGIC);
    out.write(&s)?;
    out.out.flush()?;
    Ok(())
}

fn header_record(out: &mut Vec<u8>) {
    let at = begin(out, op::HEADER);
    put_str(out, PROFILE);
    put_str(out, concat!("ulog-recv ", env!("CARGO_PKG_VERSION")));
    end(out, at);
}

fn schema_record(out: &mut Vec<u8>, id: u16, name: &str, text: &str) {
    let at = begin(out, op::SCHEMA);
    put_u16(out, id);
    put_str(out, name);
    put_str(out, "ros2msg");
    put_str(out, text);
    end(out, at);
}

fn channel_record(out: &mut Vec<u8>, id: u16, schema: u16, topic: &str) {
    let at = begin(out, op::CHANNEL);
    put_u16(out, id);
    put_u16(out, schema);
    put_str(out, topic);
    put_str(out, "cdr");
    put_map(out, std::iter::empty());
    end(out, at);
}

/// Starts a record: its opcode and a length to be filled in by [`end`] (returned: where).
fn begin(out: &mut Vec<u8>, opcode: u8) -> usize {
    out.push(opcode);
    out.extend_from_slice(&[0; 8]);
    out.len() - 8
}

/// Fills in the length of the record [`begin`] started at `at`.
fn end(out: &mut [u8], at: usize) {
    let length = (out.len() - at - 8) as u64;
    out[at..at + 8].copy_from_slice(&length.to_le_bytes());
}

fn put_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// An MCAP string (and a schema's data): u32 length, then the bytes.
fn put_str(out: &mut Vec<u8>, s: &str) {
    put_u32(out, s.len() as u32);
    out.extend_from_slice(s.as_bytes());
}

/// An MCAP map of strings: u32 length in bytes, then key, value, key, value...
fn put_map<'a>(out: &mut Vec<u8>, entries: impl Iterator<Item = (&'a str, &'a str)>) {
    let at = out.len();
    put_u32(out, 0);
    for (k, v) in entries {
        put_str(out, k);
        put_str(out, v);
    }
    let length = (out.len() - at - 4) as u32;
    out[at..at + 4].copy_from_slice(&length.to_le_bytes());
}
