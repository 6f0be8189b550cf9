//! A latency histogram (ack latency, publishing latency): 1 µs buckets, quantiles.

use std::time::Duration;

/// Latencies in microseconds, as a histogram with 1 µs buckets up to 65 ms (longer ones
/// count in the last bucket; the maximum is kept exactly).
#[derive(Debug, Clone, serde::Serialize)]
pub struct LatencyHistogram {
    #[serde(skip)]
    buckets: Vec<u32>,
    pub count: u64,
    pub max_us: u64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self {
            buckets: vec![0; 1 << 16],
            count: 0,
            max_us: 0,
        }
    }
}

impl LatencyHistogram {
    pub fn record(&mut self, d: Duration) {
        let us = d.as_micros().min(u64::MAX as u128) as u64;
        let i = (us as usize).min(self.buckets.len() - 1);
        self.buckets[i] += 1;
        self.count += 1;
        self.max_us = self.max_us.max(us);
    }

    /// The `q` quantile (0..=1) in microseconds; `None` before any ack.
    pub fn quantile_us(&self, q: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0u64;
        for (us, &n) in self.buckets.iter().enumerate() {
            seen += n as u64;
            if seen >= rank {
                return Some(us as u64);
            }
        }
        Some(self.max_us)
    }
}
