//! One client's queue of lines to send (sans-IO): bounded in bytes; when a line would
//! overflow it, the oldest lines go, and the next write starts with
//! `{"type":"lagged","dropped":N}` so that the client knows how many it missed.

use std::collections::VecDeque;
use std::time::Instant;

use bytes::Bytes;

/// See the module docs.
#[derive(Debug)]
pub struct Outbox {
    /// Lines (each ending in a newline), with the arrival time of the log data a data line
    /// was made from, for the latency measurement.
    lines: VecDeque<(Bytes, Option<Instant>)>,
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

    /// Queues a line; drops the oldest ones while the queue is over its limit.
    pub fn push(&mut self, line: Bytes, arrived: Option<Instant>) {
        self.queued_bytes += line.len();
        self.lines.push_back((line, arrived));
        while self.queued_bytes > self.limit && self.lines.len() > 1 {
            let (old, _) = self.lines.pop_front().expect("more than one line");
            self.queued_bytes -= old.len();
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
                format!("{{\"type\":\"lagged\",\"dropped\":{}}}\n", self.dropped).as_bytes(),
            );
            self.dropped = 0;
        }
        while out.len() < max {
            let Some((line, at)) = self.lines.pop_front() else {
                break;
            };
            self.queued_bytes -= line.len();
            out.extend_from_slice(&line);
            if let Some(at) = at {
                arrived(at);
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.lines.is_empty() && self.dropped == 0
    }

    /// Bytes waiting.
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
        let mut o = Outbox::new(30);
        for i in 0..10 {
            o.push(Bytes::from(format!("line {i}\n")), None);
        }
        assert!(o.queued_bytes() <= 30);
        assert_eq!(o.dropped_total(), 6);
        let mut out = Vec::new();
        o.take(&mut out, usize::MAX, |_| {});
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"type\":\"lagged\",\"dropped\":6}\nline 6\nline 7\nline 8\nline 9\n"
        );
        assert!(o.is_empty());
        assert_eq!(o.queued_bytes(), 0);
        // A line bigger than the limit still goes out, alone.
        o.push(Bytes::from(vec![b'x'; 100]), None);
        assert_eq!(o.queued_bytes(), 100);
    }

    #[test]
    fn take_stops_near_max_and_reports_arrival_times() {
        let mut o = Outbox::new(1 << 20);
        let t = Instant::now();
        for i in 0..100 {
            o.push(Bytes::from(format!("{i:09}\n")), (i % 2 == 0).then_some(t));
        }
        let mut out = Vec::new();
        let mut stamped = 0;
        o.take(&mut out, 35, |_| stamped += 1);
        assert_eq!(out.len(), 40);
        assert_eq!(stamped, 2);
        assert_eq!(o.queued_bytes(), 960);
    }
}
