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
//! of ours from before a restart) are answered with STOP, then START, to begin at the log's
//! start, where its formats are.

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
/// At shutdown, how long blocks still missing behind later ones are awaited before the STOP
/// (NACKed as usual: the vehicle sends a NACKed block at once, an unacked one after 100 ms).
pub const DRAIN: Duration = Duration::from_millis(500);
/// A START goes out again this often until blocks come.
pub const START_INTERVAL: Duration = Duration::from_secs(1);
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
    /// Since when `next` is missing while later blocks wait, and when to NACK again.
    pub(super) hole_since: Option<Instant>,
    pub(super) next_nack: Option<Instant>,
    pub(super) framer: Framer,
    pub(super) gaps: GapMarker,
    pub(super) bytes: u64,
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
            hole_since: None,
            next_nack: None,
            framer: Framer::new(),
            gaps: GapMarker::new(),
            bytes: 0,
            scratch: Vec::new(),
        }
    }

    /// When its timers next have work.
    pub(super) fn deadline(&self) -> Option<Instant> {
        match (self.next_nack, self.hole_since) {
            (Some(n), Some(h)) => Some(n.min(h + GIVE_UP)),
            (n, h) => n.or(h.map(|h| h + GIVE_UP)),
        }
    }
}

impl Session {
    /// Sends START (a block status with the START seqno and ACK).
    pub(super) fn send_block_start(&mut self, now: Instant) {
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
        let stream_open = self.blocks.as_ref().is_some_and(|l| l.stream_open);
        // Seqno 0 again, well into the stream, after a START of ours since it began (we
        // found it stalled or lost): the vehicle's new stream, not a late copy of block 0
        // (acked long ago, so never resent).
        let start_since = |l: &BlockLog| {
            self.start_sent
                .is_some_and(|t| l.began.is_some_and(|b| t > b))
        };
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
                    self.send_block_start(now);
                }
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
            return;
        }
        if s > log.next {
            self.stats.reordered += 1;
            log.ahead.insert(s, Box::new(block.data));
            log.hole_since.get_or_insert(now);
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
        if log.hole_since.is_some() {
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
                log.ahead.clear();
                log.next = 0;
                log.nacked_up_to = 0;
                log.hole_since = None;
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
            log.hole_since = None;
            log.next_nack = None;
        } else if log.hole_since.is_none() {
            log.hole_since = Some(now);
        }
    }

    /// The blocks' timers: NACKs again for what stays missing; a hole given up after
    /// [`GIVE_UP`] or behind [`MAX_AHEAD`] blocks.
    pub(super) fn block_timers(&mut self, now: Instant) {
        let Some(log) = &mut self.blocks else { return };
        let Some(hole_since) = log.hole_since else {
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
            log.hole_since = None;
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
mod tests {
    use super::*;
    use crate::dataflash::framer::whole_prefix;
    use crate::dataflash::gaps::DROPOUT_PREFIX;
    use crate::dataflash::{FMT_TYPE, Format};
    use crate::link::frames::{FrameDecoder, encode};
    use crate::link::log_block::{LOG_COMPONENT, encode_block};
    use crate::link::session::SessionConfig;
    use mavlink::dialects::ardupilotmega::{HEARTBEAT_DATA, MavAutopilot, MavType};

    /// A DataFlash log: FMT (MSG, ATT), then `n` ATT 10 ms apart (15 bytes each).
    fn log(n: u64, t0_us: u64) -> Vec<u8> {
        let msg = Format {
            type_id: 91,
            length: 75,
            name: "MSG".into(),
            format: "QZ".into(),
            labels: vec!["TimeUS".into(), "Message".into()],
        };
        let att = Format {
            type_id: 35,
            length: 15,
            name: "ATT".into(),
            format: "Qf".into(),
            labels: vec!["TimeUS".into(), "Roll".into()],
        };
        let mut out: Vec<u8> = [Format::fmt(), msg, att]
            .iter()
            .flat_map(Format::to_bytes)
            .collect();
        for i in 0..n {
            out.extend_from_slice(&[0xA3, 0x95, 35]);
            out.extend_from_slice(&(t0_us + 10_000 * i).to_le_bytes());
            out.extend_from_slice(&(i as f32).to_le_bytes());
        }
        out
    }

    fn blocks(log: &[u8]) -> Vec<LogBlock> {
        log.chunks(BLOCK_BYTES)
            .enumerate()
            .map(|(k, c)| {
                let mut b = LogBlock {
                    target_system: 1,
                    target_component: 155,
                    seqno: k as u32,
                    ..LogBlock::default()
                };
                b.data[..c.len()].copy_from_slice(c);
                b
            })
            .collect()
    }

    fn from(system_id: u32, component_id: u8) -> MavHeader {
        MavHeader {
            system_id,
            component_id,
            sequence: 0,
        }
    }

    fn block_frame(b: &LogBlock) -> Vec<u8> {
        let mut f = Vec::new();
        encode_block(from(1, LOG_COMPONENT), b, &mut f);
        f
    }

    fn heartbeat() -> Vec<u8> {
        let mut hb = Vec::new();
        let heartbeat = MavMessage::HEARTBEAT(HEARTBEAT_DATA {
            autopilot: MavAutopilot::MAV_AUTOPILOT_ARDUPILOTMEGA,
            mavtype: MavType::MAV_TYPE_QUADROTOR,
            ..Default::default()
        });
        encode(from(1, 1), &heartbeat, &mut hb);
        hb
    }

    /// A session that found an ArduPilot vehicle; what it sent is read out.
    fn found(t0: Instant) -> Session {
        let mut s = Session::new(SessionConfig::default(), t0);
        s.handle_datagram(&heartbeat(), t0);
        assert_eq!(s.autopilot(), Some(crate::autopilot::Autopilot::ArduPilot));
        assert_eq!(statuses(&mut s), [(BLOCK_START, true)]);
        s
    }

    /// The block statuses the session sent: (seqno, ack).
    fn statuses(s: &mut Session) -> Vec<(u32, bool)> {
        let mut dec = FrameDecoder::new();
        while let Some(f) = s.poll_transmit() {
            dec.push(&f);
        }
        std::iter::from_fn(|| dec.next_frame())
            .filter_map(|f| match f.message.into_mav()? {
                MavMessage::REMOTE_LOG_BLOCK_STATUS(b) => Some((
                    b.seqno,
                    b.status == MavRemoteLogDataBlockStatuses::MAV_REMOTE_LOG_DATA_BLOCK_ACK,
                )),
                _ => None,
            })
            .collect()
    }

    /// The log bytes handed out, and the other events.
    fn drain(s: &mut Session) -> (Vec<u8>, Vec<Event>) {
        let mut bytes = Vec::new();
        let mut events = Vec::new();
        while let Some(e) = s.poll_event() {
            match e {
                Event::LogBytes(b) => bytes.extend_from_slice(&b),
                e => events.push(e),
            }
        }
        (bytes, events)
    }

    fn marks(bytes: &[u8]) -> Vec<String> {
        let mut framer = Framer::new();
        let mut out = Vec::new();
        framer.push(bytes, |m, f| {
            if let Some(ms) = crate::dataflash::gaps::dropout_ms(m, f) {
                out.push(format!("{ms:?}"));
            }
        });
        out
    }

    #[test]
    fn blocks_late_twice_or_lost_once_come_out_as_the_log_each_acked_at_once() {
        let t0 = Instant::now();
        let mut s = found(t0);
        let whole = log(2000, 1_000_000);
        let bs = blocks(&whole);
        // Block 3 lost and resent later (after its NACK), block 5 late, 7 twice.
        let mut order: Vec<usize> = (0..bs.len()).filter(|&k| k != 3 && k != 5).collect();
        order.insert(8, 5);
        order.insert(12, 7);
        order.insert(20, 3);
        let mut now = t0;
        let mut all = Vec::new();
        for &k in &order {
            now += Duration::from_millis(1);
            s.handle_datagram(&block_frame(&bs[k]), now);
            s.handle_timeout(now);
            all.extend(statuses(&mut s));
        }
        let acks: Vec<u32> = all.iter().filter(|a| a.1).map(|a| a.0).collect();
        let nacks: Vec<u32> = all.iter().filter(|a| !a.1).map(|a| a.0).collect();
        assert_eq!(acks, order.iter().map(|&k| k as u32).collect::<Vec<_>>());
        // Block 3 NACKed as soon as block 4 showed it missing, and 5 when 6 did.
        assert_eq!(nacks[..2], [3, 5]);
        s.shutdown(now);
        assert_eq!(statuses(&mut s), [(BLOCK_STOP, true), (BLOCK_STOP, true)]);
        let (bytes, events) = drain(&mut s);
        // The last block is zero-padded: the log is its whole messages.
        assert_eq!(bytes, whole);
        assert!(events.contains(&Event::LogOpened {
            number: 1,
            format: LogFormat::DataFlash
        }));
        assert!(matches!(events.last(), Some(Event::LogClosed { .. })));
        let st = s.stats();
        assert_eq!((st.duplicates, st.lost_chunks, st.dropouts), (1, 0, 0));
        assert!(s.is_closed());
    }

    #[test]
    fn at_shutdown_a_missing_block_is_awaited_a_moment_before_the_stop() {
        let t0 = Instant::now();
        let whole = log(400, 1_000_000);
        let bs = blocks(&whole);
        for comes_back in [true, false] {
            let mut s = found(t0);
            let mut now = t0;
            // Block 10 lost: the ones after it wait behind the hole.
            for b in bs.iter().filter(|b| b.seqno != 10) {
                now += Duration::from_millis(1);
                s.handle_datagram(&block_frame(b), now);
            }
            statuses(&mut s);
            s.shutdown(now);
            assert!(!s.is_closed(), "the hole is awaited");
            assert_eq!(statuses(&mut s), [], "no STOP yet");
            if comes_back {
                // The vehicle's own resend (or our NACK's answer) fills it: STOP at once,
                // the whole log, no mark.
                now += Duration::from_millis(100);
                s.handle_datagram(&block_frame(&bs[10]), now);
                assert_eq!(
                    statuses(&mut s),
                    [(10, true), (BLOCK_STOP, true), (BLOCK_STOP, true)]
                );
                assert_eq!(drain(&mut s).0, whole);
            } else {
                // Never: NACKed meanwhile, then STOP once the drain's time is up, the hole
                // marked.
                let end = now + DRAIN;
                while let Some(t) = s.poll_timeout().filter(|&t| t < end) {
                    s.handle_timeout(t);
                    assert!(!s.is_closed());
                }
                s.handle_timeout(end);
                let sent = statuses(&mut s);
                assert!(sent.contains(&(10, false)), "{sent:?}");
                assert_eq!(
                    sent[sent.len() - 2..],
                    [(BLOCK_STOP, true), (BLOCK_STOP, true)]
                );
                assert_eq!(marks(&drain(&mut s).0).len(), 1);
            }
            assert!(s.is_closed());
        }
    }

    #[test]
    fn a_hole_never_filled_is_marked_with_its_length_and_no_torn_message_passes() {
        let t0 = Instant::now();
        let mut s = found(t0);
        let whole = log(2000, 1_000_000);
        let bs = blocks(&whole);
        let mut now = t0;
        for (k, b) in bs.iter().enumerate() {
            if (40..45).contains(&k) {
                continue;
            }
            now += Duration::from_millis(1);
            s.handle_datagram(&block_frame(b), now);
        }
        // NACKed again while missing, then given up.
        let nacks = statuses(&mut s).iter().filter(|a| !a.1).count();
        assert_eq!(nacks, 5);
        s.handle_timeout(now + NACK_INTERVAL);
        assert_eq!(statuses(&mut s).iter().filter(|a| !a.1).count(), 5);
        s.handle_timeout(now + GIVE_UP);
        let (bytes, events) = drain(&mut s);
        assert!(events.iter().any(|e| matches!(
            e,
            Event::Dropout {
                lost_chunks: 5,
                duration_ms: Some(_)
            }
        )));
        // Whole messages only, the hole's length as the log tells it: 1000 bytes of ATT at
        // 15 bytes per 10 ms, and the messages torn at its two ends.
        assert_eq!(whole_prefix(&bytes), bytes.len());
        let m = marks(&bytes);
        assert_eq!(m.len(), 1);
        let ms: u64 = m[0]
            .trim_start_matches("Some(")
            .trim_end_matches(')')
            .parse()
            .unwrap();
        assert!((660..=700).contains(&ms), "{ms} ms");
        assert!(bytes.len() < whole.len() - 1000 + 75);
        let _ = (DROPOUT_PREFIX, FMT_TYPE);
    }

    #[test]
    fn forged_far_stray_and_foreign_blocks_cost_nothing() {
        let t0 = Instant::now();
        let mut s = found(t0);
        let bs = blocks(&log(100, 0));
        s.handle_datagram(&block_frame(&bs[0]), t0);
        statuses(&mut s);
        // Far ahead: not acked, not kept, no NACK for the millions before it.
        let mut far = bs[1].clone();
        far.seqno = 2_000_000_000;
        s.handle_datagram(&block_frame(&far), t0);
        assert_eq!(statuses(&mut s), []);
        assert_eq!(s.stats().implausible, 1);
        // Another system's block, or one for another receiver: ignored.
        let mut other = Vec::new();
        encode_block(from(2, LOG_COMPONENT), &bs[1], &mut other);
        s.handle_datagram(&other, t0);
        let mut not_ours = bs[1].clone();
        not_ours.target_component = 190;
        s.handle_datagram(&block_frame(&not_ours), t0);
        assert_eq!(statuses(&mut s), []);
        assert_eq!(s.stats().ignored_chunks, 2);
        // A short (trimmed) block is zero-filled, as MAVLink 2 wants.
        for b in &bs[1..] {
            s.handle_datagram(&block_frame(b), t0);
        }
        s.shutdown(t0);
        let (bytes, _) = drain(&mut s);
        assert_eq!(bytes, log(100, 0));
    }

    #[test]
    fn a_stream_found_in_its_middle_is_stopped_and_started_from_its_beginning() {
        let t0 = Instant::now();
        let mut s = found(t0);
        let bs = blocks(&log(100, 0));
        // At once, though our own START went out a moment ago (a daemon that restarted:
        // the vehicle still streams to the client it had, and ignores STARTs meanwhile).
        let now = t0 + Duration::from_millis(10);
        s.handle_datagram(&block_frame(&bs[3]), now);
        assert_eq!(statuses(&mut s), [(BLOCK_STOP, true), (BLOCK_START, true)]);
        // Not again for every block of that stream.
        s.handle_datagram(&block_frame(&bs[4]), now);
        assert_eq!(statuses(&mut s), []);
        // The STOP was lost: the START timer goes on, and the next block a START_INTERVAL
        // later stops the stream again, whenever it comes.
        let later = now + START_INTERVAL;
        s.handle_timeout(later);
        s.handle_datagram(&block_frame(&bs[5]), later + Duration::from_millis(1));
        let sent = statuses(&mut s);
        assert!(
            sent.ends_with(&[(BLOCK_STOP, true), (BLOCK_START, true)]),
            "{sent:?}"
        );
        let (bytes, events) = drain(&mut s);
        assert!(bytes.is_empty() && !events.iter().any(|e| matches!(e, Event::LogOpened { .. })));
    }

    #[test]
    fn a_new_stream_after_an_outage_goes_on_in_the_same_log_and_a_reboot_opens_the_next() {
        let t0 = Instant::now();
        let mut s = found(t0);
        let first = log(2000, 1_000_000);
        let mut now = t0;
        for b in blocks(&first) {
            now += Duration::from_millis(1);
            s.handle_datagram(&block_frame(&b), now);
        }
        // Silent, but heard: the session asks again; the vehicle starts a new stream 15 s of
        // log later.
        now += Duration::from_secs(4);
        s.handle_datagram(&heartbeat(), now);
        s.handle_timeout(now);
        assert!(statuses(&mut s).contains(&(BLOCK_START, true)));
        let second = log(500, 36_000_000);
        for b in blocks(&second) {
            now += Duration::from_millis(1);
            s.handle_datagram(&block_frame(&b), now);
        }
        let (bytes, events) = drain(&mut s);
        assert_eq!(
            events
                .iter()
                .filter(|e| matches!(e, Event::LogOpened { .. }))
                .count(),
            1
        );
        // 1 s + 20 s of ATT in the first stream ends at 20.99 s; the second begins at 36 s.
        assert_eq!(marks(&bytes), ["Some(15010)"]);
        assert_eq!(whole_prefix(&bytes), bytes.len());
        // A third stream whose time starts over: another boot, another log.
        now += Duration::from_secs(4);
        s.handle_datagram(&heartbeat(), now);
        s.handle_timeout(now);
        statuses(&mut s);
        for b in blocks(&log(100, 500_000)) {
            now += Duration::from_millis(1);
            s.handle_datagram(&block_frame(&b), now);
        }
        s.shutdown(now);
        let (bytes, events) = drain(&mut s);
        let opened: Vec<u32> = events
            .iter()
            .filter_map(|e| match e {
                Event::LogOpened { number, .. } => Some(*number),
                _ => None,
            })
            .collect();
        assert_eq!(opened, [2]);
        assert!(bytes.ends_with(&log(100, 500_000)[3 * 89..]));
        assert!(marks(&bytes).is_empty());
    }
}
