//! Against the real PX4: its SITL build (`../shared/vendor/px4-sitl`, SIH physics, PX4's own
//! logger and MAVLink stack) streams its log to the daemon, a process, as a vehicle would;
//! what the daemon wrote is held against PX4's own file log of the same boot, both read by
//! pyulog (`tests/px4_compare.py`): samples matched by topic, instance and timestamp.
//!
//! Without the SITL the test says SKIPPED, and fails under CI.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::garage::{Garage, SECRET_KEY, credentials};
use common::procs::{Proc, fresh_dir, session_dirs};
use common::px4::{CUT_DOWN, CUT_UP, Px4, Relay};
use common::px4_compare::{brief, check_whole, export_session, px4_compare};
use serde_json::Value as Json;

/// Holds the splits of one session against PX4's log `sd`: nothing PX4 sent lost outside our
/// dropouts (`sent`: the stream PX4 put on the wire; its rate limiter drops samples without a
/// sequence gap), nothing invented, the same values, each dropout of 0.1 s or more about as
/// long as PX4's gap; returns the report.
fn check_against_px4(py: &Path, sd: &Path, sent: &Path, splits: &[PathBuf], what: &str) -> Json {
    for split in splits {
        common::check_with_pyulog(split);
    }
    let mut args: Vec<&std::ffi::OsStr> = vec!["--sent".as_ref(), sent.as_ref(), sd.as_ref()];
    args.extend(splits.iter().map(|s| s.as_os_str()));
    let report = px4_compare(py, &args);
    let shown = brief(&report);
    let sd_samples = report["sd_samples"].as_u64().unwrap();
    let matched = report["matched"].as_u64().unwrap();
    eprintln!(
        "{what}: {matched} of {sd_samples} samples of PX4's log in the window ({:.3} %): {shown}",
        100.0 * matched as f64 / sd_samples as f64
    );
    assert!(sd_samples > 5_000, "{what}: {shown}");
    assert_eq!(
        report["missing"], 0,
        "{what}: samples lost outside our dropouts: {shown}"
    );
    assert_eq!(report["invented"], 0, "{what}: {shown}");
    assert_eq!(report["value_mismatches"], 0, "{what}: {shown}");
    let gaps = report["sd_gaps_ms"].as_array().unwrap();
    let first_sample = report["window"][0].as_f64().unwrap();
    for (dropout, gap) in report["dropouts"].as_array().unwrap().iter().zip(gaps) {
        let ours = dropout[1].as_f64().unwrap();
        let theirs = gap.as_f64().unwrap();
        // PX4's gap runs between the SD log's samples around those the stream lost (the
        // slowest topics' periods blur it): a quarter of a second, or 15 %.
        let tolerance = (0.15 * theirs).max(250.0);
        if dropout[0].as_f64().unwrap() < first_sample {
            // A gap before the log's first sample runs from the header's time, and PX4's
            // logger logs next to nothing while it sends a new header reliably (its file
            // log holds a handful of samples in that second and a half), so how much of
            // the span PX4's file shows as lost varies. Only a dropout shorter than the
            // samples lost would be a lie.
            assert!(
                ours + tolerance >= theirs,
                "{what}: dropout at the log's head {ours} ms, PX4's gap {theirs} ms"
            );
        } else if ours >= 100.0 {
            assert!(
                (ours - theirs).abs() <= tolerance,
                "{what}: dropout {ours} ms, PX4's gap {theirs} ms"
            );
        }
    }
    report
}

/// `ulog-recv fill SESSION --json` through `port` (PX4's own MAVLink FTP): its report.
fn fill_from_px4(session: &Path, port: u16) -> Json {
    let out = Command::new(common::procs::BIN)
        .arg("fill")
        .arg(session)
        .args(["--json", "--udp", &port.to_string()])
        // Every FTP request and reply, and every read of the SD log, kept beside the
        // session (~1 MB): what to read when a fill against PX4 goes wrong.
        .env(
            "RUST_LOG",
            "ulog_recv::shell::fill=trace,ulog_recv::link::ftp=trace",
        )
        .output()
        .unwrap();
    let log = session.with_extension("fill.log");
    std::fs::write(&log, &out.stderr).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last: Vec<&str> = stderr.lines().rev().take(30).collect();
    assert!(
        out.status.success(),
        "fill from PX4 (the whole trace: {}): {}",
        log.display(),
        last.into_iter().rev().collect::<Vec<_>>().join("\n")
    );
    let fill: Json = serde_json::from_slice(&out.stdout).unwrap();
    eprintln!("fill from PX4: {fill}");
    fill
}

/// The SD log's length when the fill (its report) read it.
fn sd_log_bytes(fill: &Json) -> usize {
    fill["sd_log_bytes"].as_u64().unwrap() as usize
}

/// The session's own splits (not its amendments).
fn split_files(session: &Path) -> Vec<PathBuf> {
    common::procs::ulg_files(session)
        .into_iter()
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("split_")
        })
        .collect()
}

fn daemon(dir: &Path, port: u16) -> Proc {
    Proc::spawn(
        "the daemon",
        &[
            "--udp".into(),
            format!("127.0.0.1:{port}"),
            "--log-dir".into(),
            dir.display().to_string(),
            "--no-socket".into(),
            "--split-size".into(),
            "1M".into(),
        ],
    )
}

#[test]
fn the_daemon_holds_every_sample_px4_logged_in_its_window_but_inside_its_dropouts() {
    let Some(py) = common::venv_python() else {
        return;
    };
    let instance = 3;
    let Some(px4) = Px4::start("stream", instance) else {
        return;
    };
    let dir = fresh_dir("px4-stream-ours");
    // The closed splits go to a Garage (S3) as they close; PX4 on the ground is disarmed.
    let garage = Garage::start(fresh_dir("px4-garage"));
    if let Err(e) = &garage {
        eprintln!("SKIPPED (the upload part): {e}");
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the upload part"
        );
    }
    let creds = credentials(&fresh_dir("px4-creds"), SECRET_KEY);
    let upload_args = garage
        .as_ref()
        .map(|g| g.upload_args("px4", &creds))
        .unwrap_or_default();
    let relay = Relay::start(instance, 0.0, &fresh_dir("px4-stream-relay"));
    let mut args: Vec<String> = vec![
        "--udp".into(),
        format!("127.0.0.1:{}", relay.daemon_port),
        "--log-dir".into(),
        dir.display().to_string(),
        "--no-socket".into(),
        "--split-size".into(),
        "1M".into(),
    ];
    args.extend(upload_args.iter().cloned());
    let mut daemon = Proc::spawn("the daemon", &args);
    std::thread::sleep(Duration::from_secs(20));
    // A stop as systemd's: the STOP handshake, PX4's post-flight data, exit 0 in time.
    let t0 = Instant::now();
    assert!(daemon.terminate().success());
    let stop_took = t0.elapsed();
    assert!(
        stop_took < Duration::from_secs(8),
        "stopped in {stop_took:?}"
    );
    // The session completed from PX4's SD log: the ~1.5 s PX4 drops after every acked
    // header (the head) and whatever its STOP discarded (the tail).
    let session = session_dirs(&dir)[0].clone();
    let fill = fill_from_px4(&session, relay.daemon_port);
    assert!(fill["head_records"].as_u64().unwrap() > 0, "{fill}");
    assert_eq!(fill["unfilled"], serde_json::json!([]), "{fill}");
    // `info` says what the two ends brought back, as the fill did.
    let out = Command::new(common::procs::BIN)
        .args(["info", "--json"])
        .arg(&session)
        .output()
        .unwrap();
    let info: Json = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        info["session"]["records_recovered_head"], fill["head_records"],
        "{info}"
    );
    assert_eq!(
        info["session"]["records_recovered_tail"], fill["tail_records"],
        "{info}"
    );
    // And what each cost, of what the fill fetched (the head's records may lie in what an
    // earlier search near the stream's start fetched: then it costs nothing; the tail reads
    // past the stop, where nothing else does).
    for edge in ["head", "tail"] {
        let cost = &fill[format!("{edge}_fetched_bytes")];
        assert_eq!(
            info["session"][format!("fetched_bytes_{edge}")],
            *cost,
            "{info}"
        );
    }
    assert!(fill["tail_fetched_bytes"].as_u64().unwrap() > 0, "{fill}");
    assert!(
        fill["head_fetched_bytes"].as_u64().unwrap() + fill["tail_fetched_bytes"].as_u64().unwrap()
            <= fill["fetched_bytes"].as_u64().unwrap(),
        "{fill}"
    );
    let sd_logs = px4.stop();
    let (_, sent) = relay.finish(&py);
    assert_eq!(sd_logs.len(), 1, "PX4's file logs: {sd_logs:?}");
    let splits = split_files(&session);
    assert!(splits.len() >= 3, "{} splits", splits.len());
    let report = check_against_px4(&py, &sd_logs[0], &sent, &splits, "20 s of stream");
    let merged = export_session(&session, &fresh_dir("px4-stream-merged").join("flight.ulg"));
    check_whole(
        &py,
        &sd_logs[0],
        sd_log_bytes(&fill),
        &merged,
        Some(&sent),
        "20 s of stream, filled",
    );
    let sd = report["sd_samples"].as_u64().unwrap();
    let matched = report["matched"].as_u64().unwrap();
    assert!(matched as f64 >= 0.99 * sd as f64, "{report}");
    assert_eq!(
        report["postflight"], true,
        "no perf_counter_postflight: {report}"
    );
    let bytes: u64 = splits
        .iter()
        .map(|s| std::fs::metadata(s).unwrap().len())
        .sum();
    eprintln!("streamed {:.0} KB/s", bytes as f64 / 20.0 / 1000.0);

    // The session in the bucket: what the daemon sent while PX4 streamed, and the rest by
    // hand after it stopped (nothing twice); read back by boto3, byte for byte.
    let Ok(garage) = garage else { return };
    let session = &session;
    // What the daemon uploaded while PX4 streamed: each split as it closed.
    let journal: Json = std::fs::read(session.join("upload.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    let done_before: Vec<String> = journal["objects"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, o)| o["state"] == "done")
        .map(|(file, _)| file.clone())
        .collect();
    let out = Command::new(common::procs::BIN)
        .arg("upload")
        .arg(session)
        .args(&upload_args)
        .output()
        .unwrap();
    let steps = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{steps}");
    for file in &done_before {
        assert!(
            !steps.contains(&format!("{file} →")),
            "{file} went again by hand: {steps}"
        );
    }
    eprintln!(
        "{} split(s) uploaded by the daemon while PX4 streamed, the rest by hand",
        done_before.len()
    );
    assert!(
        done_before.len() >= 2,
        "the daemon uploaded {done_before:?} while PX4 streamed"
    );
    let name = session.file_name().unwrap().to_string_lossy().into_owned();
    let vehicle = format!("sys{}", instance + 1);
    let prefix = format!("px4/{vehicle}/{name}/");
    let found = garage.objects(&py, &prefix);
    let objects = found["objects"].as_object().unwrap();
    // The splits and the fill's amendments.
    let files = common::procs::ulg_files(session);
    assert_eq!(objects.len(), files.len() + 1, "{found}");
    for file in files.iter().chain([&session.join("manifest.json")]) {
        let key = format!("{prefix}{}", file.file_name().unwrap().to_string_lossy());
        let local = common::sha256_file(file);
        assert_eq!(
            objects[&key]["sha256"].as_str(),
            Some(local.as_str()),
            "{key}"
        );
    }
}

#[test]
fn a_daemon_killed_and_restarted_while_px4_streams_gets_a_new_log_whole() {
    let Some(py) = common::venv_python() else {
        return;
    };
    let instance = 4;
    let Some(px4) = Px4::start("restart", instance) else {
        return;
    };
    let dir = fresh_dir("px4-restart-ours");
    let relay = Relay::start(instance, 0.0, &fresh_dir("px4-restart-relay"));
    let port = relay.daemon_port;
    let mut first = daemon(&dir, port);
    std::thread::sleep(Duration::from_secs(8));
    // A crash: PX4 streams on to a daemon that is gone.
    unsafe { libc::kill(first.0.id() as i32, libc::SIGKILL) };
    let _ = first.0.wait();
    std::thread::sleep(Duration::from_secs(1));
    let mut second = daemon(&dir, port);
    std::thread::sleep(Duration::from_secs(10));
    assert!(second.terminate().success());
    let sessions = session_dirs(&dir);
    assert_eq!(sessions.len(), 2, "{sessions:?}");
    // Each session filled: the first, cut by the crash, to the end of PX4's log (where its
    // stream ended is not known), the second from its header on.
    let fills: Vec<Json> = sessions.iter().map(|s| fill_from_px4(s, port)).collect();
    assert!(
        fills[0]["tail_records"].as_u64().unwrap() > 0,
        "{}",
        fills[0]
    );
    assert!(
        fills[1]["head_records"].as_u64().unwrap() > 0,
        "{}",
        fills[1]
    );
    let sd_logs = px4.stop();
    assert_eq!(sd_logs.len(), 1, "PX4's file logs: {sd_logs:?}");
    // The second daemon stopped the old stream and got a new log, with its header: it opens
    // alone and holds what PX4 logged in its window.
    let splits = split_files(&sessions[1]);
    let (_, sent) = relay.finish(&py);
    let report = check_against_px4(&py, &sd_logs[0], &sent, &splits, "after a restart");
    assert_eq!(report["postflight"], true, "{report}");
    let out = fresh_dir("px4-restart-merged");
    for (k, session) in sessions.iter().enumerate() {
        let merged = export_session(session, &out.join(format!("{k}.ulg")));
        check_whole(
            &py,
            &sd_logs[0],
            sd_log_bytes(&fills[k]),
            &merged,
            Some(&sent),
            &format!("session {k}, filled"),
        );
    }
}

#[test]
fn with_five_percent_of_px4s_datagrams_lost_the_dropouts_last_as_long_as_the_gaps() {
    let Some(py) = common::venv_python() else {
        return;
    };
    let instance = 5;
    let Some(px4) = Px4::start("loss", instance) else {
        return;
    };
    let dir = fresh_dir("px4-loss-ours");
    let relay = Relay::start(instance, 0.05, &fresh_dir("px4-loss-relay"));
    // Splits every 5 s, the IMU topics in a column of their own.
    let mut d = Proc::spawn(
        "the daemon",
        &[
            "--udp".into(),
            format!("127.0.0.1:{}", relay.daemon_port),
            "--log-dir".into(),
            dir.display().to_string(),
            "--no-socket".into(),
            "--split-duration".into(),
            "5".into(),
            "--column".into(),
            "imu=sensor_*".into(),
        ],
    );
    std::thread::sleep(Duration::from_secs(15));
    assert!(d.terminate().success());
    // Then the fill, over the same lossy relay (both ways), from PX4's own MAVLink FTP server.
    let session = session_dirs(&dir).pop().expect("a session");
    let fill = fill_from_px4(&session, relay.daemon_port);
    // (What the fill costs against a whole download over such a link is `cargo bench --bench
    // fill`'s to say.)
    let sd_logs = px4.stop();
    let (dropped, sent) = relay.finish(&py);
    assert!(dropped > 100, "the relay dropped {dropped} datagrams");
    let report = check_against_px4(&py, &sd_logs[0], &sent, &split_files(&session), "5 % loss");
    assert!(
        report["dropouts"].as_array().unwrap().len() > 10,
        "{report}"
    );
    // The session with its amendments, its columns joined: every sample PX4 logged from the
    // stream's start, none twice, none invented.
    assert!(fill["filled"].as_u64().unwrap() > 10, "{fill}");
    assert_eq!(fill["unfilled"], serde_json::json!([]), "{fill}");
    let merged = export_session(&session, &dir.join("merged.ulg"));
    check_whole(
        &py,
        &sd_logs[0],
        sd_log_bytes(&fill),
        &merged,
        Some(&sent),
        "5 % loss, filled",
    );
}

#[test]
fn a_tail_px4_streamed_while_the_link_was_cut_comes_back_from_its_sd_log_post_flight_once() {
    // The link cut both ways for the stream's last seconds (out of range), then back
    // for the STOP: the daemon's STOP reaches PX4 while PX4's datagrams still do not reach
    // the daemon, so what the daemon gets after the cut is PX4's post-flight records, their
    // sequence numbers seconds of chunks past the last one it had. (PX4 sends the records
    // of its last partial chunk reliably with them: the stream resumes for an instant, and
    // the fill finds the gap's far side by them; without them the tail runs to the SD log's
    // end: the simulator's tests.) The flight comes back whole, its post-flight records
    // once.
    let Some(py) = common::venv_python() else {
        return;
    };
    let instance = 6;
    let Some(px4) = Px4::start("tail", instance) else {
        return;
    };
    let dir = fresh_dir("px4-tail-ours");
    let relay = Relay::start(instance, 0.0, &fresh_dir("px4-tail-relay"));
    let mut d = daemon(&dir, relay.daemon_port);
    std::thread::sleep(Duration::from_secs(10));
    // 3.5 s without PX4's heartbeat (one a second), under the vehicle timeout (5 s): the
    // vehicle is out of range, not lost.
    relay.cut(CUT_DOWN | CUT_UP);
    std::thread::sleep(Duration::from_secs(2));
    relay.cut(CUT_DOWN);
    unsafe { libc::kill(d.0.id() as i32, libc::SIGTERM) };
    // PX4 sends what its queue holds, then its first post-flight chunk, resent for 2.5 s:
    // the link back within that.
    std::thread::sleep(Duration::from_millis(1500));
    relay.cut(0);
    assert!(d.wait(Duration::from_secs(15)).success());
    let session = session_dirs(&dir).pop().expect("a session");
    let manifest: Json =
        serde_json::from_slice(&std::fs::read(session.join("manifest.json")).unwrap()).unwrap();
    eprintln!("the session's splits: {}", manifest["splits"]);
    let fill = fill_from_px4(&session, relay.daemon_port);
    assert_eq!(fill["unfilled"], serde_json::json!([]), "{fill}");
    // Two seconds of PX4's log (~1,500 records a second) came back.
    assert!(fill["records"].as_u64().unwrap() > 2_000, "{fill}");
    let sd_logs = px4.stop();
    let (_, sent) = relay.finish(&py);
    let merged = export_session(&session, &dir.join("merged.ulg"));
    let report = check_whole(
        &py,
        &sd_logs[0],
        sd_log_bytes(&fill),
        &merged,
        Some(&sent),
        "the link cut for the stream's end, filled",
    );
    assert_eq!(report["postflight"], true, "{report}");
    assert_eq!(common::postflight_sets(&py, &merged), 1);
}

#[test]
fn behind_mavlink_router_beside_a_ground_station_every_filled_flight_is_whole() {
    // As the guide's mavlink-router page sets it up: PX4's onboard link into the router, a
    // ground station and the daemon each on an endpoint of their own; ten seconds of
    // streaming, a STOP, then `fill` through the same endpoint. Each flight in a new boot of
    // PX4, so that each holds its own head, tail and slow topics' timing.
    // (`ROUTER_FLIGHTS`: how many, 3 by default; `ROUTER_FLIGHT_SECONDS`: how long each
    // streams, 10 s by default.)
    let Some(py) = common::venv_python() else {
        return;
    };
    let instance = 7;
    for flight in 0..common::env_number("ROUTER_FLIGHTS", 3) {
        let what = format!("behind mavlink-router, flight {flight}");
        let Some(px4) = Px4::start(&format!("router-{flight}"), instance) else {
            return;
        };
        let (gcs_port, ours) = (
            common::procs::free_udp_port(),
            common::procs::free_udp_port(),
        );
        let Some(_router) = common::router::start(Px4::onboard_port(instance), &[gcs_port, ours])
        else {
            return;
        };
        let (_gcs, heard) = common::router::ground_station(&py, gcs_port);
        let dir = fresh_dir(&format!("px4-router-ours-{flight}"));
        let mut d = daemon(&dir, ours);
        std::thread::sleep(Duration::from_secs(common::env_number(
            "ROUTER_FLIGHT_SECONDS",
            10,
        )));
        assert!(d.terminate().success(), "{what}: the daemon's exit");
        assert!(
            heard.try_iter().any(|line| line == "ready"),
            "{what}: the ground station never ran"
        );
        let session = session_dirs(&dir).pop().expect("a session");
        let fill = fill_from_px4(&session, ours);
        assert_eq!(fill["unfilled"], serde_json::json!([]), "{what}: {fill}");
        let sd_logs = px4.stop();
        assert_eq!(sd_logs.len(), 1, "{what}: PX4's file logs {sd_logs:?}");
        let merged = export_session(&session, &dir.join("merged.ulg"));
        // Against PX4's whole SD log, as the guide's check holds it: nothing stamped in the
        // stream's window is left out, whenever PX4 wrote it.
        let sd_len = std::fs::metadata(&sd_logs[0]).unwrap().len() as usize;
        let report = check_whole(&py, &sd_logs[0], sd_len, &merged, None, &what);
        assert_eq!(report["postflight"], true, "{what}: {report}");
    }
}
