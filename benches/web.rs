//! The web page's cost, measured on the daemon as it runs (a process):
//!
//! 1. The daemon receives the simulated vehicle (`ulog-recv sim --synthetic`, a process, over
//!    loopback UDP) for [`SECONDS`] s, without `--http`, then with it and the page open (the
//!    page's first requests, then its event stream read as a browser reads it), taking turns,
//!    [`ROUNDS`] rounds each: the daemon's CPU time per MB received and its peak RSS (both from
//!    `wait4`), medians. Runs of the same kind differ by more than the page costs, so what the
//!    page costs is also measured where it is spent: the page's thread's own CPU time (the
//!    kernel's `schedstat` of that thread, in ns) as a share of the whole daemon's, and the
//!    network loop's calls into the page's feed (a status a second, an event per vehicle or
//!    stream change), timed in this process. Goals: at most 3 % more CPU per MB, at most 2 MB
//!    more RSS.
//! 2. `GET /api/flights` with 1,000 sessions in the log directory (copies of one the daemon
//!    recorded): the first answer after the start (every manifest read once), then
//!    [`GETS`] answers, median and worst. Goal: at most 50 ms.
//!
//! 3. `GET /api/flights/{id}/signals` (the flight view's plots) on the session of a real PX4
//!    log (`../shared/testdata/ulog/sample.ulg`, 4 MB) streamed whole: [`SIGNAL_GETS`]
//!    answers, median, against pyulog (the peer: Flight Review reads a log with it before it
//!    plots) reading the same file in the same session, median of [`PEER_RUNS`].
//!
//! Run: `cargo bench --bench web` (`-- list`, `-- cost` or `-- signals` for one part).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_ulog-recv");
/// Seconds of stream per round.
const SECONDS: u64 = 15;
/// Rounds of each kind.
const ROUNDS: usize = 5;
/// The link's rate (PX4's MAV_x_RATE): the log streams at 70 % of it.
const LINK_RATE: u64 = 1_500_000;
/// Sessions in the log directory for the list's timing.
const SESSIONS: usize = 1000;
/// Warm `GET /api/flights` timed.
const GETS: usize = 50;
/// `GET /api/flights/{id}/signals` timed.
const SIGNAL_GETS: usize = 10;
/// pyulog's reads of the same log timed.
const PEER_RUNS: usize = 5;

fn free_port(udp: bool) -> u16 {
    if udp {
        std::net::UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    } else {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }
}

/// `GET path` (HTTP/1.0): the status and the body.
fn get(port: u16, path: &str) -> (u16, Vec<u8>) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
    let mut bytes = Vec::new();
    s.read_to_end(&mut bytes).unwrap();
    let split = bytes.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or(0);
    let status = String::from_utf8_lossy(&bytes[..split.min(12)])
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, bytes[(split + 4).min(bytes.len())..].to_vec())
}

fn daemon(log_dir: &Path, udp: u16, http: Option<u16>) -> Child {
    let mut cmd = Command::new(BIN);
    cmd.args([
        "--udp",
        &format!("127.0.0.1:{udp}"),
        "--no-socket",
        "--log-dir",
    ])
    .arg(log_dir)
    .env("RUST_LOG", "warn")
    .stdout(Stdio::piped())
    .stderr(Stdio::null());
    if let Some(port) = http {
        cmd.args(["--http", &port.to_string()]);
    }
    cmd.spawn().expect("start the daemon")
}

fn wait_listening(port: u16) {
    let t0 = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the page never listened"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The CPU time of each of `pid`'s threads so far, ns, by the thread's name.
fn thread_cpu(pid: u32) -> Vec<(String, u64)> {
    let mut threads = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        let stat = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
        let ns = stat
            .split_whitespace()
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        threads.push((comm.trim().to_owned(), ns));
    }
    threads
}

/// Stops the daemon (SIGTERM) and reaps it: its CPU seconds, peak RSS in MB, and the log
/// bytes it says it received.
fn stop(mut child: Child) -> (f64, f64, u64) {
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let mut stdout = child.stdout.take().unwrap();
    let mut status = 0;
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 writes the status and the usage given.
    unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    let mut said = String::new();
    stdout.read_to_string(&mut said).unwrap();
    let bytes = said
        .lines()
        .find_map(|l| {
            let rest = l.strip_prefix("received ")?;
            rest.split(", ").nth(1)?.split(' ').next()?.parse().ok()
        })
        .unwrap_or(0);
    let cpu = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (
        cpu(usage.ru_utime) + cpu(usage.ru_stime),
        usage.ru_maxrss as f64 / 1024.0,
        bytes,
    )
}

/// The page open: its first requests, then its event stream read until `on` goes false;
/// the events read.
fn open_page(
    port: u16,
    on: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        for path in [
            "/",
            "/assets/app.js",
            "/assets/style.css",
            "/api/session",
            "/api/flights",
            "/api/status",
        ] {
            assert_eq!(get(port, path).0, 200, "{path}");
        }
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        write!(s, "GET /api/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
        let mut events = 0;
        let mut buf = [0u8; 16384];
        while on.load(std::sync::atomic::Ordering::Relaxed) {
            if let Ok(n) = s.read(&mut buf) {
                events += buf[..n].windows(7).filter(|w| w == b"event: ").count() as u64;
            }
        }
        events
    })
}

/// One round's figures.
#[derive(Clone, Copy)]
struct Round {
    cpu_ms_per_mb: f64,
    rss_mb: f64,
    mb: f64,
    /// Events the page read.
    events: u64,
    /// The page's thread's share of the daemon's CPU time.
    web_share: f64,
    /// The daemon's CPU time, ns, all threads, over the round.
    daemon_ns: u64,
    /// The network loop's CPU ms per MB received (its thread's own time).
    loop_ms_per_mb: f64,
}

/// One round.
fn round(dir: &Path, page: bool) -> Round {
    let logs = dir.join(format!("logs-{}", fastrand::u64(..)));
    let (udp, http) = (free_port(true), free_port(false));
    let child = daemon(&logs, udp, page.then_some(http));
    let on = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let reader = page.then(|| {
        wait_listening(http);
        open_page(http, on.clone())
    });
    let mut sim = Command::new(BIN)
        .args([
            "sim",
            "--synthetic",
            "--duration",
            "3600",
            "--link-rate",
            &LINK_RATE.to_string(),
        ])
        .args(["--udp-connect", &format!("127.0.0.1:{udp}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(SECONDS));
    let threads = thread_cpu(child.id());
    let daemon_ns: u64 = threads.iter().map(|(_, ns)| ns).sum();
    let named = |wanted: &str| -> u64 {
        (threads.iter())
            .filter(|(name, _)| name == wanted)
            .map(|(_, ns)| ns)
            .sum()
    };
    let web_ns = named("ulog-recv-web");
    // The main thread is the network loop.
    let loop_ns = named("ulog-recv");
    let (cpu, rss, bytes) = stop(child);
    let _ = sim.kill();
    let _ = sim.wait();
    on.store(false, std::sync::atomic::Ordering::Relaxed);
    let events = reader.map_or(0, |r| r.join().unwrap());
    let _ = std::fs::remove_dir_all(&logs);
    let mb = bytes as f64 / 1e6;
    Round {
        cpu_ms_per_mb: cpu * 1000.0 / mb,
        rss_mb: rss,
        mb,
        events,
        web_share: web_ns as f64 / daemon_ns.max(1) as f64,
        daemon_ns,
        loop_ms_per_mb: loop_ns as f64 / 1e6 / mb,
    }
}

/// What one call of the network loop into the page's feed costs, ns: a status report (what
/// it does once a second) with a subscriber reading, as the page's event stream is.
fn feed_call_ns() -> f64 {
    use ulog_recv::web::live::{LiveState, WebFeed};
    let feed = WebFeed::new(LiveState::new("udp", "udp listen 127.0.0.1:14550".into()));
    let mut reader = feed.subscribe();
    let stats = ulog_recv::link::SessionStats::default();
    let storage = ulog_recv::store::thread::StorageStats::default();
    let calls = 20_000;
    let t0 = Instant::now();
    for _ in 0..calls {
        feed.status(&stats, &storage, 0, true, Some("idle".into()));
        let _ = reader.try_recv();
    }
    t0.elapsed().as_nanos() as f64 / calls as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn cost(dir: &Path) {
    let mut without = Vec::new();
    let mut with = Vec::new();
    for k in 0..ROUNDS {
        // Taking turns, the order changing each round.
        let order = if k % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for page in order {
            let r = round(dir, page);
            eprintln!(
                "round {k}, page {}: {:.1} CPU ms/MB, {:.1} MB RSS, {:.1} MB received, {} events, \
                 the page's thread {:.3} % of the daemon's CPU",
                if page { "open" } else { "off" },
                r.cpu_ms_per_mb,
                r.rss_mb,
                r.mb,
                r.events,
                100.0 * r.web_share
            );
            if page {
                with.push(r);
            } else {
                without.push(r);
            }
        }
    }
    let of = |v: &[Round], f: fn(&Round) -> f64| median(v.iter().map(f).collect());
    let (cpu_off, cpu_on) = (
        of(&without, |r| r.cpu_ms_per_mb),
        of(&with, |r| r.cpu_ms_per_mb),
    );
    let spread = |v: &[Round]| {
        let cpu: Vec<f64> = v.iter().map(|r| r.cpu_ms_per_mb).collect();
        let (lo, hi) = (
            cpu.iter().copied().fold(f64::MAX, f64::min),
            cpu.iter().copied().fold(0.0, f64::max),
        );
        100.0 * (hi / lo - 1.0)
    };
    let (rss_off, rss_on) = (of(&without, |r| r.rss_mb), of(&with, |r| r.rss_mb));
    let web_share = of(&with, |r| r.web_share);
    // The network loop's feed calls: a status a second, and about as many events again at
    // most (vehicle, stream and session changes are rarer than that).
    let feed_ns = feed_call_ns();
    let daemon_ns_per_s = of(&with, |r| r.daemon_ns as f64) / SECONDS as f64;
    let feed_share = 2.0 * feed_ns / daemon_ns_per_s;
    let added = web_share + feed_share;
    println!(
        "\nThe daemon receiving {SECONDS} s of log at {LINK_RATE} B/s link rate, {ROUNDS} rounds each (medians):\n"
    );
    println!("| | without --http | with the page open | goal |");
    println!("|---|---:|---:|---|");
    println!(
        "| CPU ms per MB received, all threads | {cpu_off:.1} (runs differ by {:.0} %) | {cpu_on:.1} (runs differ by {:.0} %) | |",
        spread(&without),
        spread(&with)
    );
    println!(
        "| the network loop's own CPU ms per MB (its thread's time) | {:.1} | {:.1} | |",
        of(&without, |r| r.loop_ms_per_mb),
        of(&with, |r| r.loop_ms_per_mb)
    );
    println!(
        "| the page's thread, share of the daemon's CPU | | {:.3} % | |",
        100.0 * web_share
    );
    println!(
        "| the network loop's feed calls ({feed_ns:.0} ns each, 2 a second), share | | {:.4} % | |",
        100.0 * feed_share
    );
    println!(
        "| what the page adds to the daemon's CPU | | {:.3} % | ≤ 3 % {} |",
        100.0 * added,
        if added <= 0.03 { "met" } else { "MISSED" }
    );
    println!(
        "| peak RSS, MB | {rss_off:.1} | {rss_on:.1} ({:+.2} MB) | ≤ 2 MB {} |",
        rss_on - rss_off,
        if rss_on - rss_off <= 2.0 {
            "met"
        } else {
            "MISSED"
        }
    );
}

/// A session's copy `k` under `logs`, named as the daemon names one.
fn copy_session(from: &Path, logs: &Path, k: usize) {
    let name = format!(
        "2026-01-01T{:02}-{:02}-{:02}Z_sys1",
        k / 3600,
        (k / 60) % 60,
        k % 60
    );
    let to = logs.join(name);
    std::fs::create_dir_all(&to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        if e.path().is_file() {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

fn list(dir: &Path) {
    // One real session, recorded from the simulated vehicle.
    let recorded = dir.join("recorded");
    let udp = free_port(true);
    let child = daemon(&recorded, udp, None);
    let mut sim = Command::new(BIN)
        .args(["sim", "--synthetic", "--duration", "60", "--loss", "0.02"])
        .args(["--udp-connect", &format!("127.0.0.1:{udp}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(4));
    stop(child);
    let _ = sim.kill();
    let _ = sim.wait();
    let session: PathBuf = std::fs::read_dir(&recorded)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.join("manifest.json").exists())
        .expect("a session");
    let logs = dir.join("thousand");
    for k in 0..SESSIONS {
        copy_session(&session, &logs, k);
    }
    let http = free_port(false);
    let child = daemon(&logs, free_port(true), Some(http));
    wait_listening(http);
    let t0 = Instant::now();
    let (status, body) = get(http, "/api/flights");
    let first = t0.elapsed();
    assert_eq!(status, 200);
    let rows: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(rows.as_array().map(Vec::len), Some(SESSIONS));
    let mut times: Vec<f64> = (0..GETS)
        .map(|_| {
            let t0 = Instant::now();
            let (status, _) = get(http, "/api/flights");
            assert_eq!(status, 200);
            t0.elapsed().as_secs_f64() * 1000.0
        })
        .collect();
    times.sort_by(f64::total_cmp);
    stop(child);
    let (p50, worst) = (times[times.len() / 2], times[times.len() - 1]);
    println!(
        "\n`GET /api/flights` with {SESSIONS} sessions ({} KB of JSON):\n",
        body.len() / 1024
    );
    println!("| answer | ms | goal |");
    println!("|---|---:|---|");
    println!(
        "| the first, as soon as the page listens | {:.1} | |",
        first.as_secs_f64() * 1000.0
    );
    println!(
        "| then, median of {GETS} | {p50:.1} | ≤ 50 ms {} |",
        if p50 <= 50.0 { "met" } else { "MISSED" }
    );
    println!(
        "| then, worst of {GETS} | {worst:.1} | ≤ 50 ms {} |",
        if worst <= 50.0 { "met" } else { "MISSED" }
    );
}

fn signals(dir: &Path) {
    let project = Path::new(env!("CARGO_MANIFEST_DIR"));
    let log = project.join("../shared/testdata/ulog/sample.ulg");
    let python = project.join(".venv/bin/python");
    if !log.exists() || !python.exists() {
        println!(
            "\nSKIPPED the signals' timing: no {} or no {}",
            log.display(),
            python.display()
        );
        return;
    }
    let logs = dir.join("signals");
    let (udp, http) = (free_port(true), free_port(false));
    let child = daemon(&logs, udp, Some(http));
    wait_listening(http);
    let status = Command::new(BIN)
        .arg("sim")
        .arg(&log)
        .args([
            "--once",
            "--link-rate",
            "0",
            "--udp-connect",
            &format!("127.0.0.1:{udp}"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "the simulator failed");
    let t0 = Instant::now();
    let (id, session_bytes) = loop {
        let (_, body) = get(http, "/api/flights");
        let rows: serde_json::Value = serde_json::from_slice(&body).unwrap();
        if let Some(row) = rows.get(0).filter(|r| r["closed"] == true) {
            break (
                row["id"].as_str().unwrap().to_owned(),
                row["size_bytes"].as_u64().unwrap(),
            );
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the flight never closed"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let path = format!("/api/flights/{id}/signals");
    let (mut bytes, mut points) = (0, 0);
    let ours = median(
        (0..SIGNAL_GETS)
            .map(|_| {
                let t0 = Instant::now();
                let (status, body) = get(http, &path);
                let ms = t0.elapsed().as_secs_f64() * 1000.0;
                assert_eq!(status, 200);
                let reply: serde_json::Value = serde_json::from_slice(&body).unwrap();
                bytes = body.len();
                points = reply["series"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|s| s["t_us"].as_array().unwrap().len())
                    .sum();
                ms
            })
            .collect(),
    );
    stop(child);
    let script = "import sys, time\nfrom pyulog import ULog\nt0 = time.perf_counter()\n\
                  ULog(sys.argv[1])\nprint((time.perf_counter() - t0) * 1000)";
    let peer = median(
        (0..PEER_RUNS)
            .map(|_| {
                let out = Command::new(&python)
                    .args(["-c", script])
                    .arg(&log)
                    .output()
                    .unwrap();
                assert!(
                    out.status.success(),
                    "pyulog: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
            })
            .collect(),
    );
    let mb = std::fs::metadata(&log).unwrap().len() as f64 / 1e6;
    println!(
        "\nThe flight view's signals of a real log's session ({:.1} MB recorded of the log's \
         {mb:.1} MB; {points} points, {} KB of JSON):\n",
        session_bytes as f64 / 1e6,
        bytes / 1024
    );
    println!("| read | ms, median | MB/s |");
    println!("|---|---:|---:|");
    println!(
        "| `GET /api/flights/{{id}}/signals`, of {SIGNAL_GETS} | {ours:.0} | {:.0} |",
        mb / ours * 1000.0
    );
    println!(
        "| pyulog's `ULog(file)` (the peer), of {PEER_RUNS} | {peer:.0} | {:.0} |",
        mb / peer * 1000.0
    );
    println!("| ratio, ours to the peer's | {:.2} | |", ours / peer);
}

fn main() {
    // `cargo bench` passes `--bench`; a part's name runs that part alone.
    let only = std::env::args().skip(1).find(|a| !a.starts_with("--"));
    let runs = |part: &str| only.as_deref().is_none_or(|o| o == part);
    let dir = std::env::temp_dir().join(format!("ulog-recv-bench-web-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    if runs("list") {
        list(&dir);
    }
    if runs("signals") {
        signals(&dir);
    }
    if runs("cost") {
        cost(&dir);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
