//! One client's queue of lines (or messages) to send (sans-IO): bounded in bytes; when a line
//! would overflow it, the oldest droppable lines go, and the next write starts with
//! `{"type":"lagged","dropped":N,"cause":"client_slow"}` so that the client knows how many it
//! missed. A message-oriented writer (the Foxglove server) pops whole messages instead and
//! reports the drops in its own protocol.
//!
//! What a client needs to make sense of the rest is never dropped ([`Keep`]): the `hello`,
//! the latest topic catalogue (a newer one replaces a queued one) and session events.

use std::collections::VecDeque;
use std::time::Instant;

use bytes::Bytes;

/// What a queued line costs beyond its bytes (its queue slot and allocation), counted
/// against the limit so that the bound holds in memory for small messages too.
pub const ENTRY_COST: usize = 64;

/// The bytes a line of `len` counts for.
fn cost(len: usize) -> usize {
    len + ENTRY_COST
}

/// Whether a line may be dropped when its client lags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// Samples, logged strings, stats, replies: the oldest go first.
    Droppable,
    /// Never dropped (`hello`, session events).
    Always,
    /// Never dropped, but a newer line of this kind replaces a queued one (the catalogue).
    Latest,
}

/// See the module docs.
#[derive(Debug)]
pub struct Outbox {
    /// Lines (each ending in a newline), with the arrival time of the log data a data line
    /// was made from, for the latency measurement.
    lines: VecDeque<(Bytes, Option<Instant>, Keep)>,
    queued_bytes: usize,
    limit: usize,
    /// Lines dropped since the last `lagged` line was written.
    dropped: u64,
    /// Lines dropped in all.
    dropped_total: u64,
}

impl Outbox {
    /// An outbox holding at most `limit` bytes (always at least the newest line).
    pub fn new(limit: usize) -> Self {
        Self {
            lines: VecDeque::new(),
            queued_bytes: 0,
            limit,
            dropped: 0,
            dropped_total: 0,
        }
    }

    /// Queues a line; drops the oldest droppable ones while the queue is over its limit
    /// (the newest line always stays).
    pub fn push(&mut self, line: Bytes, arrived: Option<Instant>, keep: Keep) {
        if keep == Keep::Latest {
            let before = self.lines.len();
            let mut freed = 0;
            self.lines.retain(|(l, _, k)| {
                let superseded = *k == Keep::Latest;
                if superseded {
                    freed += cost(l.len());
                }
                !superseded
            });
            self.queued_bytes -= freed;
            debug_assert!(self.lines.len() <= before);
        }
        self.queued_bytes += cost(line.len());
        self.lines.push_back((line, arrived, keep));
        while self.queued_bytes > self.limit {
            let Some(i) = self
                .lines
                .iter()
                .take(self.lines.len() - 1)
                .position(|(_, _, k)| *k == Keep::Droppable)
            else {
                break;
            };
            let (old, _, _) = self.lines.remove(i).expect("a line at that index");
            self.queued_bytes -= cost(old.len());
            self.dropped += 1;
            self.dropped_total += 1;
        }
    }

    /// Moves queued lines into `out` until it holds at least `max` bytes or the queue is
    /// empty, starting with a `lagged` line if lines were dropped. Calls `arrived` with the
    /// arrival time of each data line taken.
    pub fn take(&mut self, out: &mut Vec<u8>, max: usize, mut arrived: impl FnMut(Instant)) {
        if self.dropped > 0 {
            out.extend_from_slice(
                format!(
                    "{{\"type\":\"lagged\",\"dropped\":{},\"cause\":\"client_slow\"}}\n",
                    self.dropped
                )
                .as_bytes(),
            );
            self.dropped = 0;
        }
        while out.len() < max {
            let Some((line, at, _)) = self.lines.pop_front() else {
                break;
            };
            self.queued_bytes -= cost(line.len());
            out.extend_from_slice(&line);
            if let Some(at) = at {
                arrived(at);
            }
        }
    }

    /// The oldest queued message, whole, with the arrival time of the log data it was made
    /// from (for message-oriented sockets; [`take_dropped`](Self::take_dropped) tells what
    /// was dropped before it).
    pub fn pop(&mut self) -> Option<(Bytes, Option<Instant>)> {
        let (message, at, _) = self.lines.pop_front()?;
        self.queued_bytes -= cost(message.len());
        Some((message, at))
    }

    /// How many messages were dropped since the last call (or the last `lagged` line).
    pub fn take_dropped(&mut self) -> u64 {
        std::mem::take(&mut self.dropped)
    }

    pub fn is_empty(&self) -> bool {
        self.lines.is_empty() && self.dropped == 0
    }

    /// Bytes waiting, [`ENTRY_COST`] per line included.
    pub fn queued_bytes(&self) -> usize {
        self.queued_bytes
    }

    /// Lines dropped since the outbox was made.
    pub fn dropped_total(&self) -> u64 {
        self.dropped_total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overflow_drops_the_oldest_and_reports_how_many() {
        let mut o = Outbox::new(30 + 4 * ENTRY_COST);
        o.push(Bytes::from("hello\n"), None, Keep::Always);
        o.push(Bytes::from("topics 1\n"), None, Keep::Latest);
        for i in 0..10 {
            o.push(Bytes::from(format!("line {i}\n")), None, Keep::Droppable);
        }
        o.push(Bytes::from("topics 2\n"), None, Keep::Latest);
        assert!(o.queued_bytes() <= 30 + 4 * ENTRY_COST);
        assert_eq!(o.dropped_total(), 8);
        let mut out = Vec::new();
        o.take(&mut out, usize::MAX, |_| {});
        // The hello and the newest catalogue stay; the older catalogue was replaced.
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"type\":\"lagged\",\"dropped\":8,\"cause\":\"client_slow\"}\nhello\nline 8\nline 9\ntopics 2\n"
        );
        assert!(o.is_empty());
        assert_eq!(o.queued_bytes(), 0);
        // A line bigger than the limit still goes out, alone.
        o.push(Bytes::from(vec![b'x'; 100]), None, Keep::Droppable);
        assert_eq!(o.queued_bytes(), 100 + ENTRY_COST);
    }

    #[test]
    fn messages_come_out_whole_and_drops_are_counted_once() {
        let mut o = Outbox::new(10 + 2 * ENTRY_COST);
        let t = Instant::now();
        o.push(Bytes::from("{hello}"), None, Keep::Always);
        for i in 0..5u8 {
            o.push(Bytes::from(vec![i; 4]), Some(t), Keep::Droppable);
        }
        assert_eq!(o.take_dropped(), 4);
        assert_eq!(o.take_dropped(), 0);
        assert_eq!(o.pop(), Some((Bytes::from("{hello}"), None)));
        assert_eq!(o.pop(), Some((Bytes::from(vec![4u8; 4]), Some(t))));
        assert_eq!(o.pop(), None);
        assert_eq!(o.queued_bytes(), 0);
        assert_eq!(o.dropped_total(), 4);
    }

    #[test]
    fn take_stops_near_max_and_reports_arrival_times() {
        let mut o = Outbox::new(1 << 20);
        let t = Instant::now();
        for i in 0..100 {
            o.push(
                Bytes::from(format!("{i:09}\n")),
                (i % 2 == 0).then_some(t),
                Keep::Droppable,
            );
        }
        let mut out = Vec::new();
        let mut stamped = 0;
        o.take(&mut out, 35, |_| stamped += 1);
        assert_eq!(out.len(), 40);
        assert_eq!(stamped, 2);
        assert_eq!(o.queued_bytes(), 96 * (10 + ENTRY_COST));
    }
}
