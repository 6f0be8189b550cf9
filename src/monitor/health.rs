//! The health check's rules, sans-IO: what the daemon last reported (its status, once a
//! second) and `now` in, the problems that make it unhealthy out. `GET /healthz` answers 200
//! with none, 503 with each problem's line.

use std::time::{Duration, Instant};

/// The store stuck on one write or sync this long is a problem (a slower one is the disk
/// being slow, which the queue absorbs).
pub const STORE_STUCK: Duration = Duration::from_secs(10);
/// A write failure this recent is a problem.
pub const WRITE_FAILURE_HOLD: Duration = Duration::from_secs(10);
/// A link that has not opened for this long is a problem (a reconnect takes less).
pub const LINK_DOWN: Duration = Duration::from_secs(10);
/// The network loop silent this long is a problem (it reports every second).
pub const LOOP_SILENT: Duration = Duration::from_secs(10);

/// What the daemon last told of itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Report {
    /// The store's thread has been on one step this long (none when idle or brief).
    pub store_busy: Option<Duration>,
    /// The store writes (false: paused, the disk is full).
    pub store_writing: bool,
    /// Log bytes that could not be written, since the start.
    pub failed_bytes: u64,
    /// The link is open.
    pub link_open: bool,
}

/// Why the daemon is unhealthy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    #[error("the daemon has not reported for {} s (its network loop is stuck)", .0.as_secs())]
    LoopSilent(Duration),
    #[error("the store has been stuck on one write or sync for {} s", .0.as_secs())]
    StoreStuck(Duration),
    #[error("the disk is full: writing is paused until there is room")]
    DiskFull,
    #[error("writing the log failed in the last {} s ({bytes} bytes not written so far)", WRITE_FAILURE_HOLD.as_secs())]
    WriteFailing { bytes: u64 },
    #[error("the link has not opened for {} s", .0.as_secs())]
    LinkDown(Duration),
}

/// The daemon's reports over time; see the module docs.
#[derive(Debug, Clone)]
pub struct Health {
    started: Instant,
    last: Option<(Report, Instant)>,
    /// When the failed bytes last grew.
    last_failure: Option<Instant>,
    /// Since when the link has been down (none while open).
    link_down_since: Option<Instant>,
}

impl Health {
    pub fn new(now: Instant) -> Self {
        Self {
            started: now,
            last: None,
            last_failure: None,
            link_down_since: Some(now),
        }
    }

    /// A report of the daemon, made at `now`.
    pub fn report(&mut self, report: Report, now: Instant) {
        let failed_before = self.last.map_or(0, |(r, _)| r.failed_bytes);
        if report.failed_bytes > failed_before {
            self.last_failure = Some(now);
        }
        if report.link_open {
            self.link_down_since = None;
        } else {
            self.link_down_since.get_or_insert(now);
        }
        self.last = Some((report, now));
    }

    /// The problems at `now`; none: healthy.
    pub fn problems(&self, now: Instant) -> Vec<Problem> {
        let mut problems = Vec::new();
        let heard = self.last.map_or(self.started, |(_, at)| at);
        let silent = now.saturating_duration_since(heard);
        if silent >= LOOP_SILENT {
            problems.push(Problem::LoopSilent(silent));
        }
        if let Some(since) = self.link_down_since {
            let down = now.saturating_duration_since(since);
            if down >= LINK_DOWN {
                problems.push(Problem::LinkDown(down));
            }
        }
        let Some((report, _)) = self.last else {
            return problems;
        };
        if let Some(busy) = report.store_busy.filter(|b| *b >= STORE_STUCK) {
            problems.push(Problem::StoreStuck(busy));
        }
        if !report.store_writing {
            problems.push(Problem::DiskFull);
        }
        if self
            .last_failure
            .is_some_and(|at| now.saturating_duration_since(at) < WRITE_FAILURE_HOLD)
        {
            problems.push(Problem::WriteFailing {
                bytes: report.failed_bytes,
            });
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> Report {
        Report {
            store_busy: None,
            store_writing: true,
            failed_bytes: 0,
            link_open: true,
        }
    }

    #[test]
    fn a_daemon_that_reports_well_is_healthy_and_each_fault_names_itself() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut h = Health::new(t0);
        h.report(good(), t0);
        assert_eq!(h.problems(t0 + s(1)), vec![]);
        // Silence: the loop is stuck.
        assert_eq!(h.problems(t0 + s(12)), vec![Problem::LoopSilent(s(12))]);
        // A full disk, a store stuck, a failed write: each, then gone.
        h.report(
            Report {
                store_writing: false,
                store_busy: Some(s(11)),
                failed_bytes: 300,
                ..good()
            },
            t0 + s(20),
        );
        let p = h.problems(t0 + s(21));
        assert_eq!(
            p,
            vec![
                Problem::StoreStuck(s(11)),
                Problem::DiskFull,
                Problem::WriteFailing { bytes: 300 }
            ]
        );
        assert!(p[2].to_string().contains("300 bytes"), "{}", p[2]);
        h.report(
            Report {
                failed_bytes: 300,
                ..good()
            },
            t0 + s(31),
        );
        assert_eq!(h.problems(t0 + s(31)), vec![]);
    }

    #[test]
    fn a_link_that_does_not_open_is_a_problem_only_after_a_reconnect_s_time() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut h = Health::new(t0);
        let down = Report {
            link_open: false,
            ..good()
        };
        h.report(down, t0 + s(1));
        assert_eq!(h.problems(t0 + s(5)), vec![]);
        h.report(down, t0 + s(11));
        assert_eq!(h.problems(t0 + s(11)), vec![Problem::LinkDown(s(11))]);
        h.report(good(), t0 + s(12));
        assert_eq!(h.problems(t0 + s(12)), vec![]);
    }
}
