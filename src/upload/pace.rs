//! How fast uploads go and how they wait, sans-IO: a byte-rate pacer (`--upload-rate`, so
//! that a shared LTE modem keeps room for telemetry) and the back-off between failed tries
//! (capped exponential with jitter, never a tight loop).

use std::time::{Duration, Instant};

/// Paces bytes to at most `rate` per second on average: each request's bytes are booked on
/// a timeline from when it began, and after it the uploader waits until they are paid for.
/// A request's bytes go at the network's speed; the average over requests holds the rate.
#[derive(Debug, Clone)]
pub struct Pacer {
    rate: Option<u64>,
    /// When the bytes booked so far are paid for.
    free_at: Option<Instant>,
}

impl Pacer {
    /// At most `rate` bytes per second; `None`: as fast as the network goes.
    pub fn new(rate: Option<u64>) -> Self {
        Self {
            rate: rate.filter(|&r| r > 0),
            free_at: None,
        }
    }

    /// `bytes` were sent by a request that began at `started`; returns how long to wait from
    /// `now` before the next. An idle pacer saves nothing up: a request after a pause is
    /// booked from its own start.
    pub fn sent(&mut self, bytes: u64, started: Instant, now: Instant) -> Duration {
        let Some(rate) = self.rate else {
            return Duration::ZERO;
        };
        let from = self.free_at.filter(|&t| t > started).unwrap_or(started);
        let paid_at = from + Duration::from_secs_f64(bytes as f64 / rate as f64);
        self.free_at = Some(paid_at);
        paid_at.saturating_duration_since(now)
    }
}

/// Waits between tries of a failing upload: 1 s, doubling, capped; each wait drawn at
/// random between half and all of it, so that a fleet does not hammer a server in step.
#[derive(Debug, Clone)]
pub struct Backoff {
    failures: u32,
    first: Duration,
    cap: Duration,
    rng: fastrand::Rng,
}

impl Backoff {
    /// From `first`, doubling up to `cap`.
    pub fn new(first: Duration, cap: Duration, seed: u64) -> Self {
        Self {
            failures: 0,
            first,
            cap,
            rng: fastrand::Rng::with_seed(seed),
        }
    }

    /// A try failed: how long to wait before the next.
    pub fn failed(&mut self) -> Duration {
        let full = self
            .first
            .saturating_mul(1u32 << self.failures.min(16))
            .min(self.cap);
        self.failures = self.failures.saturating_add(1);
        let half = full / 2;
        half + Duration::from_secs_f64(half.as_secs_f64() * self.rng.f64())
    }

    /// A try succeeded: the next failure starts from the first wait again.
    pub fn succeeded(&mut self) {
        self.failures = 0;
    }

    /// Failures in a row.
    pub fn failures(&self) -> u32 {
        self.failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pacer_keeps_the_average_rate_and_saves_nothing_up_while_idle() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut p = Pacer::new(Some(1_000_000));
        // Ten requests of 500 KB, each taking 100 ms on the network: after each, the wait
        // makes it 500 ms from its start.
        let mut now = t0;
        for _ in 0..10 {
            let started = now;
            now += ms(100);
            let wait = p.sent(500_000, started, now);
            assert_eq!(wait, ms(400));
            now += wait;
        }
        // 5 MB in 5 s: 1 MB/s.
        assert_eq!(now - t0, Duration::from_secs(5));
        // A request slower than the rate needs no wait.
        assert_eq!(p.sent(100_000, now, now + ms(200)), Duration::ZERO);
        // After a long pause, nothing saved up: the next is paced from its own start.
        let later = t0 + Duration::from_secs(60);
        assert_eq!(p.sent(500_000, later, later), ms(500));
        assert_eq!(Pacer::new(None).sent(1 << 30, t0, t0), Duration::ZERO);
    }

    #[test]
    fn back_off_doubles_to_its_cap_with_jitter_and_starts_over_after_a_success() {
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(60), 7);
        let waits: Vec<Duration> = (0..10).map(|_| b.failed()).collect();
        for (i, w) in waits.iter().enumerate() {
            let full = Duration::from_secs(1 << i.min(6)).min(Duration::from_secs(60));
            assert!(*w >= full / 2 && *w <= full, "wait {i}: {w:?} for {full:?}");
        }
        assert_eq!(b.failures(), 10);
        b.succeeded();
        assert!(b.failed() <= Duration::from_secs(1));
    }
}
