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
//! The same cuts fall on an ArduPilot's `.bin` splits (ArduPilot's own log played by the
//! simulated ArduPilot), with the same promises; a repaired `.bin` split opens alone in
//! pymavlink's DFReader with nothing in it that the vehicle's log does not hold.
//!
//! A failure names its seed: `POWER_CUT_SEED=N` replays the same schedule of cuts (the same
//! modes, steps and delays; the stream's timing is the machine's).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use ulog_recv::store::bin_splitter::complete_bin_prefix;
use ulog_recv::store::files::{complete_prefix, hex, read_manifest};

use crate::common::ardupilot::compare;
use crate::common::lazyfs::{LazyFs, fault_seed};
use crate::common::procs::{Proc, free_udp_port, run_ok};
use crate::common::{self, check_with_pyulog};

/// The link's configured rate: the vehicle streams at 70 % of it.
pub(super) const LINK_RATE: u64 = 1_000_000;
/// What the log grows by at most, per second (the stream's rate, less the MAVLink framing).
const LOG_BYTES_PER_S: u64 = LINK_RATE * 7 / 10;
/// How many times faster than flown the simulated ArduPilot plays its log.
const ARDUPILOT_SPEED: u64 = 1;
/// How long a simulated ArduPilot streams before the cuts take another (its hover log is
/// 126 s as flown: a daemon started after its end would wait for a log that never comes).
const ARDUPILOT_FRESH: Duration = Duration::from_secs(90);

/// Which autopilot's log the cuts fall on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LogKind {
    /// PX4's ULog: `sample.ulg` streamed at [`LINK_RATE`].
    Ulog,
    /// ArduPilot's DataFlash: `sitl_copter_hover.bin` played [`ARDUPILOT_SPEED`] times
    /// faster than flown.
    DataFlash,
}

impl LogKind {
    fn extension(self) -> &'static str {
        match self {
            LogKind::Ulog => "ulg",
            LogKind::DataFlash => "bin",
        }
    }

    /// Length of the whole messages at the start of a split's bytes.
    fn whole(self, bytes: &[u8]) -> usize {
        match self {
            LogKind::Ulog => complete_prefix(bytes),
            LogKind::DataFlash => complete_bin_prefix(bytes),
        }
    }

    /// Bytes of a split that hold no message yet (ULog's file header).
    fn empty_len(self) -> usize {
        match self {
            LogKind::Ulog => ulog_recv::ulog::message::FILE_HEADER_LEN,
            LogKind::DataFlash => 0,
        }
    }

    /// At most what the log grows by per second.
    fn bytes_per_s(self) -> u64 {
        match self {
            LogKind::Ulog => LOG_BYTES_PER_S,
            // The hover log: 5.3 MB in 126 s.
            LogKind::DataFlash => 45_000 * ARDUPILOT_SPEED,
        }
    }

    /// The split opens alone in the autopilot's own reader, as what the vehicle logged.
    fn check_opens(self, split: &Path) {
        match self {
            LogKind::Ulog => check_with_pyulog(split),
            LogKind::DataFlash => {
                let Some(py) = common::venv_python() else {
                    return;
                };
                let log = ardupilot_log().expect("the ArduPilot log");
                let report = compare(&py, &log, &[split.to_path_buf()]);
                assert_eq!(
                    report["unexplained_invented"],
                    0,
                    "{}: {report}",
                    split.display()
                );
            }
        }
    }
}

/// ArduPilot's hover log, or None (said loudly; CI fails).
fn ardupilot_log() -> Option<PathBuf> {
    let logs = common::ardupilot::ardupilot_logs()?;
    let log = logs
        .into_iter()
        .find(|p| p.ends_with("sitl_copter_hover.bin"));
    Some(log.expect("sitl_copter_hover.bin among ArduPilot's logs"))
}

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
/// `EXT` stands for the splits' extension.
const STEPS: &[(bool, &str, &str)] = &[
    (true, "fsync", r"split_[0-9]+\.EXT"),
    (false, "fsync", r"split_[0-9]+\.EXT"),
    (true, "write", r"manifest\.json\.tmp"),
    (true, "fsync", r"manifest\.json\.tmp"),
    (true, "rename", r"manifest\.json\.tmp"),
    (false, "rename", r"manifest\.json\.tmp"),
    (true, "create", r"split_000[1-9]\.EXT"),
    (true, "write", r"split_[0-9]+\.EXT"),
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
    pub(super) kind: LogKind,
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
    let cuts = common::env_number("POWER_CUTS", 100) as usize;
    power_cuts(LogKind::Ulog, cuts, &["--split-size", "1M"]);
}

#[test]
fn power_cuts_on_ardupilots_bin_splits_keep_the_same_promises() {
    // The flight lasts two minutes (as flown); the vehicle boots again when it nears its
    // end (see ARDUPILOT_FRESH).
    let cuts = common::env_number("POWER_CUTS_BIN", 15) as usize;
    power_cuts(LogKind::DataFlash, cuts, &["--split-duration", "2"]);
}

/// `cuts` power cuts (see the module docs) on a daemon receiving `kind`'s log, `split` its
/// split options.
fn power_cuts(kind: LogKind, cuts: usize, split: &[&str]) {
    let seed = fault_seed("power cuts");
    let Some(mut fs) = LazyFs::mount(&format!("power-cuts-{}", kind.extension()), &[]) else {
        return;
    };
    let logs = fs.mount.join("logs");
    let disk_logs = fs.root.join("logs");
    let mut rng = fastrand::Rng::with_seed(seed);
    let port = free_udp_port();
    let vehicle = match kind {
        LogKind::Ulog => real_vehicle(port, seed, &[]),
        LogKind::DataFlash => ardupilot_vehicle(port, seed),
    };
    let Some((mut vehicle, mut _vehicle_lines)) = vehicle else {
        return;
    };
    let mut vehicle_since = Instant::now();
    let daemon_args = daemon_args(port, &logs, split);
    let context = |k: usize, cut: Cut| format!("seed {seed}, cut {k} ({cut:?})");
    let mut pending: Option<CutSession> = None;
    let mut worst_lost = 0u64;
    let mut counts = BTreeMap::<&str, usize>::new();
    for k in 0..=cuts {
        if kind == LogKind::DataFlash && vehicle_since.elapsed() > ARDUPILOT_FRESH {
            // Its flight nears its end: another boot of the vehicle, from the log's start.
            let _ = vehicle.0.kill();
            let _ = vehicle.0.wait();
            (vehicle, _vehicle_lines) =
                ardupilot_vehicle(port, seed.wrapping_add(k as u64)).expect("the log is there");
            vehicle_since = Instant::now();
        }
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
                fs.crash_at(before, op, &regex.replace("EXT", kind.extension()));
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
            kind,
            dir: session,
            cut,
            written,
            on_disk,
        });
    }
    let _ = vehicle.0.kill();
    eprintln!(
        "power cuts on .{}: {cuts} ({counts:?}), seed {seed}; at most {worst_lost} bytes of \
         log lost by a cut ({:.2} s of the stream)",
        kind.extension(),
        worst_lost as f64 / kind.bytes_per_s() as f64
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
    Some(simulator(&real, port, seed, extra))
}

/// The simulated ArduPilot playing its own hover log [`ARDUPILOT_SPEED`] times faster than
/// flown to `port`, with 2 % loss; `None` (said loudly) without the log.
fn ardupilot_vehicle(port: u16, seed: u64) -> Option<(Proc, Receiver<String>)> {
    let speed = ["--speed".into(), ARDUPILOT_SPEED.to_string()];
    Some(simulator(&ardupilot_log()?, port, seed, &speed))
}

/// `ulog-recv sim LOG` to `port` at [`LINK_RATE`] with 2 % loss from `seed`, and `extra`.
fn simulator(log: &Path, port: u16, seed: u64, extra: &[String]) -> (Proc, Receiver<String>) {
    let mut args = vec![
        "sim".into(),
        log.display().to_string(),
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
    Proc::spawn_watched("the simulator", &args)
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
    let kind = cut.kind;
    let split_file = |name: &str| name.ends_with(&format!(".{}", kind.extension()));
    // Removed as empty, its name then free for the new session when it opens within the
    // same second.
    if !dir.exists() || dir == opened {
        // Removed as empty: only right if nothing of a message was on the disk.
        for (name, bytes) in &cut.on_disk {
            if split_file(name) {
                assert!(
                    kind.whole(bytes) <= kind.empty_len(),
                    "{context}: {} removed, but {name} held {} bytes of whole messages on the disk",
                    dir.display(),
                    kind.whole(bytes)
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
        let whole = kind.whole(disk);
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
        for name in written.keys().filter(|n| split_file(n)) {
            let on_disk = cut.on_disk.get(name).map_or(0, |b| kind.whole(b));
            let listed = manifest.all_splits().any(|s| &s.file == name);
            assert!(
                listed || on_disk <= kind.empty_len(),
                "{context}: {name} ({on_disk} bytes of whole messages on the disk) is not in the manifest"
            );
        }
        // One sync interval of the stream (`--fsync-interval`, 1 s), and what arrives while
        // the sync itself runs (a quarter of a second here, with other tests beside).
        let bound = kind.bytes_per_s() + kind.bytes_per_s() / 4;
        assert!(
            lost <= bound,
            "{context}: the cut lost {lost} bytes of log, more than {bound} (1.25 s of the stream)"
        );
    }
    // The repaired splits open in the autopilot's reader (pyulog, and decode there as here;
    // DFReader); the session in `info`.
    for split in manifest.all_splits() {
        let torn = cut.written.as_ref().is_none_or(|w| {
            w.get(&split.file)
                .is_some_and(|b| b.len() as u64 != split.summary.bytes)
        });
        if torn {
            kind.check_opens(&dir.join(&split.file));
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
