//! End to end, the Foxglove server, read by Foxglove's own libraries: the daemon and
//! `ulog-recv sim` as processes over loopback UDP; two clients (`tests/foxglove/client.mjs`:
//! `@foxglove/ws-protocol` over `ws`, schemas parsed by `@foxglove/rosmsg`, messages decoded by
//! `@foxglove/rosmsg2-serialization`), one per subprotocol, subscribe to every channel as it is
//! advertised. For every real log and the synthetic one, each topic instance has pyulog's
//! sample count, first and last values and first and last log times; every message's log
//! time is its `timestamp` in ns; `/log` holds the logged strings; `/diagnostics` holds
//! the findings `info --diagnostics` makes in the file, at the times they were made (as
//! `diagnostic_msgs/msg/DiagnosticArray`, which Foxglove's Diagnostics panels show). Also: the server binds
//! loopback by default, refuses a client without a Foxglove subprotocol, and a client that
//! never reads costs the others nothing.

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::procs::{Proc, free_udp_port, fresh_dir, wait_for_line};
use common::{all_logs, expected_for};
use serde_json::Value as Json;

const SUBPROTOCOLS: [&str; 2] = ["foxglove.sdk.v1", "foxglove.websocket.v1"];

/// How the server's warning to a slow client ends, after the count.
const DROPPED_SUFFIX: &str =
    " messages dropped: this connection reads slower than the vehicle logs";

/// The client's folder, with Foxglove's npm packages installed (`.ci/run` does it). Missing:
/// a loud skip, or a failure under CI.
pub(crate) fn client_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/foxglove");
    if dir.join("node_modules/@foxglove/ws-protocol").exists() {
        return Some(dir);
    }
    let how = "npm ci --prefix tests/foxglove (or run .ci/run once)";
    if std::env::var_os("CI").is_some() {
        panic!("Foxglove's npm packages are missing: CI must check with them ({how})");
    }
    eprintln!("\n!!! SKIPPED the Foxglove client checks: no node_modules; run {how} !!!\n");
    None
}

/// A running Node client; its stderr lines go to a channel (and are shown).
pub(crate) struct NodeClient {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
    /// Its stdout, read as it comes (the report can be larger than a pipe holds).
    stdout: Option<std::thread::JoinHandle<String>>,
}

impl NodeClient {
    /// A client of `url` under `subprotocol`; with `stall`, it stops reading that long after
    /// the first topic channels, until [`resume`](Self::resume).
    pub(crate) fn start(dir: &Path, url: &str, subprotocol: &str, stall: Option<Duration>) -> Self {
        let mut child = Command::new("node")
            .arg(dir.join("client.mjs"))
            .arg(url)
            .arg(subprotocol)
            .args(stall.map(|d| d.as_millis().to_string()))
            // The findings come a moment after the samples they rest on: a second after the
            // log's end is plenty.
            .env("LINGER_MS", "1000")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("node runs");
        let mut out = child.stdout.take().unwrap();
        let stdout = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut out, &mut text);
            text
        });
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("node: {line}");
                let _ = tx.send(line);
            }
        });
        Self {
            child,
            lines,
            stdout: Some(stdout),
        }
    }

    fn resume(&self) {
        unsafe { libc::kill(self.child.id() as i32, libc::SIGUSR2) };
    }

    /// The client's report, once it has seen the log end.
    pub(crate) fn report(mut self, limit: Duration) -> Json {
        let t0 = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            assert!(
                t0.elapsed() < limit,
                "the Foxglove client never saw the log end"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(status.success(), "the Foxglove client failed: {status}");
        let out = self.stdout.take().unwrap().join().unwrap();
        serde_json::from_str(&out).expect("the client's report is JSON")
    }
}

impl Drop for NodeClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The Foxglove server's URL in the daemon's line that names it.
pub(crate) fn ws_url(line: &str) -> String {
    line[line.find("ws://").unwrap()..]
        .split(|c: char| c.is_whitespace() || c == ',' || c == '"')
        .next()
        .unwrap()
        .to_owned()
}

/// The daemon with a Foxglove server on a free loopback port; returns it and the URL.
fn start_daemon(dir: &Path, extra: &[&str]) -> (Proc, String, u16) {
    let port = free_udp_port();
    let mut args: Vec<String> = vec![
        "--udp".into(),
        port.to_string(),
        "--log-dir".into(),
        dir.join("logs").display().to_string(),
        "--no-socket".into(),
        "--foxglove".into(),
        "0".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let (daemon, lines) = Proc::spawn_watched("the daemon", &args);
    let url = ws_url(&wait_for_line(&lines, "ws://", Duration::from_secs(10)));
    // Drain the rest of its lines in the background.
    std::thread::spawn(move || for _ in lines {});
    (daemon, url, port)
}

fn start_sim(log: &Path, port: u16, rate: u64) -> Proc {
    Proc::spawn(
        "the simulator",
        &[
            "sim".into(),
            log.display().to_string(),
            "--once".into(),
            "--link-rate".into(),
            (rate * 10 / 7).to_string(),
            "--udp-connect".into(),
            format!("127.0.0.1:{port}"),
        ],
    )
}

#[test]
fn foxgloves_libraries_read_every_topic_of_every_log_under_both_subprotocols() {
    // A daemon, a simulator and Node clients decoding everything: a client starved of CPU
    // by another test would fall behind by itself.
    let _alone = common::alone();
    let Some(client) = client_dir() else { return };
    for log in all_logs() {
        let name = log.file_stem().unwrap().to_string_lossy().into_owned();
        let expected = expected_for(&log);
        let findings = crate::diagnostics::our_findings(&log);
        let dir = fresh_dir(&format!("foxglove-{name}"));
        std::fs::create_dir_all(&dir).unwrap();
        // Room for the whole flight in each client's queue: this test is about values, the
        // one below about slow clients.
        let (mut daemon, url, port) = start_daemon(&dir, &["--client-queue", "256M"]);
        assert!(
            url.starts_with("ws://127.0.0.1:"),
            "loopback by default: {url}"
        );
        let clients: Vec<NodeClient> = SUBPROTOCOLS
            .iter()
            .map(|p| NodeClient::start(&client, &url, p, None))
            .collect();
        for c in &clients {
            wait_for_line(&c.lines, "ready", Duration::from_secs(20));
        }
        let mut sim = start_sim(&log, port, 1_500_000);
        assert!(sim.wait(Duration::from_secs(60)).success());
        for (c, p) in clients.into_iter().zip(SUBPROTOCOLS) {
            let report = c.report(Duration::from_secs(60));
            assert_eq!(report["subprotocol"], p);
            assert_eq!(
                report["statuses"].as_array().unwrap().len(),
                0,
                "{report:.200}"
            );
            common::check_ros2_report(&format!("{name} ({p})"), &report, &expected);
            common::check_diagnostics(&format!("{name} ({p})"), &report, &findings);
        }
        assert!(daemon.terminate().success());
    }
}

/// A WebSocket handshake by hand (`Sec-WebSocket-Protocol: offered`); the status line.
fn handshake_status(url: &str, offered: Option<&str>) -> String {
    use std::io::Write;
    let addr = url.trim_start_matches("ws://");
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    let protocol = offered
        .map(|p| format!("Sec-WebSocket-Protocol: {p}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "GET / HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{protocol}\r\n"
    )
    .unwrap();
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).unwrap();
    line
}

#[test]
fn a_client_without_a_foxglove_subprotocol_is_refused_and_a_stuck_one_harms_nobody() {
    // A daemon, a simulator and Node clients decoding everything: a client starved of CPU
    // by another test would fall behind by itself.
    let _alone = common::alone();
    let Some(client) = client_dir() else { return };
    let log = all_logs()
        .into_iter()
        .find(|p| p.ends_with("sample.ulg"))
        .unwrap_or_else(|| all_logs()[0].clone());
    let expected = expected_for(&log);
    let dir = fresh_dir("foxglove-stuck");
    std::fs::create_dir_all(&dir).unwrap();
    let (mut daemon, url, port) = start_daemon(&dir, &["--client-queue", "256K"]);
    assert!(handshake_status(&url, None).contains(" 400 "));
    assert!(handshake_status(&url, Some("chat")).contains(" 400 "));
    assert!(handshake_status(&url, Some("foxglove.websocket.v1")).contains(" 101 "));
    // A client that subscribes to everything, then stops reading (once the topics at the
    // log's start are advertised); and one that reads.
    let stuck = NodeClient::start(
        &client,
        &url,
        "foxglove.sdk.v1",
        Some(Duration::from_millis(500)),
    );
    let reader = NodeClient::start(&client, &url, "foxglove.websocket.v1", None);
    for c in [&stuck, &reader] {
        wait_for_line(&c.lines, "ready", Duration::from_secs(20));
    }
    // A rate the reader keeps up with on a busy machine: the point is what the stuck client
    // costs it (nothing), not how fast Node decodes.
    let mut sim = start_sim(&log, port, 700_000);
    wait_for_line(&stuck.lines, "stalled", Duration::from_secs(20));
    assert!(sim.wait(Duration::from_secs(60)).success());
    let report = reader.report(Duration::from_secs(60));
    assert_eq!(
        report["statuses"],
        serde_json::json!([]),
        "the reader lost nothing"
    );
    common::check_ros2_report("reader beside a stuck client", &report, &expected);
    stuck.resume();
    let stuck_report = stuck.report(Duration::from_secs(60));
    // It is told how many of its messages went: those and the ones it got are all the
    // messages of its subscriptions, which the reader got whole.
    let total = |r: &Json| -> u64 {
        r["channels"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["count"].as_u64().unwrap())
            .sum()
    };
    let dropped: u64 = stuck_report["statuses"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["level"] == 1)
        .filter_map(|s| s["message"].as_str()?.strip_suffix(DROPPED_SUFFIX))
        .map(|n| n.parse::<u64>().unwrap())
        .sum();
    let warned = dropped > 0;
    eprintln!(
        "stuck client: {} messages, {dropped} dropped; the reader: {}",
        total(&stuck_report),
        total(&report)
    );
    assert_eq!(total(&stuck_report) + dropped, total(&report));
    assert!(warned, "{:.300}", stuck_report["statuses"]);
    assert!(daemon.terminate().success());
}

#[test]
fn a_flight_with_faults_shows_each_finding_on_diagnostics() {
    let _alone = common::alone();
    let Some(client) = client_dir() else { return };
    let dir = fresh_dir("foxglove-faults");
    std::fs::create_dir_all(&dir).unwrap();
    for fault in ["ekf:5000", "gps"] {
        let flight = crate::diagnostics::write_fault_flight(&dir, fault);
        let findings = crate::diagnostics::our_findings(&flight);
        assert!(!findings.is_empty(), "{fault}: the flight has findings");
        let (mut daemon, url, port) = start_daemon(&dir, &["--client-queue", "64M"]);
        let c = NodeClient::start(&client, &url, SUBPROTOCOLS[0], None);
        wait_for_line(&c.lines, "ready", Duration::from_secs(20));
        let mut sim = start_sim(&flight, port, 700_000);
        assert!(sim.wait(Duration::from_secs(60)).success());
        let report = c.report(Duration::from_secs(60));
        let diagnostics = report["channels"]
            .as_array()
            .unwrap()
            .iter()
            .find(|ch| ch["topic"] == "/diagnostics")
            .expect("a /diagnostics channel");
        assert_eq!(
            diagnostics["schemaName"],
            "diagnostic_msgs/msg/DiagnosticArray"
        );
        assert_eq!(diagnostics["timeMismatches"], 0);
        assert_eq!(diagnostics["trailing"], 0);
        common::check_diagnostics(fault, &report, &findings);
        assert!(daemon.terminate().success());
    }
}
