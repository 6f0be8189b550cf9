//! Fill benchmark, against PX4 itself: its SITL build streams its log to the daemon (a child
//! process) through a relay that loses a share of the datagrams both ways; then `ulog-recv
//! fill` completes the session from PX4's SD log over the same lossy link, and `ulog-recv
//! fetch` downloads that whole SD log over it, the yardstick. Each row prints the bytes the
//! fill fetched against the bytes it recovered, and its time against the whole download's.
//! Goals: each row's, in its last column.
//!
//! Rows: a clean link (25 s: the head and the tail only, within 4 % of the SD log or 3x
//! what they recovered); 5 % loss for 45 s and 15 s, one session as the daemon writes it by
//! default and one in splits of 5 s with the IMU topics in a column of their own
//! (`--column imu=sensor_*`); the link cut both ways for the stream's last seconds and back
//! for the STOP. Each row prints what the head's and the tail's searches fetched.
//!
//! Run: `cargo bench --bench fill` (`-- ROW` for the rows whose `name, loss %, length s`
//! holds ROW, e.g. `-- "5 %, 45 s"`; `-- --peer
//! BIN` runs each row with another build too, the previous release, in the same run;
//! `BENCH_FILL_KEEP=PREFIX` keeps each fill's JSON and log as `PREFIX-N.json`, `.log`).
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

use px4::{CUT_DOWN, CUT_UP, Px4, Relay};

/// What a row's goal is.
#[derive(Clone, Copy)]
enum Goal {
    /// Fetched bytes within 4 % of the SD log or 3x the recovered bytes, whichever is larger
    /// (the tail reads on to where each slow topic's last sample is written: up to a second
    /// of log past the stop, and PX4's SITL logs 250 KB a second; measured 0.53 to 0.58 %,
    /// and up to 166 KB of a 28 s flight's).
    Clean,
    /// Fetched bytes within this many times the recovered ones, and the fill at most this
    /// share of the whole download's time.
    Lossy { bytes: f64, time: f64 },
    /// The link cut both ways for the stream's last seconds and back for the STOP: the
    /// fill faster than the download.
    Tail,
}

/// One row of the plan.
struct Row {
    name: &'static str,
    loss: f64,
    seconds: u64,
    daemon_args: &'static [&'static str],
    goal: Goal,
}

const ROWS: &[Row] = &[
    Row {
        name: "clean, one split",
        loss: 0.0,
        seconds: 25,
        daemon_args: &[],
        goal: Goal::Clean,
    },
    Row {
        name: "one split",
        loss: 0.05,
        seconds: 45,
        daemon_args: &[],
        goal: Goal::Lossy {
            bytes: 2.0,
            time: 0.3,
        },
    },
    Row {
        name: "one split",
        loss: 0.05,
        seconds: 15,
        daemon_args: &[],
        goal: Goal::Lossy {
            bytes: 3.0,
            time: 1.0,
        },
    },
    Row {
        name: "5 s splits, imu column",
        loss: 0.05,
        seconds: 15,
        daemon_args: &["--split-duration", "5", "--column", "imu=sensor_*"],
        goal: Goal::Lossy {
            bytes: 3.0,
            time: 1.0,
        },
    },
    Row {
        name: "link cut for the end, back for the STOP",
        loss: 0.0,
        seconds: 10,
        daemon_args: &[],
        goal: Goal::Tail,
    },
];

/// How long the tail row's link is cut before the daemon's STOP, and after it the way back
/// from PX4 (under the vehicle timeout together, with a heartbeat a second).
const CUT: Duration = Duration::from_secs(2);
const CUT_AFTER_STOP: Duration = Duration::from_millis(1500);

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `-- [ROW-SUBSTRING] [--peer BIN]`: only the rows whose name, loss and length
    // (`one split, 5 %, 15 s`) hold it; each row also
    // with another build (the previous release) in the same run.
    let peer = args
        .iter()
        .position(|a| a == "--peer")
        .and_then(|i| args.get(i + 1))
        .cloned();
    let only = args
        .iter()
        .find(|a| !a.starts_with("--") && Some(*a) != peer.as_ref() && *a != "--bench");
    let mut bins = vec![("now", procs::BIN.to_string())];
    if let Some(p) = &peer {
        bins.push(("peer", p.clone()));
    }
    println!(
        "| row | build | loss | s | dropouts | read where predicted | recovered B | fetched B | head B | tail B | fetched/recovered | fetched/SD log | fill s | whole SD log | download s | fill/download | goal |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut k = 0u16;
    for row in ROWS {
        let label = format!("{}, {:.0} %, {} s", row.name, row.loss * 100.0, row.seconds);
        if only.is_some_and(|o| !label.contains(o.as_str())) {
            continue;
        }
        for (build, bin) in &bins {
            k += 1;
            run_row(row, build, bin, k);
        }
    }
}

/// Runs `row` with the build `bin` on PX4 instance `6 + k`; prints its line.
fn run_row(row: &Row, build: &str, bin: &str, k: u16) {
    let instance = 6 + k % 4;
    let Some(px4) = Px4::start(&format!("bench-fill-{k}"), instance) else {
        return;
    };
    let dir = procs::fresh_dir(&format!("bench-fill-{k}"));
    let relay = Relay::start(instance, row.loss, &dir.join("relay"));
    let port = relay.daemon_port.to_string();
    let logs = dir.join("logs");
    let mut daemon = Command::new(bin)
        .args(["--udp", &format!("127.0.0.1:{port}"), "--no-socket"])
        .arg("--log-dir")
        .arg(&logs)
        .args(row.daemon_args)
        .env("RUNTIME_DIRECTORY", &dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the daemon starts");
    std::thread::sleep(Duration::from_secs(row.seconds));
    if matches!(row.goal, Goal::Tail) {
        relay.cut(CUT_DOWN | CUT_UP);
        std::thread::sleep(CUT);
        relay.cut(CUT_DOWN);
    }
    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    if matches!(row.goal, Goal::Tail) {
        std::thread::sleep(CUT_AFTER_STOP);
        relay.cut(0);
    }
    assert!(daemon.wait().unwrap().success(), "the daemon failed");
    let session = procs::session_dirs(&logs).pop().expect("a session");

    let t0 = Instant::now();
    let fill = run(bin, &["fill", path(&session), "--json", "--udp", &port]);
    if let Ok(keep) = std::env::var("BENCH_FILL_KEEP") {
        let _ = std::fs::write(format!("{keep}-{k}.json"), &fill.stdout);
        let _ = std::fs::write(format!("{keep}-{k}.log"), &fill.stderr);
    }
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
    let out = run(bin, &["fetch", &sd_log, "--udp", &port, "-o", path(&whole)]);
    let fetch_s = t0.elapsed().as_secs_f64();
    // PX4 logs on: the file grew since it was listed, and the download (whole as far as
    // it read) cannot match the vehicle's checksum of it now.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() || stderr.contains("checksum"),
        "fetch: {stderr}"
    );
    drop(px4);
    relay.halt();

    let get = |k: &str| fill[k].as_u64().unwrap_or(0);
    let (fetched, recovered) = (get("fetched_bytes"), get("record_bytes"));
    // The SD log as the fill saw it.
    let sd_size = get("sd_log_bytes");
    let bytes_ratio = fetched as f64 / recovered.max(1) as f64;
    let sd_share = fetched as f64 / sd_size.max(1) as f64;
    let time_ratio = fill_s / fetch_s;
    let unfilled = fill["unfilled"].as_array().map_or(0, Vec::len);
    let met = unfilled == 0
        && match row.goal {
            Goal::Clean => fetched as f64 <= (0.04 * sd_size as f64).max(3.0 * recovered as f64),
            Goal::Lossy { bytes, time } => bytes_ratio <= bytes && time_ratio <= time,
            Goal::Tail => time_ratio < 1.0,
        };
    println!(
        "| {} | {build} | {:.0} % | {} | {} ({} not filled) | {} of {} | {recovered} | {fetched} | {} | {} | {bytes_ratio:.2}x | {:.2} % | {fill_s:.1} | {:.1} MB | {fetch_s:.1} | {time_ratio:.2} | {} |",
        row.name,
        row.loss * 100.0,
        row.seconds,
        get("dropouts"),
        unfilled,
        get("walked"),
        get("filled"),
        get("head_fetched_bytes"),
        get("tail_fetched_bytes"),
        100.0 * sd_share,
        sd_size as f64 / 1e6,
        if met { "met" } else { "NOT met" }
    );
}

fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

/// `BIN ARGS` (a build of ulog-recv), its output.
fn run(bin: &str, args: &[&str]) -> std::process::Output {
    Command::new(bin)
        .args(args)
        .output()
        .expect("ulog-recv runs")
}
