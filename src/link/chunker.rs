//! Cuts a ULog byte stream into log-streaming chunks the way PX4's `mavlink_ulog` does: the
//! definitions go as acked chunks, the pending partial chunk is flushed at the switch to the
//! data (the only short chunk), then full unacked chunks follow. Each chunk says where the
//! first message starting in it begins. Used by the simulator and by tests; deterministic.

use crate::link::assembler::NO_MESSAGE_START;
use crate::ulog::message::{FILE_HEADER_LEN, INCOMPAT_DATA_APPENDED, MSG_HEADER_LEN, msg_type};
use crate::ulog::{ReadError, Reader};

/// Bytes of log data in one LOGGING_DATA(_ACKED) message.
pub const CHUNK_DATA_LEN: usize = 249;

/// One chunk as the vehicle sends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogChunk {
    pub seq: u16,
    pub first_message_offset: u8,
    pub data: Vec<u8>,
    /// Sent as LOGGING_DATA_ACKED (stop-and-wait), else LOGGING_DATA.
    pub acked: bool,
    /// Offset of `data[0]` in the streamed log.
    pub stream_offset: u64,
}

/// A log ready to stream: its bytes as the vehicle would send them, and the chunks.
#[derive(Debug, Clone)]
pub struct ChunkedLog {
    /// The streamed bytes: the file's messages up to any appended data, with the
    /// appended-data flag cleared (PX4 streams no appended data).
    pub stream: Vec<u8>,
    /// Start offset in `stream` of every message (the file header at 0 included).
    pub message_starts: Vec<u64>,
    pub chunks: Vec<LogChunk>,
}

/// Types PX4 sends in the reliable (acked) phase.
fn is_definition(ty: u8) -> bool {
    matches!(
        ty,
        msg_type::FLAG_BITS
            | msg_type::FORMAT
            | msg_type::INFO
            | msg_type::INFO_MULTIPLE
            | msg_type::PARAMETER
            | msg_type::PARAMETER_DEFAULT
            | msg_type::ADD_LOGGED
    )
}

/// Chunks the log in `file` (a .ulg file's bytes). Sequence numbers start at `first_seq`.
pub fn chunk_log(file: &[u8], first_seq: u16) -> Result<ChunkedLog, ReadError> {
    let mut reader = Reader::new();
    reader.push(file);
    reader.finish();
    let mut stream = Vec::with_capacity(file.len());
    let mut message_starts = Vec::new();
    // Where the first phase-2 (unacked) message starts: the partial chunk is flushed there.
    let mut first_data_offset = None;
    let mut appended_at = None;
    while let Some(item) = reader.next_record() {
        let record = match item {
            Ok(r) => r,
            Err(e) if e.is_fatal() => return Err(e),
            Err(_) => continue,
        };
        if appended_at.is_some_and(|a| record.offset >= a) {
            break;
        }
        let start = stream.len() as u64;
        message_starts.push(start);
        stream.extend_from_slice(record.raw);
        if record.raw.len() > MSG_HEADER_LEN && record.raw[2] == msg_type::FLAG_BITS {
            // Clear the appended-data bit and offsets: the stream stops before them.
            let p = start as usize + MSG_HEADER_LEN;
            if stream[p + 8] & INCOMPAT_DATA_APPENDED != 0 {
                appended_at = (0..3)
                    .map(|i| {
                        u64::from_le_bytes(
                            stream[p + 16 + 8 * i..p + 24 + 8 * i].try_into().unwrap(),
                        )
                    })
                    .filter(|&o| o != 0)
                    .min();
                stream[p + 8] &= !INCOMPAT_DATA_APPENDED;
                stream[p + 16..p + 40].fill(0);
            }
        }
        if first_data_offset.is_none()
            && record.offset >= FILE_HEADER_LEN as u64
            && !is_definition(record.raw[2])
        {
            first_data_offset = Some(start);
        }
    }
    let chunks = cut(&stream, &message_starts, first_data_offset, first_seq);
    Ok(ChunkedLog {
        stream,
        message_starts,
        chunks,
    })
}

fn cut(stream: &[u8], starts: &[u64], switch: Option<u64>, first_seq: u16) -> Vec<LogChunk> {
    let mut chunks = Vec::with_capacity(stream.len() / CHUNK_DATA_LEN + 2);
    let mut seq = first_seq;
    let mut at = 0usize;
    let mut next_start = 0usize; // index into `starts`
    while at < stream.len() {
        let acked = switch.is_none_or(|s| (at as u64) < s);
        let mut end = (at + CHUNK_DATA_LEN).min(stream.len());
        if let Some(s) = switch
            && (at as u64) < s
        {
            end = end.min(s as usize);
        }
        while next_start < starts.len() && (starts[next_start] as usize) < at {
            next_start += 1;
        }
        let first_message_offset = match starts.get(next_start) {
            Some(&s) if (s as usize) < end => (s as usize - at) as u8,
            _ => NO_MESSAGE_START,
        };
        chunks.push(LogChunk {
            seq,
            first_message_offset,
            data: stream[at..end].to_vec(),
            acked,
            stream_offset: at as u64,
        });
        seq = seq.wrapping_add(1);
        at = end;
    }
    chunks
}
