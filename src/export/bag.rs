//! A ULog stream as a ROS 1 bag.
//!
//! Format 2.0 ([`write()`]; what `rosbag`, `rqt_bag`, Foxglove and PlotJuggler read): the
//! `#ROSBAG V2.0` line, the bag header record (padded to 4096 bytes, rewritten at the end with
//! `index_pos`, `conn_count` and `chunk_count`), chunks (uncompressed) of connection and
//! message data records, each followed by its index data records (version 1: time and offset
//! of every message, per connection), then at `index_pos` every connection record and one
//! chunk info record per chunk.
//!
//! Format 1.2 ([`write_v12`]; ROS 0.5 to 1.0): the `#ROSRECORD V1.2` line, the file header
//! record (padded to 4096 bytes, `index_pos` rewritten at the end), then message definition
//! records (`topic`, `type`, `md5`, `def`; one per topic, right before its first message) and
//! message data records (`topic`, `md5`, `type`, `sec`, `nsec`), then at `index_pos` one index
//! data record per topic (version 0: time and file offset of every message, the first entry
//! pointing at the topic's definition record).
//!
//! Record and field names are the formats'. Every record is `header_len`, the header's
//! `name=value` fields (each with its length), `data_len`, the data. Types are ROS 1's
//! ([`crate::ros::ros1`]): each connection or definition carries the definition text and its
//! MD5 sum; `/log` is `rosgraph_msgs/Log`. A message's time is its ULog timestamp.

use std::collections::BTreeMap;
use std::io::{Seek, SeekFrom, Write};

use crate::export::{ExportError, ExportOptions, ExportStats, Flight, Sink, TopicSource, walk};
use crate::ros::ros1::{self, LOG_DEFINITION, LOG_TYPE, ros_time};
use crate::ros::ros2::Ros2Type;

/// The version line.
const VERSION_LINE: &[u8] = b"#ROSBAG V2.0\n";
/// The version line of format 1.2.
const VERSION_LINE_V12: &[u8] = b"#ROSRECORD V1.2\n";
/// Bytes of the bag header record, padding included.
const BAG_HEADER_LEN: usize = 4096;
/// Uncompressed bytes after which a chunk is closed (rosbag's default).
const CHUNK_THRESHOLD: usize = 768 << 10;

/// Record opcodes.
mod op {
    pub const MESSAGE_DEFINITION: u8 = 0x01;
    pub const MESSAGE_DATA: u8 = 0x02;
    pub const BAG_HEADER: u8 = 0x03;
    pub const INDEX_DATA: u8 = 0x04;
    pub const CHUNK: u8 = 0x05;
    pub const CHUNK_INFO: u8 = 0x06;
    pub const CONNECTION: u8 = 0x07;
}

/// Writes the ULog stream of `flight` to `out` as a ROS 1 bag (format 2.0).
pub fn write<W: Write + Seek>(
    flight: &(impl Flight + ?Sized),
    options: &ExportOptions,
    mut out: W,
) -> Result<ExportStats, ExportError> {
    out.write_all(VERSION_LINE)?;
    out.write_all(&bag_header(0, 0, 0))?;
    let mut sink = RosSink::new(V20Writer {
        position: (VERSION_LINE.len() + BAG_HEADER_LEN) as u64,
        out,
        connections: Vec::new(),
        chunk: Chunk::default(),
        chunk_infos: Vec::new(),
    });
    let (stats, _) = walk(flight, options, &mut sink)?;
    let mut sink = sink.records;
    sink.close_chunk()?;
    let index_pos = sink.position;
    let mut tail = Vec::new();
    for (conn, c) in sink.connections.iter().enumerate() {
        connection_record(&mut tail, conn as u32, c);
    }
    for info in &sink.chunk_infos {
        let mut data = Vec::new();
        for (conn, count) in &info.counts {
            data.extend_from_slice(&conn.to_le_bytes());
            data.extend_from_slice(&count.to_le_bytes());
        }
        record(
            &mut tail,
            &[
                ("op", &[op::CHUNK_INFO]),
                ("ver", &1u32.to_le_bytes()),
                ("chunk_pos", &info.position.to_le_bytes()),
                ("start_time", &time_bytes(info.start_us)),
                ("end_time", &time_bytes(info.end_us)),
                ("count", &(info.counts.len() as u32).to_le_bytes()),
            ],
            &data,
        );
    }
    let mut out = sink.out;
    out.write_all(&tail)?;
    out.seek(SeekFrom::Start(VERSION_LINE.len() as u64))?;
    out.write_all(&bag_header(
        index_pos,
        sink.connections.len() as u32,
        sink.chunk_infos.len() as u32,
    ))?;
    out.flush()?;
    Ok(stats)
}

/// Writes the ULog stream of `flight` to `out` as a ROS 1 bag in format 1.2.
pub fn write_v12<W: Write + Seek>(
    flight: &(impl Flight + ?Sized),
    options: &ExportOptions,
    mut out: W,
) -> Result<ExportStats, ExportError> {
    out.write_all(VERSION_LINE_V12)?;
    out.write_all(&file_header_v12(0))?;
    let mut sink = RosSink::new(V12Writer {
        position: (VERSION_LINE_V12.len() + BAG_HEADER_LEN) as u64,
        out,
        topics: Vec::new(),
        record: Vec::new(),
    });
    let (stats, _) = walk(flight, options, &mut sink)?;
    let sink = sink.records;
    let index_pos = sink.position;
    let mut tail = Vec::new();
    for topic in &sink.topics {
        let mut data = Vec::with_capacity(topic.index.len() * 16);
        for (time, offset) in &topic.index {
            data.extend_from_slice(&time_bytes(*time));
            data.extend_from_slice(&offset.to_le_bytes());
        }
        record(
            &mut tail,
            &[
                ("op", &[op::INDEX_DATA]),
                ("ver", &0u32.to_le_bytes()),
                ("topic", topic.connection.topic.as_bytes()),
                ("count", &(topic.index.len() as u32).to_le_bytes()),
            ],
            &data,
        );
    }
    let mut out = sink.out;
    out.write_all(&tail)?;
    out.seek(SeekFrom::Start(VERSION_LINE_V12.len() as u64))?;
    out.write_all(&file_header_v12(index_pos))?;
    out.flush()?;
    Ok(stats)
}

/// A topic of a 1.2 bag: its type, and its index (time µs, file offset; the first entry is
/// the definition record's offset).
struct V12Topic {
    connection: Connection,
    index: Vec<(u64, u64)>,
}

struct V12Writer<W: Write + Seek> {
    out: W,
    position: u64,
    topics: Vec<V12Topic>,
    /// The record being written, reused.
    record: Vec<u8>,
}

impl<W: Write + Seek> Records for V12Writer<W> {
    fn add(&mut self, connection: Connection) -> u32 {
        self.topics.push(V12Topic {
            connection,
            index: Vec::new(),
        });
        (self.topics.len() - 1) as u32
    }

    /// Its definition first if it is the topic's first message.
    fn put(&mut self, n: u32, timestamp_us: u64, message: &[u8]) -> Result<(), ExportError> {
        let topic = &mut self.topics[n as usize];
        let c = &topic.connection;
        self.record.clear();
        let at = self.position;
        if topic.index.is_empty() {
            record(
                &mut self.record,
                &[
                    ("op", &[op::MESSAGE_DEFINITION]),
                    ("topic", c.topic.as_bytes()),
                    ("type", c.type_name.as_bytes()),
                    ("md5", c.md5sum.as_bytes()),
                    ("def", c.definition.as_bytes()),
                ],
                &[],
            );
        }
        let data_at = at + self.record.len() as u64;
        let (sec, nsec) = ros_time(timestamp_us);
        record(
            &mut self.record,
            &[
                ("op", &[op::MESSAGE_DATA]),
                ("topic", c.topic.as_bytes()),
                ("md5", c.md5sum.as_bytes()),
                ("type", c.type_name.as_bytes()),
                ("sec", &sec.to_le_bytes()),
                ("nsec", &nsec.to_le_bytes()),
            ],
            message,
        );
        // The first entry points at the definition, the others at their message.
        topic.index.push((
            timestamp_us,
            if topic.index.is_empty() { at } else { data_at },
        ));
        self.out.write_all(&self.record)?;
        self.position += self.record.len() as u64;
        Ok(())
    }
}

/// What a bag format does with connections and messages.
trait Records {
    /// A new connection (a topic with its type): its number.
    fn add(&mut self, connection: Connection) -> u32;
    /// A message (ROS 1 serialised) on connection `conn` at `timestamp_us`.
    fn put(&mut self, conn: u32, timestamp_us: u64, message: &[u8]) -> Result<(), ExportError>;
}

/// The export's [`Sink`] for either bag format: samples and logged strings serialised for
/// ROS 1, `/log` made at its first string.
struct RosSink<R: Records> {
    records: R,
    log_connection: Option<u32>,
    log_sequence: u32,
    buffer: Vec<u8>,
}

impl<R: Records> RosSink<R> {
    fn new(records: R) -> Self {
        Self {
            records,
            log_connection: None,
            log_sequence: 0,
            buffer: Vec::new(),
        }
    }
}

impl<R: Records> Sink for RosSink<R> {
    fn channel(
        &mut self,
        topic: &str,
        ty: &Ros2Type,
        _source: &TopicSource<'_>,
    ) -> Result<u32, ExportError> {
        Ok(self.records.add(Connection::of(topic, ty)))
    }

    fn sample(
        &mut self,
        channel: u32,
        ty: &Ros2Type,
        timestamp_us: u64,
        data: &[u8],
    ) -> Result<(), ExportError> {
        if ty.encode_ros1(data, &mut self.buffer).is_err() {
            return Ok(());
        }
        self.records.put(channel, timestamp_us, &self.buffer)
    }

    fn log(
        &mut self,
        timestamp_us: u64,
        ulog_level: u8,
        name: &str,
        text: &[u8],
    ) -> Result<(), ExportError> {
        let conn = match self.log_connection {
            Some(conn) => conn,
            None => *self
                .log_connection
                .insert(self.records.add(Connection::log())),
        };
        ros1::encode_log(
            timestamp_us,
            ulog_level,
            name,
            text,
            self.log_sequence,
            &mut self.buffer,
        );
        self.log_sequence = self.log_sequence.wrapping_add(1);
        self.records.put(conn, timestamp_us, &self.buffer)
    }
}

/// A connection: a topic with its type.
struct Connection {
    topic: String,
    type_name: String,
    md5sum: String,
    definition: String,
}

impl Connection {
    /// The topic `topic` of type `ty`, as ROS 1 sees it.
    fn of(topic: &str, ty: &Ros2Type) -> Self {
        let type_name = ty.ros1_name();
        let definition = ros1::definition_from_ros2(&ty.schema);
        let md5sum = ros1::md5sum(&definition, &type_name);
        Self {
            topic: topic.to_owned(),
            type_name,
            md5sum,
            definition,
        }
    }

    /// `/log`.
    fn log() -> Self {
        Self {
            topic: "/log".to_owned(),
            type_name: LOG_TYPE.to_owned(),
            md5sum: ros1::md5sum(LOG_DEFINITION, LOG_TYPE),
            definition: LOG_DEFINITION.to_owned(),
        }
    }
}

/// The chunk being filled.
#[derive(Default)]
struct Chunk {
    data: Vec<u8>,
    /// Per connection: (time µs, offset of its message record in `data`).
    index: BTreeMap<u32, Vec<(u64, u32)>>,
    start_us: u64,
    end_us: u64,
}

struct ChunkInfo {
    position: u64,
    start_us: u64,
    end_us: u64,
    /// (connection, messages in the chunk).
    counts: Vec<(u32, u32)>,
}

struct V20Writer<W: Write + Seek> {
    out: W,
    /// Bytes written so far.
    position: u64,
    connections: Vec<Connection>,
    chunk: Chunk,
    chunk_infos: Vec<ChunkInfo>,
}

impl<W: Write + Seek> Records for V20Writer<W> {
    fn add(&mut self, connection: Connection) -> u32 {
        let conn = self.connections.len() as u32;
        // Into the chunk where it is first used, as rosbag writes it.
        connection_record(&mut self.chunk.data, conn, &connection);
        self.connections.push(connection);
        conn
    }

    fn put(&mut self, conn: u32, timestamp_us: u64, message: &[u8]) -> Result<(), ExportError> {
        let chunk = &mut self.chunk;
        if chunk.index.is_empty() {
            chunk.start_us = timestamp_us;
            chunk.end_us = timestamp_us;
        }
        chunk.start_us = chunk.start_us.min(timestamp_us);
        chunk.end_us = chunk.end_us.max(timestamp_us);
        let offset = chunk.data.len() as u32;
        record(
            &mut chunk.data,
            &[
                ("op", &[op::MESSAGE_DATA]),
                ("conn", &conn.to_le_bytes()),
                ("time", &time_bytes(timestamp_us)),
            ],
            message,
        );
        chunk
            .index
            .entry(conn)
            .or_default()
            .push((timestamp_us, offset));
        if chunk.data.len() >= CHUNK_THRESHOLD {
            self.close_chunk()?;
        }
        Ok(())
    }
}

impl<W: Write + Seek> V20Writer<W> {
    /// Writes the chunk and its index data records.
    fn close_chunk(&mut self) -> Result<(), ExportError> {
        let chunk = std::mem::take(&mut self.chunk);
        if chunk.data.is_empty() {
            return Ok(());
        }
        let mut bytes = Vec::with_capacity(chunk.data.len() + 1024);
        record(
            &mut bytes,
            &[
                ("op", &[op::CHUNK]),
                ("compression", b"none"),
                ("size", &(chunk.data.len() as u32).to_le_bytes()),
            ],
            &chunk.data,
        );
        let mut counts = Vec::new();
        for (conn, entries) in &chunk.index {
            let mut data = Vec::with_capacity(entries.len() * 12);
            for (time, offset) in entries {
                data.extend_from_slice(&time_bytes(*time));
                data.extend_from_slice(&offset.to_le_bytes());
            }
            record(
                &mut bytes,
                &[
                    ("op", &[op::INDEX_DATA]),
                    ("ver", &1u32.to_le_bytes()),
                    ("conn", &conn.to_le_bytes()),
                    ("count", &(entries.len() as u32).to_le_bytes()),
                ],
                &data,
            );
            counts.push((*conn, entries.len() as u32));
        }
        self.chunk_infos.push(ChunkInfo {
            position: self.position,
            start_us: chunk.start_us,
            end_us: chunk.end_us,
            counts,
        });
        self.out.write_all(&bytes)?;
        self.position += bytes.len() as u64;
        Ok(())
    }
}

/// Appends a record: its header's length and fields (`name=value`, each with its length),
/// then its data's length and data.
fn record(out: &mut Vec<u8>, fields: &[(&str, &[u8])], data: &[u8]) {
    let header_len: usize = fields.iter().map(|(n, v)| 4 + n.len() + 1 + v.len()).sum();
    out.extend_from_slice(&(header_len as u32).to_le_bytes());
    push_fields(out, fields);
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out.extend_from_slice(data);
}

/// Fields as a record header has them, without the overall length.
fn push_fields(out: &mut Vec<u8>, fields: &[(&str, &[u8])]) {
    for (name, value) in fields {
        out.extend_from_slice(&((name.len() + 1 + value.len()) as u32).to_le_bytes());
        out.extend_from_slice(name.as_bytes());
        out.push(b'=');
        out.extend_from_slice(value);
    }
}

/// A connection record: `conn` and `topic` in its header, the connection header (topic,
/// type, MD5 sum, definition) as its data.
fn connection_record(out: &mut Vec<u8>, conn: u32, c: &Connection) {
    let mut data = Vec::new();
    push_fields(
        &mut data,
        &[
            ("topic", c.topic.as_bytes()),
            ("type", c.type_name.as_bytes()),
            ("md5sum", c.md5sum.as_bytes()),
            ("message_definition", c.definition.as_bytes()),
        ],
    );
    record(
        out,
        &[
            ("op", &[op::CONNECTION]),
            ("conn", &conn.to_le_bytes()),
            ("topic", c.topic.as_bytes()),
        ],
        &data,
    );
}

/// The bag header record, padded with spaces to [`BAG_HEADER_LEN`] bytes.
fn bag_header(index_pos: u64, conn_count: u32, chunk_count: u32) -> Vec<u8> {
    padded_header(&[
        ("op", &[op::BAG_HEADER]),
        ("index_pos", &index_pos.to_le_bytes()),
        ("conn_count", &conn_count.to_le_bytes()),
        ("chunk_count", &chunk_count.to_le_bytes()),
    ])
}

/// The 1.2 file header record (the same opcode as 2.0's bag header), padded likewise.
fn file_header_v12(index_pos: u64) -> Vec<u8> {
    padded_header(&[
        ("op", &[op::BAG_HEADER]),
        ("index_pos", &index_pos.to_le_bytes()),
    ])
}

/// A record of `fields` whose data is spaces, [`BAG_HEADER_LEN`] bytes in all.
fn padded_header(fields: &[(&str, &[u8])]) -> Vec<u8> {
    let header_len: usize = fields.iter().map(|(n, v)| 4 + n.len() + 1 + v.len()).sum();
    let padding = BAG_HEADER_LEN - 4 - header_len - 4;
    let mut out = Vec::with_capacity(BAG_HEADER_LEN);
    record(&mut out, fields, &vec![b' '; padding]);
    debug_assert_eq!(out.len(), BAG_HEADER_LEN);
    out
}

/// A ROS time field: seconds, then nanoseconds (uint32 each).
fn time_bytes(us: u64) -> [u8; 8] {
    let (sec, nsec) = ros_time(us);
    let mut out = [0; 8];
    out[..4].copy_from_slice(&sec.to_le_bytes());
    out[4..].copy_from_slice(&nsec.to_le_bytes());
    out
}
