//! Power cuts for real: the daemon's `--log-dir` on LazyFS ([`crate::common::lazyfs`]), a
//! real PX4 log streamed by the simulated vehicle at 700 KB/s with 2 % loss, and the power
//! cut (what is not synced is gone, the daemon killed with it) at a random moment from a
//! printed seed, a hundred times in one log directory; each time the daemon starts again on
//! what is left. The cuts fall while receiving, while a split closes (1 MB splits close
//! every 1.5 s), while the session closes (the cut a moment after SIGTERM), and at exact
//! steps: LazyFS dies before or after a split's fsync, the manifest's write, sync or rename,
//! a split's creation.
//!
//! After every cut, once the next start has repaired it:
//! - the session is closed, its manifest parses and names only files that exist and hold
//!   what it says (size, and SHA-256 of each closed split);
//! - each split is exactly the whole messages of what was on the disk (nothing synced lost,
//!   nothing invented, no sample twice or out of its place: a prefix of what was written);
//! - a plain cut (not at a step) lost at most one `--fsync-interval` (1 s) of the stream, plus
//!   what arrives while the sync runs (a quarter of a second): the bytes the files held
//!   before the cut (unsynced included) against after;
//! - the repaired split opens in pyulog (decoded as ours does) and the session in
//!   `ulog-recv info`.
//!
//! A failure names its seed: `POWER_CUT_SEED=N` replays the same schedule of cuts (the same
//! modes, steps and delays; the stream's timing is the machine's).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use ulog_recv::store::files::{complete_prefix, hex, read_manifest};

use crate::common::lazyfs::{LazyFs, fault_seed};
use crate::common::procs::{Proc, free_udp_port, run_ok};
use crate::common::{self, check_with_pyulog};

/// The link's configured rate: the vehicle streams at 70 % of it.
pub(super) const LINK_RATE: u64 = 1_000_000;
/// What the log grows by at most, per second (the stream's rate, less the MAVLink framing).
const LOG_BYTES_PER_S: u64 = LINK_RATE * 7 / 10;

/// Bytes of each file of a session, by its path relative to the session.
pub(super) type Snapshot = BTreeMap<String, Vec<u8>>;

pub(super) fn snapshot(session: &Path) -> Snapshot {
    let mut out = Snapshot::new();
    for name in common::procs::files_under(session) {
        if let Ok(bytes) = std::fs::read(session.join(&name)) {
            out.insert(name, bytes);
        }
    }
    out
}

/// Where a cut falls.
#[derive(Debug, Clone, Copy)]
pub(super) enum Cut {
    /// While the flight streams in.
    Receiving,
    /// A moment after SIGTERM: the STOP handshake, the last split closing, the manifest
    /// saying the session is over.
    Closing,
    /// LazyFS dies at an exact step of the store.
    AtStep {
        before: bool,
        op: &'static str,
        regex: &'static str,
    },
    /// LazyFS tore a write (some of it on the disk, the rest not), then died.
    Torn,
}

/// The exact steps: each split's data sync, the manifest's write, sync and rename (a
/// split's beginning and end, every 10 s), a new split's file.
const STEPS: &[(bool, &str, &str)] = &[
    (true, "fsync", r"split_[0-9]+\.ulg"),
    (false, "fsync", r"split_[0-9]+\.ulg"),
    (true, "write", r"manifest\.json\.tmp"),
    (true, "fsync", r"manifest\.json\.tmp"),
    (true, "rename", r"manifest\.json\.tmp"),
    (false, "rename", r"manifest\.json\.tmp"),
    (true, "create", r"split_000[1-9]\.ulg"),
    (true, "write", r"split_[0-9]+\.ulg"),
];

fn pick(rng: &mut fastrand::Rng) -> Cut {
    match rng.u32(0..10) {
        0..=4 => Cut::Receiving,
        5..=6 => Cut::Closing,
        _ => {
            let (before, op, regex) = STEPS[rng.usize(0..STEPS.len())];
            Cut::AtStep { before, op, regex }
        }
    }
}

/// What one cut left, to be checked once the next start has repaired it.
pub(super) struct CutSession {
    pub(super) dir: PathBuf,
    pub(super) cut: Cut,
    /// The files as the daemon had written them (unsynced included); none for a cut at a
    /// step (the mount died with LazyFS).
    pub(super) written: Option<Snapshot>,
    /// The files as the disk held them after the cut.
    pub(super) on_disk: Snapshot,
}

#[test]
fn a_hundred_power_cuts_lose_at_most_one_sync_interval_and_nothing_synced() {
    let seed = fault_seed("power cuts");
    let cuts = common::env_number("POWER_CUTS", 100) as usize;
    let Some(mut fs) = LazyFs::mount("power-cuts", &[]) else {
        return;
    };
    let logs = fs.mount.join("logs");
    let disk_logs = fs.root.join("logs");
    let mut rng = fastrand::Rng::with_seed(seed);
    let port = free_udp_port();
    let Some((mut vehicle, _vehicle_lines)) = real_vehicle(port, seed, &[]) else {
        return;
    };
    let daemon_args = daemon_args(port, &logs, &["--split-size", "1M"]);
    let context = |k: usize, cut: Cut| format!("seed {seed}, cut {k} ({cut:?})");
    let mut pending: Option<CutSession> = None;
    let mut worst_lost = 0u64;
    let mut counts = BTreeMap::<&str, usize>::new();
    for k in 0..=cuts {
        let (mut daemon, lines) = Proc::spawn_watched("the daemon", &daemon_args);
        // The start repairs what the last cut left before the new log's session opens.
        let opened = wait_session_opened(&lines, &fs, &daemon_args, k);
        if let Some(previous) = pending.take() {
            let lost = check_repaired(&previous, &context(k - 1, previous.cut), &opened);
            worst_lost = worst_lost.max(lost);
        }
        if k == cuts {
            assert!(
                daemon.terminate().success(),
                "the last daemon exits cleanly"
            );
            break;
        }
        let session = newest_session(&logs);
        let cut = pick(&mut rng);
        let delay = Duration::from_millis(rng.u64(200..2500));
        let pid = daemon.0.id() as i32;
        let mut written = None;
        match cut {
            Cut::Receiving | Cut::Closing => {
                std::thread::sleep(delay);
                if matches!(cut, Cut::Closing) {
                    unsafe { libc::kill(pid, libc::SIGTERM) };
                    std::thread::sleep(Duration::from_millis(rng.u64(0..400)));
                }
                // Frozen, so that what it wrote is what the cut finds.
                stop_whole(pid);
                written = Some(snapshot(&session));
                fs.power_cut();
                let _ = daemon.0.kill();
                let _ = daemon.0.wait();
            }
            Cut::AtStep { before, op, regex } => {
                std::thread::sleep(delay / 4);
                fs.crash_at(before, op, regex);
                let crashed = fs.wait_crashed(Duration::from_secs(8));
                let _ = daemon.0.kill();
                let _ = daemon.0.wait();
                if !crashed {
                    // The step did not come (no split began in time): a plain cut instead.
                    fs.power_cut();
                }
                fs.remount(&[]);
            }
            Cut::Torn => unreachable!("not among the random cuts"),
        }
        *counts
            .entry(match cut {
                Cut::Receiving => "receiving",
                Cut::Closing => "closing",
                Cut::AtStep { .. } => "at a step",
                Cut::Torn => unreachable!("not among the random cuts"),
            })
            .or_default() += 1;
        let on_disk = snapshot(&disk_logs.join(session.file_name().unwrap()));
        pending = Some(CutSession {
            dir: session,
            cut,
            written,
            on_disk,
        });
    }
    let _ = vehicle.0.kill();
    eprintln!(
        "power cuts: {cuts} ({counts:?}), seed {seed}; at most {worst_lost} bytes of log lost \
         by a cut ({:.2} s of the stream)",
        worst_lost as f64 / LOG_BYTES_PER_S as f64
    );
}

/// The daemon's arguments: the vehicle on UDP `port`, logs into `logs`, no live socket,
/// and `extra`.
pub(super) fn daemon_args(port: u16, logs: &Path, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "--udp".into(),
        port.to_string(),
        "--no-socket".into(),
        "--log-dir".into(),
        logs.display().to_string(),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    args
}

/// The simulated vehicle streaming `sample.ulg` (a real PX4 log, 4 MB) to `port` at
/// [`LINK_RATE`] with 2 % loss, `extra` added to its arguments; `None` (said loudly) without
/// the real logs.
pub(super) fn real_vehicle(
    port: u16,
    seed: u64,
    extra: &[String],
) -> Option<(Proc, Receiver<String>)> {
    let real = common::shared_logs()?
        .into_iter()
        .find(|p| p.ends_with("sample.ulg"))
        .expect("sample.ulg among the real logs");
    let mut args = vec![
        "sim".into(),
        real.display().to_string(),
        "--link-rate".into(),
        LINK_RATE.to_string(),
        "--loss".into(),
        "0.02".into(),
        "--seed".into(),
        seed.to_string(),
        "--udp-connect".into(),
        format!("127.0.0.1:{port}"),
    ];
    args.extend(extra.iter().cloned());
    Some(Proc::spawn_watched("the simulator", &args))
}

/// Waits for the daemon's `log session opened`, after its repair; says which run.
pub(super) fn wait_session_opened(
    lines: &Receiver<String>,
    fs: &LazyFs,
    args: &[String],
    k: usize,
) -> PathBuf {
    let t0 = Instant::now();
    loop {
        match lines.recv_timeout(Duration::from_secs(1)) {
            Ok(line) if line.contains("log session opened") => {
                let dir = line
                    .split("dir=")
                    .nth(1)
                    .and_then(|d| d.split_whitespace().next());
                return PathBuf::from(dir.unwrap_or_else(|| panic!("no dir= in {line}")));
            }
            Ok(line) => assert!(
                !line.contains("panicked"),
                "start {k}: the daemon panicked: {line}"
            ),
            Err(_) => {}
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "start {k} ({args:?}): no log session opened within 30 s (LazyFS mounted: {})",
            fs.mount.display()
        );
    }
}

/// Stops the daemon and waits until every thread of it has stopped (one in a write to
/// LazyFS stops when the write returns), so that nothing it writes comes after a snapshot.
fn stop_whole(pid: i32) {
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let t0 = Instant::now();
    // A write to LazyFS returns when LazyFS (a FUSE server, on the same busy cores) has
    // taken it: seconds, at worst.
    while t0.elapsed() < Duration::from_secs(10) {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task"));
        let all_stopped = tasks.into_iter().flatten().flatten().all(|task| {
            let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
            // The state follows the command's closing parenthesis.
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            state.starts_with(['T', 't', 'Z', 'X']) || state.is_empty()
        });
        if all_stopped {
            return;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    panic!("the daemon (pid {pid}) did not stop within 10 s of SIGSTOP");
}

pub(super) fn newest_session(logs: &Path) -> PathBuf {
    let sessions = common::procs::session_dirs(logs);
    sessions.last().expect("a session is open").clone()
}

/// Checks what the start made of one cut session (the start having opened the session
/// `opened`); returns the bytes the cut cost (0 for a cut at a step, which has no view of
/// what was written).
pub(super) fn check_repaired(cut: &CutSession, context: &str, opened: &Path) -> u64 {
    let dir = &cut.dir;
    // Removed as empty, its name then free for the new session when it opens within the
    // same second.
    if !dir.exists() || dir == opened {
        // Removed as empty: only right if nothing of a message was on the disk.
        for (name, bytes) in &cut.on_disk {
            if name.ends_with(".ulg") {
                assert!(
                    complete_prefix(bytes) <= ulog_recv::ulog::message::FILE_HEADER_LEN,
                    "{context}: {} removed, but {name} held {} bytes of whole messages on the disk",
                    dir.display(),
                    complete_prefix(bytes)
                );
            }
        }
        return 0;
    }
    let manifest = read_manifest(dir)
        .unwrap_or_else(|e| panic!("{context}: {}: manifest: {e}", dir.display()));
    assert!(manifest.closed, "{context}: {} not closed", dir.display());
    let mut lost = 0;
    for split in manifest.all_splits() {
        let path = dir.join(&split.file);
        let bytes = std::fs::read(&path)
            .unwrap_or_else(|e| panic!("{context}: the manifest names {}: {e}", split.file));
        assert!(split.closed, "{context}: {} not closed", split.file);
        assert_eq!(
            split.summary.bytes,
            bytes.len() as u64,
            "{context}: {} holds another size than its manifest says",
            split.file
        );
        assert_eq!(
            split.sha256.as_deref(),
            Some(hex(&Sha256::digest(&bytes)).as_str()),
            "{context}: {} holds other bytes than its manifest says",
            split.file
        );
        // Exactly the whole messages of what the disk held.
        let disk = cut
            .on_disk
            .get(&split.file)
            .unwrap_or_else(|| panic!("{context}: {} is not what the cut left", split.file));
        let whole = complete_prefix(disk);
        assert!(
            bytes.len() == whole && disk[..whole] == bytes[..],
            "{context}: {}: {} bytes after the repair, the disk held {} of whole messages",
            split.file,
            bytes.len(),
            whole
        );
        if let Some(written) = &cut.written {
            let before = written.get(&split.file).unwrap_or_else(|| {
                panic!("{context}: {} was not written before the cut", split.file)
            });
            assert!(
                before.starts_with(&bytes),
                "{context}: {} is not what the daemon wrote",
                split.file
            );
            lost += (before.len() - bytes.len()) as u64;
        }
    }
    // No split the daemon wrote (past its header) is missing from the manifest.
    if let Some(written) = &cut.written {
        for name in written.keys().filter(|n| n.ends_with(".ulg")) {
            let on_disk = cut.on_disk.get(name).map_or(0, |b| complete_prefix(b));
            let listed = manifest.all_splits().any(|s| &s.file == name);
            assert!(
                listed || on_disk <= ulog_recv::ulog::message::FILE_HEADER_LEN,
                "{context}: {name} ({on_disk} bytes of whole messages on the disk) is not in the manifest"
            );
        }
        // One sync interval of the stream (`--fsync-interval`, 1 s), and what arrives while
        // the sync itself runs (a quarter of a second here, with other tests beside).
        let bound = LOG_BYTES_PER_S + LOG_BYTES_PER_S / 4;
        assert!(
            lost <= bound,
            "{context}: the cut lost {lost} bytes of log, more than {bound} (1.25 s of the stream)"
        );
    }
    // The repaired splits open in pyulog and decode there as here; the session in `info`.
    for split in manifest.all_splits() {
        let torn = cut.written.as_ref().is_none_or(|w| {
            w.get(&split.file)
                .is_some_and(|b| b.len() as u64 != split.summary.bytes)
        });
        if torn {
            check_with_pyulog(&dir.join(&split.file));
        }
    }
    run_ok(&["info", &dir.display().to_string(), "--json"]);
    lost
}

/// Found by the soak (`POWER_CUT_SEED=8006582564981843867`): a daemon killed before its first
/// sync leaves its writes in the page cache (a kill is no power cut); the next start repaired
/// the session and its manifest named the split's size and SHA-256, but the split itself was
/// never synced, so a later power cut emptied it under that manifest.
#[test]
fn a_session_repaired_after_a_kill_keeps_what_its_manifest_says_through_the_next_power_cut() {
    let Some(mut fs) = LazyFs::mount("repaired-then-cut", &[]) else {
        return;
    };
    let port = free_udp_port();
    let Some((mut vehicle, _)) = real_vehicle(port, 1, &[]) else {
        return;
    };
    let logs = fs.mount.join("logs");
    let args = daemon_args(port, &logs, &[]);
    let (mut killed, lines) = Proc::spawn_watched("the daemon", &args);
    wait_session_opened(&lines, &fs, &args, 0);
    let session = newest_session(&logs);
    // Killed before its first sync (a second in).
    std::thread::sleep(Duration::from_millis(300));
    let _ = killed.0.kill();
    let _ = killed.0.wait();
    let (mut repairing, lines) = Proc::spawn_watched("the daemon", &args);
    wait_session_opened(&lines, &fs, &args, 1);
    let repaired = read_manifest(&session).expect("the session repaired");
    assert!(repaired.closed);
    // Then the power goes.
    stop_whole(repairing.0.id() as i32);
    fs.power_cut();
    let _ = repairing.0.kill();
    let _ = repairing.0.wait();
    let _ = vehicle.0.kill();
    let manifest = read_manifest(&session).unwrap();
    assert_eq!(manifest, repaired, "the repaired manifest, durable");
    assert!(manifest.all_splits().next().is_some());
    for split in manifest.all_splits() {
        let bytes = std::fs::read(session.join(&split.file)).unwrap();
        assert_eq!(bytes.len() as u64, split.summary.bytes, "{}", split.file);
        assert_eq!(
            split.sha256.as_deref(),
            Some(hex(&Sha256::digest(&bytes)).as_str()),
            "{}",
            split.file
        );
    }
}
