//! The reorder buffer for log chunks (sans-IO): chunks in, in any order and with duplicates;
//! the same chunks out in sequence order, with honest gaps where chunks never came.
//!
//! Sequence numbers are 16 bits and wrap at 65536. A chunk ahead of the next expected one,
//! and at most `max_chunks` (the window) beyond the furthest chunk taken, is held; one behind it is a duplicate (if it was
//! delivered recently) or too late (its gap was already declared). A gap is declared, and the
//! chunks after it released, when the buffer holds `max_chunks` chunks or its oldest chunk has
//! waited `max_wait`.
//!
//! A chunk further ahead than that (by less than half the sequence space) never moves the
//! window by itself: it is a *suspect*, set aside until a neighbour (another chunk within
//! a window of it) confirms that the stream really jumped there, as after a long outage. Then
//! both are held as any chunk (the gap before them is declared when its wait runs out). A suspect left alone for
//! `suspect_wait`, or passed by the stream, is dropped as implausible: a forged or stale chunk
//! costs at most itself.
//!
//! The caller drives time: it passes `now` and asks [`ReorderBuffer::deadline`] when to call
//! [`ReorderBuffer::poll`] again.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

/// One LOGGING_DATA(_ACKED) payload, reduced to what reassembly needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    pub seq: u16,
    /// Offset in `data` of the first ULog message that starts in it; 255 when none does.
    pub first_message_offset: u8,
    /// The `length` valid bytes of the chunk.
    pub data: Vec<u8>,
}

/// What the buffer releases, in stream order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    Chunk(Chunk),
    /// `lost` chunks (a sequence range) will never be delivered.
    Gap {
        lost: u64,
    },
}

/// How long the buffer waits for a missing chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReorderConfig {
    /// Chunks held at most; when full, the oldest missing ones are declared lost.
    pub max_chunks: usize,
    /// Longest time a chunk waits for the missing ones before it.
    pub max_wait: Duration,
    /// Longest time a chunk far ahead of the window waits for a neighbour to confirm it.
    pub suspect_wait: Duration,
}

impl Default for ReorderConfig {
    /// 256 chunks (64 KB) and 250 ms: several times the reordering a Wi-Fi or radio link shows,
    /// and at most a quarter second of delay before data reaches disk. A suspect waits 1 s:
    /// after a real outage the next chunk follows within milliseconds, even at 57600 baud.
    fn default() -> Self {
        Self {
            max_chunks: 256,
            max_wait: Duration::from_millis(250),
            suspect_wait: Duration::from_secs(1),
        }
    }
}

/// What [`ReorderBuffer::push`] made of a chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// Taken (delivered at once or held for reordering).
    Accepted,
    /// Already delivered or already held: dropped.
    Duplicate,
    /// Behind a gap that was already declared: dropped.
    TooLate,
    /// Far ahead of the window: set aside until a neighbour confirms it.
    Suspect,
}

/// Counters; all monotonic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReorderStats {
    pub accepted: u64,
    pub duplicates: u64,
    pub too_late: u64,
    /// Chunks held because one before them was missing (late or lost).
    pub reordered: u64,
    /// Chunks that arrived after a later one and were put back in their place.
    pub recovered: u64,
    /// Chunks declared lost.
    pub lost: u64,
    pub gaps: u64,
    /// Chunks that arrived far ahead of the window (set aside as suspects).
    pub suspects: u64,
    /// Suspects never confirmed by a neighbour: dropped.
    pub implausible: u64,
}

/// Sequence numbers remembered as delivered, to tell duplicates from late chunks.
const HISTORY: usize = 4096;

/// Suspects kept at most; beyond, the oldest is dropped.
const MAX_SUSPECTS: usize = 8;

/// A chunk far ahead of the window, with its absolute position and arrival time.
#[derive(Debug)]
struct Suspect {
    pos: u64,
    chunk: Chunk,
    arrived: Instant,
}

/// See the module docs.
pub struct ReorderBuffer {
    config: ReorderConfig,
    /// Sequence number of the next chunk to deliver.
    next: u16,
    /// Held chunks with their arrival time, by absolute position (see `next_pos`).
    held: BTreeMap<u64, (Chunk, Instant)>,
    /// Absolute position (sequence numbers unwrapped) of `next`.
    next_pos: u64,
    /// `delivered[seq % HISTORY] == seq as u32 + 1` when `seq` was delivered recently.
    delivered: Vec<u32>,
    suspects: Vec<Suspect>,
    ready: VecDeque<Delivery>,
    stats: ReorderStats,
}

impl ReorderBuffer {
    /// A buffer expecting `first_seq` next (0 after a LOGGING_START).
    pub fn new(first_seq: u16, config: ReorderConfig) -> Self {
        Self {
            config,
            next: first_seq,
            held: BTreeMap::new(),
            next_pos: 0,
            delivered: vec![0; HISTORY],
            suspects: Vec::new(),
            ready: VecDeque::new(),
            stats: ReorderStats::default(),
        }
    }

    pub fn stats(&self) -> ReorderStats {
        self.stats
    }

    /// Sequence number of the next chunk to deliver.
    pub fn next_seq(&self) -> u16 {
        self.next
    }

    /// Chunks held, waiting for missing ones.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Takes one chunk that arrived at `now`.
    pub fn push(&mut self, chunk: Chunk, now: Instant) -> Arrival {
        let ahead = chunk.seq.wrapping_sub(self.next);
        let behind = if crate::planted::is(crate::planted::Bug::SequenceCompareWithoutWrap) {
            chunk.seq < self.next
        } else {
            ahead >= 0x8000
        };
        if behind {
            let was_delivered =
                self.delivered[chunk.seq as usize % HISTORY] == u32::from(chunk.seq) + 1;
            return if was_delivered {
                self.stats.duplicates += 1;
                Arrival::Duplicate
            } else {
                self.stats.too_late += 1;
                Arrival::TooLate
            };
        }
        let pos = self.next_pos + u64::from(ahead);
        if pos > self.front() + self.config.max_chunks as u64 {
            return self.suspect(chunk, pos, now);
        }
        if self.held.contains_key(&pos) {
            self.stats.duplicates += 1;
            return Arrival::Duplicate;
        }
        self.stats.accepted += 1;
        if self
            .held
            .last_key_value()
            .is_some_and(|(&last, _)| last > pos)
        {
            self.stats.recovered += 1;
        }
        if ahead == 0 {
            self.deliver(chunk);
            self.release_contiguous();
        } else {
            self.held.insert(pos, (chunk, now));
            if self.held.len() > self.config.max_chunks {
                self.declare_gap();
            }
        }
        self.poll_time(now);
        Arrival::Accepted
    }

    /// Declares gaps whose wait has expired at `now`.
    pub fn poll(&mut self, now: Instant) {
        self.poll_time(now);
    }

    /// The next delivery, in stream order.
    pub fn pop(&mut self) -> Option<Delivery> {
        self.ready.pop_front()
    }

    /// When [`poll`](Self::poll) next has work: the oldest held chunk's deadline, or a
    /// suspect's.
    pub fn deadline(&self) -> Option<Instant> {
        let held = self.held_deadline();
        let suspect = self
            .suspects
            .iter()
            .map(|s| s.arrived + self.config.suspect_wait)
            .min();
        match (held, suspect) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The stream's leading edge: the furthest chunk held, else the next to deliver. A chunk
    /// more than a window beyond it is a suspect.
    fn front(&self) -> u64 {
        self.held
            .last_key_value()
            .map_or(self.next_pos, |(&pos, _)| pos.max(self.next_pos))
    }

    fn held_deadline(&self) -> Option<Instant> {
        self.held
            .values()
            .map(|(_, t)| *t)
            .min()
            .map(|t| t + self.config.max_wait)
    }

    /// Gives up on every missing chunk before the held ones and releases them all (the stream
    /// ended, or the caller knows nothing more will come). Unconfirmed suspects are dropped.
    pub fn flush(&mut self) {
        self.stats.implausible += self.suspects.len() as u64;
        self.suspects.clear();
        while !self.held.is_empty() {
            self.declare_gap();
        }
    }

    fn poll_time(&mut self, now: Instant) {
        while let Some(deadline) = self.held_deadline() {
            if now < deadline {
                break;
            }
            self.declare_gap();
        }
        if !self.suspects.is_empty() {
            self.review_suspects(now);
        }
    }

    /// Sets a chunk far ahead of the window aside, or, when it confirms a suspect near it (or
    /// is confirmed by one), jumps the stream there.
    fn suspect(&mut self, chunk: Chunk, pos: u64, now: Instant) -> Arrival {
        if self.suspects.iter().any(|s| s.pos == pos) {
            // A copy proves nothing: a forged frame can be sent twice.
            self.stats.duplicates += 1;
            return Arrival::Duplicate;
        }
        self.stats.suspects += 1;
        let window = self.config.max_chunks as u64;
        let confirmed = self.suspects.iter().any(|s| s.pos.abs_diff(pos) <= window);
        self.suspects.push(Suspect {
            pos,
            chunk,
            arrived: now,
        });
        if !confirmed {
            if self.suspects.len() > MAX_SUSPECTS {
                self.suspects.remove(0);
                self.stats.implausible += 1;
            }
            return Arrival::Suspect;
        }
        // The stream jumped (an outage longer than the window): the neighbours are held as any
        // chunk, so that late ones from before the jump still find their place until the
        // gap's wait runs out.
        for s in std::mem::take(&mut self.suspects) {
            if s.pos.abs_diff(pos) <= window {
                self.stats.accepted += 1;
                self.held.insert(s.pos, (s.chunk, s.arrived));
            } else {
                self.suspects.push(s);
            }
        }
        while self.held.len() > self.config.max_chunks {
            self.declare_gap();
        }
        self.poll_time(now);
        Arrival::Accepted
    }

    /// Drops suspects that waited too long or that the stream passed; takes those the window
    /// now covers.
    fn review_suspects(&mut self, now: Instant) {
        let window = self.config.max_chunks as u64;
        let mut i = 0;
        while i < self.suspects.len() {
            let s = &self.suspects[i];
            let expired = now >= s.arrived + self.config.suspect_wait;
            if expired || s.pos < self.next_pos || self.held.contains_key(&s.pos) {
                self.suspects.remove(i);
                self.stats.implausible += 1;
            } else if s.pos <= self.front() + window {
                let s = self.suspects.remove(i);
                self.stats.accepted += 1;
                self.held.insert(s.pos, (s.chunk, s.arrived));
            } else {
                i += 1;
            }
        }
    }

    /// Declares the chunks before the first held one lost, then releases what follows.
    fn declare_gap(&mut self) {
        let Some((&first, _)) = self.held.first_key_value() else {
            return;
        };
        let lost = first - self.next_pos;
        if lost > 0 {
            self.stats.lost += lost;
            self.stats.gaps += 1;
            self.ready.push_back(Delivery::Gap { lost });
            self.next_pos = first;
            self.next = self.next.wrapping_add(lost as u16);
        }
        self.release_contiguous();
    }

    fn release_contiguous(&mut self) {
        while let Some((chunk, _)) = self.held.remove(&self.next_pos) {
            self.stats.reordered += 1;
            self.deliver(chunk);
        }
    }

    fn deliver(&mut self, chunk: Chunk) {
        debug_assert_eq!(chunk.seq, self.next);
        self.delivered[chunk.seq as usize % HISTORY] = u32::from(chunk.seq) + 1;
        self.next = self.next.wrapping_add(1);
        self.next_pos += 1;
        self.ready.push_back(Delivery::Chunk(chunk));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(seq: u16) -> Chunk {
        Chunk {
            seq,
            first_message_offset: 0,
            data: vec![seq as u8],
        }
    }

    fn drain(buf: &mut ReorderBuffer) -> Vec<String> {
        std::iter::from_fn(|| buf.pop())
            .map(|d| match d {
                Delivery::Chunk(c) => c.seq.to_string(),
                Delivery::Gap { lost } => format!("gap{lost}"),
            })
            .collect()
    }

    #[test]
    fn late_chunks_are_put_back_in_order_and_duplicates_dropped() {
        let t = Instant::now();
        let mut b = ReorderBuffer::new(0, ReorderConfig::default());
        assert_eq!(b.push(chunk(0), t), Arrival::Accepted);
        assert_eq!(b.push(chunk(2), t), Arrival::Accepted);
        assert_eq!(b.push(chunk(3), t), Arrival::Accepted);
        assert_eq!(drain(&mut b), ["0"]);
        assert_eq!(b.push(chunk(2), t), Arrival::Duplicate);
        assert_eq!(b.push(chunk(1), t), Arrival::Accepted);
        assert_eq!(drain(&mut b), ["1", "2", "3"]);
        assert_eq!(b.push(chunk(1), t), Arrival::Duplicate);
        assert_eq!(b.stats().reordered, 2);
        assert_eq!(b.stats().recovered, 1);
        assert_eq!(b.stats().duplicates, 2);
    }

    #[test]
    fn a_gap_is_declared_after_the_wait_and_late_chunks_are_refused() {
        let t = Instant::now();
        let cfg = ReorderConfig {
            max_chunks: 100,
            max_wait: Duration::from_millis(50),
            ..ReorderConfig::default()
        };
        let mut b = ReorderBuffer::new(0, cfg);
        b.push(chunk(0), t);
        b.push(chunk(3), t + Duration::from_millis(10));
        assert_eq!(b.deadline(), Some(t + Duration::from_millis(60)));
        b.poll(t + Duration::from_millis(59));
        assert_eq!(drain(&mut b), ["0"]);
        b.poll(t + Duration::from_millis(60));
        assert_eq!(drain(&mut b), ["gap2", "3"]);
        assert_eq!(b.push(chunk(1), t), Arrival::TooLate);
        assert_eq!(b.stats().lost, 2);
    }

    #[test]
    fn a_full_buffer_declares_the_gap_at_once() {
        let t = Instant::now();
        let cfg = ReorderConfig {
            max_chunks: 2,
            max_wait: Duration::from_secs(10),
            ..ReorderConfig::default()
        };
        let mut b = ReorderBuffer::new(0, cfg);
        for s in [2, 3, 4] {
            b.push(chunk(s), t);
        }
        assert_eq!(drain(&mut b), ["gap2", "2", "3", "4"]);
    }

    #[test]
    fn gaps_are_counted_modulo_65536_across_the_wrap() {
        let t = Instant::now();
        let cfg = ReorderConfig {
            max_chunks: 1,
            max_wait: Duration::from_secs(10),
            ..ReorderConfig::default()
        };
        let mut b = ReorderBuffer::new(65534, cfg);
        b.push(chunk(65534), t);
        b.push(chunk(65535), t);
        b.push(chunk(0), t);
        b.push(chunk(3), t);
        b.push(chunk(4), t);
        assert_eq!(drain(&mut b), ["65534", "65535", "0", "gap2", "3", "4"]);
        assert_eq!(b.stats().lost, 2);
        assert_eq!(b.next_seq(), 5);
    }
}
