//! The simulated vehicle's side of an impaired link (sans-IO): what it sends is lost,
//! corrupted, duplicated or held back behind later frames, what it receives is lost, and both
//! ways go quiet in periodic outages, all drawn from one seeded RNG so that a run replays.
//! Every simulated autopilot sends and receives through one; the impairment may change as
//! the run goes ([`ImpairedLink::set_impairment`]: a fault schedule).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::sim::config::Impairment;

/// The longest a reordered frame is held back (a link reorders within milliseconds, however
/// few frames follow, e.g. while the vehicle waits for an ack).
const MAX_REORDER_DELAY: Duration = Duration::from_millis(20);

/// See the module docs.
#[derive(Debug)]
pub struct ImpairedLink {
    impairment: Impairment,
    rng: fastrand::Rng,
    /// The vehicle's power-up: outages are periods from it.
    epoch: Instant,
    out: VecDeque<Vec<u8>>,
    /// Frames held back, with the frames still to pass them and the latest time they go out
    /// anyway.
    delayed: Vec<(usize, Instant, Vec<u8>)>,
    /// Frames onto the wire, every copy.
    pub frames_sent: u64,
    /// Frames the link lost, both ways.
    pub frames_dropped: u64,
}

impl ImpairedLink {
    pub fn new(impairment: Impairment, seed: u64, epoch: Instant) -> Self {
        Self {
            impairment,
            rng: fastrand::Rng::with_seed(seed),
            epoch,
            out: VecDeque::new(),
            delayed: Vec::new(),
            frames_sent: 0,
            frames_dropped: 0,
        }
    }

    pub fn impairment(&self) -> &Impairment {
        &self.impairment
    }

    /// From now on the link is impaired as `impairment` says (frames held back stay so).
    pub fn set_impairment(&mut self, impairment: Impairment) {
        self.impairment = impairment;
    }

    /// A frame from the vehicle at `now`; `cut`: the vehicle's own reason for the link to be
    /// down now (on top of the periodic outages). True when at least one copy gets through
    /// intact (a corrupted frame still goes out, to be refused by its checksum).
    pub fn send(&mut self, mut frame: Vec<u8>, now: Instant, cut: bool) -> bool {
        let imp = self.impairment;
        if cut || self.periodic_outage(now) || self.chance(imp.loss) {
            self.frames_dropped += 1;
            return false;
        }
        if !frame.is_empty() && self.chance(imp.corrupt) {
            let at = self.rng.usize(..frame.len());
            frame[at] ^= self.rng.u8(1..);
            self.push_out(frame);
            return false;
        }
        let copies = if self.chance(imp.duplicate) { 2 } else { 1 };
        for copy in 1..=copies {
            let frame = if copy == copies {
                std::mem::take(&mut frame)
            } else {
                frame.clone()
            };
            if imp.reorder_depth > 0 && self.chance(imp.reorder) {
                let behind = self.rng.usize(1..=imp.reorder_depth);
                self.delayed.push((behind, now + MAX_REORDER_DELAY, frame));
            } else {
                self.push_out(frame);
            }
        }
        true
    }

    /// Whether a frame to the vehicle at `now` is lost (`cut` as for [`send`](Self::send)).
    pub fn lost_inbound(&mut self, now: Instant, cut: bool) -> bool {
        let lost = cut || self.periodic_outage(now) || self.chance(self.impairment.uplink_loss);
        if lost {
            self.frames_dropped += 1;
        }
        lost
    }

    /// In one of the periodic outages at `now` (the first period starts with a clear link).
    pub fn periodic_outage(&self, now: Instant) -> bool {
        let imp = &self.impairment;
        match imp.outage_every {
            Some(every) if !every.is_zero() => {
                let since = now.duration_since(self.epoch);
                let t = since.as_nanos() % every.as_nanos();
                since >= every && t < imp.outage_len.as_nanos()
            }
            _ => false,
        }
    }

    /// Sends a frame; frames held back are released once enough have passed them.
    fn push_out(&mut self, frame: Vec<u8>) {
        self.out.push_back(frame);
        self.frames_sent += 1;
        for d in &mut self.delayed {
            d.0 = d.0.saturating_sub(1);
        }
        self.release(None);
    }

    /// Releases the held-back frames that enough frames passed, or whose time is up at `now`.
    pub fn release(&mut self, now: Option<Instant>) {
        let mut i = 0;
        while i < self.delayed.len() {
            let (behind, until, _) = &self.delayed[i];
            if *behind == 0 || now.is_some_and(|n| n >= *until) {
                let (_, _, f) = self.delayed.swap_remove(i);
                self.out.push_back(f);
                self.frames_sent += 1;
            } else {
                i += 1;
            }
        }
    }

    /// Every frame held back goes out now.
    pub fn flush(&mut self) {
        for (_, _, f) in self.delayed.drain(..) {
            self.out.push_back(f);
            self.frames_sent += 1;
        }
    }

    /// Nothing is on its way any more (the vehicle rebooted).
    pub fn clear(&mut self) {
        self.out.clear();
        self.delayed.clear();
    }

    /// When a held-back frame goes out at the latest.
    pub fn next_release(&self) -> Option<Instant> {
        self.delayed.iter().map(|d| d.1).min()
    }

    /// The next frame on the wire to the receiver.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.out.pop_front()
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.rng.f64() < p
    }
}
