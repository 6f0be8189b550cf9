//! The log itself: every chunk acked first, duplicates dropped, chunks put back in order
//! ([`ReorderBuffer`]), whole ULog messages reassembled ([`Assembler`]), gaps marked as
//! dropouts ([`GapMarker`]), a new log told from a stray chunk 0, and the log bytes handed out.

use std::time::Instant;

use mavlink::MavHeader;
use mavlink::dialects::ardupilotmega::{LOGGING_ACK_DATA, MavMessage};

use super::commands::AfterStop;
use super::{CloseReason, Event, Phase, Session, SessionStats};
use crate::link::assembler::Assembler;
use crate::link::reorder::{Chunk, Delivery, ReorderBuffer, ReorderStats};
use crate::ulog::gaps::{Dropout, GapMarker};
use crate::ulog::message::{FILE_HEADER_LEN, FILE_MAGIC, framed};

/// A copy of chunk 0 this many chunks into a log cannot be a late duplicate (the vehicle
/// resends chunk 0 for 2.5 s at most, and it does not send chunk 1 before our ack): it starts a
/// new log even when its bytes equal the first one's.
const NEW_LOG_AFTER_CHUNKS: u64 = 1024;

/// The fields LOGGING_DATA and LOGGING_DATA_ACKED share.
#[derive(Debug, Clone, Copy)]
pub(super) struct ChunkFrame<'a> {
    pub(super) sequence: u16,
    pub(super) target_system: u8,
    pub(super) target_component: u8,
    pub(super) length: u8,
    pub(super) first_message_offset: u8,
    pub(super) data: &'a [u8; 249],
}

/// A chunk 0 with a new header in the middle of a log, waiting for the chunk after it.
#[derive(Debug)]
pub(super) struct PendingNewLog {
    pub(super) data: Vec<u8>,
    pub(super) arrived: Instant,
}

/// One log being received.
pub(super) struct Log {
    pub(super) number: u32,
    pub(super) reorder: ReorderBuffer,
    pub(super) assembler: Assembler,
    /// Marks the gaps with dropouts (and follows formats and subscriptions for the times).
    pub(super) gaps: GapMarker,
    /// Chunk 0 as received, to tell its duplicates from a new log's first chunk.
    pub(super) first_chunk: Vec<u8>,
    /// Chunks taken into the reorder buffer.
    pub(super) chunks: u64,
    /// The file header has been handed out.
    pub(super) opened: bool,
    pub(super) bytes: u64,
    /// Assembler output of the chunk in hand.
    pub(super) scratch: Vec<u8>,
}

impl Session {
    pub(super) fn on_chunk(
        &mut self,
        header: MavHeader,
        d: ChunkFrame<'_>,
        acked: bool,
        now: Instant,
    ) {
        let Some(v) = self.vehicle else {
            self.stats.ignored_chunks += 1;
            return;
        };
        if header.system_id != v.system_id as u32
            || d.target_system != self.system_id()
            || d.target_component != self.config.component_id
        {
            self.stats.ignored_chunks += 1;
            return;
        }
        if acked {
            // Before anything else: the vehicle is blocked until this arrives.
            self.send(
                MavMessage::LOGGING_ACK(LOGGING_ACK_DATA {
                    sequence: d.sequence,
                    target_system: v.system_id,
                    target_component: v.component_id,
                }),
                now,
            );
            self.stats.acks_sent += 1;
            self.stats.acked_chunks += 1;
        }
        self.stats.chunks += 1;
        let len = (d.length as usize).min(d.data.len());
        let data = &d.data[..len];
        let streaming = matches!(self.phase, Phase::Streaming { .. });
        // A log open while the STOP handshake of a shutdown runs still takes its chunks.
        let draining = matches!(
            self.phase,
            Phase::Stopping {
                then: AfterStop::Close,
                ..
            }
        ) && self.log.is_some();
        let starts_log = d.sequence == 0
            && d.first_message_offset == 0
            && data.len() >= FILE_MAGIC.len()
            && data[..FILE_MAGIC.len()] == FILE_MAGIC;
        if starts_log && !draining {
            // A copy of chunk 0 (resent while our ack was on its way) is a duplicate; a
            // different chunk 0, or one long after the start, is a new log.
            let duplicate = self
                .log
                .as_ref()
                .is_some_and(|l| l.first_chunk == data && l.chunks < NEW_LOG_AFTER_CHUNKS);
            let after_start = self
                .start_sent
                .is_some_and(|t| now.duration_since(t) < 10 * self.config.command_timeout);
            if !duplicate && (streaming || after_start) {
                if self.is_logging() {
                    // In the middle of a log: a restart of the stream, or a stray frame. The
                    // chunk after it decides.
                    self.stats.suspects += 1;
                    let earlier = self.pending_new_log.replace(PendingNewLog {
                        data: data.to_vec(),
                        arrived: now,
                    });
                    if earlier.is_some() {
                        self.stats.implausible += 1;
                    }
                    return;
                }
                self.begin_log(data, streaming, now);
            }
        } else if let Some(pending) = self.pending_new_log.take() {
            let window = self.config.reorder.max_chunks as u16;
            let expired = now.duration_since(pending.arrived) > self.config.reorder.suspect_wait;
            // The chunk after a restart: early in a stream, and behind the open log's.
            let of_open_log = self
                .log
                .as_ref()
                .is_some_and(|l| d.sequence.wrapping_sub(l.reorder.next_seq()) < 0x8000);
            if !expired && !of_open_log && (1..=window).contains(&d.sequence) {
                // Confirmed: the vehicle restarted its stream.
                self.begin_log(&pending.data, streaming, now);
                self.take_chunk(0, 0, &pending.data, now);
            } else if expired {
                self.stats.implausible += 1;
            } else {
                self.pending_new_log = Some(pending);
            }
        }
        // (A log begun above is streaming now.)
        let streaming = matches!(self.phase, Phase::Streaming { .. });
        if self.log.is_none() || !(streaming || draining) {
            self.stats.ignored_chunks += 1;
            return;
        }
        if streaming {
            self.phase = Phase::Streaming {
                stall_check: now + self.config.stream_timeout,
            };
        }
        self.failures = 0;
        self.take_chunk(d.sequence, d.first_message_offset, data, now);
    }

    /// Closes any open log and opens a new one whose chunk 0 is `first_chunk`.
    fn begin_log(&mut self, first_chunk: &[u8], streaming: bool, now: Instant) {
        if self.log.is_some() {
            self.close_log(CloseReason::NewLog);
        }
        self.logs_opened += 1;
        self.stats.logs += 1;
        self.log = Some(Log {
            number: self.logs_opened,
            reorder: ReorderBuffer::new(0, self.config.reorder),
            assembler: Assembler::new(),
            gaps: GapMarker::new(self.config.max_held_bytes),
            first_chunk: first_chunk.to_vec(),
            chunks: 0,
            opened: false,
            bytes: 0,
            scratch: Vec::new(),
        });
        if !streaming {
            // The START's ACCEPTED was lost, but the stream is here.
            self.stream_started(now);
        }
        self.phase = Phase::Streaming {
            stall_check: now + self.config.stream_timeout,
        };
    }

    /// Puts one chunk of the open log into its reorder buffer and takes what comes out.
    fn take_chunk(&mut self, seq: u16, first_message_offset: u8, data: &[u8], now: Instant) {
        let Some(log) = &mut self.log else { return };
        log.chunks += 1;
        log.reorder.push(
            Chunk {
                seq,
                first_message_offset,
                data: data.to_vec(),
            },
            now,
        );
        self.drain_reorder();
    }

    /// Ends the open log: what the reorder buffer holds goes out, a pending dropout is
    /// resolved, [`Event::LogClosed`] follows (only for a log that was opened).
    pub(super) fn close_log(&mut self, reason: CloseReason) {
        if self.pending_new_log.take().is_some() {
            self.stats.implausible += 1;
        }
        let Some(log) = &mut self.log else { return };
        log.reorder.flush();
        self.drain_reorder();
        let Some(mut log) = self.log.take() else {
            return;
        };
        // Nothing timestamped came after the last gap, if one is pending.
        let before = self.out.len();
        let dropout = log.gaps.finish(&mut self.out);
        self.count_out(&mut log, before);
        self.dropout_event(dropout);
        add_reorder_stats(&mut self.stats, &log.reorder.stats());
        let a = log.assembler.stats();
        self.stats.discarded_bytes += a.discarded_bytes;
        self.stats.framing_errors += a.framing_errors;
        if log.opened {
            self.log_closed(log.number, reason, log.bytes);
        }
    }

    /// A log is over (either autopilot's): the bytes still held go out first, then
    /// [`Event::LogClosed`].
    pub(super) fn log_closed(&mut self, number: u32, reason: CloseReason, bytes: u64) {
        self.flush_out();
        tracing::info!(number, ?reason, bytes, "log closed");
        self.events.push_back(Event::LogClosed {
            number,
            reason,
            bytes,
        });
    }

    /// Moves everything the reorder buffer releases through the assembler and the decoder.
    pub(super) fn drain_reorder(&mut self) {
        let Some(mut log) = self.log.take() else {
            return;
        };
        while let Some(d) = log.reorder.pop() {
            match d {
                Delivery::Chunk(c) => {
                    let mut scratch = std::mem::take(&mut log.scratch);
                    scratch.clear();
                    log.assembler
                        .chunk(&c.data, c.first_message_offset, &mut scratch);
                    self.take_messages(&mut log, &scratch);
                    log.scratch = scratch;
                }
                Delivery::Gap { lost } => {
                    log.assembler.gap();
                    if log.opened && !crate::planted::is(crate::planted::Bug::GapWithoutDropout) {
                        log.gaps.gap(lost);
                    }
                }
            }
        }
        self.log = Some(log);
    }

    /// Takes whole messages from the assembler (the file header first in a log).
    fn take_messages(&mut self, log: &mut Log, mut bytes: &[u8]) {
        if !log.opened && bytes.len() >= FILE_HEADER_LEN {
            let header: &[u8; FILE_HEADER_LEN] =
                bytes[..FILE_HEADER_LEN].try_into().expect("16 bytes");
            log.gaps.header(header);
            log.opened = true;
            self.flush_out();
            tracing::info!(number = log.number, "log opened");
            self.events.push_back(Event::LogOpened {
                number: log.number,
                format: crate::autopilot::LogFormat::ULog,
            });
            let before = self.out.len();
            self.out.extend_from_slice(header);
            self.count_out(log, before);
            bytes = &bytes[FILE_HEADER_LEN..];
        }
        // The assembler hands out whole messages only.
        let before = self.out.len();
        for message in framed(bytes) {
            if let Some(dropout) = log.gaps.message(message, &mut self.out) {
                self.dropout_event(Some(dropout));
            }
        }
        self.count_out(log, before);
    }

    /// Counts the log bytes appended to `out` since it was `before` long.
    fn count_out(&mut self, log: &mut Log, before: usize) {
        let n = (self.out.len() - before) as u64;
        log.bytes += n;
        self.stats.log_bytes += n;
    }

    /// A dropout was written: counted, told.
    fn dropout_event(&mut self, dropout: Option<Dropout>) {
        let Some(d) = dropout else { return };
        self.stats.dropouts += 1;
        tracing::info!(lost_chunks = d.lost, duration_ms = ?d.duration_ms, "dropout");
        self.events.push_back(Event::Dropout {
            lost_chunks: d.lost,
            duration_ms: d.duration_ms,
        });
    }

    /// Hands the log bytes collected so far out as one event.
    pub(super) fn flush_out(&mut self) {
        if !self.out.is_empty() {
            self.events
                .push_back(Event::LogBytes(self.out.split().freeze()));
        }
    }
}

/// Adds one log's reorder counters to the session's.
pub(super) fn add_reorder_stats(stats: &mut SessionStats, log: &ReorderStats) {
    stats.duplicates += log.duplicates;
    stats.too_late += log.too_late;
    stats.reordered += log.reordered;
    stats.recovered += log.recovered;
    stats.lost_chunks += log.lost;
    stats.gaps += log.gaps;
    stats.suspects += log.suspects;
    stats.implausible += log.implausible;
}
