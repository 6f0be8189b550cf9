//! What goes wrong in one simulated run, drawn from its seed: the vehicle, its flight, the
//! link's steady impairment and a list of timed faults.
//!
//! Schedules come in a "swarm" (as TigerBeetle's VOPR draws them): each seed turns on a
//! random subset of the fault kinds and leans on one of them, so that some seeds are all
//! outages, some all reboots, some a bit of everything; a fault kind that is always drawn
//! thinly never piles up enough to hit the rare paths. Some seeds are storms, their faults
//! all within seconds, where they meet; some sign every frame, with the companion
//! computer's clock right or wrong.

use std::time::Duration;

use ulog_recv::sim::Impairment;

use super::bucket::BucketFaults;

/// Which autopilot the simulated vehicle is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Autopilot {
    Px4,
    ArduPilot,
}

/// One kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// Frames from the vehicle lost (`level`: the probability).
    Loss,
    /// Frames from the vehicle arriving twice.
    Duplicate,
    /// Frames from the vehicle held back behind later ones.
    Reorder,
    /// Frames from the vehicle arriving with a byte changed.
    Corrupt,
    /// Frames to the vehicle (acks, commands) lost.
    UplinkLoss,
    /// Nothing gets through either way.
    Outage,
    /// The vehicle reboots and is silent for the fault's length.
    VehicleReboot,
    /// The receiver's process dies and starts again (its session begins anew).
    DaemonRestart,
    /// Another sender on the receiver's socket sends junk datagrams.
    Junk,
    /// The companion computer loses power: the daemon dies, and the disk keeps only what
    /// was synced (drawn with the store on disk only, after the rest of the schedule).
    PowerCut,
    /// Another program takes the disk's room for the fault's length (`level`: the bytes it
    /// leaves free): the store's writes fail until there is room again (drawn with the
    /// store on disk only, last).
    DiskFull,
    /// The store is stuck in a slow sync (an SD card under load) for the fault's length:
    /// what the session receives meanwhile waits in the store's queue (drawn with the store
    /// on disk only, last).
    SlowDisk,
    /// The disk fails every sync for the fault's length (an I/O error: what was written
    /// since a file's last good sync may never reach the disk) (drawn with the store on
    /// disk only, last).
    SyncFails,
}

impl FaultKind {
    pub const ALL: [FaultKind; 9] = [
        FaultKind::Loss,
        FaultKind::Duplicate,
        FaultKind::Reorder,
        FaultKind::Corrupt,
        FaultKind::UplinkLoss,
        FaultKind::Outage,
        FaultKind::VehicleReboot,
        FaultKind::DaemonRestart,
        FaultKind::Junk,
    ];
    /// The kinds of fault on the store's disk, drawn apart from [`ALL`](Self::ALL)'s swarm.
    pub const DISK: [FaultKind; 4] = [
        FaultKind::PowerCut,
        FaultKind::DiskFull,
        FaultKind::SlowDisk,
        FaultKind::SyncFails,
    ];

    /// A spell of link trouble (a changed impairment), not an event.
    pub fn is_link(self) -> bool {
        matches!(
            self,
            FaultKind::Loss
                | FaultKind::Duplicate
                | FaultKind::Reorder
                | FaultKind::Corrupt
                | FaultKind::UplinkLoss
                | FaultKind::Outage
        )
    }
}

/// A fault from `at` (simulated time since power-up) for `len`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fault {
    pub kind: FaultKind,
    pub at: Duration,
    pub len: Duration,
    /// The probability of a link fault; a count for junk.
    pub level: f64,
}

impl Fault {
    fn active(&self, t: Duration) -> bool {
        t >= self.at && t < self.at + self.len
    }
}

/// Everything a run does that its seed decides, except the link's own dice (seeded from
/// the same seed, inside the simulated vehicle).
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    pub seed: u64,
    pub autopilot: Autopilot,
    /// PX4: seconds of the synthetic flight; ArduPilot: which of ArduPilot's own logs, and
    /// the share of it flown.
    pub flight_s: u32,
    pub ardupilot_log: usize,
    pub ardupilot_share: f64,
    /// The link's rate, bytes per second.
    pub link_rate: u64,
    /// ArduPilot's buffer, in blocks (small: it drops at the source).
    pub buffer_blocks: usize,
    /// The link between faults.
    pub base: Impairment,
    pub faults: Vec<Fault>,
    /// The store's splits: at most this many bytes, or this much log time (µs).
    pub split_bytes: Option<u64>,
    pub split_us: Option<u64>,
    /// A live-socket client subscribed to every topic (one seed in four: rendering every
    /// sample as JSON costs).
    pub live: bool,
    /// The store writes each log to files (one seed in four: files cost).
    pub disk: bool,
    /// With the store on disk, one seed in two: the uploader sends the sessions to a bucket
    /// that fails so.
    pub bucket: Option<BucketFaults>,
    /// With the store on disk, one seed in three: a disk budget (`max-total`) of this share
    /// of the vehicle's log.
    pub budget_share: Option<f64>,
    /// The budget is `min-free` on the folder's own filesystem (a tmpfs: with a full disk
    /// only, one such seed in two), free space of all but the budget, not `max-total`.
    pub budget_min_free: bool,
    /// PX4 with the store on disk, one seed in two (flights of minutes, not the long ones):
    /// once the flight is over, the daemon's `--fill auto` fills its sessions from the
    /// vehicle's SD log.
    pub fill: Option<FillPlan>,
    /// The store's queue (`--store-queue`): the daemon's default, small in seeds whose store
    /// stalls (so that some stalls fill it).
    pub store_queue: usize,
    /// One seed in three: the vehicle and the receiver sign every frame (MAVLink 2
    /// signing), and the junk datagrams include replays of the vehicle's own frames and
    /// frames forged with another key.
    pub signing: Option<CompanionClock>,
    /// The faults all fall within [`STORM`] (one seed in four with two faults or more).
    pub storm: bool,
    /// PX4 with the store on disk, no slow sync, two seeds in three: the store
    /// keeps the accelerometers in a column of their own and the ESC status in an event
    /// buffer, with triggers and events asked for.
    pub columns: Option<ColumnPlan>,
}

/// The columns, the event buffer and what makes its events ([`super::columns`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnPlan {
    /// The buffer's log time before and after an event, µs.
    pub before_us: u64,
    pub after_us: u64,
    /// The most bytes of samples it holds: the daemon's default, or (one plan in four) so
    /// few that it drops some before their time.
    pub max_bytes: u64,
    /// A field condition fires when the first ESC's speed rises past this (rpm).
    pub rpm_over: i32,
    /// Events asked for (`ulog-recv event`), simulated time since power-up.
    pub requests: Vec<Duration>,
}

/// How long a storm's faults take to begin, all of them.
pub const STORM: Duration = Duration::from_secs(10);

/// With signing: the companion computer's wall clock beside the vehicle's (the vehicle's
/// signing clock starts at the true time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompanionClock {
    /// The true time (NTP, or a GPS-fed clock).
    True,
    /// Behind by this much (a clock without NTP yet, up to a day).
    Behind(Duration),
    /// Ahead by this much, less than the minute a signing stream new to the vehicle may be
    /// behind it.
    Ahead(Duration),
    /// At 1970 after each boot (a computer without a real-time clock, before NTP).
    Unset,
}

/// How a fill goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FillPlan {
    /// The power fails as the fill asks for its operation number this (from 0), when power
    /// cuts are drawn, one fill in two; the daemon starts again and fills what is not done.
    pub power_cut_at: Option<u32>,
}

/// The daemon's `--store-queue` when none is given.
const DEFAULT_STORE_QUEUE: usize = 32 << 20;

/// The faults a schedule draws at most.
const MAX_FAULTS: usize = 12;

impl Schedule {
    /// The schedule of `seed`. `ardupilot_logs`: how many of ArduPilot's logs there are to
    /// fly (0: PX4 only).
    pub fn draw(seed: u64, ardupilot_logs: usize) -> Self {
        let every: Vec<FaultKind> = (FaultKind::ALL.into_iter())
            .chain(FaultKind::DISK)
            .collect();
        Self::draw_of(seed, ardupilot_logs, &every)
    }

    /// The schedule of `seed` with faults of `kinds` only: the vehicle, its flight and its
    /// link are the seed's as with every kind; the faults, and what is drawn after them, are
    /// not.
    pub fn draw_of(seed: u64, ardupilot_logs: usize, kinds: &[FaultKind]) -> Self {
        let mut rng = fastrand::Rng::with_seed(seed ^ 0x5eed_5c4e_d01e_0000);
        let autopilot = if ardupilot_logs > 0 && rng.bool() {
            Autopilot::ArduPilot
        } else {
            Autopilot::Px4
        };
        // Some flights are long enough for PX4's 16-bit chunk sequence to wrap (it starts at
        // 0 with every log: 65,536 chunks are 16 MB).
        let flight_s = if rng.u8(..40) == 0 {
            rng.u32(2_300..=2_500)
        } else {
            rng.u32(120..=300)
        };
        let link_rate = match autopilot {
            Autopilot::Px4 => rng.u64(12_000..=60_000),
            Autopilot::ArduPilot => rng.u64(20_000..=80_000),
        };
        let base = if rng.u8(..4) == 0 {
            Impairment::NONE
        } else {
            Impairment {
                loss: rng.f64() * 0.02,
                duplicate: rng.f64() * 0.01,
                reorder: rng.f64() * 0.02,
                reorder_depth: rng.usize(1..=8),
                uplink_loss: rng.f64() * 0.02,
                ..Impairment::NONE
            }
        };
        // The swarm: a subset of the kinds, one of them heavy.
        let enabled: Vec<FaultKind> = FaultKind::ALL
            .into_iter()
            .filter(|_| rng.u8(..3) != 0)
            .filter(|k| kinds.contains(k))
            .collect();
        let heavy = (!enabled.is_empty()).then(|| enabled[rng.usize(..enabled.len())]);
        let count = if enabled.is_empty() {
            0
        } else {
            rng.usize(0..=MAX_FAULTS)
        };
        // Faults fall in the first minutes, while the log streams.
        let span_ms = match autopilot {
            Autopilot::Px4 => 60_000,
            Autopilot::ArduPilot => 120_000,
        };
        let mut faults: Vec<Fault> = (0..count)
            .map(|_| {
                let kind = match heavy {
                    Some(h) if rng.bool() => h,
                    _ => enabled[rng.usize(..enabled.len())],
                };
                draw_fault(&mut rng, kind, span_ms)
            })
            .collect();
        faults.sort_by_key(|f| f.at);
        let ardupilot_log = rng.usize(..ardupilot_logs.max(1));
        let ardupilot_share = 0.3 + 0.4 * rng.f64();
        let buffer_blocks = rng.usize(8..=64);
        let (split_bytes, split_us) = if rng.bool() {
            (Some(rng.u64(32 << 10..1 << 20)), None)
        } else {
            (None, Some(rng.u64(5..=60) * 1_000_000))
        };
        let live = rng.u8(..4) == 0;
        let disk = rng.u8(..4) == 0;
        let mut bucket = (disk && rng.bool()).then(|| BucketFaults::draw(&mut rng));
        let budget_share = (disk && rng.u8(..3) == 0).then(|| 0.3 + 1.2 * rng.f64());
        // Power cuts, with the store on disk one seed in two; some seeds storms of them.
        if disk && kinds.contains(&FaultKind::PowerCut) && rng.bool() {
            let cuts = if rng.u8(..4) == 0 {
                rng.usize(5..=10)
            } else {
                rng.usize(1..=4)
            };
            for _ in 0..cuts {
                faults.push(draw_fault(&mut rng, FaultKind::PowerCut, span_ms));
            }
            faults.sort_by_key(|f| f.at);
        }
        // Not in the long flights: a fill reads the SD log to its end for each session a
        // restart cut short, and 16 MB over FTP cost seconds of CPU each.
        let fill =
            (disk && autopilot == Autopilot::Px4 && flight_s <= 300 && rng.bool()).then(|| {
                FillPlan {
                    power_cut_at: (kinds.contains(&FaultKind::PowerCut) && rng.bool())
                        .then(|| rng.u32(..60)),
                }
            });
        // The disk full for a while, with the store on disk one seed in five.
        if disk && kinds.contains(&FaultKind::DiskFull) && rng.u8(..5) == 0 {
            for _ in 0..rng.usize(1..=3) {
                faults.push(draw_fault(&mut rng, FaultKind::DiskFull, span_ms));
            }
            faults.sort_by_key(|f| f.at);
        }
        // Slow syncs, with the store on disk one seed in four, and a queue of 64 KiB (the
        // least the daemon takes) to 4 MiB.
        let mut store_queue = DEFAULT_STORE_QUEUE;
        if disk && kinds.contains(&FaultKind::SlowDisk) && rng.u8(..4) == 0 {
            for _ in 0..rng.usize(1..=4) {
                faults.push(draw_fault(&mut rng, FaultKind::SlowDisk, span_ms));
            }
            faults.sort_by_key(|f| f.at);
            store_queue = (64 << 10) << rng.u32(..=6);
        }
        // Failing syncs, with the store on disk one seed in five.
        if disk && kinds.contains(&FaultKind::SyncFails) && rng.u8(..5) == 0 {
            for _ in 0..rng.usize(1..=3) {
                faults.push(draw_fault(&mut rng, FaultKind::SyncFails, span_ms));
            }
            faults.sort_by_key(|f| f.at);
        }
        let signing = (rng.u8(..3) == 0).then(|| match rng.u8(..4) {
            0 => CompanionClock::True,
            1 => CompanionClock::Behind(Duration::from_secs(rng.u64(1..86_400))),
            2 => CompanionClock::Ahead(Duration::from_millis(rng.u64(1..50_000))),
            _ => CompanionClock::Unset,
        });
        // One seed in four is a storm: its faults, in their order, all within ten seconds,
        // where they meet (a stall, a reboot and a power cut one after the other).
        let storm = rng.u8(..4) == 0 && faults.len() > 1;
        if storm {
            let first = Duration::from_millis(1_000);
            let scale = STORM.as_secs_f64() / Duration::from_millis(span_ms - 1_000).as_secs_f64();
            for f in &mut faults {
                f.at = first + (f.at - first).mul_f64(scale);
            }
        }
        // Slow answers, one bucket in two: a request's chance of 5 to 50 %.
        if let Some(b) = &mut bucket
            && rng.bool()
        {
            b.slow = 0.05 + 0.45 * rng.f64();
        }
        let budget_min_free = budget_share.is_some()
            && faults.iter().any(|f| f.kind == FaultKind::DiskFull)
            && rng.bool();
        // (Drawn last: the seeds' schedules before columns came stay as they were.)
        // Not where the store stalls: a sync round over three columns takes longer, and what
        // the store holds after a dropout of its own is written before one completes, out
        // of the sync rounds' check (which a store holding it too long fails by seed 142).
        let stalls = faults.iter().any(|f| f.kind == FaultKind::SlowDisk);
        let columns =
            (disk && autopilot == Autopilot::Px4 && !stalls && rng.u8(..3) != 0).then(|| {
                let mut requests: Vec<Duration> = (0..rng.usize(0..=4))
                    .map(|_| Duration::from_millis(rng.u64(1_000..span_ms * 3)))
                    .collect();
                requests.sort();
                ColumnPlan {
                    before_us: rng.u64(500..=10_000) * 1_000,
                    after_us: rng.u64(200..=5_000) * 1_000,
                    max_bytes: match rng.u8(..4) {
                        0 => rng.u64(256..=8_192),
                        _ => ulog_recv::store::events::DEFAULT_BUFFER_BYTES,
                    },
                    rpm_over: rng.i32(4_000..=11_000),
                    requests,
                }
            });
        Self {
            seed,
            autopilot,
            flight_s,
            ardupilot_log,
            ardupilot_share,
            link_rate,
            buffer_blocks,
            base,
            faults,
            split_bytes,
            split_us,
            live,
            disk,
            bucket,
            budget_share,
            budget_min_free,
            fill,
            store_queue,
            signing,
            storm,
            columns,
        }
    }

    /// The same schedule with only the faults at `keep` (indices into `faults`).
    pub fn keeping(&self, keep: &[usize]) -> Self {
        Self {
            faults: keep.iter().map(|&i| self.faults[i]).collect(),
            ..self.clone()
        }
    }

    /// The link's impairment at `t`: the base, worsened by every link fault active then
    /// (each probability the largest of them).
    pub fn impairment_at(&self, t: Duration) -> Impairment {
        let mut imp = self.base;
        for f in self
            .faults
            .iter()
            .filter(|f| f.kind.is_link() && f.active(t))
        {
            match f.kind {
                FaultKind::Loss => imp.loss = imp.loss.max(f.level),
                FaultKind::Duplicate => imp.duplicate = imp.duplicate.max(f.level),
                FaultKind::Reorder => {
                    imp.reorder = imp.reorder.max(f.level);
                    imp.reorder_depth = imp.reorder_depth.max(16);
                }
                FaultKind::Corrupt => imp.corrupt = imp.corrupt.max(f.level),
                FaultKind::UplinkLoss => imp.uplink_loss = imp.uplink_loss.max(f.level),
                FaultKind::Outage => {
                    imp.loss = 1.0;
                    imp.uplink_loss = 1.0;
                }
                _ => {}
            }
        }
        imp
    }

    /// The times the link's impairment changes, in order.
    pub fn link_changes(&self) -> Vec<Duration> {
        let mut t: Vec<Duration> = (self.faults.iter())
            .filter(|f| f.kind.is_link())
            .flat_map(|f| [f.at, f.at + f.len])
            .collect();
        t.sort();
        t.dedup();
        t
    }

    /// Whether a fault fills the disk.
    pub fn fills_disk(&self) -> bool {
        self.faults.iter().any(|f| f.kind == FaultKind::DiskFull)
    }

    /// The faults that are events (reboots, restarts, junk, a full disk), in time order.
    pub fn events(&self) -> Vec<Fault> {
        (self.faults.iter())
            .filter(|f| !f.kind.is_link())
            .copied()
            .collect()
    }
}

fn draw_fault(rng: &mut fastrand::Rng, kind: FaultKind, span_ms: u64) -> Fault {
    let at = Duration::from_millis(rng.u64(1_000..span_ms));
    let ms = |lo: u64, hi: u64, rng: &mut fastrand::Rng| Duration::from_millis(rng.u64(lo..hi));
    let (len, level) = match kind {
        FaultKind::Loss => (ms(200, 20_000, rng), 0.05 + 0.6 * rng.f64()),
        FaultKind::Duplicate => (ms(200, 20_000, rng), 0.05 + 0.5 * rng.f64()),
        FaultKind::Reorder => (ms(200, 20_000, rng), 0.05 + 0.5 * rng.f64()),
        FaultKind::Corrupt => (ms(200, 20_000, rng), 0.01 + 0.3 * rng.f64()),
        FaultKind::UplinkLoss => (ms(200, 20_000, rng), 0.05 + 0.9 * rng.f64()),
        // Short ones, and some longer than ArduPilot's 10 s client timeout and PX4's 2.5 s
        // of ack tries.
        FaultKind::Outage if rng.bool() => (ms(100, 3_000, rng), 1.0),
        FaultKind::Outage => (ms(3_000, 25_000, rng), 1.0),
        FaultKind::VehicleReboot => (ms(500, 15_000, rng), 0.0),
        FaultKind::DaemonRestart | FaultKind::PowerCut => (Duration::ZERO, 0.0),
        FaultKind::Junk => (Duration::ZERO, rng.u32(1..200) as f64),
        // Full to the last bytes, or with a page or a few left (a split's preamble may fit).
        FaultKind::DiskFull => (ms(500, 40_000, rng), rng.u64(..64 << 10) as f64),
        // From a hitch to as long as a card's garbage collection can take.
        FaultKind::SlowDisk => (ms(200, 30_000, rng), 0.0),
        // One sync, or every sync for seconds.
        FaultKind::SyncFails => (ms(1, 5_000, rng), 0.0),
    };
    Fault {
        kind,
        at,
        len,
        level,
    }
}

#[test]
fn a_seed_draws_one_schedule_and_the_swarm_draws_every_kind() {
    assert_eq!(Schedule::draw(7, 2), Schedule::draw(7, 2));
    let schedules: Vec<Schedule> = (0..200).map(|s| Schedule::draw(s, 2)).collect();
    for kind in FaultKind::ALL {
        let with = schedules
            .iter()
            .filter(|s| s.faults.iter().any(|f| f.kind == kind))
            .count();
        assert!(with > 20, "{kind:?} in {with} of 200 schedules");
    }
    let ardupilot = schedules
        .iter()
        .filter(|s| s.autopilot == Autopilot::ArduPilot)
        .count();
    assert!((60..140).contains(&ardupilot), "{ardupilot}");
    let cut = |s: &&Schedule| s.faults.iter().any(|f| f.kind == FaultKind::PowerCut);
    let power_cuts = schedules.iter().filter(cut).count();
    assert!(
        power_cuts > 10,
        "power cuts in {power_cuts} of 200 schedules"
    );
    assert!(schedules.iter().filter(cut).all(|s| s.disk));
    // The disk's other faults, with the store on disk only.
    for kind in [
        FaultKind::DiskFull,
        FaultKind::SlowDisk,
        FaultKind::SyncFails,
    ] {
        let with: Vec<&Schedule> = (schedules.iter())
            .filter(|s| s.faults.iter().any(|f| f.kind == kind))
            .collect();
        assert!(
            with.len() >= 4,
            "{kind:?} in {} of 200 schedules",
            with.len()
        );
        assert!(
            with.iter().all(|s| s.disk),
            "{kind:?} without the store on disk"
        );
    }
    // Some seeds are calm, some are storms.
    assert!(schedules.iter().any(|s| s.faults.is_empty()));
    assert!(schedules.iter().any(|s| s.faults.len() >= 10));
    let storms: Vec<&Schedule> = schedules.iter().filter(|s| s.storm).collect();
    assert!(storms.len() > 20, "{} storms", storms.len());
    let first = Duration::from_secs(1);
    for s in &storms {
        assert!(
            s.faults
                .iter()
                .all(|f| f.at >= first && f.at <= first + STORM)
        );
    }
    // Signing in a third of the seeds, with every kind of companion clock.
    let clocks: Vec<CompanionClock> = schedules.iter().filter_map(|s| s.signing).collect();
    assert!(
        (40..100).contains(&clocks.len()),
        "{} signing",
        clocks.len()
    );
    for kind in [
        |c: &CompanionClock| matches!(c, CompanionClock::True),
        |c: &CompanionClock| matches!(c, CompanionClock::Behind(_)),
        |c: &CompanionClock| matches!(c, CompanionClock::Ahead(d) if *d < Duration::from_secs(60)),
        |c: &CompanionClock| matches!(c, CompanionClock::Unset),
    ] {
        assert!(clocks.iter().any(kind), "{clocks:?}");
    }
    // A `min-free` budget now and then, with a full disk only (its folder on a tmpfs).
    let min_free: Vec<Schedule> = (0..1000)
        .map(|s| Schedule::draw(s, 2))
        .filter(|s| s.budget_min_free)
        .collect();
    assert!(min_free.len() >= 3, "{} min-free budgets", min_free.len());
    assert!(
        min_free
            .iter()
            .all(|s| s.fills_disk() && s.budget_share.is_some())
    );
    // Slow answers from half the buckets.
    let buckets: Vec<_> = schedules.iter().filter_map(|s| s.bucket).collect();
    let slow = buckets.iter().filter(|b| b.slow > 0.0).count();
    assert!(
        slow >= 3 && slow < buckets.len(),
        "slow answers from {slow} of {} buckets",
        buckets.len()
    );
}
