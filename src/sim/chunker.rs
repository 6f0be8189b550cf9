//! Cuts a ULog byte stream into log-streaming chunks the way PX4's logger and `mavlink_ulog`
//! do. Used by the simulator and by tests; deterministic.
//!
//! The logger writes some messages *reliably*: the header and definitions, and in flight each
//! 'A' (a topic instance that appears) and each run of 'M' (its perf output). A chunk is sent
//! when its 249 bytes are full, or, when a reliable section ends, flushed short; it goes as
//! LOGGING_DATA_ACKED when its last byte is reliable, so an acked chunk may begin with ordinary
//! data that was pending when the section began. Each chunk says where the first message
//! starting in it begins.
//!
//! PX4 writes its post-flight perf counters ('M' `perf_counter_postflight`) when it is
//! stopped: the trailing run of them in a file is held back as [`ChunkedLog::postflight`]
//! (a made-up set when the file has none) and streamed by [`ChunkedLog::stop_after`].

use crate::link::assembler::NO_MESSAGE_START;
use crate::ulog::message::{
    FILE_HEADER_LEN, INCOMPAT_DATA_APPENDED, MSG_HEADER_LEN, is_definition, is_postflight, msg_type,
};
use crate::ulog::{ReadError, Reader, Writer};

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
    /// appended-data flag cleared (PX4 streams no appended data), without the post-flight
    /// data (until [`stop_after`](Self::stop_after) adds it).
    pub stream: Vec<u8>,
    /// Start offset in `stream` of every message (the file header at 0 included).
    pub message_starts: Vec<u64>,
    pub chunks: Vec<LogChunk>,
    /// What the logger writes when stopped: whole 'M' `perf_counter_postflight` messages.
    pub postflight: Vec<u8>,
}

/// Types PX4 sends in the reliable (acked) phase: the definitions and the subscriptions.
fn is_acked_phase(ty: u8) -> bool {
    is_definition(ty) || ty == msg_type::ADD_LOGGED
}

/// Chunks the log in `file` (a .ulg file's bytes). Sequence numbers start at `first_seq`.
pub fn chunk_log(file: &[u8], first_seq: u16) -> Result<ChunkedLog, ReadError> {
    let mut reader = Reader::new();
    reader.push(file);
    reader.finish();
    let mut stream = Vec::with_capacity(file.len());
    let mut message_starts = Vec::new();
    // Byte ranges written reliably: the definitions, then in-flight 'A's and 'M' runs.
    let mut reliable: Vec<(u64, u64)> = Vec::new();
    let mut in_definitions = true;
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
        let end = stream.len() as u64;
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
        let ty = (record.offset >= FILE_HEADER_LEN as u64).then(|| record.raw[2]);
        if in_definitions {
            if ty.is_some_and(|t| !is_acked_phase(t)) {
                in_definitions = false;
            } else {
                extend_reliable(&mut reliable, start, end, true);
                continue;
            }
        }
        match ty {
            Some(msg_type::ADD_LOGGED) => reliable.push((start, end)),
            // A run of 'M' is one reliable section.
            Some(msg_type::INFO_MULTIPLE) => {
                let previous_was_m = message_starts.len() >= 2
                    && stream[message_starts[message_starts.len() - 2] as usize + 2]
                        == msg_type::INFO_MULTIPLE;
                extend_reliable(&mut reliable, start, end, previous_was_m);
            }
            _ => {}
        }
    }
    // The trailing post-flight perf counters: written on STOP, not streamed before.
    let mut cut_at = stream.len();
    while let Some(&s) = message_starts.last() {
        if s == 0 || !is_postflight(&stream[s as usize..cut_at]) {
            break;
        }
        cut_at = s as usize;
        message_starts.pop();
    }
    let postflight = if cut_at < stream.len() {
        stream.split_off(cut_at)
    } else {
        made_up_postflight()
    };
    for r in &mut reliable {
        r.1 = r.1.min(cut_at as u64);
    }
    reliable.retain(|r| r.0 < r.1);
    let chunks = cut(&stream, &message_starts, &reliable, 0, first_seq);
    Ok(ChunkedLog {
        stream,
        message_starts,
        chunks,
        postflight,
    })
}

/// Adds `[start, end)` to the ranges, joined to the last one when `join` and they touch.
fn extend_reliable(ranges: &mut Vec<(u64, u64)>, start: u64, end: u64, join: bool) {
    match ranges.last_mut() {
        Some(last) if join && last.1 == start => last.1 = end,
        _ => ranges.push((start, end)),
    }
}

/// Post-flight perf counters in PX4's shape, for a file that has none.
fn made_up_postflight() -> Vec<u8> {
    let mut w = Writer::new();
    let counters = [
        "logger_sd_write",
        "logger_sd_fsync",
        "mavlink_txe",
        "mavlink_el",
        "ekf2_update",
        "sensors_update",
        "mc_att_control",
        "mc_rate_control",
        "navigator",
        "commander",
    ];
    for (i, name) in counters.iter().cycle().take(40).enumerate() {
        let line = format!(
            "{name}: {} events, {}us elapsed, {}.{:02}us avg, min {}us max {}us {}.{:03}us rms",
            1000 + 37 * i,
            52_000 + 911 * i,
            50 + i,
            (7 * i) % 100,
            3 + i % 5,
            400 + 13 * i,
            20 + i % 9,
            (31 * i) % 1000
        );
        w.info_multiple_string("perf_counter_postflight", &line, i > 0)
            .expect("a short line fits a message");
    }
    w.take()
}

/// Cuts `stream` from `from` (a chunk boundary) into chunks numbered from `first_seq`; see
/// the module docs for where chunks end and which are acked.
fn cut(
    stream: &[u8],
    starts: &[u64],
    reliable: &[(u64, u64)],
    from: u64,
    first_seq: u16,
) -> Vec<LogChunk> {
    let mut chunks = Vec::with_capacity(stream.len() / CHUNK_DATA_LEN + 2);
    let mut seq = first_seq;
    let mut at = from as usize;
    let mut next_start = starts.partition_point(|&s| s < from);
    let mut next_range = reliable.partition_point(|r| r.1 <= from);
    while at < stream.len() {
        let mut end = (at + CHUNK_DATA_LEN).min(stream.len());
        while next_range < reliable.len() && reliable[next_range].1 <= at as u64 {
            next_range += 1;
        }
        // A reliable section ending inside this chunk flushes it there.
        if let Some(&(s, e)) = reliable.get(next_range)
            && (s as usize) < end
            && (e as usize) < end
        {
            end = e as usize;
        }
        let last = (end - 1) as u64;
        let acked = reliable
            .get(next_range)
            .is_some_and(|&(s, e)| s <= last && last < e);
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

impl ChunkedLog {
    /// What the logger sends when stopped after chunk `sent - 1` went out: the rest of the
    /// message in progress, then the post-flight data, all reliably, the last chunk flushed
    /// short. The unsent chunks after `sent` are replaced by these (their indices are
    /// `sent..chunks.len()` afterwards).
    pub fn stop_after(&mut self, sent: usize) {
        let from = self
            .chunks
            .get(sent)
            .map_or(self.stream.len() as u64, |c| c.stream_offset);
        // Sequence numbers run on from the first chunk's, one per chunk.
        let first_seq = self
            .chunks
            .first()
            .map_or(0, |c| c.seq)
            .wrapping_add(sent as u16);
        let keep = self.message_starts.partition_point(|&s| s < from);
        let message_end = self
            .message_starts
            .get(keep)
            .map_or(self.stream.len(), |&s| s as usize);
        self.stream.truncate(message_end);
        self.message_starts.truncate(keep);
        self.chunks.truncate(sent);
        for m in crate::ulog::message::framed(&self.postflight) {
            self.message_starts.push(self.stream.len() as u64);
            self.stream.extend_from_slice(m);
        }
        let reliable = [(from, self.stream.len() as u64)];
        let tail = cut(
            &self.stream,
            &self.message_starts,
            &reliable,
            from,
            first_seq,
        );
        self.chunks.extend(tail);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn synthetic() -> Vec<u8> {
        crate::sim::synth::generate(crate::sim::synth::SynthOptions {
            duration_s: 5,
            seed: 3,
            appended_data: false,
        })
    }

    /// The chunks cover the stream back to back, with sequence numbers one apart.
    fn check_cover(log: &ChunkedLog) {
        let mut at = 0;
        for (i, c) in log.chunks.iter().enumerate() {
            assert_eq!(c.stream_offset, at, "chunk {i}");
            assert!(!c.data.is_empty() && c.data.len() <= CHUNK_DATA_LEN);
            assert_eq!(c.seq, log.chunks[0].seq.wrapping_add(i as u16));
            at += c.data.len() as u64;
        }
        assert_eq!(at, log.stream.len() as u64);
    }

    #[test]
    fn reliable_sections_end_in_short_acked_chunks() {
        let log = chunk_log(&synthetic(), 0).unwrap();
        check_cover(&log);
        // Definitions acked, then unacked data; every short chunk but the last is acked.
        assert!(log.chunks[0].acked);
        assert!(log.chunks.iter().any(|c| !c.acked));
        let n = log.chunks.len();
        for c in &log.chunks[..n - 1] {
            if c.data.len() < CHUNK_DATA_LEN {
                assert!(c.acked, "a short chunk at {} is a flush", c.stream_offset);
            }
        }
        assert!(!log.postflight.is_empty(), "a made-up post-flight");
        let mut m = 0;
        for msg in crate::ulog::message::framed(&log.postflight) {
            assert!(is_postflight(msg));
            m += 1;
        }
        assert!(m >= 10);
    }

    #[test]
    fn a_stop_sends_the_message_in_progress_then_the_postflight_reliably() {
        let mut log = chunk_log(&synthetic(), 0).unwrap();
        let pristine = log.clone();
        let before = log.chunks.len();
        let sent = before / 2;
        let seq = log.chunks[sent].seq;
        log.stop_after(sent);
        check_cover(&log);
        assert_eq!(log.chunks[sent].seq, seq);
        assert!(log.chunks[sent..].iter().all(|c| c.acked));
        // The stream ends with the post-flight messages, whole.
        assert!(log.stream.ends_with(&log.postflight));
        let end = log.stream.len() - log.postflight.len();
        assert!(log.message_starts.contains(&(end as u64)));
        // What was sent stays as it was.
        assert_eq!(log.chunks[..sent], pristine.chunks[..sent]);
        assert!(pristine.stream.starts_with(&log.stream[..end]));
        // After everything was sent, the continuation is the post-flight alone.
        let mut whole = chunk_log(&synthetic(), 0).unwrap();
        let len = whole.stream.len();
        let n = whole.chunks.len();
        let last_seq = whole.chunks[n - 1].seq;
        whole.stop_after(n);
        assert_eq!(whole.chunks[n].seq, last_seq.wrapping_add(1));
        assert_eq!(whole.stream.len(), len + whole.postflight.len());
        check_cover(&whole);
    }
}
