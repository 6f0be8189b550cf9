//! Deliberate bugs, planted to measure what the whole-receiver simulation catches
//! (`tests/it/simulation/`): each is a mistake a receiver could plausibly make, made at the
//! one place the code could make it. All are off unless a test turns one on, and then only
//! for its own thread ([`plant`]); the daemon never turns one on.
//!
//! A plant point asks [`is`] (a thread-local read) and, when its bug is planted, does the
//! wrong thing instead of the right one.

use std::cell::Cell;

/// A bug the simulation must catch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Bug {
    /// PX4's 16-bit chunk sequence numbers compared without their wrap: a duplicate from
    /// before the wrap is taken for a chunk far ahead (and not dropped), an early chunk from
    /// after it for a late one (and dropped).
    SequenceCompareWithoutWrap,
    /// A gap in PX4's chunks is passed over without its dropout mark: the log loses data
    /// silently.
    GapWithoutDropout,
    /// An ArduPilot block that arrives ahead of a hole is acked, then thrown away: the
    /// vehicle was told it is safe, and it is never written.
    AckedBlockDroppedWhenAhead,
    /// The repair after a crash looks only at the splits the manifest lists: a split begun
    /// after the manifest's last word stays out of it, open, and the end of the log with it.
    RepairOnlyListedSplits,
    /// The upload journal records a file as in the bucket before its upload has succeeded:
    /// an upload that then fails is never tried again, and the file is never there.
    JournalAheadOfUpload,
    /// The disk budget deletes the newest closed session first rather than the oldest: the
    /// flight just landed goes before last week's.
    BudgetDeletesNewestFirst,
    /// The open split's sync is skipped: the round completes, and what it should have made
    /// durable is in the page cache only, lost to a power cut.
    SplitSyncSkipped,
    /// A split is closed, and the manifest calls it closed with its checksum, without its
    /// sync: a power cut can cut it short, and leave a later split's bytes after the hole.
    SplitClosedUnsynced,
    /// A split whose sync failed (an I/O error) is closed with all it held: what the failed
    /// sync lost (Linux marks those pages clean, and no later sync writes them) is in its
    /// checksum, and a power cut leaves zeros there.
    FailedSyncKeptWhole,
    /// The store holds what comes after a dropout of its own (samples its queue dropped)
    /// until the next sample, out of its syncs' reach: a vehicle gone quiet and a power cut
    /// take it, though sync rounds passed.
    StoreHoldsAfterOwnGap,
    /// A start's MAVLink signing clock begins at the wall clock, not above the reservation
    /// on disk: a companion computer whose clock is behind the vehicle's (or starts at
    /// 1970) signs with timestamps it already used, and the vehicle refuses them as
    /// replays.
    SigningClockFromWallClock,
    /// A signed frame is taken whatever its timestamp: a replayed capture of the vehicle's
    /// own frames (an old chunk, an old command's answer) passes as new.
    ReplayAccepted,
    /// Paused writing waits, once the disk has room again, for the budget's `min-free` as
    /// well: with the open session alone larger than `min-free` allows, it never resumes,
    /// and the rest of the flight is lost with room on the disk.
    ResumeWaitsForMinFree,
    /// An event's window in an event buffer writes only what comes after the event: the
    /// samples held from before it, what the buffer is for, are never written.
    WindowSkipsHeldSamples,
    /// The repair after a crash closes or removes a column's splits and calls the session
    /// closed without making the column's folder durable: a power cut takes a split's name
    /// from under the manifest that lists it, or brings an empty one back beside a manifest
    /// that no longer lists it nor repairs it again.
    ColumnRepairUnsynced,
}

impl Bug {
    pub const ALL: [Bug; 15] = [
        Bug::SequenceCompareWithoutWrap,
        Bug::GapWithoutDropout,
        Bug::AckedBlockDroppedWhenAhead,
        Bug::RepairOnlyListedSplits,
        Bug::JournalAheadOfUpload,
        Bug::BudgetDeletesNewestFirst,
        Bug::SplitSyncSkipped,
        Bug::SplitClosedUnsynced,
        Bug::FailedSyncKeptWhole,
        Bug::StoreHoldsAfterOwnGap,
        Bug::SigningClockFromWallClock,
        Bug::ReplayAccepted,
        Bug::ResumeWaitsForMinFree,
        Bug::WindowSkipsHeldSamples,
        Bug::ColumnRepairUnsynced,
    ];
}

thread_local! {
    static PLANTED: Cell<Option<Bug>> = const { Cell::new(None) };
}

/// Plants `bug` (or none) in this thread's receiver code until the guard is dropped.
#[must_use = "the bug is planted only while the guard lives"]
pub fn plant(bug: Option<Bug>) -> Planted {
    let before = PLANTED.with(|p| p.replace(bug));
    Planted { before }
}

/// Whether `bug` is planted in this thread.
#[inline]
pub fn is(bug: Bug) -> bool {
    PLANTED.with(|p| p.get() == Some(bug))
}

/// Keeps a bug planted; dropping it restores what was planted before.
#[derive(Debug)]
pub struct Planted {
    before: Option<Bug>,
}

impl Drop for Planted {
    fn drop(&mut self) {
        PLANTED.with(|p| p.set(self.before));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bug_is_planted_for_its_guard_only_and_its_thread_only() {
        assert!(!is(Bug::GapWithoutDropout));
        {
            let _g = plant(Some(Bug::GapWithoutDropout));
            assert!(is(Bug::GapWithoutDropout));
            assert!(!is(Bug::SequenceCompareWithoutWrap));
            let other = std::thread::spawn(|| is(Bug::GapWithoutDropout));
            assert!(!other.join().unwrap());
        }
        assert!(!is(Bug::GapWithoutDropout));
    }
}
