//! The daemon's Prometheus metrics and health check as a fleet uses them: a real Prometheus
//! (Debian's `prometheus`) scrapes `--metrics` every second while the simulated vehicle
//! streams at 2 % loss, the daemon fills the flight from the vehicle's SD log and uploads it
//! to a real Garage; Prometheus's HTTP API is then asked, and every figure agrees with what
//! `info` and `uploads` read from the session on disk and what the bucket holds (boto3).
//! `promtool check metrics` finds nothing to say of the exposition; counters never go back
//! across a SIGHUP. `/healthz` answers 503 with the reason while the link cannot open.
//! The alert rules pass `promtool check rules` and fire on recorded series (`promtool test
//! rules`); the guide, the rules and the Grafana dashboard name only metrics the daemon has.
//!
//! Without Prometheus, Garage or pyulog's virtualenv the tests say SKIPPED, and fail under CI.

use crate::common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::garage::{Garage, SECRET_KEY, credentials, free_tcp_port, free_tcp_ports};
use common::procs::{BIN, Proc, free_udp_port, fresh_dir, session_dirs, wait_for_line};
use serde_json::Value as Json;
use ulog_recv::monitor::catalogue::{ALL, Kind};

fn skip_or_fail(what: &str) {
    eprintln!("SKIPPED: {what}");
    assert!(
        std::env::var_os("CI").is_none(),
        "CI must run the metrics tests: {what}"
    );
}

fn monitoring_dir() -> PathBuf {
    common::project().join("docs/monitoring")
}

/// `GET path` on `addr`: the status code and the body.
fn http_get(addr: &str, path: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap_or_else(|e| panic!("{addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, body.to_string())
}

fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A real Prometheus scraping `target` every second.
struct Prometheus {
    child: Child,
    addr: String,
}

impl Prometheus {
    fn start(dir: &Path, target: &str) -> Option<Self> {
        let binary = Path::new("/usr/bin/prometheus");
        if !binary.exists() {
            skip_or_fail("no /usr/bin/prometheus (Debian's prometheus package)");
            return None;
        }
        std::fs::create_dir_all(dir).unwrap();
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: ulog-recv\n    static_configs:\n      \
                 - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let addr = format!("127.0.0.1:{}", free_tcp_port());
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start prometheus");
        let p = Prometheus { child, addr };
        let t0 = Instant::now();
        while std::net::TcpStream::connect(&p.addr).is_err()
            || http_get(&p.addr, "/-/ready").0 != 200
        {
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "Prometheus not ready"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        Some(p)
    }

    /// The instant query's samples: (labels, value).
    fn query(&self, promql: &str) -> Vec<(Json, f64)> {
        let (status, body) = http_get(
            &self.addr,
            &format!("/api/v1/query?query={}", url_encode(promql)),
        );
        assert_eq!(status, 200, "{promql}: {body}");
        let v: Json = serde_json::from_str(&body).unwrap();
        v["data"]["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let value = r["value"][1].as_str().unwrap().parse().unwrap();
                (r["metric"].clone(), value)
            })
            .collect()
    }

    /// The one value of `promql`.
    fn value(&self, promql: &str) -> f64 {
        let r = self.query(promql);
        assert_eq!(r.len(), 1, "{promql}: {r:?}");
        r[0].1
    }

    /// Waits until Prometheus's last scrape of the daemon is newer than `after`.
    fn scraped_since(&self, after: std::time::SystemTime) {
        let after = after
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let t0 = Instant::now();
        loop {
            let r = self.query("timestamp(up{job=\"ulog-recv\"})");
            if r.first().is_some_and(|(_, at)| *at > after + 1.0) {
                return;
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "no new scrape");
            std::thread::sleep(Duration::from_millis(300));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn promtool(args: &[&str], stdin: Option<&str>) -> (bool, String) {
    let mut child = Command::new("promtool")
        .args(args)
        .current_dir(monitoring_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool");
    let mut input = child.stdin.take().unwrap();
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).unwrap();
    }
    drop(input);
    let out = child.wait_with_output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

fn json_of(args: &[&str], path: &Path) -> Json {
    common::json_output(Command::new(BIN).args(args).arg(path))
}

/// A real PX4 log without a dropout of its logger's own: every dropout in the sessions is
/// the link's.
const FLIGHT: &str = "sample_px4_events.ulg";

#[test]
fn a_real_prometheus_scraping_the_daemon_agrees_with_info_uploads_and_the_bucket() {
    let Some(logs_there) = common::shared_logs() else {
        return;
    };
    let flight = logs_there
        .into_iter()
        .find(|p| p.ends_with(FLIGHT))
        .expect(FLIGHT);
    let Some(py) = common::venv_python() else {
        return skip_or_fail("no virtualenv with pyulog and boto3 (.venv)");
    };
    let garage = match Garage::start(fresh_dir("garage-metrics")) {
        Ok(g) => g,
        Err(e) => return skip_or_fail(&e),
    };
    let dir = fresh_dir("metrics-e2e");
    let logs = dir.join("logs");
    let creds = credentials(&dir, SECRET_KEY);
    let [metrics_port] = free_tcp_ports::<1>();
    let target = format!("127.0.0.1:{metrics_port}");
    let Some(prometheus) = Prometheus::start(&dir.join("prometheus"), &target) else {
        return;
    };
    let own = json_of(&["info", "--json"], &flight)["dropouts"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(own, 0, "{FLIGHT} has dropouts of its own");

    let port = free_udp_port();
    let mut args: Vec<String> = [
        "--udp",
        &format!("127.0.0.1:{port}"),
        "--log-dir",
        logs.to_str().unwrap(),
        "--no-socket",
        "--fill",
        "auto",
        "--metrics",
        &metrics_port.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(garage.upload_args("fleet", &creds));
    let (mut daemon, lines) = Proc::spawn_watched("the daemon", &args);
    let line = wait_for_line(&lines, "metrics on http://", Duration::from_secs(20));
    assert!(
        line.contains(&format!("http://127.0.0.1:{metrics_port}/metrics")),
        "a port alone binds loopback: {line}"
    );
    let (mut sim, sim_lines) = Proc::spawn_watched(
        "the simulator",
        &[
            "sim".into(),
            flight.display().to_string(),
            "--udp-connect".into(),
            format!("127.0.0.1:{port}"),
            "--link-rate".into(),
            "400000".into(),
            "--loss".into(),
            "0.02".into(),
            "--seed".into(),
            "7".into(),
        ],
    );
    wait_for_line(&sim_lines, "whole log was sent", Duration::from_secs(120));
    // The log ends: the session closes (the daemon asks for the next log, which the vehicle
    // starts again), the fill takes the first one's losses back from the SD log over the same
    // link, then that session goes to the bucket, its amendments with it. Then the vehicle is
    // switched off: the last session closes (its fill fails: no vehicle), it goes to the
    // bucket, and the counters stand still.
    wait_for_line(
        &lines,
        "filled from the vehicle's SD log",
        Duration::from_secs(120),
    );
    wait_for_line(&lines, "session uploaded", Duration::from_secs(120));
    sim.0.kill().unwrap();
    let _ = sim.0.wait();
    wait_for_line(&lines, "log session closed", Duration::from_secs(60));
    let t0 = Instant::now();
    let listing = loop {
        let listing =
            common::text_output(Command::new(BIN).args(["uploads", "--log-dir"]).arg(&logs));
        if listing.lines().all(|l| l.contains("  uploaded  ")) {
            break listing;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "never all uploaded: {listing}"
        );
        std::thread::sleep(Duration::from_secs(1));
    };
    prometheus.scraped_since(std::time::SystemTime::now());

    // A SIGHUP (a new split, the config re-read) takes nothing back.
    let before_hup = prometheus.value("ulog_recv_chunks_received_total");
    assert!(before_hup > 0.0);
    unsafe { libc::kill(daemon.0.id() as i32, libc::SIGHUP) };
    std::thread::sleep(Duration::from_secs(1));
    prometheus.scraped_since(std::time::SystemTime::now());
    for def in ALL.iter().filter(|d| d.kind == Kind::Counter) {
        let resets = format!("sum(resets({}[10m])) or vector(0)", def.name);
        assert_eq!(prometheus.value(&resets), 0.0, "{} went back", def.name);
    }
    assert_eq!(
        prometheus.value("ulog_recv_chunks_received_total"),
        before_hup
    );

    // The exposition as a scraper gets it: promtool has nothing to say, and it is small.
    let (status, exposition) = http_get(&target, "/metrics");
    assert_eq!(status, 200);
    let (ok, said) = promtool(&["check", "metrics"], Some(&exposition));
    assert!(
        ok && said.trim().is_empty(),
        "promtool check metrics: {said}"
    );
    assert!(exposition.len() < 16 * 1024, "{} bytes", exposition.len());
    for def in ALL
        .iter()
        .filter(|d| d.name != "ulog_recv_logs_budget_bytes")
    {
        assert!(
            exposition.contains(&format!("# TYPE {} {}", def.name, def.kind.as_str())),
            "{} missing from the exposition",
            def.name
        );
    }
    let (status, health) = http_get(&target, "/healthz");
    assert_eq!((status, health.as_str()), (200, "ok\n"));

    // What Prometheus holds against the sessions on disk, as `info` reads them.
    let sessions = session_dirs(&logs);
    assert!(sessions.len() >= 2, "{sessions:?}");
    let infos: Vec<Json> = (sessions.iter())
        .map(|s| json_of(&["info", "--json"], s)["session"].clone())
        .collect();
    let total = |f: &dyn Fn(&Json) -> f64| infos.iter().map(f).sum::<f64>();
    let v = |q: &str| prometheus.value(q);
    let dropouts = total(&|i| i["dropouts_received"].as_f64().unwrap());
    assert!(dropouts > 0.0, "2 % loss lost nothing: {infos:?}");
    assert_eq!(v("ulog_recv_dropouts_total"), dropouts);
    assert!(v("ulog_recv_dropout_duration_seconds_count") <= dropouts);
    assert!(v("ulog_recv_dropout_duration_seconds_sum") > 0.0);
    assert_eq!(v("ulog_recv_logs_total"), sessions.len() as f64);
    let stored = total(&|i| {
        (i["columns"].as_array().unwrap().iter())
            .map(|c| c["bytes"].as_f64().unwrap())
            .sum()
    });
    assert_eq!(v("ulog_recv_store_written_bytes_total"), stored);
    assert_eq!(v("ulog_recv_log_received_bytes_total"), stored);
    let splits = total(&|i| i["splits"].as_f64().unwrap());
    assert_eq!(v("ulog_recv_splits_closed_total"), splits);
    assert!(v("ulog_recv_chunks_lost_total") >= dropouts);
    assert!(v("ulog_recv_chunks_received_total") > v("ulog_recv_chunks_lost_total") * 10.0);
    assert!(v("ulog_recv_acks_sent_total") > 0.0);
    assert_eq!(
        v("ulog_recv_ack_latency_seconds_count"),
        v("ulog_recv_acks_sent_total")
    );
    assert_eq!(v("ulog_recv_store_dropped_samples_total"), 0.0);
    assert_eq!(v("ulog_recv_store_writing"), 1.0);
    assert_eq!(v("ulog_recv_link_open{link=\"udp\"}"), 1.0);
    assert_eq!(
        v("ulog_recv_link_up{link=\"udp\"}"),
        0.0,
        "the vehicle is off"
    );
    assert!(v("ulog_recv_store_fsync_seconds_count") > 0.0);
    // The flight diagnostics' findings, each an event of its session, by analyzer and
    // severity.
    let mut findings = std::collections::BTreeMap::<(String, String), f64>::new();
    for event in infos.iter().flat_map(|i| i["events"].as_array().unwrap()) {
        if let Some(f) = event["finding"].as_object() {
            let key = (
                f["id"].as_str().unwrap().into(),
                f["severity"].as_str().unwrap().into(),
            );
            *findings.entry(key).or_default() += 1.0;
        }
    }
    assert!(
        !findings.is_empty(),
        "{FLIGHT} holds GPS interference: {infos:?}"
    );
    assert_eq!(
        v("sum(ulog_recv_findings_total)"),
        findings.values().sum::<f64>()
    );
    for ((analyzer, severity), n) in &findings {
        let q =
            format!("ulog_recv_findings_total{{analyzer=\"{analyzer}\",severity=\"{severity}\"}}");
        assert_eq!(v(&q), *n, "{q}");
    }
    // The fill of the first session: whole, what it recovered in the session's record.
    let first = &infos[0];
    assert!(first["records_recovered"].as_u64().unwrap() > 0, "{first}");
    assert_eq!(first["unfilled"].as_array().unwrap().len(), 0, "{first}");
    assert!(v("ulog_recv_fill_runs_total{outcome=\"done\"}") >= 1.0);
    assert_eq!(v("ulog_recv_fill_missing_dropouts"), 0.0);
    assert!(v("ulog_recv_fill_recovered_bytes_total") > 0.0);
    assert!(v("ulog_recv_fill_fetched_bytes_total") >= v("ulog_recv_fill_recovered_bytes_total"));
    // The uploads: against `uploads`, the sessions' marks and what boto3 finds in the bucket.
    let uploaded: Vec<&PathBuf> = (sessions.iter())
        .filter(|s| s.join(ulog_recv::store::files::UPLOADED_MARK).exists())
        .collect();
    assert_eq!(uploaded.len(), sessions.len(), "{listing}");
    assert_eq!(
        listing.matches("  uploaded  ").count(),
        sessions.len(),
        "{listing}"
    );
    assert_eq!(v("ulog_recv_upload_pending_sessions"), 0.0);
    let bucket = garage.objects(&py, "fleet/");
    let objects = bucket["objects"].as_object().unwrap();
    let is_split = |k: &str| k.ends_with(".ulg") && !k.contains("/amend_");
    let split_bytes: f64 = (objects.iter())
        .filter(|(k, _)| is_split(k))
        .map(|(_, o)| o["size"].as_f64().unwrap())
        .sum();
    let splits_in_bucket = objects.keys().filter(|k| is_split(k)).count() as f64;
    assert_eq!(splits_in_bucket, splits, "{bucket}");
    // The fill's amendments went up with their session.
    let amendments = total(&|i| i["amendments"].as_array().unwrap().len() as f64);
    assert!(amendments > 0.0);
    let amended = objects.keys().filter(|k| k.contains("/amend_")).count() as f64;
    assert_eq!(amended, amendments, "{bucket}");
    // Each object once at least (a manifest goes again as its session moves on).
    let sent = v("ulog_recv_upload_objects_total");
    assert!(sent >= objects.len() as f64, "{sent} {bucket}");
    assert!(v("ulog_recv_upload_bytes_total") >= split_bytes);
    let newest_mark = (uploaded.iter())
        .map(|s| {
            let m = std::fs::metadata(s.join(ulog_recv::store::files::UPLOADED_MARK)).unwrap();
            let t = m
                .modified()
                .unwrap()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap();
            t.as_secs_f64()
        })
        .fold(0.0, f64::max);
    assert!((v("ulog_recv_upload_last_complete_timestamp_seconds") - newest_mark).abs() < 1e-3);
    assert_eq!(v("sum(ulog_recv_upload_failures_total) or vector(0)"), 0.0);
    assert!(v("process_resident_memory_bytes") > 1e6);
    let version = format!(
        "ulog_recv_build_info{{version=\"{}\"}}",
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(v(&version), 1.0);
    assert!(daemon.terminate().success());
}

#[test]
fn healthz_says_503_and_why_while_the_link_cannot_open() {
    let dir = fresh_dir("metrics-health");
    let [metrics_port, closed] = free_tcp_ports::<2>();
    let target = format!("127.0.0.1:{metrics_port}");
    let (mut daemon, lines) = Proc::spawn_watched(
        "the daemon",
        &[
            "--tcp".into(),
            format!("127.0.0.1:{closed}"),
            "--log-dir".into(),
            dir.join("logs").display().to_string(),
            "--no-socket".into(),
            "--metrics".into(),
            target.clone(),
        ],
    );
    wait_for_line(&lines, "metrics on http://", Duration::from_secs(20));
    let (status, body) = http_get(&target, "/healthz");
    assert_eq!(
        (status, body.as_str()),
        (200, "ok\n"),
        "not yet: a reconnect takes time"
    );
    let t0 = Instant::now();
    let (status, body) = loop {
        let (status, body) = http_get(&target, "/healthz");
        if status != 200 || t0.elapsed() > Duration::from_secs(20) {
            break (status, body);
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(status, 503, "{body}");
    assert!(body.starts_with("the link has not opened for "), "{body}");
    let (_, exposition) = http_get(&target, "/metrics");
    assert!(
        exposition.contains("ulog_recv_link_open{link=\"tcp\"} 0"),
        "{exposition}"
    );
    assert_eq!(http_get(&target, "/nothing").0, 404);
    assert!(daemon.terminate().success());
}

/// Every `ulog_recv_…` name in `text`.
fn names_in(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("ulog_recv_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        // A prefix in a pattern (`ulog_recv_(a|b)`) is not a name.
        if !tail[..end].ends_with('_') {
            names.push(tail[..end].to_string());
        }
        rest = &tail[end..];
    }
    names
}

/// A name the exposition has: a metric's own, or a histogram's series.
fn exported(name: &str) -> bool {
    ALL.iter().any(|d| {
        d.name == name
            || (d.kind == Kind::Histogram
                && ["_bucket", "_sum", "_count"]
                    .iter()
                    .any(|s| name == format!("{}{s}", d.name)))
    })
}

#[test]
fn the_rules_fire_and_the_guide_rules_and_dashboard_name_only_metrics_the_daemon_has() {
    if Command::new("promtool").arg("--version").output().is_err() {
        return skip_or_fail("no promtool (Debian's prometheus package)");
    }
    let (ok, said) = promtool(&["check", "rules", "ulog-recv.rules.yml"], None);
    assert!(ok, "{said}");
    let (ok, said) = promtool(&["test", "rules", "ulog-recv.rules.test.yml"], None);
    assert!(ok && said.contains("SUCCESS"), "{said}");
    let rules = std::fs::read_to_string(monitoring_dir().join("ulog-recv.rules.yml")).unwrap();
    let dashboard =
        std::fs::read_to_string(monitoring_dir().join("grafana-dashboard.json")).unwrap();
    let _: Json = serde_json::from_str(&dashboard).expect("the dashboard is JSON");
    let chapter = std::fs::read_to_string(common::project().join("docs/src/metrics.md")).unwrap();
    for (what, text) in [
        ("rules", &rules),
        ("dashboard", &dashboard),
        ("guide", &chapter),
    ] {
        for name in names_in(text) {
            assert!(
                exported(&name),
                "the {what} names {name}, which the daemon does not export"
            );
        }
    }
    // The guide's table: each metric, its kind and its labels, as the catalogue says.
    for def in ALL {
        let labels = def.labels.join(", ");
        let row = format!("| `{}` | {} | {} |", def.name, def.kind.as_str(), labels);
        assert!(chapter.contains(&row), "the guide lacks the row {row}");
    }
}
