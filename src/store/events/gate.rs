//! One event buffer's gate on its column's stream: what is inside a window goes out at once,
//! the rest is held for `before` (bounded in bytes), and an event writes out what its window
//! takes, each topic's samples in their order.

use std::collections::{HashMap, VecDeque};
use std::ops::ControlFlow;

use bytes::BytesMut;

use super::{EventBufferSpec, HOLD_MARGIN_US, follow_header};
use crate::ulog::Decoder;
use crate::ulog::framer::{Framer, Unit};
use crate::ulog::message::Message;

/// One buffer's gate on its column's stream (see the module docs).
#[derive(Debug)]
pub struct EventGate {
    spec: EventBufferSpec,
    framer: Framer,
    decoder: Decoder,
    /// Samples held, in arrival order.
    held: HeldSamples,
    /// Windows so far, merged, by start.
    windows: Vec<[u64; 2]>,
    /// Per message id: the last sample time written.
    written: HashMap<u16, u64>,
    /// Samples dropped from memory before their time was up (the byte bound).
    pub dropped_for_memory: u64,
}

impl EventGate {
    pub fn new(spec: EventBufferSpec) -> Self {
        Self {
            spec,
            framer: Framer::file(),
            decoder: Decoder::new(),
            held: HeldSamples::default(),
            windows: Vec::new(),
            written: HashMap::new(),
            dropped_for_memory: 0,
        }
    }

    pub fn spec(&self) -> &EventBufferSpec {
        &self.spec
    }

    /// The windows so far, merged, by start: `[from, to]` µs of log time.
    pub fn windows(&self) -> &[[u64; 2]] {
        &self.windows
    }

    /// Bytes of samples held now.
    pub fn held_bytes(&self) -> u64 {
        self.held.bytes_held
    }

    /// Takes the column's next bytes (header first, then messages, in pieces of any size) and
    /// appends what is to be written now to `out`.
    pub fn push(&mut self, bytes: &[u8], out: &mut BytesMut) {
        let mut framer = std::mem::take(&mut self.framer);
        let _ = framer.push(bytes, |unit| {
            match unit {
                Unit::Header(h) => {
                    follow_header(&mut self.decoder, h);
                    out.extend_from_slice(h);
                }
                Unit::Message(m) => self.follow(m, out),
            }
            ControlFlow::Continue(())
        });
        self.framer = framer;
        self.evict();
    }

    fn follow(&mut self, message: &[u8], out: &mut BytesMut) {
        let parsed = Message::parse_framed(message);
        if let Some(Message::RemoveLogged { msg_id }) = parsed {
            // Its held samples could not follow the removal.
            self.held.take_where(|_, id| id == msg_id, |_, _, _| {});
            self.written.remove(&msg_id);
        }
        let msg_id = match parsed {
            Some(Message::Data { msg_id, .. }) => msg_id,
            _ => {
                if let Some(p) = &parsed {
                    let _ = self.decoder.handle(p);
                }
                out.extend_from_slice(message);
                return;
            }
        };
        let Some(ts) = self.decoder.timestamp_of(parsed.as_ref()) else {
            // No time to place it by: written as it comes.
            out.extend_from_slice(message);
            return;
        };
        if self.in_window(ts) {
            self.write(ts, msg_id, message, out);
        } else {
            self.held.push(ts, msg_id, message);
        }
    }

    fn write(&mut self, ts: u64, msg_id: u16, message: &[u8], out: &mut BytesMut) {
        write_in_order(&mut self.written, ts, msg_id, message, out);
    }

    fn in_window(&self, ts: u64) -> bool {
        let k = self.windows.partition_point(|w| w[1] < ts);
        self.windows.get(k).is_some_and(|w| w[0] <= ts)
    }

    /// Drops held samples past `before` (and the margin) and over the byte bound.
    fn evict(&mut self) {
        let horizon = self
            .decoder
            .last_timestamp()
            .saturating_sub(self.spec.before_us + HOLD_MARGIN_US);
        while let Some(ts) = self.held.front_time() {
            let over = self.held.bytes_held > self.spec.max_bytes;
            if ts >= horizon && !over {
                break;
            }
            if over && ts >= horizon {
                self.dropped_for_memory += 1;
            }
            self.held.pop_front();
        }
    }

    /// An event at `at_us` (log time): opens its window (`after_us` instead of the buffer's
    /// own when given), merged with those it overlaps, and appends the held samples it takes
    /// to `out`. Returns the event's own window.
    pub fn open(&mut self, at_us: u64, after_us: Option<u64>, out: &mut BytesMut) -> [u64; 2] {
        let window = [
            at_us.saturating_sub(self.spec.before_us),
            at_us.saturating_add(after_us.unwrap_or(self.spec.after_us)),
        ];
        // Held samples are older than the newest sample and outside every window: when the
        // window's part up to now is covered already, none can be in it (a trigger firing on
        // every sample costs no scan of what is held).
        let past_end = window[1].min(self.decoder.last_timestamp());
        let scan = window[0] <= past_end
            && !self
                .windows
                .iter()
                .any(|w| w[0] <= window[0] && w[1] >= past_end);
        let [mut from, mut to] = window;
        self.windows.retain(|w| {
            let overlaps = w[0] <= to && w[1] >= from;
            if overlaps {
                from = from.min(w[0]);
                to = to.max(w[1]);
            }
            !overlaps
        });
        let k = self.windows.partition_point(|w| w[0] < from);
        self.windows.insert(k, [from, to]);
        if scan && !crate::planted::is(crate::planted::Bug::WindowSkipsHeldSamples) {
            let written = &mut self.written;
            self.held.take_where(
                |ts, _| ts >= from && ts <= to,
                |ts, msg_id, m| write_in_order(written, ts, msg_id, m, out),
            );
        }
        window
    }
}

/// Appends a sample to `out` unless one of its topic stamped later was written already.
fn write_in_order(
    written: &mut HashMap<u16, u64>,
    ts: u64,
    msg_id: u16,
    message: &[u8],
    out: &mut BytesMut,
) {
    let last = written.entry(msg_id).or_insert(0);
    if ts >= *last {
        *last = ts;
        out.extend_from_slice(message);
    }
}

/// A gate's held samples in arrival order, their bytes in one buffer (no allocation per
/// sample; the buffer's dropped front is reclaimed once it is half of it).
#[derive(Debug, Default)]
struct HeldSamples {
    samples: VecDeque<HeldSample>,
    /// The held messages' bytes; `bytes[0]` is byte `base` of all ever pushed.
    bytes: Vec<u8>,
    base: usize,
    /// Bytes of the samples held (what the byte bound counts).
    bytes_held: u64,
}

#[derive(Debug, Clone, Copy)]
struct HeldSample {
    ts: u64,
    msg_id: u16,
    /// Where its message starts among all bytes ever pushed.
    start: usize,
    len: usize,
}

impl HeldSamples {
    fn push(&mut self, ts: u64, msg_id: u16, message: &[u8]) {
        self.samples.push_back(HeldSample {
            ts,
            msg_id,
            start: self.base + self.bytes.len(),
            len: message.len(),
        });
        self.bytes.extend_from_slice(message);
        self.bytes_held += message.len() as u64;
    }

    fn front_time(&self) -> Option<u64> {
        self.samples.front().map(|s| s.ts)
    }

    fn pop_front(&mut self) {
        let Some(s) = self.samples.pop_front() else {
            return;
        };
        self.bytes_held -= s.len as u64;
        match self.samples.front() {
            None => {
                self.base += self.bytes.len();
                self.bytes.clear();
            }
            Some(next) => {
                let dead = next.start - self.base;
                if dead >= 64 << 10 && dead * 2 >= self.bytes.len() {
                    self.bytes.drain(..dead);
                    self.base = next.start;
                }
            }
        }
    }

    /// Takes out the samples `pick` chooses, handing each to `take` in order; keeps the rest.
    fn take_where(
        &mut self,
        mut pick: impl FnMut(u64, u16) -> bool,
        mut take: impl FnMut(u64, u16, &[u8]),
    ) {
        let old = std::mem::take(self);
        self.base = old.base + old.bytes.len();
        for s in old.samples {
            let message = &old.bytes[s.start - old.base..][..s.len];
            if pick(s.ts, s.msg_id) {
                take(s.ts, s.msg_id, message);
            } else {
                self.push(s.ts, s.msg_id, message);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::columns::ColumnSpec;

    #[test]
    fn held_samples_keep_their_bytes_through_drops_and_takes() {
        let mut held = HeldSamples::default();
        let message = |k: u64| vec![k as u8; 1000 + (k % 7) as usize];
        for k in 0..300u64 {
            held.push(k, (k % 3) as u16, &message(k));
        }
        for _ in 0..200 {
            held.pop_front();
        }
        // The dropped front was reclaimed, the rest is intact.
        assert!(held.bytes.len() < 150_000, "{}", held.bytes.len());
        assert_eq!(
            held.bytes_held,
            (200..300).map(|k| message(k).len() as u64).sum::<u64>()
        );
        let mut taken = Vec::new();
        held.take_where(
            |ts, id| id == 0 && ts < 250,
            |ts, _, m| taken.push((ts, m.to_vec())),
        );
        let want: Vec<(u64, Vec<u8>)> = (200..250)
            .filter(|k| k % 3 == 0)
            .map(|k| (k, message(k)))
            .collect();
        assert_eq!(taken, want);
        let mut rest = Vec::new();
        held.take_where(|_, _| true, |ts, _, m| rest.push((ts, m.to_vec())));
        let want: Vec<(u64, Vec<u8>)> = (200..300)
            .filter(|k| !(k % 3 == 0 && *k < 250))
            .map(|k| (k, message(k)))
            .collect();
        assert_eq!(rest, want);
        assert_eq!(held.bytes_held, 0);
    }

    #[test]
    fn overlapping_windows_merge_and_lookups_find_them() {
        let spec = EventBufferSpec {
            column: ColumnSpec::parse("imu=sensor_*").unwrap(),
            before_us: 5,
            after_us: 2,
            max_bytes: 1 << 20,
        };
        let mut gate = EventGate::new(spec);
        let mut out = BytesMut::new();
        assert_eq!(gate.open(100, None, &mut out), [95, 102]);
        assert_eq!(gate.open(50, Some(10), &mut out), [45, 60]);
        assert_eq!(gate.open(104, None, &mut out), [99, 106]);
        assert_eq!(gate.windows(), [[45, 60], [95, 106]]);
        gate.open(58, None, &mut out);
        assert_eq!(gate.windows(), [[45, 60], [95, 106]]);
        gate.open(80, Some(20), &mut out);
        assert_eq!(gate.windows(), [[45, 60], [75, 106]]);
        for (ts, inside) in [
            (44, false),
            (45, true),
            (60, true),
            (61, false),
            (75, true),
            (106, true),
            (107, false),
        ] {
            assert_eq!(gate.in_window(ts), inside, "{ts}");
        }
    }
}
