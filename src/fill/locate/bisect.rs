//! The bisection on byte offsets: a probe read in the middle of the range, its first
//! message boundary, the time there (the median, or at the flight's edges the log's clock),
//! and the half of the range the target lies in; until the range is small enough for the
//! scan ([`super::stretch`]).

use super::boundary::sync;
use super::stretch::Scan;
use super::{BISECT_STOP, Edge, Locator, MAX_PROBE, PROBE, Stage};
use crate::fill::scan::DropoutSite;
use crate::fill::walk::timestamp;
use crate::ulog::Decoder;
use crate::ulog::message::framed;

impl Locator {
    /// Takes a probe the bisection asked for: narrows its range to the half the target lies
    /// in, or reads a longer probe where this one shows no boundary or no time.
    pub(super) fn handle_probe(&mut self, offset: u64, data: &[u8]) {
        let Stage::Bisect { lo, hi, probe } = &mut self.stage else {
            return;
        };
        let mid = *lo + (*hi - *lo) / 2;
        if offset != mid {
            return;
        }
        // Nothing to date in a probe that ran to the end of the file: what follows
        // the records (the post-flight data), so they are before it; in a probe
        // short of the end: the definitions, so they are after it.
        let at_end = mid + data.len() as u64 >= self.sd_len;
        let Some(start) = sync(&self.decoder, data) else {
            if *probe < MAX_PROBE && data.len() as u64 == *probe {
                // Long messages: no chain of them fits; look at more.
                *probe *= 2;
                return;
            }
            if at_end {
                *hi = mid;
            } else {
                *lo = mid;
            }
            return self.bisected();
        };
        let mut decoder = std::mem::take(&mut self.decoder);
        let mut times: Vec<u64> = framed(&data[start..])
            .filter_map(|raw| timestamp(&mut decoder, raw))
            .filter(|t| *t > 0)
            .collect();
        self.decoder = decoder;
        // The median: some topics carry another clock or none (0), some lag. At
        // the flight's edges, where a record (the head's first, the tail's last,
        // a slow topic's next) is looked for by the log's clock, the third newest
        // (the median if newer): the probe is before it only if (nearly) nothing in
        // it is as new, where the median of a pass PX4's logger makes over its
        // topics when it resumes, old samples among them, can lie.
        times.sort_unstable();
        let front = if by_clock(self.edge) {
            let newest = times.len().checked_sub(1);
            newest.map(|newest| times[newest - 2.min(newest / 2)])
        } else {
            times.get(times.len() / 2).copied()
        };
        self.dated |= front.is_some();
        if front.is_none() && *probe < MAX_PROBE && data.len() as u64 == *probe {
            // Messages without a time (a run of 'M' or 'P'): look further.
            *probe *= 2;
            return;
        }
        *probe = PROBE;
        let after = match front {
            Some(t) => t >= self.target_us,
            None => at_end,
        };
        if after {
            *hi = mid;
        } else {
            *lo = mid;
        }
        self.bisected();
    }

    /// Starts the scan once the bisection's range is small enough (or goes on with the
    /// scan that left off for it).
    fn bisected(&mut self) {
        if let Stage::Bisect { lo, hi, .. } = self.stage
            && hi - lo <= BISECT_STOP
        {
            self.stage = Stage::Scan(match self.left_off.take() {
                Some(mut scan) => {
                    scan.restart_at(lo);
                    scan
                }
                None => {
                    self.scan_start = Some(lo);
                    Scan::from(lo)
                }
            });
        }
    }
}

/// Whether a search for `edge` looks for the log's clock itself (the flight's head and
/// tail, and where a slow topic is due in the tail), not for a gap's anchors.
pub(super) fn by_clock(edge: Option<Edge>) -> bool {
    matches!(edge, Some(Edge::Head | Edge::Tail))
}

/// The median time of the anchors before `site`.
pub(super) fn median_time(decoder: &mut Decoder, site: &DropoutSite) -> Option<u64> {
    let mut times: Vec<u64> = site
        .before
        .iter()
        .filter_map(|i| timestamp(decoder, &site.messages[*i].bytes))
        .collect();
    times.sort_unstable();
    times.get(times.len() / 2).copied()
}
