//! The writer thread: the file from its magic to its footer, each chunk compressed (by the
//! compressor threads of [`super::compress`]) and written with its message indexes, then the
//! metadata, the summary section, its offsets and the footer.

use std::io::Write;
use std::sync::mpsc;

use super::compress::{Compressed, Compression};
use super::records::{
    begin, channel_record, end, header_record, put_map, put_str, put_u16, put_u32, put_u64,
    schema_record,
};
use super::{Chunk, ChunkIndex, MAGIC, Step, Summary, op};
use crate::export::{ExportError, FlightMetadata};

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
pub(super) fn write_file<W: Write>(
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
