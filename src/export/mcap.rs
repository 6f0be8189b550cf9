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

use std::io::Write;
use std::sync::mpsc;

use crate::diagnose::Finding;
use crate::export::{
    ExportError, ExportOptions, ExportStats, Flight, FlightMetadata, Sink, Steps, TopicSource,
    WriterAt, walk, with_writer,
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
    let chunk_limit = chunk_bytes(flight.len());
    let compressors = compressors_for(flight.len(), chunk_limit);
    let at = WriterAt::for_chunks(flight.len(), chunk_limit);
    write_chunked(flight, options, out, chunk_limit, at, compressors)
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

/// The writer thread: the file from its magic to its footer, the chunks compressed by
/// `compressors` threads (see [`Compression`]). Each chunk, once written, goes back emptied
/// through `written`.
fn write_file<W: Write>(
    out: W,
    steps: mpsc::Receiver<Step>,
    written: mpsc::Sender<Chunk>,
    compressors: usize,
) -> Result<(), ExportError> {
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
    std::thread::scope(|scope| {
        let mut compression = Compression::start(scope, compressors)?;
        let mut write = |compression: &mut Compression, done: Compressed| {
            let index = write_chunk(&mut out, &done, &mut record)?;
            chunk_indexes.push(index);
            let Compressed {
                mut chunk, bytes, ..
            } = done;
            chunk.clear();
            // The decoding side may be done with chunks: then this one is dropped.
            let _ = written.send(chunk);
            compression.recycle(bytes);
            Ok::<_, ExportError>(())
        };
        for step in steps {
            match step {
                Step::Chunk(chunk) => {
                    if let Some(done) = compression.push(chunk)? {
                        write(&mut compression, done)?;
                    }
                }
                Step::Finish { summary, metadata } => {
                    while let Some(done) = compression.pop()? {
                        write(&mut compression, done)?;
                    }
                    return finish(out, &summary, metadata, &chunk_indexes);
                }
            }
        }
        // The decoding side stopped early (its error is the one reported).
        Ok(())
    })
}

/// Compressors wanted for a log of `ulog_len` bytes in chunks of `chunk_limit`: one per core,
/// at most four (the decoding side feeds about two), and no more than the log has chunks.
fn compressors_for(ulog_len: u64, chunk_limit: usize) -> usize {
    let chunks = ulog_len.div_ceil(chunk_limit as u64);
    if chunks <= 1 {
        // Not worth asking the cgroup files how many cores there are.
        return 1;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    cores
        .min(4)
        .min(usize::try_from(chunks).unwrap_or(usize::MAX))
}

/// A chunk with its records compressed (and their CRC, which the chunk record carries).
struct Compressed {
    chunk: Chunk,
    bytes: Vec<u8>,
    crc: u32,
}

/// Compresses `chunk` into `bytes` (emptied first).
fn compress(
    compressor: &mut zstd::bulk::Compressor<'_>,
    chunk: Chunk,
    mut bytes: Vec<u8>,
) -> std::io::Result<Compressed> {
    bytes.clear();
    bytes.reserve(zstd::zstd_safe::compress_bound(chunk.records.len()));
    compressor.compress_to_buffer(&chunk.records, &mut bytes)?;
    let crc = crc32fast::hash(&chunk.records);
    Ok(Compressed { chunk, bytes, crc })
}

/// A compressor's end as the writer thread holds it: chunks (each with a buffer for its
/// compressed bytes) in, compressed chunks out.
type Worker = (
    mpsc::SyncSender<(Chunk, Vec<u8>)>,
    mpsc::Receiver<std::io::Result<Compressed>>,
);

/// Where the writer's chunks are compressed, handing them back in the order they came: on
/// the writer thread itself when one compressor is wanted, else on threads of their own
/// ([`CompressThreads`]). Compressed buffers come back to be reused.
enum Compression {
    Here {
        compressor: zstd::bulk::Compressor<'static>,
        spare: Vec<u8>,
    },
    Threads(CompressThreads),
}

/// Compressor threads, each chunk going to the next thread in turn and each result taken
/// from them in the same turn, so that they come back in order. Holds at most one chunk per
/// thread.
struct CompressThreads {
    workers: Vec<Worker>,
    /// Which worker has each chunk in flight, oldest first.
    in_flight: std::collections::VecDeque<usize>,
    next: usize,
    spares: Vec<Vec<u8>>,
}

impl Compression {
    /// `threads` compressors (one: on the caller's thread), their threads in `scope`.
    fn start<'scope>(
        scope: &'scope std::thread::Scope<'scope, '_>,
        threads: usize,
    ) -> Result<Self, ExportError> {
        if threads <= 1 {
            return Ok(Compression::Here {
                compressor: zstd::bulk::Compressor::new(ZSTD_LEVEL)?,
                spare: Vec::new(),
            });
        }
        let mut workers = Vec::with_capacity(threads);
        for _ in 0..threads {
            let (chunks, to_compress) = mpsc::sync_channel::<(Chunk, Vec<u8>)>(1);
            let (done, compressed) = mpsc::sync_channel(1);
            let mut compressor = zstd::bulk::Compressor::new(ZSTD_LEVEL)?;
            std::thread::Builder::new()
                .name("mcap-compress".into())
                .spawn_scoped(scope, move || {
                    for (chunk, bytes) in to_compress {
                        // The writer is gone on an error: stop.
                        if done.send(compress(&mut compressor, chunk, bytes)).is_err() {
                            break;
                        }
                    }
                })
                .map_err(ExportError::Write)?;
            workers.push((chunks, compressed));
        }
        Ok(Compression::Threads(CompressThreads {
            workers,
            in_flight: Default::default(),
            next: 0,
            spares: Vec::new(),
        }))
    }

    /// Takes `chunk` in; returns the oldest chunk compressed if one had to be taken out to
    /// make room (on the caller's thread: `chunk` itself).
    fn push(&mut self, chunk: Chunk) -> Result<Option<Compressed>, ExportError> {
        match self {
            Compression::Here { compressor, spare } => {
                Ok(Some(compress(compressor, chunk, std::mem::take(spare))?))
            }
            Compression::Threads(threads) => threads.push(chunk),
        }
    }

    /// The oldest chunk in flight, compressed; `None` when none is.
    fn pop(&mut self) -> Result<Option<Compressed>, ExportError> {
        match self {
            Compression::Here { .. } => Ok(None),
            Compression::Threads(threads) => threads.pop(),
        }
    }

    /// A compressed buffer written out, to compress into again.
    fn recycle(&mut self, bytes: Vec<u8>) {
        match self {
            Compression::Here { spare, .. } => *spare = bytes,
            Compression::Threads(threads) => threads.spares.push(bytes),
        }
    }
}

impl CompressThreads {
    /// See [`Compression::push`].
    fn push(&mut self, chunk: Chunk) -> Result<Option<Compressed>, ExportError> {
        let oldest = match self.in_flight.len() == self.workers.len() {
            true => self.pop()?,
            false => None,
        };
        let bytes = self.spares.pop().unwrap_or_default();
        let (to_worker, _) = &self.workers[self.next];
        to_worker.send((chunk, bytes)).map_err(|_| stopped())?;
        self.in_flight.push_back(self.next);
        self.next = (self.next + 1) % self.workers.len();
        Ok(oldest)
    }

    /// See [`Compression::pop`].
    fn pop(&mut self) -> Result<Option<Compressed>, ExportError> {
        let Some(worker) = self.in_flight.pop_front() else {
            return Ok(None);
        };
        let (_, from_worker) = &self.workers[worker];
        Ok(Some(from_worker.recv().map_err(|_| stopped())??))
    }
}

/// The error of a compressor thread gone.
fn stopped() -> ExportError {
    ExportError::Write(std::io::Error::other("an MCAP compressor thread stopped"))
}

/// Writes one chunk record and its message index records; `record` is a buffer reused from
/// chunk to chunk.
fn write_chunk<W: Write>(
    out: &mut Output<W>,
    compressed: &Compressed,
    record: &mut Vec<u8>,
) -> Result<ChunkIndex, ExportError> {
    let Compressed { chunk, bytes, crc } = compressed;
    let times = chunk.times.unwrap_or((0, 0));
    let start = out.position;
    record.clear();
    let at = begin(record, op::CHUNK);
    put_u64(record, times.0);
    put_u64(record, times.1);
    put_u64(record, chunk.records.len() as u64);
    put_u32(record, *crc);
    put_str(record, "zstd");
    put_u64(record, bytes.len() as u64);
    let length = record.len() as u64 - 9 + bytes.len() as u64;
    record[at..at + 8].copy_from_slice(&length.to_le_bytes());
    out.write(record)?;
    out.write(bytes)?;
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
        compressed: bytes.len() as u64,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn synthetic() -> Vec<u8> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/synthetic.ulg");
        std::fs::read(path).expect("the project's synthetic log")
    }

    #[test]
    fn chunks_compressed_on_several_threads_or_after_decoding_make_the_same_file() {
        let flight = synthetic();
        let options = ExportOptions::default();
        let mut one = Vec::new();
        let stats = write_chunked(&flight, &options, &mut one, 4 << 10, WriterAt::Thread, 1);
        let stats = stats.unwrap();
        assert!(stats.samples > 0);
        // Small chunks: many of them, each thread given several in turn.
        assert!(chunk_records(&one) > 10, "{} chunks", chunk_records(&one));
        for how in [
            (WriterAt::Thread, 2),
            (WriterAt::Thread, 3),
            (WriterAt::After, 1),
        ] {
            let mut other = Vec::new();
            let (at, threads) = how;
            write_chunked(&flight, &options, &mut other, 4 << 10, at, threads).unwrap();
            assert!(one == other, "{how:?} changed the file");
        }
    }

    /// The chunk records of the data section, walked record by record from the magic.
    fn chunk_records(file: &[u8]) -> usize {
        let (mut at, mut chunks) = (MAGIC.len(), 0);
        while at + 9 <= file.len() && file[at] != op::FOOTER {
            let length = u64::from_le_bytes(file[at + 1..at + 9].try_into().unwrap());
            chunks += usize::from(file[at] == op::CHUNK);
            at += 9 + length as usize;
        }
        chunks
    }

    /// A writer that fails once `room` bytes are written.
    struct FullDisk {
        room: usize,
    }

    impl Write for FullDisk {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            if bytes.len() > self.room {
                return Err(std::io::Error::from(std::io::ErrorKind::StorageFull));
            }
            self.room -= bytes.len();
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_write_failing_with_chunks_in_flight_ends_the_export_with_its_error() {
        let flight = synthetic();
        for how in [
            (WriterAt::Thread, 1),
            (WriterAt::Thread, 3),
            (WriterAt::After, 1),
        ] {
            let out = FullDisk { room: 8 << 10 };
            let (at, threads) = how;
            let options = ExportOptions::default();
            let result = write_chunked(&flight, &options, out, 4 << 10, at, threads);
            match result {
                Err(ExportError::Write(e)) => {
                    assert_eq!(e.kind(), std::io::ErrorKind::StorageFull, "{how:?}: {e}")
                }
                other => panic!("{how:?}: {:?}", other.map(|s| s.samples)),
            }
        }
    }
}
