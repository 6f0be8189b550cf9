//! Torn writes, then a crash, on LazyFS: one write of which only some parts reach the disk
//! (`torn-op`), or a sequence of writes without a sync of which only some do (`torn-seq`),
//! on the open split, the manifest and the signing clock's reservation; LazyFS dies right
//! after, as the power would. The daemon's wall clock is frozen (libfaketime) so that its
//! session's files are named before they exist, which LazyFS needs to aim at them.
//!
//! After each, the next start repairs the session as after any power cut (checked as the
//! power-cut test checks it: each split exactly the whole messages the disk held, the
//! manifest true to the files, pyulog and `info` open it), and a torn reservation never
//! stops a signed start nor takes its timestamps back.

use std::path::Path;
use std::time::Duration;

use super::power::{
    Cut, CutSession, LogKind, check_repaired, daemon_args, newest_session, real_vehicle, snapshot,
    wait_session_opened,
};
use crate::common::lazyfs::{Injection, LazyFs, fault_seed, frozen_clock_env};
use crate::common::procs::{Proc, free_udp_port};

/// The daemon's frozen wall clock, and so its session's name.
const FROZEN_AT: &str = "2030-01-01 00:00:00";
const SESSION: &str = "logs/2030-01-01T00-00-00Z_sys1";

/// How many [`cases`].
const CASES: usize = 6;

/// The torn writes: each its name, and the injection on a path under LazyFS's `root`.
fn cases(root: &Path, rng: &mut fastrand::Rng) -> Vec<(&'static str, Injection)> {
    let split = root.join(SESSION).join("split_0000.ulg");
    let manifest = root.join(SESSION).join("manifest.json.tmp");
    // The store hands the kernel what each turn of its loop wrote: about 40 writes a second
    // here, 150 for the whole log; a tear after the first sync (at 1 s) and before the end.
    let (w1, w2) = (rng.u32(45..140), rng.u32(45..140));
    // A sequence runs from one sync of the file to the next (a second): the second to fourth.
    let (s1, s2) = (rng.u32(2..5), rng.u32(2..5));
    vec![
        (
            "a split's write, its middle lost",
            Injection::TornOp {
                file: split.clone(),
                occurrence: w1,
                parts: 4,
                persist: vec![1, 3],
            },
        ),
        (
            "a split's write, its start lost",
            Injection::TornOp {
                file: split.clone(),
                occurrence: w2,
                parts: 2,
                persist: vec![2],
            },
        ),
        (
            "a split's writes since its sync, every other one lost",
            Injection::TornSeq {
                file: split.clone(),
                occurrence: s1,
                persist: vec![1, 3],
            },
        ),
        (
            "a split's writes since its sync, the first lost",
            Injection::TornSeq {
                file: split,
                occurrence: s2,
                persist: vec![2, 3],
            },
        ),
        (
            "the manifest's write, half of it",
            Injection::TornOp {
                file: manifest.clone(),
                occurrence: 2,
                parts: 2,
                persist: vec![1],
            },
        ),
        (
            "the manifest's write, its end only",
            Injection::TornOp {
                file: manifest,
                occurrence: 3,
                parts: 4,
                persist: vec![4],
            },
        ),
    ]
}

#[test]
fn torn_writes_then_a_crash_leave_every_session_repaired_whole() {
    let seed = fault_seed("torn writes");
    let Some(frozen) = frozen_clock_env(FROZEN_AT) else {
        return;
    };
    let frozen: Vec<(&str, &str)> = frozen.iter().map(|(k, v)| (*k, v.as_str())).collect();
    for k in 0..CASES {
        let Some(mut fs) = LazyFs::mount(&format!("torn-{k}"), &[]) else {
            return;
        };
        // Aimed at this mount's files.
        let mut rng = fastrand::Rng::with_seed(seed.wrapping_add(k as u64));
        let (name, injection) = cases(&fs.root, &mut rng).swap_remove(k);
        fs.remount(std::slice::from_ref(&injection));
        let logs = fs.mount.join("logs");
        let port = free_udp_port();
        let Some((mut vehicle, _)) = real_vehicle(port, seed, &[]) else {
            return;
        };
        let args = daemon_args(port, &logs, &[]);
        let (mut daemon, lines) = Proc::spawn_watched_with_env("the daemon", &args, &frozen);
        wait_session_opened(&lines, &fs, &args, 0);
        let session = newest_session(&logs);
        assert!(
            session.ends_with(SESSION),
            "the frozen clock names the session: {}",
            session.display()
        );
        let torn = fs.wait_crashed(Duration::from_secs(20));
        let _ = daemon.0.kill();
        let _ = daemon.0.wait();
        assert!(
            torn,
            "seed {seed}, {name}: LazyFS never tore the write ({injection:?})"
        );
        fs.remount(&[]);
        let cut = CutSession {
            kind: LogKind::Ulog,
            dir: session,
            cut: Cut::Torn,
            written: None,
            on_disk: snapshot(&fs.root.join(SESSION)),
        };
        let (mut daemon, lines) = Proc::spawn_watched("the daemon", &args);
        let opened = wait_session_opened(&lines, &fs, &args, 1);
        check_repaired(&cut, &format!("seed {seed}, {name}"), &opened);
        assert!(daemon.terminate().success());
        let _ = vehicle.0.kill();
    }
}

#[test]
fn a_torn_signing_reservation_neither_stops_a_signed_start_nor_takes_its_clock_back() {
    use std::os::unix::fs::PermissionsExt;
    use ulog_recv::shell::keyfile::RESERVATION_FILE;
    let reservation_tmp = |root: &Path| root.join("logs").join(format!("{RESERVATION_FILE}.tmp"));
    let Some(mut fs) = LazyFs::mount("torn-reservation", &[]) else {
        return;
    };
    // The second start's reservation: half of its number on the disk, then the power gone
    // (each start writes the number, then the line's end).
    fs.remount(&[Injection::TornOp {
        file: reservation_tmp(&fs.root),
        occurrence: 3,
        parts: 2,
        persist: vec![1],
    }]);
    let key = fs.mount.parent().unwrap().join("key");
    std::fs::write(&key, format!("{}\n", "5a".repeat(32))).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let signing = vec!["--signing-key".to_string(), key.display().to_string()];
    let port = free_udp_port();
    let Some((mut vehicle, _)) = real_vehicle(port, 1, &signing) else {
        return;
    };
    let logs = fs.mount.join("logs");
    let key = key.display().to_string();
    let args = daemon_args(port, &logs, &["--signing-key", &key]);
    let (mut first, lines) = Proc::spawn_watched("the daemon", &args);
    wait_session_opened(&lines, &fs, &args, 0);
    let _ = first.0.kill();
    let _ = first.0.wait();
    let (mut second, _) = Proc::spawn_watched("the daemon", &args);
    let torn = fs.wait_crashed(Duration::from_secs(20));
    let _ = second.0.kill();
    let _ = second.0.wait();
    assert!(torn, "LazyFS never tore the reservation's write");
    fs.remount(&[]);
    let read = |fs: &LazyFs| -> u64 {
        let path = fs.root.join("logs").join(RESERVATION_FILE);
        let text = std::fs::read_to_string(&path).unwrap();
        text.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{} holds {text:?}", path.display()))
    };
    // The first start's reservation, whole: the torn one never took its name.
    let before = read(&fs);
    let (mut third, lines) = Proc::spawn_watched("the daemon", &args);
    // The vehicle takes only signed frames: a log opens only on our signed START.
    wait_session_opened(&lines, &fs, &args, 2);
    let after = read(&fs);
    assert!(
        after > before,
        "the reservation went from {before} to {after}: timestamps used again"
    );
    assert!(third.terminate().success());
    let _ = vehicle.0.kill();
}
