//! The receiver in one deterministic simulation, driven by a seed: a simulated PX4 or
//! ArduPilot streams a flight of minutes through a link whose faults a seeded [`schedule`]
//! draws (loss, duplicates, reordering, corruption, lost acks, outages, vehicle reboots,
//! receiver restarts, junk datagrams, with MAVLink signing or without), alone and together;
//! the link session receives it in simulated time ([`world`]), and, as the schedule says, the
//! store writes it to files ([`disk`]) on a disk whose power cuts keep only what was synced
//! ([`power`]), in columns and an event buffer in some seeds ([`columns`]), the uploader
//! sends those to a failing, slow bucket ([`bucket`]) and the live socket and the Foxglove
//! server ([`foxglove`]) publish it; after the flight, the fill takes what the link lost
//! from the vehicle's SD log ([`fill`]); [`checks`] judges what it handed out against what
//! the vehicle wrote. The same seed runs the same, event for event.
//!
//! - `SIM_SEEDS=N` runs N seeds (1,000 by default) from `SIM_BASE` (0 by default).
//! - `SIM_SEED=S` runs seed S alone; `SIM_FAULTS=i,j` keeps only those faults of its
//!   schedule (what a failure's shrinking printed).
//! - `SIM_KINDS=Outage,Junk` draws only those kinds of fault.
//! - A seed that ever failed goes into `tests/simulation-seeds.txt` and runs every time.
//! - Planted bugs ([`ulog_recv::planted`]) measure what the simulation catches.

mod bucket;
mod checks;
mod columns;
mod disk;
mod fill;
mod foxglove;
mod power;
mod schedule;
mod splits;
mod store_thread;
mod world;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ulog_recv::planted::{Bug, plant};
use ulog_recv::store::events::EventSource;

use schedule::{Autopilot, FaultKind, Schedule};
use world::{ArduPilotLogs, Outcome, run};

/// The bug `SIM_BUG` names (as [`Bug`]'s variants), if any.
fn planted_by_env() -> Option<Bug> {
    let name = std::env::var("SIM_BUG").ok()?;
    let bug = Bug::ALL.into_iter().find(|b| format!("{b:?}") == name);
    Some(bug.unwrap_or_else(|| panic!("SIM_BUG={name}: not a planted bug ({:?})", Bug::ALL)))
}

/// Seeds per run unless `SIM_SEEDS` says otherwise.
const DEFAULT_SEEDS: u64 = 1000;

/// ArduPilot's own logs' bytes (none without `../shared`: said loudly, and CI fails).
fn ardupilot_logs() -> Vec<Arc<Vec<u8>>> {
    crate::common::ardupilot::ardupilot_logs()
        .unwrap_or_default()
        .iter()
        .map(|p| Arc::new(std::fs::read(p).unwrap()))
        .collect()
}

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    Some(
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v}: not a number")),
    )
}

/// One seed's run and judgement; a panic in the receiver is a failure too.
fn judge(schedule: &Schedule, logs: &ArduPilotLogs) -> (Result<(), String>, Option<Outcome>) {
    let ran =
        quietly(|| std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(schedule, logs))));
    match ran {
        Ok(outcome) => (checks::check(&outcome, logs), Some(outcome)),
        Err(panic) => {
            let what = (panic.downcast_ref::<String>().cloned())
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            (Err(format!("panicked: {what}")), None)
        }
    }
}

/// The fewest of `schedule`'s faults that still fail (one at a time taken away while the
/// failure stays); their indices.
fn shrink(schedule: &Schedule, logs: &ArduPilotLogs) -> Vec<usize> {
    let mut keep: Vec<usize> = (0..schedule.faults.len()).collect();
    let mut i = 0;
    while i < keep.len() {
        let mut fewer = keep.clone();
        fewer.remove(i);
        if judge(&schedule.keeping(&fewer), logs).0.is_err() {
            keep = fewer;
        } else {
            i += 1;
        }
    }
    keep
}

/// A failed seed, shrunk, and the command that replays it.
fn report(seed: u64, error: &str, logs: &ArduPilotLogs) -> String {
    let schedule = schedule_of(seed, logs);
    let keep = shrink(&schedule, logs);
    let kept: Vec<String> = keep.iter().map(|i| i.to_string()).collect();
    let faults: Vec<String> = keep
        .iter()
        .map(|&i| format!("  {:?}", schedule.faults[i]))
        .collect();
    format!(
        "seed {seed} ({:?}): {error}\n shrunk to {} of {} faults:\n{}\n replay: SIM_SEED={seed} \
         SIM_FAULTS={} cargo test --test it simulation::seeds -- --nocapture",
        schedule.autopilot,
        keep.len(),
        schedule.faults.len(),
        faults.join("\n"),
        kept.join(",")
    )
}

/// The schedule of `seed`, of the fault kinds `SIM_KINDS` names (comma-separated, as
/// [`FaultKind`](schedule::FaultKind)'s variants), else of all.
fn schedule_of(seed: u64, logs: &ArduPilotLogs) -> Schedule {
    let Ok(names) = std::env::var("SIM_KINDS") else {
        return Schedule::draw(seed, logs.len());
    };
    let kinds: Vec<_> = names
        .split(',')
        .map(|n| {
            (schedule::FaultKind::ALL.into_iter())
                .chain(schedule::FaultKind::DISK)
                .find(|k| format!("{k:?}") == n.trim())
                .unwrap_or_else(|| panic!("SIM_KINDS: no fault kind {n:?}"))
        })
        .collect();
    Schedule::draw_of(seed, logs.len(), &kinds)
}

/// What a batch of seeds came to.
#[derive(Debug, Default)]
struct Batch {
    failures: Vec<(u64, String)>,
    simulated: Duration,
    faults: u64,
    ardupilot: u64,
    /// Seeds whose store wrote files, and whose live client was sent every sample.
    on_disk: u64,
    live: u64,
    /// Seeds whose store kept columns and an event buffer, and the events it handed out
    /// (asked for, triggered, found by the diagnostics).
    columns: u64,
    events: [u64; 3],
    /// Seeds whose uploader sent the sessions to a failing bucket, and the bucket's faults.
    uploads: u64,
    bucket_faults: u64,
    slow_answers: u64,
    passes_died: u64,
    /// Seeds with a disk budget, and the sessions it deleted.
    budgets: u64,
    min_free: u64,
    budget_deletions: u64,
    /// Splits the store's splitter wrote.
    splits: u64,
    /// Power cuts that came while the vehicle's log streamed.
    power_cuts: u64,
    /// Spells of a full disk, and the sessions whose writing one paused.
    disk_fulls: u64,
    paused: u64,
    /// Spells of a slow sync, and the samples the store's queue stripped meanwhile.
    stalls: u64,
    stripped: u64,
    /// Spells of failing syncs.
    sync_failures: u64,
    /// The most log bytes that waited for the store past its queue's bound, in any seed.
    past_bound: u64,
    /// Fills after the flight that ran to their end, the records they recovered, and the
    /// power cuts that came in a fill.
    fills: u64,
    fill_records: u64,
    fill_power_cuts: u64,
    /// Seeds signing both ways; the junk's replays of the vehicle's frames and forgeries;
    /// the frames the receiver refused for their signature or as replays.
    signing: u64,
    /// Seeds whose faults all came within ten seconds.
    storms: u64,
    replays: u64,
    forged: u64,
    refused_signed: u64,
}

/// Runs `seeds` on every core; stops early once `stop_after` seeds failed.
fn run_seeds(seeds: &[u64], logs: &ArduPilotLogs, bug: Option<Bug>, stop_after: usize) -> Batch {
    let next = AtomicUsize::new(0);
    let failed = AtomicUsize::new(0);
    let simulated_ms = AtomicU64::new(0);
    let faults = AtomicU64::new(0);
    let ardupilot = AtomicU64::new(0);
    let on_disk = AtomicU64::new(0);
    let live = AtomicU64::new(0);
    let columns = AtomicU64::new(0);
    let events = [(); 3].map(|()| AtomicU64::new(0));
    let uploads = AtomicU64::new(0);
    let bucket_faults = AtomicU64::new(0);
    let slow_answers = AtomicU64::new(0);
    let passes_died = AtomicU64::new(0);
    let budgets = AtomicU64::new(0);
    let min_free = AtomicU64::new(0);
    let budget_deletions = AtomicU64::new(0);
    let splits = AtomicU64::new(0);
    let power_cuts = AtomicU64::new(0);
    let disk_fulls = AtomicU64::new(0);
    let paused = AtomicU64::new(0);
    let stalls = AtomicU64::new(0);
    let stripped = AtomicU64::new(0);
    let sync_failures = AtomicU64::new(0);
    let past_bound = AtomicU64::new(0);
    let fills = AtomicU64::new(0);
    let fill_records = AtomicU64::new(0);
    let fill_power_cuts = AtomicU64::new(0);
    let signing = AtomicU64::new(0);
    let storms = AtomicU64::new(0);
    let replays = AtomicU64::new(0);
    let forged = AtomicU64::new(0);
    let refused_signed = AtomicU64::new(0);
    let failures = std::sync::Mutex::new(Vec::new());
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                let _planted = plant(bug);
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= seeds.len() || failed.load(Ordering::Relaxed) >= stop_after {
                        break;
                    }
                    let schedule = schedule_of(seeds[i], logs);
                    faults.fetch_add(schedule.faults.len() as u64, Ordering::Relaxed);
                    if schedule.autopilot == Autopilot::ArduPilot {
                        ardupilot.fetch_add(1, Ordering::Relaxed);
                    }
                    on_disk.fetch_add(u64::from(schedule.disk), Ordering::Relaxed);
                    live.fetch_add(u64::from(schedule.live), Ordering::Relaxed);
                    columns.fetch_add(u64::from(schedule.columns.is_some()), Ordering::Relaxed);
                    let uploading = schedule.disk && schedule.bucket.is_some();
                    uploads.fetch_add(u64::from(uploading), Ordering::Relaxed);
                    storms.fetch_add(u64::from(schedule.storm), Ordering::Relaxed);
                    let budget = schedule.disk && schedule.budget_share.is_some();
                    budgets.fetch_add(u64::from(budget), Ordering::Relaxed);
                    let free = budget && schedule.budget_min_free;
                    min_free.fetch_add(u64::from(free), Ordering::Relaxed);
                    let (verdict, outcome) = judge(&schedule, logs);
                    if let Some(o) = &outcome {
                        simulated_ms.fetch_add(o.simulated.as_millis() as u64, Ordering::Relaxed);
                        let n: usize = o.logs.iter().map(|l| l.splits.files.len()).sum();
                        splits.fetch_add(n as u64, Ordering::Relaxed);
                        bucket_faults.fetch_add(o.bucket_faults(), Ordering::Relaxed);
                        let (slow, died) = o.slow_answers();
                        slow_answers.fetch_add(slow, Ordering::Relaxed);
                        passes_died.fetch_add(died, Ordering::Relaxed);
                        for (_, e) in o.disk.iter().flat_map(|d| &d.events) {
                            let k = match e.source {
                                EventSource::Request => 0,
                                EventSource::LoggedText | EventSource::Field => 1,
                                EventSource::Diagnostic => 2,
                            };
                            events[k].fetch_add(1, Ordering::Relaxed);
                        }
                        let deleted = o.disk.as_ref().map_or(0, |d| d.deleted.len());
                        budget_deletions.fetch_add(deleted as u64, Ordering::Relaxed);
                        power_cuts.fetch_add(u64::from(o.power_cuts), Ordering::Relaxed);
                        disk_fulls.fetch_add(u64::from(o.disk_fulls), Ordering::Relaxed);
                        let n = o.disk.as_ref().map_or(0, |d| d.paused.len());
                        paused.fetch_add(n as u64, Ordering::Relaxed);
                        stalls.fetch_add(u64::from(o.stalls), Ordering::Relaxed);
                        stripped.fetch_add(o.stripped, Ordering::Relaxed);
                        sync_failures.fetch_add(u64::from(o.sync_failures), Ordering::Relaxed);
                        past_bound.fetch_max(o.past_bound as u64, Ordering::Relaxed);
                        fills.fetch_add(o.fills.len() as u64, Ordering::Relaxed);
                        let records = (o.fills.iter())
                            .filter_map(|f| f.result.as_ref().ok())
                            .map(|r| r.records)
                            .sum();
                        fill_records.fetch_add(records, Ordering::Relaxed);
                        let cut = o
                            .event_log
                            .iter()
                            .any(|l| l.ends_with(world::FILL_POWER_CUT));
                        fill_power_cuts.fetch_add(u64::from(cut), Ordering::Relaxed);
                        if let Some(s) = &o.signing {
                            signing.fetch_add(1, Ordering::Relaxed);
                            replays.fetch_add(s.replays, Ordering::Relaxed);
                            forged.fetch_add(s.forged, Ordering::Relaxed);
                            let refused = s.receiver.bad_signature + s.receiver.replayed;
                            refused_signed.fetch_add(refused, Ordering::Relaxed);
                        }
                    }
                    if let Err(e) = verdict {
                        failed.fetch_add(1, Ordering::Relaxed);
                        failures.lock().unwrap().push((seeds[i], e));
                    }
                }
            });
        }
    });
    let mut failures = failures.into_inner().unwrap();
    failures.sort();
    Batch {
        failures,
        simulated: Duration::from_millis(simulated_ms.into_inner()),
        faults: faults.into_inner(),
        ardupilot: ardupilot.into_inner(),
        on_disk: on_disk.into_inner(),
        live: live.into_inner(),
        columns: columns.into_inner(),
        events: events.map(AtomicU64::into_inner),
        uploads: uploads.into_inner(),
        bucket_faults: bucket_faults.into_inner(),
        slow_answers: slow_answers.into_inner(),
        passes_died: passes_died.into_inner(),
        budgets: budgets.into_inner(),
        min_free: min_free.into_inner(),
        budget_deletions: budget_deletions.into_inner(),
        splits: splits.into_inner(),
        power_cuts: power_cuts.into_inner(),
        disk_fulls: disk_fulls.into_inner(),
        paused: paused.into_inner(),
        stalls: stalls.into_inner(),
        stripped: stripped.into_inner(),
        sync_failures: sync_failures.into_inner(),
        past_bound: past_bound.into_inner(),
        fills: fills.into_inner(),
        fill_records: fill_records.into_inner(),
        fill_power_cuts: fill_power_cuts.into_inner(),
        signing: signing.into_inner(),
        storms: storms.into_inner(),
        replays: replays.into_inner(),
        forged: forged.into_inner(),
        refused_signed: refused_signed.into_inner(),
    }
}

thread_local! {
    /// This thread runs a seed whose panics [`judge`] catches and reports.
    static JUDGING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with the panic hook's message left out for this thread's panics (a seed's
/// panic is reported with its seed); other threads' panics, other tests', print as ever.
fn quietly<T>(f: impl FnOnce() -> T) -> T {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !JUDGING.with(|j| j.get()) {
                default(info)
            }
        }));
    });
    let before = JUDGING.with(|j| j.replace(true));
    let out = f();
    JUDGING.with(|j| j.set(before));
    out
}

#[test]
fn seeds() {
    let logs = ardupilot_logs();
    if let Some(seed) = env_u64("SIM_SEED") {
        let _planted = plant(planted_by_env());
        let mut schedule = schedule_of(seed, &logs);
        if let Ok(keep) = std::env::var("SIM_FAULTS") {
            let keep: Vec<usize> = keep
                .split(',')
                .filter(|s| !s.is_empty())
                .map(|s| s.parse().expect("SIM_FAULTS: indices"))
                .collect();
            schedule = schedule.keeping(&keep);
        }
        eprintln!("{schedule:#?}");
        // RUST_LOG=debug shows the receiver's own log of the run.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .try_init();
        let outcome = run(&schedule, &logs);
        for line in &outcome.event_log {
            eprintln!("{line}");
        }
        if let Err(e) = checks::check(&outcome, &logs) {
            panic!("seed {seed}: {e}");
        }
        return;
    }
    let base = env_u64("SIM_BASE").unwrap_or(0);
    let n = env_u64("SIM_SEEDS").unwrap_or(DEFAULT_SEEDS);
    let seeds: Vec<u64> = (base..base + n).collect();
    let started = Instant::now();
    let batch = run_seeds(&seeds, &logs, None, usize::MAX);
    let took = started.elapsed();
    eprintln!(
        "simulation: {n} seeds ({} ArduPilot; {} with the store on disk, {} of them \
         uploading, {} with a disk budget ({} of them min-free) that deleted {} sessions, {} \
         with columns and an event buffer, whose store handed out {} events asked for, {} \
         triggered and {} findings; {} with a live client) \
         from {base}, {} faults ({} seeds storms of them; {} power cuts, {} spells of a full disk that paused {} \
         sessions, {} slow syncs that stripped {} samples with at most {} bytes waiting past the queue's bound, {} \
         spells of failing syncs) and {} bucket faults ({} slow answers; {} upload passes \
         died with the daemon mid-request), {} splits, {} fills after the flight ({} records \
         recovered, {} power cuts in a fill), {} seeds signing both ways ({} replays and {} \
         forgeries in the junk, {} frames refused by the receiver's signature checks), {:.1} h \
         simulated, in {:.1} s",
        batch.ardupilot,
        batch.on_disk,
        batch.uploads,
        batch.budgets,
        batch.min_free,
        batch.budget_deletions,
        batch.columns,
        batch.events[0],
        batch.events[1],
        batch.events[2],
        batch.live,
        batch.faults,
        batch.storms,
        batch.power_cuts,
        batch.disk_fulls,
        batch.paused,
        batch.stalls,
        batch.stripped,
        batch.past_bound,
        batch.sync_failures,
        batch.bucket_faults,
        batch.slow_answers,
        batch.passes_died,
        batch.splits,
        batch.fills,
        batch.fill_records,
        batch.fill_power_cuts,
        batch.signing,
        batch.replays,
        batch.forged,
        batch.refused_signed,
        batch.simulated.as_secs_f64() / 3600.0,
        took.as_secs_f64()
    );
    for (seed, e) in &batch.failures {
        eprintln!("failed: seed {seed}: {e}");
    }
    let reports: Vec<String> = (batch.failures.iter().take(3))
        .map(|(seed, e)| report(*seed, e, &logs))
        .collect();
    assert!(
        batch.failures.is_empty(),
        "{} of {n} seeds failed:\n{}",
        batch.failures.len(),
        reports.join("\n\n")
    );
}

/// Every seed that ever failed, kept: `tests/simulation-seeds.txt`, one per line (`#` for
/// what it found).
#[test]
fn kept_seeds() {
    let logs = ardupilot_logs();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/simulation-seeds.txt");
    let text = std::fs::read_to_string(path).unwrap();
    let seeds: Vec<u64> = text
        .lines()
        .map(|l| l.split('#').next().unwrap().trim())
        .filter(|l| !l.is_empty())
        .map(|l| l.parse().expect("a seed"))
        .collect();
    assert!(!seeds.is_empty(), "{path} keeps no seed");
    let batch = run_seeds(&seeds, &logs, None, usize::MAX);
    assert!(batch.failures.is_empty(), "{:?}", batch.failures);
}

#[test]
fn the_same_seed_runs_the_same_event_for_event() {
    let logs = ardupilot_logs();
    // Seeds of both autopilots, with faults of several kinds; one that uploads to a failing,
    // slow bucket under a disk budget; one whose power is cut (which part of each unsynced write
    // the disk kept is drawn too); one whose fill a power cut stops.
    let mut picked = Vec::new();
    for seed in 0.. {
        let s = Schedule::draw(seed, logs.len());
        if s.faults.len() >= 4 && !picked.iter().any(|p: &Schedule| p.autopilot == s.autopilot) {
            picked.push(s);
        }
        if picked.len() == 2 || (logs.is_empty() && picked.len() == 1) {
            break;
        }
    }
    picked.extend(
        (0..)
            .map(|seed| Schedule::draw(seed, logs.len()))
            .find(|s| {
                s.faults.len() >= 2
                    && s.budget_share.is_some()
                    && s.bucket
                        .is_some_and(|b| b.fail > 0.0 && b.lost_answer > 0.0 && b.slow > 0.0)
            }),
    );
    let cuts = |s: &Schedule| {
        (s.faults.iter())
            .filter(|f| f.kind == FaultKind::PowerCut)
            .count()
    };
    picked.extend(
        (0..)
            .map(|seed| Schedule::draw(seed, logs.len()))
            .find(|s| cuts(s) >= 3),
    );
    // And one whose fill after the flight a power cut stops.
    picked.extend(
        (0..)
            .map(|seed| Schedule::draw(seed, logs.len()))
            .find(|s| s.fill.is_some_and(|f| f.power_cut_at.is_some())),
    );
    // And one whose disk stalls and fails its syncs (which samples the store's queue
    // strips depends on what waits in it when).
    let has = |s: &Schedule, kind: FaultKind| s.faults.iter().any(|f| f.kind == kind);
    picked.extend(
        (0..)
            .map(|seed| Schedule::draw(seed, logs.len()))
            .find(|s| has(s, FaultKind::SlowDisk) && has(s, FaultKind::SyncFails)),
    );
    // And one that signs, with junk (replays and forgeries drawn), restarts and reboots
    // (the signing clocks), in a storm.
    picked.extend(
        (0..)
            .map(|seed| Schedule::draw(seed, logs.len()))
            .find(|s| {
                s.signing.is_some()
                    && s.storm
                    && has(s, FaultKind::Junk)
                    && has(s, FaultKind::VehicleReboot)
                    && (has(s, FaultKind::DaemonRestart) || has(s, FaultKind::PowerCut))
            }),
    );
    for schedule in picked {
        let (a, b) = (run(&schedule, &logs), run(&schedule, &logs));
        assert!(a.event_log.len() > 100, "{:?}", a.event_log);
        if let Some(k) = (0..a.event_log.len().max(b.event_log.len()))
            .find(|&k| a.event_log.get(k) != b.event_log.get(k))
        {
            let around = |l: &[String]| l[k.saturating_sub(3)..(k + 3).min(l.len())].to_vec();
            panic!(
                "seed {}: the event logs part at line {k}:\n{:#?}\n{:#?}",
                schedule.seed,
                around(&a.event_log),
                around(&b.event_log)
            );
        }
        assert_eq!(a.digest(), b.digest());
        // And another seed runs otherwise.
        let other = run(&Schedule::draw(schedule.seed + 1, logs.len()), &logs);
        assert_ne!(a.digest(), other.digest());
    }
}

/// Each planted bug is caught within 1,000 seeds, and the seeds it took are printed.
#[test]
fn planted_bugs_are_caught_within_1000_seeds() {
    let logs = ardupilot_logs();
    let only = planted_by_env();
    for bug in Bug::ALL {
        if only.is_some_and(|b| b != bug) {
            continue;
        }
        if bug == Bug::AckedBlockDroppedWhenAhead && logs.is_empty() {
            eprintln!("\n!!! SKIPPED: {bug:?} needs ArduPilot's logs !!!\n");
            continue;
        }
        let mut found = None;
        // In rounds of 50, to stop soon after the first catch.
        for round in 0..20u64 {
            let seeds: Vec<u64> = (round * 50..(round + 1) * 50).collect();
            let batch = run_seeds(&seeds, &logs, Some(bug), 1);
            if let Some((seed, e)) = batch.failures.first() {
                found = Some((*seed, e.clone()));
                break;
            }
        }
        let (seed, error) = found.unwrap_or_else(|| panic!("{bug:?}: not caught in 1,000 seeds"));
        // The bug, not the seed: without it the same seed passes.
        let schedule = schedule_of(seed, &logs);
        let (clean, _) = judge(&schedule, &logs);
        assert!(
            clean.is_ok(),
            "seed {seed} fails without {bug:?} too: {clean:?}"
        );
        eprintln!(
            "planted {bug:?}: caught by seed {seed} ({} seeds): {error}",
            seed + 1
        );
    }
}
