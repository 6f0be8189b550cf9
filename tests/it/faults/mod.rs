//! Faults cost time, never data, tried for real on the daemon as a process:
//! - a slow SD card: every fsync delayed 2 s by `strace --inject` (Debian's strace), during a
//!   12 MB flight at 20,000 chunks/s: all of it on disk, exit 0 within 10 s of SIGTERM, acks
//!   never waiting for a sync;
//! - a disk that stalls (a 5 s fsync): memory stays at the queue's bound, the log
//!   gets a dropout for what did not fit, receiving and acking go on;
//! - leftovers of a crash (an open split replaced by a directory, a truncated manifest, an
//!   empty split, an unreadable split): the daemon starts, says one line per broken session,
//!   records the next flight whole;
//! - kill -9 every 2 s through a 60 s flight: every file parses in pyulog, and each kill
//!   loses at most the last second (a kill: the kernel keeps what was written; real power
//!   cuts and torn writes, on LazyFS, are `power`, `torn`, `fill_cut`, `upload_cut`,
//!   `dataset_cut` and `soak`);
//! - a daemon held up (SIGSTOP for 60 ms, ten times) while the vehicle streams: the backlog
//!   in its socket is read whole;
//! - nonsense values for every size, duration and interval option, at start and on SIGHUP,
//!   and `--socket` at a regular file, a directory, a live socket (`settings`).

mod dataset_cut;
mod fill_cut;
mod power;
mod settings;
mod soak;
mod torn;
mod upload_cut;

use crate::common;

use std::io::{BufRead, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use common::procs::{BIN, Proc, free_udp_port, fresh_dir, ulg_files, wait_for_line};
use ulog_recv::sim::chunk_log;
use ulog_recv::sim::synth::{SynthOptions, generate};

/// The daemon under strace: both are killed if the test fails.
struct Traced {
    strace: Child,
    daemon: i32,
}

impl Traced {
    /// Waits for strace (whose exit status is the daemon's), at most `limit`.
    fn wait(&mut self, limit: Duration) -> std::process::ExitStatus {
        let t0 = Instant::now();
        loop {
            if let Some(status) = self.strace.try_wait().unwrap() {
                return status;
            }
            assert!(
                t0.elapsed() < limit,
                "the daemon did not exit within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Traced {
    fn drop(&mut self) {
        unsafe { libc::kill(self.daemon, libc::SIGKILL) };
        let _ = self.strace.kill();
        let _ = self.strace.wait();
    }
}

/// The daemon under strace with every fsync and fdatasync delayed by `delay` (`when` picks
/// which calls, strace's syntax), and its stderr lines.
fn daemon_with_slow_syncs(
    args: &[String],
    delay: &str,
    when: Option<&str>,
) -> (Traced, Receiver<String>) {
    let strace =
        common::procs::strace("slow the disk down for real").expect("checked by the caller");
    let inject = match when {
        Some(w) => format!("inject=fsync,fdatasync:delay_enter={delay}:when={w}"),
        None => format!("inject=fsync,fdatasync:delay_enter={delay}"),
    };
    let mut child = Command::new(strace)
        .args([
            "-f",
            "-qq",
            "--seccomp-bpf",
            "-e",
            "trace=fsync,fdatasync",
            "-e",
        ])
        .arg(&inject)
        .args(["-o", "/dev/null", BIN])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = forward_lines(child.stderr.take().unwrap());
    // The daemon: strace's child that runs (strace may leave a helper child behind).
    let children = format!("/proc/{0}/task/{0}/children", child.id());
    let t0 = Instant::now();
    let daemon = loop {
        let text = std::fs::read_to_string(&children).unwrap_or_default();
        let running = text.split_whitespace().find(|pid| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            let state = status
                .lines()
                .find_map(|l| l.strip_prefix("State:"))
                .unwrap_or("");
            let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
            !state.trim_start().starts_with('Z') && exe == Path::new(BIN)
        });
        if let Some(pid) = running {
            break pid.parse().unwrap();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "strace started no daemon"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    (
        Traced {
            strace: child,
            daemon,
        },
        lines,
    )
}

/// Lines of `stream`, shown and sent to the channel.
fn forward_lines(stream: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stream)
            .lines()
            .map_while(Result::ok)
        {
            eprintln!("{line}");
            let _ = tx.send(line);
        }
    });
    rx
}

/// `ulog-recv sim` streaming a synthetic flight of `seconds` to `port` at `chunks_per_s`.
fn sim(port: u16, seconds: u32, chunks_per_s: u64, once: bool) -> (Proc, Receiver<String>) {
    // PX4 streams at 70 % of the link's configured rate; a full chunk is 267 bytes on the wire.
    let link_rate = (chunks_per_s * 267 * 10).div_ceil(7);
    let mut args = vec![
        "sim".to_string(),
        "--synthetic".into(),
        "--duration".into(),
        seconds.to_string(),
        "--link-rate".into(),
        link_rate.to_string(),
        "--udp-connect".into(),
        format!("127.0.0.1:{port}"),
    ];
    if once {
        args.push("--once".into());
    }
    Proc::spawn_watched("the simulator", &args)
}

/// What the simulator streams for a synthetic flight of `seconds`, post-flight data included.
fn streamed(seconds: u32) -> Vec<u8> {
    let log = chunk_log(
        &generate(SynthOptions {
            duration_s: seconds,
            seed: 1,
            appended_data: false,
        }),
        0,
    )
    .unwrap();
    [log.stream, log.postflight].concat()
}

/// The daemon's ack latency p99 in µs, from its summary line.
fn ack_p99_us(summary: &str) -> u64 {
    let p99 = summary
        .split("ack latency")
        .nth(1)
        .and_then(|s| s.split("p99 ").nth(1))
        .and_then(|s| s.split_whitespace().next())
        .unwrap_or_else(|| panic!("no ack latency in {summary:?}"));
    p99.parse().unwrap()
}

fn terminate(pid: i32) {
    unsafe { libc::kill(pid, libc::SIGTERM) };
}

#[test]
fn a_slow_card_costs_time_never_data() {
    if common::procs::strace("slow the disk down for real").is_none() {
        return;
    }
    // It loads the machine (a flight at 20,000 chunks/s) and its timings are the point.
    let _alone = common::alone();
    let dir = fresh_dir("slow-card");
    let port = free_udp_port();
    let args = vec![
        "--udp".to_string(),
        port.to_string(),
        "--no-socket".into(),
        "--log-dir".into(),
        dir.display().to_string(),
    ];
    let (mut traced, log) = daemon_with_slow_syncs(&args, "2s", None);
    // About 12 MB of log at 20,000 chunks/s: 2.5 s of stream.
    let seconds = 1600;
    let (mut vehicle, vehicle_log) = sim(port, seconds, 20_000, true);
    wait_for_line(
        &vehicle_log,
        "the whole log was sent",
        Duration::from_secs(60),
    );
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    terminate(traced.daemon);
    let status = traced.wait(Duration::from_secs(30));
    let took = t0.elapsed();
    assert!(status.success(), "{status:?}");
    assert!(took < Duration::from_secs(10), "exit took {took:?}");
    assert!(vehicle.wait(Duration::from_secs(10)).success());
    let mut summary = String::new();
    traced
        .strace
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut summary)
        .unwrap();
    let p99 = ack_p99_us(&summary);
    let v: serde_json::Value = serde_json::from_str(vehicle.stdout_text().trim()).unwrap();
    eprintln!("slow card: exit {took:?} after SIGTERM, acks p99 {p99} µs; vehicle {v}");
    // Acks never wait for a sync: a blocked loop would show seconds here, a busy two-core
    // machine shows a millisecond or two.
    assert!(p99 < 50_000, "acks p99 {p99} µs while every sync took 2 s");
    assert_eq!(v["ack_timeouts"], 0, "{v}");
    assert!(v["longest_ack_wait_ms"].as_u64().unwrap() < 500, "{v}");
    // All of it on disk, byte for byte: the stream and the post-flight data.
    let files = ulg_files(&dir);
    assert_eq!(files.len(), 1, "{files:?}");
    let expected = streamed(seconds);
    assert!(expected.len() > 12_000_000, "{} bytes", expected.len());
    assert!(
        std::fs::read(&files[0]).unwrap() == expected,
        "the file is not the flight"
    );
    let m = ulog_recv::store::files::read_manifest(files[0].parent().unwrap()).unwrap();
    assert!(m.closed && m.splits[0].closed);
    let lines: Vec<String> = log.try_iter().collect();
    assert!(
        !lines.iter().any(|l| l.contains("cannot keep up")),
        "{lines:#?}"
    );
}

/// Peak resident memory of a process, KB.
fn peak_rss_kb(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// The live socket's next `stats` line.
fn stats_line(socket: &Path) -> serde_json::Value {
    let mut s = std::os::unix::net::UnixStream::connect(socket).unwrap();
    s.write_all(b"{\"subscribe\": []}\n").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut r = std::io::BufReader::new(s);
    loop {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        if v["type"] == "stats" {
            return v;
        }
    }
}

#[test]
fn a_disk_that_stalls_keeps_memory_bounded_and_receiving_and_acking_go_on() {
    if common::procs::strace("slow the disk down for real").is_none() {
        return;
    }
    // It loads the machine (a flight at 20,000 chunks/s) and its timings are the point.
    let _alone = common::alone();
    let dir = fresh_dir("stall");
    std::fs::create_dir_all(&dir).unwrap();
    let port = free_udp_port();
    let socket = dir.join("live.sock");
    let bound: u64 = 4 << 20;
    let args = vec![
        "--udp".to_string(),
        port.to_string(),
        "--socket".into(),
        socket.display().to_string(),
        "--log-dir".into(),
        dir.join("logs").display().to_string(),
        "--store-queue".into(),
        "4M".into(),
    ];
    // The second sync (the new session's manifest) blocks the store for 5 s.
    let (mut traced, log) = daemon_with_slow_syncs(&args, "5s", Some("2"));
    let daemon = traced.daemon;
    // About 60 MB of log at 20,000 chunks/s: 11 s, the first 5 while the store is stuck, so
    // that samples after the stall tell the dropout's length.
    // The daemon's own memory before any log (its code and threads): the queue's bound is
    // held against what it takes beyond that.
    let t0 = Instant::now();
    while !socket.exists() {
        assert!(t0.elapsed() < Duration::from_secs(20), "no live socket");
        std::thread::sleep(Duration::from_millis(20));
    }
    let idle = peak_rss_kb(daemon) << 10;
    let (mut vehicle, vehicle_log) = sim(port, 7200, 20_000, true);
    wait_for_line(&log, "log session opened", Duration::from_secs(20));
    std::thread::sleep(Duration::from_secs(2));
    // The status says so while it lasts.
    let stats = stats_line(&socket);
    assert!(
        stats["storage"]["stalled_ms"]
            .as_u64()
            .is_some_and(|ms| ms >= 1000),
        "{stats}"
    );
    assert!(
        stats["storage"]["lost_samples"].as_u64().unwrap() > 0,
        "{stats}"
    );
    wait_for_line(
        &vehicle_log,
        "the whole log was sent",
        Duration::from_secs(60),
    );
    let peak = peak_rss_kb(daemon) << 10;
    // The store comes back and writes what waited; then the daemon stops.
    let t0 = Instant::now();
    loop {
        let stats = stats_line(&socket);
        if stats["storage"]["queued_bytes"] == 0 && stats["storage"]["stalled_ms"].is_null() {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "{stats}");
    }
    terminate(daemon);
    assert!(traced.wait(Duration::from_secs(60)).success());
    assert!(vehicle.wait(Duration::from_secs(10)).success());
    let v: serde_json::Value = serde_json::from_str(vehicle.stdout_text().trim()).unwrap();
    assert_eq!(v["ack_timeouts"], 0, "acks went on: {v}");
    assert!(v["longest_ack_wait_ms"].as_u64().unwrap() < 500, "{v}");
    eprintln!(
        "stalled disk: peak RSS {:.1} MB ({:.1} MB idle) with a {} MB queue; vehicle {v}",
        peak as f64 / (1 << 20) as f64,
        idle as f64 / (1 << 20) as f64,
        bound >> 20
    );
    // Two queues hold log bytes: the store's (`--store-queue`) and the live publisher's
    // backlog (8 MB), each counting the bytes it holds.
    assert!(
        peak < idle + bound + (8 << 20),
        "peak RSS {} MB ({} MB idle) with a {} MB queue",
        peak >> 20,
        idle >> 20,
        bound >> 20
    );
    // The file: whole messages, a dropout of ours where samples did not fit, and pyulog
    // reads it.
    let files = ulg_files(&dir.join("logs"));
    assert!(!files.is_empty());
    let bytes: Vec<u8> = files
        .iter()
        .flat_map(|f| std::fs::read(f).unwrap())
        .collect();
    let summary = ulog_recv::ulog::summary::summarize(&std::fs::read(&files[0]).unwrap()).unwrap();
    // The synthetic flight has one dropout of its own (30 ms, four seconds in).
    assert!(summary.dropouts.len() >= 2, "{:?}", summary.dropouts);
    eprintln!("stalled disk: dropouts in the log {:?}", summary.dropouts);
    assert!(summary.dropouts.iter().any(|d| d.duration_ms > 1000));
    for f in &files {
        common::check_with_pyulog(f);
    }
    assert!(bytes.len() > 4 << 20);
}

/// A session written by the store and left open, as a crash leaves it.
fn crashed_session(log_dir: &Path, second: u64) -> PathBuf {
    use ulog_recv::store::{LogStore, StoreOptions};
    let mut store = LogStore::open(StoreOptions::new(log_dir.to_owned())).unwrap();
    let t = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + second);
    let dir = store
        .begin_log((1, 1), t, ulog_recv::autopilot::LogFormat::ULog)
        .unwrap();
    store
        .write(&generate(SynthOptions {
            duration_s: 5,
            seed: 2,
            appended_data: false,
        }))
        .unwrap();
    store.sync().unwrap();
    std::mem::forget(store); // no end: the session stays open
    dir
}

#[test]
fn leftovers_of_a_crash_never_stop_a_start() {
    // As root, the daemon runs as nobody, who must reach its log directory: the test's folder
    // may lie under a home directory only its owner enters (CI builds in ~/.cache), so then
    // the logs go under the system's temporary directory, replaced at each run and removed
    // when the test passes.
    let root = unsafe { libc::geteuid() } == 0;
    let dir = if root {
        let reachable = std::env::temp_dir().join("ulog-recv-it-leftovers");
        let _ = std::fs::remove_dir_all(&reachable);
        reachable
    } else {
        fresh_dir("leftovers")
    };
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    // An open split replaced by a directory.
    let a = crashed_session(&logs, 1);
    std::fs::remove_file(a.join("split_0000.ulg")).unwrap();
    std::fs::create_dir(a.join("split_0000.ulg")).unwrap();
    // A truncated manifest.
    let b = crashed_session(&logs, 2);
    let manifest = std::fs::read(b.join("manifest.json")).unwrap();
    std::fs::write(b.join("manifest.json"), &manifest[..manifest.len() / 2]).unwrap();
    // A zero-length split.
    let c = crashed_session(&logs, 3);
    std::fs::File::options()
        .write(true)
        .open(c.join("split_0000.ulg"))
        .unwrap()
        .set_len(0)
        .unwrap();
    // A split the daemon cannot read: root's and private while it runs as nobody, or no
    // permission at all when the test is not root.
    let d = crashed_session(&logs, 4);
    let unreadable = d.join("split_0000.ulg");
    std::fs::set_permissions(
        &unreadable,
        std::fs::Permissions::from_mode(if root { 0o600 } else { 0o000 }),
    )
    .unwrap();
    let port = free_udp_port();
    let daemon_args = [
        "--udp".to_string(),
        port.to_string(),
        "--no-socket".into(),
        "--log-dir".into(),
        logs.display().to_string(),
    ];
    let mut command = if root {
        // Everything but the unreadable split belongs to nobody.
        for entry in walk(&logs) {
            if entry != unreadable {
                std::os::unix::fs::chown(&entry, Some(65534), Some(65534)).unwrap();
            }
        }
        std::os::unix::fs::chown(&logs, Some(65534), Some(65534)).unwrap();
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN]);
        c
    } else {
        Command::new(BIN)
    };
    let mut daemon = Proc(
        command
            .args(daemon_args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
        "the daemon",
    );
    let log = forward_lines(daemon.0.stderr.take().unwrap());
    let (mut vehicle, vehicle_log) = sim(port, 20, 2000, true);
    wait_for_line(
        &vehicle_log,
        "the whole log was sent",
        Duration::from_secs(60),
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(daemon.terminate().success());
    assert!(vehicle.wait(Duration::from_secs(10)).success());
    let lines: Vec<String> = log.try_iter().collect();
    // One line per broken session, naming it and the cause.
    for (session, cause) in [
        (&a, "not a regular file"),
        (&b, "manifest cannot be read"),
        (&d, "ermission denied"),
    ] {
        let name = session.file_name().unwrap().to_string_lossy().into_owned();
        let said: Vec<&String> = lines
            .iter()
            .filter(|l| l.contains(&name) && l.contains("ERROR"))
            .collect();
        assert_eq!(said.len(), 1, "{name}: {lines:#?}");
        assert!(said[0].contains(cause), "{}", said[0]);
        let aside = PathBuf::from(format!("{}.unrecoverable", session.display()));
        assert!(aside.is_dir() && !session.exists(), "{name} set aside");
    }
    // The empty one held nothing: gone.
    assert!(!c.exists());
    // The next flight, whole.
    let new: Vec<PathBuf> = ulg_files(&logs)
        .into_iter()
        .filter(|f| !f.to_string_lossy().contains(".unrecoverable"))
        .collect();
    assert_eq!(new.len(), 1, "{new:?}");
    assert!(std::fs::read(&new[0]).unwrap() == streamed(20));
    // A second start meets the set-aside sessions and leaves them alone, quietly.
    let out = Command::new(BIN)
        .args([
            "--udp",
            &free_udp_port().to_string(),
            "--no-socket",
            "--log-dir",
        ])
        .arg(&logs)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    terminate(out.id() as i32);
    let out = out.wait_with_output().unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("ERROR"), "{err}");
    if root {
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// Every path under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        }
        out.push(p);
    }
    out
}

/// Follows a daemon's live socket: the largest sample timestamp seen so far (µs), until the
/// daemon goes.
fn follow_samples(socket: PathBuf) -> std::sync::Arc<std::sync::atomic::AtomicU64> {
    use std::sync::atomic::{AtomicU64, Ordering};
    let seen = std::sync::Arc::new(AtomicU64::new(0));
    let out = seen.clone();
    std::thread::spawn(move || {
        let t0 = Instant::now();
        let stream = loop {
            match std::os::unix::net::UnixStream::connect(&socket) {
                Ok(s) => break s,
                Err(_) if t0.elapsed() < Duration::from_secs(3) => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Err(_) => return,
            }
        };
        let mut w = stream.try_clone().unwrap();
        w.write_all(b"{\"subscribe\": [\"*\"]}\n").unwrap();
        for line in std::io::BufReader::new(stream)
            .lines()
            .map_while(Result::ok)
        {
            if line.starts_with("{\"type\":\"data\"")
                && let Ok(v) = serde_json::from_str::<serde_json::Value>(&line)
                && let Some(t) = v["timestamp"].as_u64()
            {
                out.fetch_max(t, Ordering::Relaxed);
            }
        }
    });
    seen
}

#[test]
fn kill_9_every_2_s_through_a_60_s_flight_loses_at_most_the_last_second() {
    use std::sync::atomic::Ordering;
    // It loads the machine (a flight at 20,000 chunks/s) and its timings are the point.
    let _alone = common::alone();
    let dir = fresh_dir("kill-every-2s");
    let logs = dir.join("logs");
    std::fs::create_dir_all(&dir).unwrap();
    let port = free_udp_port();
    // The vehicle streams at the pace it logs, so that a second of stream is a second of log.
    let minute = generate(SynthOptions {
        duration_s: 60,
        seed: 1,
        appended_data: false,
    });
    let chunks_per_s = (minute.len() as u64 / 60).div_ceil(249);
    let (mut vehicle, _) = sim(port, 600, chunks_per_s, false);
    let mut runs = Vec::new();
    for run in 0..30 {
        let socket = dir.join(format!("live{run}.sock"));
        let mut daemon = Proc::spawn(
            "the daemon",
            &[
                "--udp".into(),
                port.to_string(),
                "--socket".into(),
                socket.display().to_string(),
                "--log-dir".into(),
                logs.display().to_string(),
            ],
        );
        let seen = follow_samples(socket);
        std::thread::sleep(Duration::from_secs(2));
        daemon.0.kill().unwrap(); // SIGKILL: no STOP, no flush, nothing
        daemon.0.wait().unwrap();
        runs.push(seen.load(Ordering::Relaxed));
    }
    // A last start repairs what the last kill left.
    let mut daemon = Proc::spawn(
        "the daemon",
        &[
            "--udp".into(),
            free_udp_port().to_string(),
            "--no-socket".into(),
            "--log-dir".into(),
            logs.display().to_string(),
        ],
    );
    std::thread::sleep(Duration::from_secs(1));
    assert!(daemon.terminate().success());
    let _ = vehicle.0.kill();
    // One session per run that received samples, in order; each holds all but (at most) the
    // last second of what its daemon had received.
    let mut sessions: Vec<PathBuf> = std::fs::read_dir(&logs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    sessions.sort();
    let received: Vec<u64> = runs.into_iter().filter(|&t| t > 0).collect();
    assert!(
        received.len() >= 25,
        "{} runs received samples",
        received.len()
    );
    assert_eq!(sessions.len(), received.len(), "{sessions:?}");
    let mut worst = 0;
    for (session, &seen) in sessions.iter().zip(&received) {
        let m = ulog_recv::store::files::read_manifest(session).unwrap();
        assert!(m.closed, "{} repaired and closed", session.display());
        let last = m
            .splits
            .iter()
            .filter_map(|s| s.summary.last_timestamp)
            .max()
            .unwrap_or(0);
        let lost = seen.saturating_sub(last);
        worst = worst.max(lost);
        assert!(
            lost <= 1_000_000,
            "{}: samples up to {seen} µs received, up to {last} µs kept",
            session.display()
        );
        for f in ulg_files(session) {
            common::check_with_pyulog(&f);
        }
    }
    eprintln!(
        "kill -9 every 2 s: {} sessions, at most {} ms of log lost per kill",
        sessions.len(),
        worst / 1000
    );
}

#[test]
fn a_daemon_held_up_reads_its_backlog_whole() {
    // A companion computer busy elsewhere: the daemon is stopped (SIGSTOP) for 60 ms at a
    // time while the vehicle streams, so that a hundred or more datagrams wait in its socket
    // each time, far under the socket's buffer. Every one of them must reach the file.
    // It loads the machine (a flight at 20,000 chunks/s) and its timings are the point.
    let _alone = common::alone();
    let dir = fresh_dir("held-up");
    let port = free_udp_port();
    let (mut daemon, log) = Proc::spawn_watched(
        "the daemon",
        &[
            "--udp".to_string(),
            port.to_string(),
            "--no-socket".into(),
            "--log-dir".into(),
            dir.display().to_string(),
        ],
    );
    let pid = daemon.0.id() as i32;
    let seconds = 900;
    let (mut vehicle, vehicle_log) = sim(port, seconds, 2000, true);
    wait_for_line(&log, "log session opened", Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(500));
    for _ in 0..10 {
        unsafe { libc::kill(pid, libc::SIGSTOP) };
        std::thread::sleep(Duration::from_millis(60));
        unsafe { libc::kill(pid, libc::SIGCONT) };
        std::thread::sleep(Duration::from_millis(200));
    }
    wait_for_line(
        &vehicle_log,
        "the whole log was sent",
        Duration::from_secs(60),
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(daemon.terminate().success());
    assert!(vehicle.wait(Duration::from_secs(10)).success());
    let files = ulg_files(&dir);
    assert_eq!(files.len(), 1, "{files:?}");
    let got = std::fs::read(&files[0]).unwrap();
    let expected = streamed(seconds);
    assert!(
        got == expected,
        "the file is not the flight: {} bytes of {}, dropouts {:?}",
        got.len(),
        expected.len(),
        ulog_recv::ulog::summary::summarize(&got).map(|s| s.dropouts)
    );
}
