//! How often each topic of a flight is written, as the stream shows it ([`Pace`]), sans-IO:
//! what tells a stopped stream's tail whether a sample of it stamped before the stop may
//! still be written to the SD log, and when (PX4's logger takes a slow topic's newest
//! sample once an interval, however its samples' times are spaced).

use std::collections::HashMap;

/// How long a topic quiet past its period may still be publishing (a slow topic's period,
/// and then some): a topic quiet for longer stopped, or is published on a change.
pub const LAG_US: u64 = 1_500_000;
/// How long after its time PX4 may log a sample, at most: the longest interval it logs a
/// topic at, and then some (`rtl_status`: once 2 s, up to 1.65 s after its time).
pub const MAX_LAG_US: u64 = 2_500_000;

/// How often a topic instance's samples come, as the stream shows it: what tells a stopped
/// stream's tail that no sample of it stamped before the stop is still to be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pace {
    /// Its newest sample's time, µs.
    pub last_us: u64,
    /// The shortest time between two of its samples, µs (`None` with one sample).
    pub period_us: Option<u64>,
    /// The longest it was logged after its time, µs: how far the log's clock (its newest
    /// sample so far) was past a sample of it when it was written.
    pub lag_us: u64,
    /// How many of its samples were logged more than [`LATE_US`] after their time: a topic
    /// PX4 logs once an interval has its samples wait for it (one written as it publishes
    /// is late only while the logger is held up, once or so).
    pub late_writes: u32,
    /// The log's clock when its last [`WRITES`] new samples were written, oldest first
    /// (`writes[..n_writes]`): its cadence.
    writes: [u64; WRITES],
    n_writes: usize,
}

/// How long after its time a sample is logged late ([`Pace::late_writes`]), µs, and how
/// far the log's clock jumps when PX4's logger was held up: longer than a logger loop or
/// two and the partial chunk's spread.
pub const LATE_US: u64 = 100_000;
/// How many late writes tell a topic PX4 logs once an interval.
pub const LATE_WRITES: u32 = 2;
/// How many of a topic's writes its [`Pace`] keeps to tell its cadence.
pub const WRITES: usize = 8;
/// How far a steady topic's writes may stray from its cadence, µs (a few of PX4's logger
/// loops).
pub const CADENCE_JITTER_US: u64 = 12_000;
/// The shortest cadence worth predicting, µs (a faster topic's next write is among the
/// records read anyway).
pub const MIN_CADENCE_US: u64 = 100_000;

impl Pace {
    /// A topic's first sample, stamped `t`: logged when it was subscribed, however old, so
    /// no lag of its.
    pub fn first(t: u64, clock: u64) -> Self {
        let mut writes = [0; WRITES];
        writes[0] = clock;
        Self {
            last_us: t,
            period_us: None,
            lag_us: 0,
            late_writes: 0,
            writes,
            n_writes: 1,
        }
    }

    /// Takes a sample stamped `t`.
    pub fn sample(&mut self, t: u64) {
        if t > self.last_us {
            let gap = t - self.last_us;
            self.period_us = Some(self.period_us.map_or(gap, |p| p.min(gap)));
            self.last_us = t;
        }
    }

    /// Takes a sample stamped `t`, written with the log's clock (its newest sample so far)
    /// at `clock` (its lag is the caller's to judge: not one written after the logger was
    /// held up).
    pub fn logged(&mut self, t: u64, clock: u64) {
        if t > self.last_us {
            if self.n_writes == WRITES {
                self.writes.copy_within(1.., 0);
                self.n_writes -= 1;
            }
            self.writes[self.n_writes] = clock;
            self.n_writes += 1;
        }
        self.sample(t);
    }

    /// [`logged`](Self::logged), and how late it was: a sample of the stream itself (the
    /// tail's records past the stop are logged without: PX4's logger is held up there).
    /// `held_up`: written in the pass PX4's logger makes over its topics when it resumes
    /// after it was held up (the log's clock jumped just before), late for that, not for
    /// waiting on its interval.
    pub fn logged_late(&mut self, t: u64, clock: u64, held_up: bool) {
        self.logged(t, clock);
        self.lag_us = self.lag_us.max(clock - t);
        self.late_writes += u32::from(!held_up && clock - t > LATE_US);
    }

    /// Every topic's pace of `from` merged into `into`'s (another column's).
    pub fn merge_all(into: &mut HashMap<u16, Pace>, from: &HashMap<u16, Pace>) {
        for (id, pace) in from {
            into.entry(*id)
                .and_modify(|p| p.merge(pace))
                .or_insert(*pace);
        }
    }

    /// Both paces of one topic (two columns').
    pub fn merge(&mut self, other: &Pace) {
        self.period_us = match (self.period_us, other.period_us) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.last_us = self.last_us.max(other.last_us);
        self.lag_us = self.lag_us.max(other.lag_us);
        self.late_writes = self.late_writes.saturating_add(other.late_writes);
        // The cadence of the column that wrote it last.
        if other.writes[..other.n_writes].last() > self.writes[..self.n_writes].last() {
            self.writes = other.writes;
            self.n_writes = other.n_writes;
        }
    }

    /// Whether a sample stamped at or before `t`, newer than the newest one, may still be
    /// written with the log's clock at `now`: while the clock is not past
    /// [`due_by(t)`](Self::due_by) by more than `slack`. (PX4's logger writes a topic's
    /// samples in their order: once one stamped `t` or later is written, none before it
    /// comes.)
    pub fn may_have_before(&self, t: u64, now: u64, slack: u64) -> bool {
        self.last_us < t && self.due_by(t).is_some_and(|due| now <= due + slack)
    }

    /// The latest the log's clock can be when a sample of it stamped at or before `t` (and
    /// after its newest) is written, µs; `None` when none can come.
    ///
    /// None can once it was written with the log's clock past `t`: the clock is the newest
    /// time of the records written before it, so PX4's logger copied it no earlier, and it
    /// copies a topic's newest sample: one stamped between its newest and `t` would have
    /// been written then instead. (This settles every topic PX4's logger writes in its pass
    /// over them when it resumes after a STOP.) A write more than [`MAX_LAG_US`] past `t`
    /// settles nothing: a topic stamped on a clock of its own (seconds or minutes ahead of
    /// the others, in some logs) drags the log's clock along. Else the later of:
    /// - **Its next write**, when its samples were seen waiting for it ([`LATE_WRITES`]
    ///   of them logged late). PX4's logger takes a rate-limited topic's newest sample
    ///   once an interval: one published right after a write waits for the next, an
    ///   interval after that write, however its samples' times are spaced (PX4's
    ///   `telemetry_status`: a quarter of a second to four apart, so no period of them
    ///   bounds it). The interval is the shortest time between two of its last [`WRITES`]
    ///   writes (longer ones are writes the stream lost, or intervals without a new
    ///   sample); with its first write only (when it was subscribed), [`MAX_LAG_US`]
    ///   after it.
    /// - **Its lag**, while its period says a sample may have been taken (the newest is a
    ///   period or more before `t`) and it is still publishing (its newest sample less
    ///   than a period and [`LAG_US`] old: a topic quiet for longer stopped, or is
    ///   published on a change, and PX4 logs such a sample with the first records after
    ///   it): `t` and the latest it was seen written after its time.
    pub fn due_by(&self, t: u64) -> Option<u64> {
        let writes = &self.writes[..self.n_writes];
        let last_write = writes[writes.len() - 1];
        if (t + 1..=t + MAX_LAG_US).contains(&last_write) {
            return None;
        }
        let next_write = match writes.windows(2).map(|w| w[1].saturating_sub(w[0])).min() {
            Some(interval) => (self.late_writes >= LATE_WRITES).then_some(last_write + interval),
            None => Some(writes[0] + MAX_LAG_US),
        };
        let by_interval = next_write.filter(|next| *next > t);
        let by_lag = self
            .period_us
            .filter(|p| self.last_us + p <= t && t - self.last_us <= p + LAG_US)
            .map(|_| t + self.lag_us);
        by_interval.max(by_lag)
    }

    /// The earliest the log's clock can be when its next sample is written, when its
    /// writes kept a steady cadence (PX4's logger takes a slow topic's newest sample once
    /// an interval): its last write and its cadence, less how far its writes strayed from
    /// it and [`CADENCE_JITTER_US`]. `None` for a topic written on a change, or faster than
    /// [`MIN_CADENCE_US`], or seen written fewer than 4 times: its next sample may come any
    /// time.
    ///
    /// A cadence is the shortest time between two writes; every other must be a whole
    /// number of them within [`CADENCE_JITTER_US`] (the stream lost some).
    pub fn next_write_from(&self) -> Option<u64> {
        let writes = &self.writes[..self.n_writes];
        if writes.len() < 4 {
            return None;
        }
        let gaps = || writes.windows(2).map(|w| w[1].saturating_sub(w[0]));
        let cadence = gaps().min()?;
        if cadence < MIN_CADENCE_US {
            return None;
        }
        let stray = gaps()
            .map(|gap| gap.abs_diff((gap + cadence / 2) / cadence * cadence))
            .max()?;
        (stray <= CADENCE_JITTER_US)
            .then(|| (writes[writes.len() - 1] + cadence).saturating_sub(stray + CADENCE_JITTER_US))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A topic's samples `(time, the log's clock when written)`, as the scan takes them.
    fn logged(samples: &[(u64, u64)]) -> Pace {
        let (t, clock) = samples[0];
        let mut p = Pace::first(t, clock);
        for (t, clock) in &samples[1..] {
            p.logged_late(*t, *clock, false);
        }
        p
    }

    #[test]
    fn a_pace_says_a_sample_may_still_come_only_while_its_period_and_lag_allow() {
        // Every 100 ms, each written 400 ms late (its interval); the stream stopped at
        // 1.05 s, after its write at 0.9 s.
        let p = logged(&[(300_000, 700_000), (400_000, 800_000), (500_000, 900_000)]);
        assert_eq!(p.period_us, Some(100_000));
        assert_eq!(p.late_writes, 2);
        // Its 0.6 s sample and later may come, until the log's clock is past 1.05 s by
        // its lag (and the slack): its next write (1.0 s) is due before the stop.
        assert_eq!(p.due_by(1_050_000), Some(1_450_000));
        assert!(p.may_have_before(1_050_000, 1_300_000, 50_000));
        assert!(!p.may_have_before(1_050_000, 1_600_000, 50_000));
        // A stop before its last write: that write took its newest sample, so nothing
        // stamped before the stop is left (a stop it may have lagged: its lag only).
        assert_eq!(p.due_by(550_000), None);
        // Quiet for longer than a period and the lag, and its next write long due: it
        // stopped publishing.
        assert_eq!(p.due_by(3_000_000), None);
        assert!(!p.may_have_before(3_000_000, 3_000_000, 50_000));
        // A sample stamped at or after the stop already in: nothing before it follows.
        assert!(!p.may_have_before(450_000, 1_000_000, 50_000));
        // Its first write only (when it was subscribed): for MAX_LAG_US after it.
        let first = Pace::first(900_000, 900_000);
        assert!(first.may_have_before(1_050_000, 1_050_000, 50_000));
        assert!(!first.may_have_before(4_000_000, 4_000_000, 50_000));
        // Out of order: no change.
        let mut q = p;
        q.sample(450_000);
        assert_eq!(q, p);
        // Late in the pass PX4's logger makes when it resumes: late for that, not for its
        // interval.
        let mut h = p;
        h.logged_late(600_000, 1_000_000, true);
        assert_eq!(h.late_writes, p.late_writes);
    }

    #[test]
    fn a_topic_logged_once_a_second_may_come_until_its_next_write_however_early_the_last_ones_were()
    {
        // PX4's `telemetry_status` in a real log (sample_px4_events.ulg), logged once a
        // second: its samples 88 ms, 88 ms, 0.83 s, 0.57 s, 0.32 s, 64 ms and 64 ms old
        // when written. The stream stopped at 40.954 s; the next sample, stamped 40.502 s,
        // was written at 41.314 s.
        let p = logged(&[
            (34_226_000, 34_314_000),
            (35_226_000, 35_314_000),
            (35_486_000, 36_314_000),
            (36_742_000, 37_314_000),
            (37_994_000, 38_314_000),
            (39_250_000, 39_314_000),
            (40_250_000, 40_314_000),
        ]);
        assert_eq!(p.late_writes, 3);
        // Until its next write, an interval after its last (and its lag from the stop,
        // while its period says it is publishing).
        assert_eq!(p.due_by(40_954_000), Some(40_954_000 + 828_000));
        // A stop its lag would give up on before the write: its next write holds it.
        let quick = logged(&[
            (34_226_000, 34_314_000),
            (35_226_000, 35_314_000),
            (36_226_000, 36_414_000),
            (37_226_000, 37_414_000),
        ]);
        assert_eq!(quick.lag_us, 188_000);
        assert_eq!(quick.due_by(38_000_000), Some(38_414_000));
        assert!(quick.may_have_before(38_000_000, 38_414_000, CADENCE_JITTER_US));
        assert!(!quick.may_have_before(38_000_000, 38_500_000, CADENCE_JITTER_US));
        // Its write after the stop, of a sample stamped before it (taken), settles it.
        let mut after = quick;
        after.logged(37_900_000, 38_414_000);
        assert_eq!(after.due_by(38_000_000), None);
    }

    /// A topic written at the log's clock `writes`, each sample 1.5 s old.
    fn written(writes: &[u64]) -> Pace {
        let mut p = Pace::first(writes[0] - 1_500_000, writes[0]);
        for w in &writes[1..] {
            p.logged(w - 1_500_000, *w);
        }
        p
    }

    #[test]
    fn a_steady_topics_next_write_is_told_by_its_cadence_and_no_other_topics_is() {
        // Every 2 s, 4 ms late once; the stream lost the write at 8 s.
        let p = written(&[2_000_000, 4_000_000, 6_004_000, 10_000_000, 12_000_000]);
        // From its last write, a cadence on, less the 4 ms it strayed and the jitter.
        assert_eq!(
            p.next_write_from(),
            Some(14_000_000 - 4_000 - CADENCE_JITTER_US)
        );
        // Only its last writes count.
        let many: Vec<u64> = (2..=21).map(|k| k * 1_000_000).collect();
        assert_eq!(
            written(&many).next_write_from(),
            Some(22_000_000 - CADENCE_JITTER_US)
        );
        // Written on a change in between: its next sample may come any time.
        assert_eq!(
            written(&[2_000_000, 4_000_000, 4_600_000, 6_000_000, 8_000_000]).next_write_from(),
            None
        );
        // Too few writes to tell, or too fast to be worth it.
        assert_eq!(
            written(&[2_000_000, 4_000_000, 6_000_000]).next_write_from(),
            None
        );
        let fast: Vec<u64> = (1..=10).map(|k| k * 50_000 + 2_000_000).collect();
        assert_eq!(written(&fast).next_write_from(), None);
        // A sample logged again (the same time) is no write of a new one.
        let mut q = p;
        q.logged(q.last_us, 13_000_000);
        assert_eq!(q.next_write_from(), p.next_write_from());
    }
}
