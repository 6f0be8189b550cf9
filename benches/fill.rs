//! Fill benchmark, against PX4 itself: its SITL build streams its log to the daemon (a child
//! process) through a relay that loses a share of the datagrams both ways; then `ulog-recv
//! fill` completes the session from PX4's SD log over the same lossy link, and `ulog-recv
//! fetch` downloads that whole SD log over it, the yardstick. Each row prints the bytes the
//! fill fetched against the bytes it recovered, and its time against the whole download's.
//! Goal: fetched <= 3x recovered, and the fill faster than the download.
//!
//! Rows: one session as the daemon writes it by default, and one in splits of 5 s with the
//! IMU topics in a column of their own (`--column imu=sensor_*`).
//!
//! Run: `cargo bench --bench fill` (optionally `-- SECONDS` of stream per row, default 15).
//! Needs `../shared/vendor/px4-sitl`.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[path = "../tests/it/common/machine.rs"]
#[allow(dead_code)]
mod machine;
#[path = "../tests/it/common/procs.rs"]
#[allow(dead_code)]
mod procs;
#[path = "../tests/it/common/px4.rs"]
#[allow(dead_code)]
mod px4;

use px4::{Px4, Relay};

/// One row of the plan.
struct Row {
    name: &'static str,
    loss: f64,
    daemon_args: &'static [&'static str],
}

const ROWS: &[Row] = &[
    Row {
        name: "one split",
        loss: 0.05,
        daemon_args: &[],
    },
    Row {
        name: "5 s splits, imu column",
        loss: 0.05,
        daemon_args: &["--split-duration", "5", "--column", "imu=sensor_*"],
    },
];

fn main() {
    let seconds: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(15);
    println!(
        "| row | loss | dropouts | read where predicted | recovered B | fetched B | fetched/recovered | fill s | whole SD log | download s | fill/download | goal |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (k, row) in ROWS.iter().enumerate() {
        let instance = 7 + k as u16;
        let Some(px4) = Px4::start(&format!("bench-fill-{k}"), instance) else {
            return;
        };
        let dir = procs::fresh_dir(&format!("bench-fill-{k}"));
        let relay = Relay::start(instance, row.loss, &dir.join("relay"));
        let port = relay.daemon_port.to_string();
        let logs = dir.join("logs");
        let mut daemon = Command::new(procs::BIN)
            .args(["--udp", &format!("127.0.0.1:{port}"), "--no-socket"])
            .arg("--log-dir")
            .arg(&logs)
            .args(row.daemon_args)
            .env("RUNTIME_DIRECTORY", &dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the daemon starts");
        std::thread::sleep(Duration::from_secs(seconds));
        unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
        assert!(daemon.wait().unwrap().success(), "the daemon failed");
        let session = procs::session_dirs(&logs).pop().expect("a session");

        let t0 = Instant::now();
        let fill = run(&["fill", path(&session), "--json", "--udp", &port]);
        let fill_s = t0.elapsed().as_secs_f64();
        assert!(
            fill.status.success(),
            "fill: {}",
            String::from_utf8_lossy(&fill.stderr)
        );
        let fill: serde_json::Value = serde_json::from_slice(&fill.stdout).unwrap();
        let sd_log = fill["sd_log"].as_str().expect("an SD log").to_owned();

        let whole = dir.join("sd.ulg");
        let t0 = Instant::now();
        let out = run(&["fetch", &sd_log, "--udp", &port, "-o", path(&whole)]);
        let fetch_s = t0.elapsed().as_secs_f64();
        // PX4 logs on: the file grew since it was listed, and the download (whole as far as
        // it read) cannot match the vehicle's checksum of it now.
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() || stderr.contains("checksum"),
            "fetch: {stderr}"
        );
        let sd_size = [whole.clone(), whole.with_extension("ulg.part")]
            .iter()
            .find_map(|f| std::fs::metadata(f).ok())
            .map_or(0, |m| m.len());
        drop(px4);
        relay.halt();

        let get = |k: &str| fill[k].as_u64().unwrap_or(0);
        let (fetched, recovered) = (get("fetched_bytes"), get("record_bytes"));
        let bytes_ratio = fetched as f64 / recovered.max(1) as f64;
        let time_ratio = fill_s / fetch_s;
        let unfilled = fill["unfilled"].as_array().map_or(0, Vec::len);
        println!(
            "| {} | {:.0} % | {} ({} not filled) | {} of {} | {recovered} | {fetched} | {bytes_ratio:.2}x | {fill_s:.1} | {:.1} MB | {fetch_s:.1} | {time_ratio:.2} | {} |",
            row.name,
            row.loss * 100.0,
            get("dropouts"),
            unfilled,
            get("walked"),
            get("filled"),
            sd_size as f64 / 1e6,
            if bytes_ratio <= 3.0 && time_ratio < 1.0 {
                "met"
            } else {
                "NOT met"
            }
        );
    }
}

fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

/// `ulog-recv ARGS`, its output.
fn run(args: &[&str]) -> std::process::Output {
    Command::new(procs::BIN)
        .args(args)
        .output()
        .expect("ulog-recv runs")
}
