//! ArduPilot's log stream (DataFlash remote logging, `AP_Logger_MAVLink`): START and STOP
//! as REMOTE_LOG_BLOCK_STATUS, every block acked at once, a NACK for each block a later one
//! shows missing (again every [`NACK_INTERVAL`] while it stays missing), duplicates dropped,
//! late blocks put back in order, whole DataFlash messages out, gaps marked in the log.
//!
//! The vehicle answers neither START nor STOP: the first block (seqno 0) is the answer. It
//! keeps every block until acked and resends it after 100 ms, so a block missing for long is
//! one it no longer has (it dropped us, or restarted its stream): after [`GIVE_UP`] (or with
//! [`MAX_AHEAD`] blocks waiting behind it) the hole is declared lost and marked. A block
//! further than [`MAX_AHEAD`] beyond the stream is implausible (the vehicle holds about 40 in
//! flight): neither acked, kept nor NACKed for, so a forged one costs nothing.
//!
//! A new stream (seqno 0 again, after the vehicle dropped us or lost us for 10 s) continues
//! the same log: the outage becomes a dropout whose length the log times around it tell,
//! unless the log time went back (the vehicle rebooted), when the log closes and a new one
//! opens. Blocks of a stream we did not start (seqno other than 0 with none open: a stream
//! of ours from before a restart) are answered with STOP, then START once that stream has
//! gone quiet ([`STOPPED_QUIET`]), to begin at the log's start, where its formats are.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use mavlink::MavHeader;
use mavlink::dialects::ardupilotmega::{
    MavMessage, MavRemoteLogDataBlockStatuses, REMOTE_LOG_BLOCK_STATUS_DATA,
};

use super::{CloseReason, Event, Phase, Session};
use crate::autopilot::LogFormat;
use crate::dataflash::{Framer, GapMarker, Resolved};
use crate::link::log_block::{BLOCK_BYTES, BLOCK_START, BLOCK_STOP, LogBlock};

/// Blocks beyond the next expected one that can be real: the vehicle's buffer holds about 40.
pub const MAX_AHEAD: u32 = 1024;
/// A missing block is NACKed again this often while later ones wait.
pub const NACK_INTERVAL: Duration = Duration::from_millis(100);
/// Most NACKs sent in one round.
pub const NACKS_PER_ROUND: usize = 32;
/// A block missing this long is one the vehicle no longer has.
pub const GIVE_UP: Duration = Duration::from_secs(5);
/// Blocks below the next one that arrive after a START of ours are kept aside up to this
/// seqno: more than the vehicle keeps in flight (`LOG_MAV_BUFSIZE` 64 KB: some 300 blocks).
pub const KEPT_ASIDE: u32 = 512;
/// At shutdown, how long blocks still missing behind later ones are awaited before the STOP
/// (NACKed as usual: the vehicle sends a NACKed block at once, an unacked one after 100 ms).
pub const DRAIN: Duration = Duration::from_millis(500);
/// A START goes out again this often until blocks come.
pub const START_INTERVAL: Duration = Duration::from_secs(1);
/// A stream we stopped is over once no block of it has come for this long: the vehicle
/// resends an unacked block every 100 ms, and a link holds a frame back for milliseconds.
pub const STOPPED_QUIET: Duration = Duration::from_millis(500);
/// The vehicle's stream going to another client is said again at most this often.
pub const FOREIGN_STREAM_REPEAT: Duration = Duration::from_secs(60);

/// The ArduPilot log being received.
pub(super) struct BlockLog {
    pub(super) number: u32,
    /// The stream this log is fed by now is running (its seqno 0 came).
    pub(super) stream_open: bool,
    /// When the running stream's seqno 0 came.
    pub(super) began: Option<Instant>,
    /// The next block of the stream to hand out.
    pub(super) next: u32,
    /// Blocks beyond `next`, waiting for those before them.
    pub(super) ahead: BTreeMap<u32, Box<[u8; BLOCK_BYTES]>>,
    /// Blocks known missing so far: NACKed up to here (exclusive).
    pub(super) nacked_up_to: u32,
    /// The hole: `next` (the block missing while later ones wait) and since when it is the
    /// one missing (a hole that moves on to the next block missing starts its wait anew);
    /// and when to NACK again.
    pub(super) hole: Option<(u32, Instant)>,
    pub(super) next_nack: Option<Instant>,
    pub(super) framer: Framer,
    pub(super) gaps: GapMarker,
    pub(super) bytes: u64,
    /// Blocks with a seqno already taken that came after a START of ours: acked as
    /// duplicates, but they may be the first blocks of the new stream that START began,
    /// its block 0 late. When that block 0 comes, they are the new stream's.
    pub(super) aside: BTreeMap<u32, Box<[u8; BLOCK_BYTES]>>,
    /// Messages of the block in hand.
    pub(super) scratch: Vec<u8>,
}

impl BlockLog {
    fn new(number: u32) -> Self {
        Self {
            number,
            stream_open: false,
            began: None,
            next: 0,
            ahead: BTreeMap::new(),
            nacked_up_to: 0,
            hole: None,
            next_nack: None,
            framer: Framer::new(),
            gaps: GapMarker::new(),
            bytes: 0,
            aside: BTreeMap::new(),
            scratch: Vec::new(),
        }
    }

    /// When its timers next have work.
    pub(super) fn deadline(&self) -> Option<Instant> {
        match (self.next_nack, self.hole.map(|(_, since)| since)) {
            (Some(n), Some(h)) => Some(n.min(h + GIVE_UP)),
            (n, h) => n.or(h.map(|h| h + GIVE_UP)),
        }
    }
}

impl Session {
    /// Sends START (a block status with the START seqno and ACK).
    pub(super) fn send_block_start(&mut self, now: Instant) {
        // Only a stream this START begins can come after it: what came before is no part.
        if let Some(log) = &mut self.blocks {
            log.aside.clear();
        }
        self.send_block_status(BLOCK_START, true, now);
        self.stats.start_requests += 1;
        self.start_sent = Some(now);
        self.phase = Phase::Starting {
            deadline: now + START_INTERVAL,
        };
    }

    /// Ends a shutdown's drain (see [`Session::shutdown`]) once no block is missing behind
    /// later ones, or its time is up, or the vehicle is gone: STOP (twice: a lossy link), and
    /// the log closes.
    pub(super) fn end_drain_when_done(&mut self, now: Instant) {
        let Some(until) = self.draining_until else {
            return;
        };
        let hole = self.blocks.as_ref().is_some_and(|l| !l.ahead.is_empty());
        let present = self.vehicle.is_some() && self.phase != Phase::Searching;
        if hole && present && now < until {
            return;
        }
        self.draining_until = None;
        if self.vehicle.is_some() {
            self.send_block_stop(now);
            self.send_block_stop(now);
        }
        self.finish();
    }

    /// After a STOP of ours to a stream found in its middle: the START waits until no block
    /// has come for [`STOPPED_QUIET`]. A block carries no stream of its own, only a seqno,
    /// so a block of the stopped stream still in flight after the START would pass for one
    /// of the new stream (acked, kept, and the new stream's own block of that seqno dropped
    /// as its duplicate: two logs spliced). Once the stopped stream is quiet, every block
    /// that comes is the new one's.
    fn await_stopped_stream_quiet(&mut self, now: Instant) {
        self.phase = Phase::Waiting {
            until: now + STOPPED_QUIET,
        };
    }

    /// Sends STOP; the vehicle stops at once and says nothing.
    pub(super) fn send_block_stop(&mut self, now: Instant) {
        self.send_block_status(BLOCK_STOP, true, now);
    }

    fn send_block_status(&mut self, seqno: u32, ack: bool, now: Instant) {
        let Some(v) = self.vehicle else { return };
        let status = if ack {
            MavRemoteLogDataBlockStatuses::MAV_REMOTE_LOG_DATA_BLOCK_ACK
        } else {
            MavRemoteLogDataBlockStatuses::MAV_REMOTE_LOG_DATA_BLOCK_NACK
        };
        self.send(
            MavMessage::REMOTE_LOG_BLOCK_STATUS(REMOTE_LOG_BLOCK_STATUS_DATA {
                target_system: v.system_id,
                target_component: v.component_id,
                seqno,
                status,
            }),
            now,
        );
    }

    /// One block from the vehicle's log component.
    pub(super) fn on_log_block(&mut self, header: MavHeader, block: &LogBlock, now: Instant) {
        self.take_log_block(header, block, now);
        self.end_drain_when_done(now);
    }

    fn take_log_block(&mut self, header: MavHeader, block: &LogBlock, now: Instant) {
        let Some(v) = self.vehicle else {
            self.stats.ignored_chunks += 1;
            return;
        };
        if header.system_id != u32::from(v.system_id) || self.phase == Phase::Closed {
            self.stats.ignored_chunks += 1;
            return;
        }
        // ArduPilot's log component is the autopilot's own: its blocks prove it is there
        // (a lossy link may drop its heartbeats while the log streams on).
        if let Some(v) = &mut self.vehicle {
            v.last_heartbeat = now;
        }
        if block.target_system != self.system_id()
            || block.target_component != self.config.component_id
        {
            // The vehicle serves one client at a time, and it is another one.
            self.stats.ignored_chunks += 1;
            if self
                .foreign_stream_said
                .is_none_or(|t| now.duration_since(t) >= FOREIGN_STREAM_REPEAT)
            {
                self.foreign_stream_said = Some(now);
                tracing::warn!(
                    "the vehicle streams its log to system {} component {}, not to us: another \
                     recorder on the link has its stream (a log endpoint of mavlink-router or \
                     Rpanion-server, MAVSDK); turn it off",
                    block.target_system,
                    block.target_component
                );
            }
            return;
        }
        let s = block.seqno;
        if matches!(self.phase, Phase::Waiting { .. }) {
            // The stream we stopped, still arriving: in flight, or our STOP was lost (then
            // the vehicle resends every 100 ms, and the STOP goes again).
            self.stats.ignored_chunks += 1;
            if self
                .middle_stopped
                .is_none_or(|t| now.duration_since(t) >= START_INTERVAL)
            {
                self.middle_stopped = Some(now);
                self.send_block_stop(now);
            }
            self.await_stopped_stream_quiet(now);
            return;
        }
        let stream_open = self.blocks.as_ref().is_some_and(|l| l.stream_open);
        // Seqno 0 again, well into the stream, after a START of ours since it began (we
        // found it stalled or lost): the vehicle's new stream, not a late copy of block 0
        // (acked long ago, so never resent).
        let start_since = |l: &BlockLog| {
            self.start_sent
                .is_some_and(|t| l.began.is_some_and(|b| t > b))
        };
        let after_start = self.blocks.as_ref().is_some_and(start_since);
        let restarted = s == 0
            && self.blocks.as_ref().is_some_and(|l| {
                l.stream_open && l.next > 1 && (l.next >= MAX_AHEAD || start_since(l))
            });
        if !stream_open || restarted {
            if s != 0 {
                // A stream we did not start at its beginning: stop it, start ours.
                self.stats.ignored_chunks += 1;
                // Once a START_INTERVAL: the blocks of the stream go on arriving (resent every
                // 100 ms) until the STOP gets through. Not tied to our own STARTs, which go
                // out every START_INTERVAL while the vehicle ignores them.
                if self
                    .middle_stopped
                    .is_none_or(|t| now.duration_since(t) >= START_INTERVAL)
                {
                    self.middle_stopped = Some(now);
                    tracing::info!(
                        seqno = s,
                        "the vehicle streams its log from the middle; stopping it to start \
                         again from its beginning"
                    );
                    self.send_block_stop(now);
                }
                self.await_stopped_stream_quiet(now);
                return;
            }
            self.begin_stream(now);
        }
        let Some(log) = &mut self.blocks else { return };
        if s >= log.next.saturating_add(MAX_AHEAD) {
            self.stats.implausible += 1;
            return;
        }
        // Before anything else: the vehicle holds the block until this arrives.
        self.send_block_status(s, true, now);
        self.stats.acks_sent += 1;
        self.stats.acked_chunks += 1;
        self.stats.chunks += 1;
        self.phase = Phase::Streaming {
            stall_check: now + self.config.stream_timeout,
        };
        let Some(log) = &mut self.blocks else { return };
        if s < log.next || log.ahead.contains_key(&s) {
            self.stats.duplicates += 1;
            if s < log.next && s < KEPT_ASIDE && after_start {
                log.aside.insert(s, Box::new(block.data));
            }
            return;
        }
        // The stream goes on: what was kept aside was duplicates after all.
        log.aside.clear();
        if s > log.next {
            self.stats.reordered += 1;
            if crate::planted::is(crate::planted::Bug::AckedBlockDroppedWhenAhead) {
                return;
            }
            log.ahead.insert(s, Box::new(block.data));
            log.hole.get_or_insert((log.next, now));
            // NACK the blocks this one shows missing, those not NACKed yet.
            let from = log.nacked_up_to.max(log.next);
            let missing: Vec<u32> = (from..s)
                .filter(|k| !log.ahead.contains_key(k))
                .take(NACKS_PER_ROUND)
                .collect();
            log.nacked_up_to = log.nacked_up_to.max(s);
            log.next_nack.get_or_insert(now + NACK_INTERVAL);
            for k in missing {
                self.send_block_status(k, false, now);
                self.stats.nacks_sent += 1;
            }
            self.release_blocks(now);
            return;
        }
        if log.hole.is_some() {
            self.stats.recovered += u64::from(!log.ahead.is_empty());
        }
        let data = block.data;
        self.take_block(&data);
        if let Some(log) = &mut self.blocks {
            log.next += 1;
        }
        self.release_blocks(now);
    }

    /// Seqno 0 of a stream: the log goes on (a restart after an outage) or begins.
    fn begin_stream(&mut self, now: Instant) {
        match &mut self.blocks {
            Some(log) => {
                tracing::info!(number = log.number, "the vehicle's log stream began again");
                log.framer.restart();
                log.gaps.gap(0);
                // What came of the new stream before its block 0.
                log.ahead = std::mem::take(&mut log.aside);
                log.next = 0;
                log.nacked_up_to = 0;
                log.hole = None;
                log.next_nack = None;
                log.stream_open = true;
                log.began = Some(now);
            }
            None => {
                self.logs_opened += 1;
                self.stats.logs += 1;
                let mut log = BlockLog::new(self.logs_opened);
                log.stream_open = true;
                log.began = Some(now);
                tracing::info!(number = log.number, "log opened (ArduPilot DataFlash)");
                self.events.push_back(Event::LogOpened {
                    number: log.number,
                    format: LogFormat::DataFlash,
                });
                self.blocks = Some(log);
            }
        }
        self.stats.problem = None;
        self.events.push_back(Event::StreamStarted);
        self.phase = Phase::Streaming {
            stall_check: now + self.config.stream_timeout,
        };
    }

    /// Hands out the blocks that are next in order.
    fn release_blocks(&mut self, now: Instant) {
        loop {
            let Some(log) = &mut self.blocks else { return };
            let Some(data) = log.ahead.remove(&log.next) else {
                break;
            };
            log.next += 1;
            self.take_block(&data);
        }
        let Some(log) = &mut self.blocks else { return };
        if log.ahead.is_empty() {
            log.hole = None;
            log.next_nack = None;
        } else if log.hole.is_none_or(|(missing, _)| missing != log.next) {
            log.hole = Some((log.next, now));
        }
    }

    /// The blocks' timers: NACKs again for what stays missing; a hole given up after
    /// [`GIVE_UP`] or behind [`MAX_AHEAD`] blocks.
    pub(super) fn block_timers(&mut self, now: Instant) {
        let Some(log) = &mut self.blocks else { return };
        let Some((_, hole_since)) = log.hole else {
            return;
        };
        if now >= hole_since + GIVE_UP || log.ahead.len() as u32 >= MAX_AHEAD {
            let first = *log.ahead.keys().next().expect("a hole has blocks after it");
            let lost = u64::from(first - log.next);
            tracing::debug!(from = log.next, lost, "blocks given up as lost");
            self.stats.lost_chunks += lost;
            self.stats.gaps += 1;
            log.framer.gap();
            log.gaps.gap(lost);
            log.next = first;
            log.hole = None;
            log.next_nack = None;
            self.release_blocks(now);
            return;
        }
        if log.next_nack.is_some_and(|t| now >= t) {
            let last = log.ahead.keys().next_back().copied().unwrap_or(log.next);
            let missing: Vec<u32> = (log.next..last)
                .filter(|k| !log.ahead.contains_key(k))
                .take(NACKS_PER_ROUND)
                .collect();
            log.next_nack = Some(now + NACK_INTERVAL);
            for k in missing {
                self.send_block_status(k, false, now);
                self.stats.nacks_sent += 1;
            }
        }
    }

    /// One block's bytes, in order: whole messages (and gap marks) out.
    fn take_block(&mut self, data: &[u8; BLOCK_BYTES]) {
        let Some(mut log) = self.blocks.take() else {
            return;
        };
        let mut messages = std::mem::take(&mut log.scratch);
        messages.clear();
        log.framer.push(data, |m, _| messages.extend_from_slice(m));
        self.take_block_messages(&mut log, &messages);
        log.scratch = messages;
        self.blocks = Some(log);
    }

    /// Whole messages through the gap marker to the log's bytes; a log time that went back
    /// across a gap (the vehicle rebooted) closes the log and opens the next.
    fn take_block_messages(&mut self, log: &mut BlockLog, mut messages: &[u8]) {
        let mut out = Vec::new();
        while messages.len() >= 3 {
            let Some(format) = log.framer.format(messages[2]) else {
                break;
            };
            let len = (format.length as usize).min(messages.len());
            let (m, rest) = messages.split_at(len);
            messages = rest;
            let resolved = log.gaps.message(m, format, &log.framer, &mut out);
            if let Some(r) = resolved {
                if log.gaps.went_back() {
                    self.reboot_seen(log, &mut out);
                } else {
                    self.block_dropout(r);
                }
            }
        }
        log.bytes += out.len() as u64;
        self.stats.log_bytes += out.len() as u64;
        self.out.extend_from_slice(&out);
    }

    /// The log after the last gap is another boot's: what came before it closes, `out`
    /// (the new boot's first messages) opens the next log.
    fn reboot_seen(&mut self, log: &mut BlockLog, out: &mut Vec<u8>) {
        tracing::info!(
            number = log.number,
            "the vehicle rebooted: a new log begins"
        );
        self.log_closed(log.number, CloseReason::NewLog, log.bytes);
        self.logs_opened += 1;
        self.stats.logs += 1;
        log.number = self.logs_opened;
        log.bytes = 0;
        log.gaps.reset();
        self.events.push_back(Event::LogOpened {
            number: log.number,
            format: LogFormat::DataFlash,
        });
        self.out.extend_from_slice(out);
        log.bytes += out.len() as u64;
        out.clear();
    }

    fn block_dropout(&mut self, r: Resolved) {
        self.stats.dropouts += 1;
        self.flush_out();
        self.events.push_back(Event::Dropout {
            lost_chunks: r.lost_blocks,
            duration_ms: r.duration_ms,
        });
    }

    /// Ends the ArduPilot log: what is held goes out (an open gap marked), then LogClosed.
    pub(super) fn close_block_log(&mut self, reason: CloseReason) {
        let Some(mut log) = self.blocks.take() else {
            return;
        };
        // Blocks still waiting behind a hole are the log's too: the hole is lost.
        if let Some(&first) = log.ahead.keys().next() {
            let lost = u64::from(first - log.next);
            self.stats.lost_chunks += lost;
            self.stats.gaps += 1;
            log.framer.gap();
            log.gaps.gap(lost);
            while let Some((k, data)) = log.ahead.pop_first() {
                if k != log.next {
                    log.framer.gap();
                    log.gaps.gap(u64::from(k - log.next));
                }
                log.next = k + 1;
                self.blocks = Some(log);
                self.take_block(&data);
                log = self.blocks.take().expect("put back");
            }
        }
        let mut tail = Vec::new();
        log.framer.finish(|m, _| tail.extend_from_slice(m));
        self.take_block_messages(&mut log, &tail);
        let mut out = Vec::new();
        if let Some(r) = log.gaps.finish(&log.framer, &mut out) {
            self.block_dropout(r);
        }
        log.bytes += out.len() as u64;
        self.stats.log_bytes += out.len() as u64;
        self.out.extend_from_slice(&out);
        self.stats.discarded_bytes += log.framer.stats().skipped_bytes;
        self.log_closed(log.number, reason, log.bytes);
    }
}

#[cfg(test)]
mod tests;
