//! `ulog-recv export`, read back by independent readers: MCAP by the Python `mcap` and
//! `mcap-ros2-support` packages (`tests/mcap_read.py`), ROS 1 bags (format 2.0) by rosbags
//! (`tests/bag_read.py`, which also recomputes every connection's MD5 sum), bags in format 1.2
//! by ROS's own `rosbag` library (`tests/bag12_read.py`, through the topics' index), a
//! session's TIDE export by the reader written from the draft (`tests/it/tide.rs` has the rest).
//! Every real log and
//! the synthetic one, and a session of several splits recorded from the simulator by the
//! daemon: each topic instance with pyulog's sample count, first and last values and log
//! times (a session's latched replays counted once), `/log` with the logged strings; MCAP with
//! profile `ros2`, zstd chunks with message indexes, the info and parameters as metadata; a
//! 10 s window of a long (synthetic) flight read through the index touches under a tenth of
//! its chunks; `--from/--to` and `--topics` cut. MCAP's `/diagnostics` holds the findings
//! `info --diagnostics` makes, those made in the window for a window, none with
//! `--diagnostics none`.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::procs::{BIN, Proc, free_udp_port, fresh_dir};
use common::{all_logs, expected_for};
use serde_json::Value as Json;

fn export(input: &Path, output: &Path, extra: &[&str]) {
    let out = Command::new(BIN)
        .arg("export")
        .arg(input)
        .arg("-o")
        .arg(output)
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "export {}: {}",
        input.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The independent reader's report of an export (an MCAP with a window: `START_NS:END_NS`).
fn read(py: &Path, file: &Path, window: Option<(u64, u64)>) -> Json {
    let name = file.to_string_lossy();
    let reader = if name.ends_with(".tide") {
        "tests/tide_read.py"
    } else if name.ends_with(".v12.bag") {
        "tests/bag12_read.py"
    } else if name.ends_with(".bag") {
        "tests/bag_read.py"
    } else {
        "tests/mcap_read.py"
    };
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(reader);
    let out = Command::new(py)
        .arg(script)
        .arg(file)
        .args(window.map(|(a, b)| format!("{a}:{b}")))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the mcap reader: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A bag's shape against pyulog's reading of the log.
fn check_bag(what: &str, report: &Json, expected: &Json) {
    assert_eq!(report["md5_mismatches"], serde_json::json!([]), "{what}");
    assert!(report["chunks"].as_u64().unwrap() > 0, "{what}");
    common::check_ros2_report(what, report, expected);
}

/// The file's shape and metadata against pyulog's reading of the log.
fn check_file(what: &str, report: &Json, expected: &Json) {
    assert_eq!(report["profile"], "ros2", "{what}");
    assert_eq!(
        report["compressions"],
        serde_json::json!(["zstd"]),
        "{what}"
    );
    assert_eq!(report["indexed"], true, "{what}");
    let info = report["metadata"]["ulog_info"].as_object().unwrap();
    let want: Vec<&String> = expected["info"].as_object().unwrap().keys().collect();
    assert_eq!(info.keys().collect::<Vec<_>>(), want, "{what}: info keys");
    let params = report["metadata"]["ulog_initial_parameters"]
        .as_object()
        .unwrap();
    assert_eq!(
        params.len(),
        expected["initial_parameters"].as_object().unwrap().len(),
        "{what}: parameters"
    );
    common::check_ros2_report(what, report, expected);
}

#[test]
fn every_log_exports_to_mcap_and_bags_that_independent_readers_read_as_pyulog() {
    let Some(py) = common::venv_python() else {
        return;
    };
    let dir = fresh_dir("export-logs");
    std::fs::create_dir_all(&dir).unwrap();
    for log in all_logs() {
        let name = log.file_stem().unwrap().to_string_lossy().into_owned();
        let mcap = dir.join(format!("{name}.mcap"));
        export(&log, &mcap, &[]);
        let expected = expected_for(&log);
        let report = read(&py, &mcap, None);
        check_file(&name, &report, &expected);
        let findings = crate::diagnostics::our_findings(&log);
        common::check_diagnostics(&name, &report, &findings);
        let bag = dir.join(format!("{name}.bag"));
        export(&log, &bag, &[]);
        check_bag(&format!("{name}.bag"), &read(&py, &bag, None), &expected);
        let old = dir.join(format!("{name}.v12.bag"));
        export(&log, &old, &["--bag-version", "1.2"]);
        common::check_ros2_report(
            &format!("{name}.v12.bag"),
            &read(&py, &old, None),
            &expected,
        );
    }
}

#[test]
fn a_window_of_a_long_flight_touches_few_chunks_and_options_cut() {
    let Some(py) = common::venv_python() else {
        return;
    };
    // A long flight: half an hour of our synthetic one (the real logs hold a minute at most).
    let dir = fresh_dir("export-window");
    std::fs::create_dir_all(&dir).unwrap();
    let log = &dir.join("long.ulg");
    let bytes = ulog_recv::sim::synth::generate(ulog_recv::sim::synth::SynthOptions {
        duration_s: 1800,
        seed: 3,
        appended_data: false,
    });
    std::fs::write(log, &bytes).unwrap();
    let summary = ulog_recv::ulog::summary::summarize(&bytes).unwrap();
    let mcap = dir.join("whole.mcap");
    export(log, &mcap, &[]);
    let (start, end) = (summary.start_timestamp, summary.last_timestamp);
    let middle = (start + end) / 2 * 1000;
    let window = (middle, middle + 10_000_000_000);
    let report = read(&py, &mcap, Some(window));
    let w = &report["window"];
    let (touched, chunks) = (
        w["chunks_touched"].as_u64().unwrap(),
        report["chunks"].as_u64().unwrap(),
    );
    eprintln!(
        "{}: {:.0} s of flight in {chunks} chunks; a 10 s window touches {touched}",
        log.display(),
        (end - start) as f64 / 1e6
    );
    assert!(touched * 10 < chunks, "{touched} of {chunks} chunks");
    assert!(w["messages_in_window"].as_u64().unwrap() > 0);
    assert_eq!(w["messages_through_index"], w["messages_in_window"]);

    // --from/--to (seconds, as `info` prints them) and --topics.
    let (from_s, to_s) = (middle as f64 / 1e9, middle as f64 / 1e9 + 10.0);
    let cut = dir.join("cut.mcap");
    export(
        log,
        &cut,
        &[
            "--from",
            &format!("{from_s}"),
            "--to",
            &format!("{to_s}"),
            "--topics",
            "vehicle_*",
            "log",
        ],
    );
    let report = read(&py, &cut, None);
    let channels = report["channels"].as_array().unwrap();
    assert!(!channels.is_empty());
    for ch in channels {
        let topic = ch["topic"].as_str().unwrap();
        assert!(topic.starts_with("/vehicle_") || topic == "/log", "{topic}");
        for key in ["firstLogTime", "lastLogTime"] {
            let ns: u64 = ch[key].as_str().unwrap().parse().unwrap();
            assert!(
                ns >= (from_s * 1e9) as u64 - 1000 && ns <= (to_s * 1e9) as u64 + 1000,
                "{topic} {key} {ns}"
            );
        }
    }
}

#[test]
fn a_session_of_several_splits_exports_as_one_flight() {
    let Some(py) = common::venv_python() else {
        return;
    };
    let logs = all_logs();
    let log = logs
        .iter()
        .find(|p| p.ends_with("sample.ulg"))
        .unwrap_or(&logs[0]);
    let dir = fresh_dir("export-session");
    let port = free_udp_port();
    let mut daemon = Proc::spawn(
        "the daemon",
        &[
            "--udp".into(),
            port.to_string(),
            "--log-dir".into(),
            dir.join("logs").display().to_string(),
            "--no-socket".into(),
            "--split-size".into(),
            "1M".into(),
        ],
    );
    let mut sim = Proc::spawn(
        "the simulator",
        &[
            "sim".into(),
            log.display().to_string(),
            "--once".into(),
            "--link-rate".into(),
            "3000000".into(),
            "--udp-connect".into(),
            format!("127.0.0.1:{port}"),
        ],
    );
    assert!(sim.wait(Duration::from_secs(60)).success());
    assert!(daemon.terminate().success());
    let sessions: Vec<PathBuf> = std::fs::read_dir(dir.join("logs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(sessions.len(), 1);
    let splits = common::procs::ulg_files(&sessions[0]).len();
    assert!(splits >= 3, "{splits} splits");
    let mcap = dir.join("session.mcap");
    export(&sessions[0], &mcap, &[]);
    let what = format!("a session of {splits} splits");
    check_file(&what, &read(&py, &mcap, None), &expected_for(log));
    let bag = dir.join("session.bag");
    export(&sessions[0], &bag, &[]);
    check_bag(&what, &read(&py, &bag, None), &expected_for(log));
    let old = dir.join("session.v12.bag");
    export(&sessions[0], &old, &["--bag-version", "1.2"]);
    common::check_ros2_report(&what, &read(&py, &old, None), &expected_for(log));
    let tide = dir.join("session.tide");
    export(&sessions[0], &tide, &[]);
    let report = read(&py, &tide, None);
    assert_eq!(report["problems"], serde_json::json!([]), "{what}");
    common::check_ros2_report(&what, &report, &expected_for(log));
    // A window of the session, cut through its manifest: only samples stamped inside it.
    let expected = expected_for(log);
    let (start, end) = (
        expected["start_timestamp"].as_u64().unwrap(),
        expected["last_timestamp"].as_u64().unwrap(),
    );
    let (from_us, to_us) = (start + (end - start) / 3, start + (end - start) / 2);
    let cut = dir.join("window.mcap");
    export(
        &sessions[0],
        &cut,
        &[
            "--from",
            &format!("{}", from_us as f64 / 1e6),
            "--to",
            &format!("{}", to_us as f64 / 1e6),
        ],
    );
    let report = read(&py, &cut, None);
    let mut samples = 0;
    for ch in report["channels"].as_array().unwrap() {
        samples += ch["count"].as_u64().unwrap();
        for key in ["firstLogTime", "lastLogTime"] {
            let ns: u64 = ch[key].as_str().unwrap().parse().unwrap();
            assert!(
                ns >= from_us * 1000 && ns <= to_us * 1000,
                "{} {key} {ns}",
                ch["topic"]
            );
        }
    }
    assert!(samples > 0);
}

#[test]
fn an_mcaps_diagnostics_are_the_findings_made_in_its_window() {
    let Some(py) = common::venv_python() else {
        return;
    };
    let dir = fresh_dir("export-diagnostics");
    std::fs::create_dir_all(&dir).unwrap();
    let flight = crate::diagnostics::write_fault_flight(&dir, "ekf:5000");
    let findings = crate::diagnostics::our_findings(&flight);
    assert_eq!(
        findings.len(),
        2,
        "a warning at 2 s, a critical at 5 s: {findings:?}"
    );
    let whole = dir.join("whole.mcap");
    export(&flight, &whole, &[]);
    common::check_diagnostics("whole", &read(&py, &whole, None), &findings);
    // A window that ends between the two: the warning only (the detectors still watched the
    // flight from its start).
    let made = |f: &Json| f["end_timestamp_us"].as_u64().unwrap();
    let between = (made(&findings[0]) + made(&findings[1])) / 2;
    let window = dir.join("window.mcap");
    let to = format!("{}", between as f64 / 1e6);
    export(&flight, &window, &["--from", "30", "--to", &to]);
    common::check_diagnostics("window", &read(&py, &window, None), &findings[..1]);
    // Left out: by --diagnostics none, or by --topics that do not name it.
    for (name, extra) in [
        ("none.mcap", &["--diagnostics", "none"][..]),
        ("topics.mcap", &["--topics", "vehicle_*"][..]),
    ] {
        let out = dir.join(name);
        export(&flight, &out, extra);
        let report = read(&py, &out, None);
        assert_eq!(report["diagnostics"], serde_json::json!([]), "{name}");
        assert!(
            !report["channels"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["topic"] == "/diagnostics"),
            "{name}"
        );
    }
}
