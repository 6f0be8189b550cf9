//! A ULog stream as a TIDE 2.0 file (the layout and the decisions: [`super`]).
//!
//! Two threads, as the MCAP export: the caller's decodes the log and lays each entry out in
//! the chunk under way, with the `TYPE` and `CHAN` blocks of the channels that chunk opens; a
//! writer thread compresses each full chunk in one call and writes it, then its `INDX` blocks.
//! At most two chunks wait between them, so memory stays bounded by the chunk size on any log.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::sync::mpsc;
use std::time::{Duration, SystemTime};

use bytes::BufMut;

use super::{CHUNK_FIXED, Compression, MAJOR, MINOR, SYNTAX, tag, type_hash};
use crate::export::{
    ExportError, ExportOptions, ExportStats, Flight, FlightMetadata, Sink, Steps, TopicSource,
    WriterAt, release_text, utc_offset_us, walk, with_writer,
};
use crate::ros::ros2::{LOG_SCHEMA, LOG_TYPE, Ros2Type, encode_log, schema_definitions};

/// gzip's level: 1, the fastest (level 6 took ~3x the time for ~10 % less output).
const GZIP_LEVEL: u32 = 1;
/// bzip2's block size in 100 KB units: 9, its default (chunks are up to 1 MB).
const BZIP2_LEVEL: u32 = 9;

/// Entry bytes per chunk, for a log of `ulog_len` bytes: about 1/200 of the log (a window of a
/// long flight touches few chunks), at least 64 KB and at most 1 MB. Smaller than the MCAP
/// export's least (256 KB) because gzip is slower than zstd: a short log's chunks compress on
/// the writer thread while the next are decoded, and gzip's 32 KB window gains nothing from
/// more.
fn chunk_bytes(ulog_len: u64) -> usize {
    (ulog_len / 200).clamp(64 << 10, 1 << 20) as usize
}

/// Writes the ULog stream of `flight` to `out` as TIDE, its chunks compressed with `compression`.
pub fn write<W: Write + Send>(
    flight: &(impl Flight + ?Sized),
    options: &ExportOptions,
    compression: Compression,
    out: W,
) -> Result<ExportStats, ExportError> {
    let utc_offset_us = utc_offset_us(flight)?;
    let chunk_limit = chunk_bytes(flight.len());
    with_writer(
        "tide-writer",
        WriterAt::for_chunks(flight.len(), chunk_limit),
        move |received| write_file(out, compression, received),
        |steps| {
            let mut sink = EntrySink {
                chunk_limit,
                offset_us: utc_offset_us.unwrap_or(0),
                steps,
                chunk: Chunk::default(),
                blocks: Vec::new(),
                hashes: HashMap::new(),
                topics: HashMap::new(),
                channels: 0,
                log_channel: None,
                first_ns: None,
                buffer: Vec::new(),
            };
            let (stats, metadata) = walk(flight, options, &mut sink)?;
            sink.send_chunk()?;
            let meta = meta_block(&metadata, utc_offset_us, sink.first_ns);
            sink.steps.send(Step::Finish(meta))?;
            Ok(stats)
        },
    )
}

/// The entries of one chunk, uncompressed, and what its header and index blocks need.
#[derive(Default)]
struct Chunk {
    /// `TYPE` and `CHAN` blocks to write before the chunk (the channels it opens).
    blocks: Vec<u8>,
    entries: Vec<u8>,
    count: u32,
    /// Earliest and latest entry time, ns.
    times: Option<(u64, u64)>,
    /// Per channel: (time, offset of the entry in `entries`).
    index: BTreeMap<u32, Vec<(u64, u32)>>,
}

/// What the writer thread is handed, in order.
enum Step {
    Chunk(Chunk),
    /// The `META` block, then the end.
    Finish(Vec<u8>),
}

/// The decoding side: lays entries out in the chunk under way, hands full ones over.
struct EntrySink {
    chunk_limit: usize,
    /// µs added to a log time for the entry's time (0 without a UTC reference).
    offset_us: i64,
    steps: Steps<Step>,
    chunk: Chunk,
    /// Blocks of channels opened since the chunk under way was handed over.
    blocks: Vec<u8>,
    /// Type hashes by full type name, for the types written so far.
    hashes: HashMap<String, [u8; 20]>,
    /// Channel ids by topic (a topic subscribed again is the same channel).
    topics: HashMap<String, u32>,
    channels: u32,
    log_channel: Option<u32>,
    /// The first entry's time, ns.
    first_ns: Option<u64>,
    /// The entry being encoded.
    buffer: Vec<u8>,
}

impl EntrySink {
    /// Hands the chunk under way (with the blocks of the channels it opens) to the writer.
    fn send_chunk(&mut self) -> Result<(), ExportError> {
        if self.chunk.count == 0 && self.blocks.is_empty() {
            return Ok(());
        }
        let mut chunk = std::mem::take(&mut self.chunk);
        chunk.blocks = std::mem::take(&mut self.blocks);
        self.chunk.entries.reserve(self.chunk_limit + (64 << 10));
        self.steps.send(Step::Chunk(chunk))
    }

    /// Writes the `TYPE` blocks of `name` (a type with schema `schema`) and of its
    /// dependencies not written yet, dependencies first; returns the type's hash.
    fn types(&mut self, name: &str, schema: &str) -> [u8; 20] {
        if let Some(hash) = self.hashes.get(name) {
            return *hash;
        }
        let definitions = schema_definitions(name, schema);
        // Each type after the types it uses: repeat until every one is written.
        let mut left: Vec<_> = definitions.iter().collect();
        let mut stuck = false;
        while !left.is_empty() {
            let before = left.len();
            left.retain(|def| {
                if self.hashes.contains_key(&def.name) {
                    return false;
                }
                let ready = stuck || def.dependencies.iter().all(|d| self.hashes.contains_key(d));
                if ready {
                    let hash = type_hash(SYNTAX, &def.text);
                    let deps: Vec<[u8; 20]> = (def.dependencies.iter())
                        .filter_map(|d| self.hashes.get(d).copied())
                        .collect();
                    type_block(&mut self.blocks, &hash, &def.name, &def.text, &deps);
                    self.hashes.insert(def.name.clone(), hash);
                }
                !ready
            });
            // A dependency the schema does not define (never in a schema of ours): the rest
            // are written as they are rather than not at all.
            stuck = left.len() == before;
        }
        // The schema's first definition is `name`'s own: written above or before.
        self.hashes[name]
    }

    /// The channel of `topic`: its `TYPE` and `CHAN` blocks written the first time.
    fn open_channel(
        &mut self,
        topic: &str,
        type_name: &str,
        schema: &str,
        source_name: &str,
        source_config: &[u8],
    ) -> u32 {
        if let Some(&id) = self.topics.get(topic) {
            return id;
        }
        let hash = self.types(type_name, schema);
        let id = self.channels;
        self.channels += 1;
        self.topics.insert(topic.to_owned(), id);
        let at = begin(&mut self.blocks, tag::CHAN);
        self.blocks.put_u32_le(id);
        // The name's size is one byte: topics are far shorter.
        let name = &topic.as_bytes()[..topic.len().min(255)];
        self.blocks.put_u8(name.len() as u8);
        self.blocks.put_slice(name);
        self.blocks.put_u32_le(source_name.len() as u32);
        self.blocks.put_slice(source_name.as_bytes());
        self.blocks.put_u32_le(source_config.len() as u32);
        self.blocks.put_slice(source_config);
        self.blocks.put_u8(1);
        self.blocks.put_u16_le(hash.len() as u16);
        self.blocks.put_slice(&hash);
        end(&mut self.blocks, at);
        id
    }

    /// Lays out the entry in `buffer` on `channel`, stamped with the log time `timestamp_us`.
    fn put(&mut self, channel: u32, timestamp_us: u64) -> Result<(), ExportError> {
        let us = (timestamp_us as i64).saturating_add(self.offset_us).max(0) as u64;
        let ns = us.saturating_mul(1000);
        let chunk = &mut self.chunk;
        let offset = chunk.entries.len() as u32;
        chunk.entries.put_u32_le(channel);
        chunk.entries.put_u64_le(ns);
        chunk.entries.put_u32_le(self.buffer.len() as u32);
        chunk.entries.put_slice(&self.buffer);
        chunk.count += 1;
        chunk.index.entry(channel).or_default().push((ns, offset));
        chunk.times = Some(match chunk.times {
            None => (ns, ns),
            Some((a, b)) => (a.min(ns), b.max(ns)),
        });
        self.first_ns.get_or_insert(ns);
        if chunk.entries.len() >= self.chunk_limit {
            self.send_chunk()?;
        }
        Ok(())
    }
}

impl Sink for EntrySink {
    fn channel(
        &mut self,
        topic: &str,
        ty: &Ros2Type,
        source: &TopicSource<'_>,
    ) -> Result<u32, ExportError> {
        let source_name = format!("uORB {}, instance {}", source.format, source.multi_id);
        let config = source.format_texts.as_bytes();
        Ok(self.open_channel(topic, &ty.name, &ty.schema, &source_name, config))
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
        self.put(channel, timestamp_us)
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
                let source = "ULog logged strings (plain and tagged)";
                let id = self.open_channel("/log", LOG_TYPE, LOG_SCHEMA, source, b"");
                *self.log_channel.insert(id)
            }
        };
        encode_log(timestamp_us, ulog_level, name, text, &mut self.buffer);
        self.put(channel, timestamp_us)
    }
}

/// A `TYPE` block: the hash, the syntax, the type's name, an empty version, its definition,
/// no acceptable sources, and the hashes of its dependencies.
fn type_block(out: &mut Vec<u8>, hash: &[u8; 20], name: &str, definition: &str, deps: &[[u8; 20]]) {
    let at = begin(out, tag::TYPE);
    out.put_u16_le(hash.len() as u16);
    out.put_slice(hash);
    out.put_u8(SYNTAX.len() as u8);
    out.put_slice(SYNTAX.as_bytes());
    out.put_u16_le(name.len() as u16);
    out.put_slice(name.as_bytes());
    out.put_u16_le(0);
    out.put_u32_le(definition.len() as u32);
    out.put_slice(definition.as_bytes());
    out.put_u8(0);
    out.put_u16_le(deps.len() as u16);
    for dep in deps {
        out.put_u16_le(dep.len() as u16);
        out.put_slice(dep);
    }
    end(out, at);
}

/// The `META` block: Dublin Core's title, date and source, how times were made, the ULog
/// info (see the module docs).
fn meta_block(
    metadata: &FlightMetadata,
    utc_offset_us: Option<i64>,
    first_ns: Option<u64>,
) -> Vec<u8> {
    let info = |key: &str| metadata.info.get(key).map(String::as_str);
    let vehicle = info("ver_hw").unwrap_or("unknown hardware");
    let mut entries: Vec<(String, String)> = vec![(
        "dc:Title".into(),
        format!("{} flight on {vehicle}", info("sys_name").unwrap_or("PX4")),
    )];
    if let (Some(_), Some(ns)) = (utc_offset_us, first_ns) {
        let start = SystemTime::UNIX_EPOCH + Duration::from_nanos(ns);
        entries.push((
            "dc:Date".into(),
            humantime::format_rfc3339_seconds(start).to_string(),
        ));
    }
    entries.push(("dc:Source".into(), source_text(metadata)));
    entries.push((
        "dc:Description".into(),
        match utc_offset_us {
            Some(_) => "PX4 ULog flight log; entry times are UTC, from the log's first GPS time",
            None => {
                "PX4 ULog flight log; entry times are the log's own (since the vehicle booted): \
                 the log has no UTC reference"
            }
        }
        .to_owned(),
    ));
    entries.push((
        "dc:Creator".into(),
        concat!("ulog-recv ", env!("CARGO_PKG_VERSION")).into(),
    ));
    entries.push((
        "ulog-recv:time_offset_ns".into(),
        (utc_offset_us.unwrap_or(0) as i128 * 1000).to_string(),
    ));
    for (key, value) in &metadata.info {
        entries.push((format!("ulog:info:{key}"), value.clone()));
    }
    entries.truncate(u16::MAX as usize);
    let mut out = Vec::new();
    let at = begin(&mut out, tag::META);
    out.put_u16_le(entries.len() as u16);
    for (key, value) in &entries {
        out.put_u16_le(key.len() as u16);
        out.put_slice(key.as_bytes());
        out.put_u32_le(value.len() as u32);
        out.put_slice(value.as_bytes());
    }
    end(&mut out, at);
    out
}

/// `dc:Source`: the vehicle (hardware, system, uuid) and its software version.
fn source_text(metadata: &FlightMetadata) -> String {
    let info = |key: &str| metadata.info.get(key).cloned();
    let mut vehicle = info("ver_hw").unwrap_or_else(|| "unknown hardware".into());
    if let Some(uuid) = info("sys_uuid") {
        vehicle.push_str(&format!(" (uuid {uuid})"));
    }
    let mut software = info("sys_name").unwrap_or_else(|| "PX4".into());
    if let Some(release) = info("ver_sw_release").and_then(|r| r.parse::<u32>().ok()) {
        software.push_str(&format!(" {}", release_text(release)));
    }
    if let Some(git) = info("ver_sw") {
        software.push_str(&format!(" ({})", &git[..git.len().min(12)]));
    }
    if let Some(branch) = info("ver_sw_branch") {
        software.push_str(&format!(", branch {branch}"));
    }
    format!("{vehicle}, {software}")
}

/// Starts a block: its tag and a size to be filled in by [`end`] (returned: where).
fn begin(out: &mut Vec<u8>, tag: [u8; 4]) -> usize {
    out.put_slice(&tag);
    out.put_u64_le(0);
    out.len() - 8
}

/// Fills in the size of the block [`begin`] started at `at`.
fn end(out: &mut [u8], at: usize) {
    let size = (out.len() - at - 8) as u64;
    out[at..at + 8].copy_from_slice(&size.to_le_bytes());
}

/// The writer thread: the file from its `TIDE` block to its `META` block.
fn write_file<W: Write>(
    mut out: W,
    compression: Compression,
    steps: mpsc::Receiver<Step>,
) -> Result<(), ExportError> {
    let mut block = Vec::with_capacity(1 << 20);
    let at = begin(&mut block, tag::TIDE);
    block.put_u8(MAJOR);
    block.put_u8(MINOR);
    end(&mut block, at);
    out.write_all(&block)?;
    let mut position = block.len() as u64;
    let mut chunk_id = 0u32;
    let mut compressed = Vec::new();
    for step in steps {
        match step {
            Step::Chunk(chunk) => {
                out.write_all(&chunk.blocks)?;
                position += chunk.blocks.len() as u64;
                if chunk.count == 0 {
                    continue;
                }
                let entries = compress(compression, &chunk.entries, &mut compressed)?;
                let start = position;
                let times = chunk.times.unwrap_or((0, 0));
                block.clear();
                block.put_slice(&tag::CHNK);
                block.put_u64_le((CHUNK_FIXED + entries.len()) as u64);
                block.put_u32_le(chunk_id);
                block.put_u32_le(chunk.count);
                block.put_u64_le(times.0);
                block.put_u64_le(times.1);
                block.put_u8(compression as u8);
                out.write_all(&block)?;
                out.write_all(entries)?;
                position += (block.len() + entries.len()) as u64;
                chunk_id += 1;
                block.clear();
                for (channel, index) in &chunk.index {
                    let at = begin(&mut block, tag::INDX);
                    block.put_u32_le(*channel);
                    block.put_u32_le(index.len() as u32);
                    for &(time, offset) in index {
                        block.put_u64_le(start);
                        block.put_u64_le(time);
                        block.put_u32_le(offset);
                    }
                    end(&mut block, at);
                }
                out.write_all(&block)?;
                position += block.len() as u64;
            }
            Step::Finish(meta) => {
                out.write_all(&meta)?;
                out.flush()?;
                return Ok(());
            }
        }
    }
    // The decoding side stopped early (its error is the one reported).
    Ok(())
}

/// `entries` compressed with `compression` (into `out`, reused), or as they are.
fn compress<'a>(
    compression: Compression,
    entries: &'a [u8],
    out: &'a mut Vec<u8>,
) -> std::io::Result<&'a [u8]> {
    out.clear();
    match compression {
        Compression::None => return Ok(entries),
        Compression::Gzip => {
            let mut encoder =
                flate2::write::GzEncoder::new(&mut *out, flate2::Compression::new(GZIP_LEVEL));
            encoder.write_all(entries)?;
            encoder.finish()?;
        }
        Compression::Bzip2 => {
            let mut encoder =
                bzip2::write::BzEncoder::new(&mut *out, bzip2::Compression::new(BZIP2_LEVEL));
            encoder.write_all(entries)?;
            encoder.finish()?;
        }
    }
    Ok(out)
}
