//! `ulog-recv fill` as users run it: the daemon records the simulator's flight over a
//! rate-limited link (9000 B/s) losing 5 % of the vehicle's frames and 10 % of ours (acks
//! and FTP requests alike), then the fill takes what the stream lost from the simulator's SD
//! log over MAVLink FTP. Checked by pyulog and by the independent MCAP reader through
//! `export`: the session holds exactly the original log's samples, each once; the splits'
//! SHA-256 unchanged; bytes fetched within twice the lost records' plus 64 KB per dropout.
//! A fill killed (-9) halfway resumes without a record twice. A vehicle without an SD card
//! and one whose SD log is another flight: a clear error, the session unchanged.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::procs::{BIN, Proc, free_udp_port, fresh_dir, session_dirs, wait_for_line};
use serde_json::Value as Json;

const SYNTHETIC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/synthetic.ulg");

/// The simulator on `port`, streaming `log` (a file, or `--synthetic ...`), with `extra`.
fn sim(port: u16, log: &[&str], extra: &[&str]) -> (Proc, std::sync::mpsc::Receiver<String>) {
    let mut args: Vec<String> = vec!["sim".into()];
    args.extend(log.iter().map(|s| s.to_string()));
    args.extend(
        [
            "--udp-connect",
            &format!("127.0.0.1:{port}"),
            "--link-rate",
            "9000",
            "--loss",
            "0.05",
            "--uplink-loss",
            "0.1",
            "--seed",
            "4",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    args.extend(extra.iter().map(|s| s.to_string()));
    Proc::spawn_watched("the simulator", &args)
}

/// The simulator on `port`, streaming the log file `log` over a fast link that loses
/// nothing but what `extra` says.
fn fast_sim(port: u16, log: &Path, extra: &[&str]) -> (Proc, std::sync::mpsc::Receiver<String>) {
    let mut args: Vec<String> = vec!["sim".into(), log.display().to_string()];
    args.extend(
        [
            "--udp-connect",
            &format!("127.0.0.1:{port}"),
            "--link-rate",
            "1000000",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    args.extend(extra.iter().map(|s| s.to_string()));
    Proc::spawn_watched("the simulator", &args)
}

/// The daemon's arguments: listening on `port`, logging into `dir`, with `extra`.
fn daemon_args(port: u16, dir: &Path, extra: &[&str]) -> Vec<String> {
    let mut args = vec![
        "--udp".into(),
        format!("127.0.0.1:{port}"),
        "--log-dir".into(),
        dir.display().to_string(),
        "--no-socket".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// Records the simulator's whole flight with the daemon; the session directory.
fn record(port: u16, dir: &Path, sim_lines: &std::sync::mpsc::Receiver<String>) -> PathBuf {
    record_with(port, dir, sim_lines, &[])
}

/// [`record`], the daemon given `extra` too.
fn record_with(
    port: u16,
    dir: &Path,
    sim_lines: &std::sync::mpsc::Receiver<String>,
    extra: &[&str],
) -> PathBuf {
    let mut args = vec!["--split-duration", "10"];
    args.extend_from_slice(extra);
    let mut daemon = Proc::spawn("the daemon", &daemon_args(port, dir, &args));
    wait_for_line(sim_lines, "whole log was sent", Duration::from_secs(120));
    std::thread::sleep(Duration::from_millis(500));
    assert!(daemon.terminate().success());
    let sessions = session_dirs(dir);
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    sessions[0].clone()
}

/// `ulog-recv fill SESSION --json --udp PORT`: its report, or its error text.
fn fill(session: &Path, port: u16) -> Result<Json, String> {
    let out = Command::new(BIN)
        .arg("fill")
        .arg(session)
        .args(["--json", "--udp", &port.to_string()])
        // As many developers' shells have it: an error a user can act on still prints no
        // backtrace.
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap();
    if out.status.success() {
        Ok(serde_json::from_slice(&out.stdout).unwrap())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn export(input: &Path, output: &Path) {
    let out = Command::new(BIN)
        .arg("export")
        .arg(input)
        .arg("-o")
        .arg(output)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "export: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn python(py: &Path, script: &str, args: &[&Path]) -> Json {
    common::json_output(
        Command::new(py)
            .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(script))
            .args(args),
    )
}

/// The session exported as one log (into `dir`) opens in pyulog and holds the original's
/// samples exactly, per topic instance, none twice.
fn assert_whole_flight(py: &Path, session: &Path, dir: &Path) {
    assert_whole_flight_of(py, session, dir, Path::new(SYNTHETIC));
}

/// [`assert_whole_flight`] against the log file `original`; the session as one log.
fn assert_whole_flight_of(py: &Path, session: &Path, dir: &Path, original: &Path) -> PathBuf {
    let merged = dir.join("merged.ulg");
    export(session, &merged);
    common::check_with_pyulog(&merged);
    let same = python(py, "tests/same_samples.py", &[&merged, original]);
    assert_eq!(same["differ"], serde_json::json!({}), "{same}");
    assert_eq!(same["extra_in_a"], 0, "{same}");
    merged
}

/// The logs the tail tests stream: the synthetic one and two real ones beside the project.
fn tail_logs() -> Vec<PathBuf> {
    let mut logs = vec![PathBuf::from(SYNTHETIC)];
    logs.extend(
        common::shared_logs()
            .unwrap_or_default()
            .into_iter()
            .filter(|p| {
                p.ends_with("sample_log_small.ulg") || p.ends_with("sample_px4_events.ulg")
            }),
    );
    logs
}

/// Fills `session` (of the log file `log`) through `port`: nothing left unfilled, a tail
/// among the fills, the flight the original's (into `dir`), one set of post-flight
/// records; the fill's report.
fn fill_tail(py: &Path, session: &Path, dir: &Path, log: &Path, port: u16) -> Json {
    let name = log.file_name().unwrap().to_string_lossy();
    let report = fill(session, port).unwrap();
    eprintln!("{name}: fill: {report}");
    assert_eq!(
        report["unfilled"],
        serde_json::json!([]),
        "{name}: {report}"
    );
    let (_, edges) = dropouts_and_edges(session);
    assert!(
        edges.contains(&serde_json::json!("tail")),
        "{name}: {edges:?}"
    );
    let merged = assert_whole_flight_of(py, session, dir, log);
    assert_eq!(common::postflight_sets(py, &merged), 1, "{name}");
    report
}

/// The dropouts the daemon wrote in `session`, and its amendments' edges after a fill.
fn dropouts_and_edges(session: &Path) -> (u64, Vec<Json>) {
    let manifest: Json =
        serde_json::from_slice(&std::fs::read(session.join("manifest.json")).unwrap()).unwrap();
    let dropouts = manifest["splits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["dropouts"].as_u64().unwrap())
        .sum();
    let edges = manifest["amendments"]
        .as_array()
        .map(|a| {
            a.iter()
                .flat_map(|e| e["fills"].as_array().cloned().unwrap_or_default())
                .map(|f| f["edge"].clone())
                .collect()
        })
        .unwrap_or_default();
    (dropouts, edges)
}

/// Every file of the session, name → bytes.
fn files(session: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(session)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect()
}

/// The MCAP reader's channels: topic → (count, first message, last message).
fn channels(report: &Json) -> std::collections::BTreeMap<String, (Json, Json, Json)> {
    report["channels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["topic"].as_str().unwrap().to_string(),
                (c["count"].clone(), c["first"].clone(), c["last"].clone()),
            )
        })
        .collect()
}

#[test]
fn a_fill_over_a_lossy_slow_link_makes_the_session_the_whole_flight_each_record_once() {
    let Some(py) = common::venv_python() else {
        return;
    };
    let dir = fresh_dir("fill-e2e");
    let port = free_udp_port();
    let (_sim, lines) = sim(port, &[SYNTHETIC], &[]);
    let session = record(port, &dir, &lines);
    let before = files(&session);
    let manifest: Json = serde_json::from_slice(&before["manifest.json"]).unwrap();
    let dropouts: u64 = manifest["splits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["dropouts"].as_u64().unwrap())
        .sum();
    assert!(dropouts >= 5, "the lossy link made {dropouts} dropouts");

    // A fill cut short (kill -9) once the manifest names its first amendment (the file is
    // on disk a moment before: cut between the two, the next fill writes it anew).
    let mut first = Proc::spawn(
        "the fill",
        &[
            "fill".into(),
            session.display().to_string(),
            "--udp".into(),
            port.to_string(),
        ],
    );
    let t0 = std::time::Instant::now();
    let named = || {
        std::fs::read(session.join("manifest.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<Json>(&b).ok())
            .is_some_and(|m| m["amendments"].as_array().is_some_and(|a| !a.is_empty()))
    };
    while !named() {
        assert!(t0.elapsed() < Duration::from_secs(120), "no amendment");
        std::thread::sleep(Duration::from_millis(20));
    }
    unsafe { libc::kill(first.0.id() as i32, libc::SIGKILL) };
    let _ = first.0.wait();
    // Then again: it goes on with what is not filled.
    let report = fill(&session, port).unwrap();
    eprintln!("fill: {report}");
    assert!(report["already_filled"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(report["unfilled"], serde_json::json!([]), "{report}");
    assert_eq!(
        report["filled"].as_u64().unwrap() + report["already_filled"].as_u64().unwrap(),
        report["dropouts"].as_u64().unwrap(),
        "{report}"
    );
    // The splits untouched, their SHA-256 as the manifest had them.
    let after = files(&session);
    for (name, bytes) in &before {
        if name.starts_with("split_") {
            assert!(after[name] == *bytes, "{name} was rewritten");
        }
    }
    let manifest: Json = serde_json::from_slice(&after["manifest.json"]).unwrap();
    for split in manifest["splits"].as_array().unwrap() {
        let file = split["file"].as_str().unwrap();
        assert_eq!(
            split["sha256"].as_str().unwrap(),
            common::sha256_file(&session.join(file))
        );
    }
    assert!(!manifest["amendments"].as_array().unwrap().is_empty());
    // What the second run fetched, against what it recovered.
    let fetched = report["fetched_bytes"].as_u64().unwrap();
    let bound =
        2 * report["record_bytes"].as_u64().unwrap() + 65_536 * report["filled"].as_u64().unwrap();
    assert!(fetched <= bound, "fetched {fetched} bytes, bound {bound}");

    // pyulog: the session as one log is the original, sample for sample, none twice.
    assert_whole_flight(&py, &session, &dir);
    // The independent MCAP reader: the same channels, counts, first and last messages as
    // the original exported alike.
    let (ours, theirs) = (dir.join("merged.mcap"), dir.join("original.mcap"));
    export(&session, &ours);
    export(Path::new(SYNTHETIC), &theirs);
    let ours = python(&py, "tests/mcap_read.py", &[&ours]);
    let theirs = python(&py, "tests/mcap_read.py", &[&theirs]);
    assert_eq!(channels(&ours), channels(&theirs));
    // `info` on the session: every gap filled; what is missing now is the original's own.
    let out = Command::new(BIN)
        .args(["info", "--json"])
        .arg(&session)
        .output()
        .unwrap();
    assert!(out.status.success());
    let info: Json = serde_json::from_slice(&out.stdout).unwrap();
    let original = Command::new(BIN)
        .args(["info", "--json", SYNTHETIC])
        .output()
        .unwrap();
    let original: Json = serde_json::from_slice(&original.stdout).unwrap();
    assert_eq!(info["session"]["gaps_filled"], report["dropouts"], "{info}");
    assert_eq!(
        info["session"]["dropouts_remaining"].as_u64().unwrap(),
        original["dropouts"].as_array().unwrap().len() as u64
    );
    // Each filled gap's log time: from the flight's start on, and every dropout the stream had
    // (read from the splits as written) meets one of them, but those the SD log has too.
    let filled = info["session"]["filled"].as_array().unwrap();
    assert!(!filled.is_empty(), "{info}");
    let span = |g: &Json| {
        (
            g["first_us"].as_u64().unwrap(),
            g["last_us"].as_u64().unwrap(),
        )
    };
    let start = info["flight"]["start_timestamp"].as_u64().unwrap();
    for g in filled {
        let (first, end) = span(g);
        assert!(
            start <= first && first <= end,
            "{g}: before the flight's start {start}, or backwards"
        );
    }
    let remaining: Vec<&Json> = info["flight"]["dropouts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| &d["timestamp"])
        .collect();
    for split in manifest["splits"].as_array().unwrap() {
        let file = session.join(split["file"].as_str().unwrap());
        let split_info = common::json_output(Command::new(BIN).args(["info", "--json"]).arg(&file));
        for d in split_info["dropouts"].as_array().unwrap() {
            // What it lost: from its timestamp (the last sample before it), for its duration.
            let t = d["timestamp"].as_u64().unwrap();
            let lost_until = t + 1000 * d["duration_ms"].as_u64().unwrap();
            assert!(
                filled
                    .iter()
                    .map(span)
                    .any(|(a, b)| a <= lost_until && t <= b)
                    || remaining.contains(&&d["timestamp"]),
                "the dropout at {t}..{lost_until} µs meets no filled gap, and is not one the \
                 SD log lost too: {filled:?}"
            );
        }
    }
    // Its row of the `flights` table, read by pyarrow: the dropouts as received, none left
    // unfilled, and in the flight only the original log's own.
    let tables = dir.join("tables");
    common::text_output(
        Command::new(BIN)
            .arg("export")
            .arg(&session)
            .arg("--dataset")
            .arg(&tables)
            .args(["--topics", "flights"]),
    );
    let flights = common::json_output(Command::new(&py).arg("-c").arg(FLIGHT_ROW).arg(&tables));
    assert_eq!(flights["dropouts_received"], dropouts, "{flights}");
    assert_eq!(flights["unfilled_dropouts"], 0, "{flights}");
    assert_eq!(
        flights["dropouts"].as_u64().unwrap(),
        original["dropouts"].as_array().unwrap().len() as u64,
        "{flights}"
    );
    // A fill of a filled session has nothing to do.
    let again = fill(&session, port).unwrap();
    assert_eq!(again["filled"], 0, "{again}");
    assert_eq!(again["fetched_bytes"], 0, "{again}");
}

/// Prints the one row of the `flights` table under the dataset root `argv[1]` as JSON.
const FLIGHT_ROW: &str = "import sys, json, pyarrow.dataset as ds\n\
    rows = ds.dataset(sys.argv[1] + '/parquet/v1/flights', partitioning='hive').to_table().to_pylist()\n\
    assert len(rows) == 1, rows\n\
    print(json.dumps(rows[0], default=str))";

#[test]
fn a_session_in_columns_with_an_event_buffer_is_filled_column_by_column_and_only_inside_windows() {
    // vehicle_attitude in a column of its own, sensor_accel held by an event buffer whose
    // windows open around each logged string: each column takes its own topics from the SD
    // log, none twice, and the buffer only what its windows hold.
    let Some(py) = common::venv_python() else {
        return;
    };
    let dir = fresh_dir("fill-e2e-columns");
    let port = free_udp_port();
    let (_sim, lines) = sim(port, &[SYNTHETIC], &[]);
    let session = record_with(
        port,
        &dir,
        &lines,
        &[
            "--column",
            "att=vehicle_attitude",
            "--event-buffer",
            "accel=sensor_accel",
            "--event-before",
            "1",
            "--event-after",
            "1",
            "--event-on-log",
            "Takeoff|Disarmed",
        ],
    );
    let report = fill(&session, port).unwrap();
    eprintln!("fill: {report}");
    assert_eq!(report["unfilled"], serde_json::json!([]), "{report}");
    assert!(report["records"].as_u64().unwrap() > 0, "{report}");
    let merged = dir.join("merged.ulg");
    export(&session, &merged);
    common::check_with_pyulog(&merged);
    let windows = python(
        &py,
        "tests/event_windows.py",
        &[
            Path::new(SYNTHETIC),
            &merged,
            &session.join("manifest.json"),
            Path::new("accel"),
        ],
    );
    eprintln!("event windows: {windows}");
    assert!(windows["gated_kept"].as_u64().unwrap() > 0, "{windows}");
    // Each amendment opens alone, and each column read alone holds its own topics.
    for entry in std::fs::read_dir(&session).unwrap() {
        let path = entry.unwrap().path();
        if path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("amend_")
        {
            common::check_with_pyulog(&path);
        }
    }
    let att = dir.join("att.ulg");
    let out = Command::new(BIN)
        .arg("export")
        .arg(&session)
        .args(["--column", "att", "-o"])
        .arg(&att)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let same = python(&py, "tests/same_samples.py", &[&att, Path::new(SYNTHETIC)]);
    assert_eq!(same["extra_in_a"], 0, "{same}");
    assert_eq!(
        same["differ"]["vehicle_attitude/0"],
        serde_json::Value::Null,
        "the column holds every vehicle_attitude sample: {same}"
    );
}

#[test]
fn without_an_sd_card_or_with_another_flights_log_the_fill_says_so_and_changes_nothing() {
    if common::venv_python().is_none() {
        return;
    }
    let dir = fresh_dir("fill-e2e-refused");
    let port = free_udp_port();
    let (mut recorded, lines) = sim(port, &[SYNTHETIC], &[]);
    let session = record(port, &dir, &lines);
    recorded.terminate();
    let before = files(&session);
    // No SD card.
    let (mut no_card, _) = sim(port, &[SYNTHETIC], &["--sd-log-missing"]);
    let error = fill(&session, port).unwrap_err();
    assert!(error.contains("no SD card?"), "{error}");
    assert!(error.contains("Error: cannot fill"), "{error}");
    assert!(!error.to_lowercase().contains("backtrace"), "{error}");
    no_card.terminate();
    // An SD log of another flight (a real PX4 log: another boot, the records differ). The
    // synthetic generator would not do: it makes the same records every time.
    let Some(logs) = common::shared_logs() else {
        return;
    };
    let other = logs[0].display().to_string();
    let (_other, _) = sim(port, &[&other], &[]);
    let error = fill(&session, port).unwrap_err();
    assert!(error.contains("no SD log of this flight"), "{error}");
    // Every command takes --log-level: the fill's debug lines say why each log was refused.
    let out = Command::new(BIN)
        .arg("fill")
        .arg(&session)
        .args(["--udp", &port.to_string(), "--log-level", "debug"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("not this flight's SD log"), "{stderr}");
    assert_eq!(files(&session), before, "the session changed");
}

#[test]
fn with_fill_auto_the_daemon_fills_each_session_it_closes_through_its_own_link() {
    let Some(py) = common::venv_python() else {
        return;
    };
    let dir = fresh_dir("fill-e2e-auto");
    let port = free_udp_port();
    let (_sim, sim_lines) = sim(port, &[SYNTHETIC], &[]);
    let (mut daemon, lines) =
        Proc::spawn_watched("the daemon", &daemon_args(port, &dir, &["--fill", "auto"]));
    wait_for_line(&sim_lines, "whole log was sent", Duration::from_secs(120));
    // The vehicle goes quiet: the daemon closes the log (and asks for the next), then fills
    // the closed session over the same link while the vehicle streams on.
    let line = wait_for_line(
        &lines,
        "filled from the vehicle's SD log",
        Duration::from_secs(120),
    );
    assert!(line.contains("not_filled=0"), "{line}");
    assert!(daemon.terminate().success());
    let session = session_dirs(&dir)[0].clone();
    assert_whole_flight(&py, &session, &dir);
}

#[test]
fn a_tail_lost_with_the_link_and_back_for_the_stop_is_filled_to_the_sd_logs_end() {
    // A radio out of range from 70 % of the flight until the landing, back for the STOP:
    // the session holds the flight's start, a dropout, and PX4's post-flight records
    // (acked chunks ~30 % of the log past the last one received). They carry no time; the
    // daemon counts the chunks lost by their sequence numbers, and the fill takes that many
    // chunks of the SD log's records: here all of them to its end (the simulated vehicle
    // streamed its whole log before the STOP).
    let Some(py) = common::venv_python() else {
        return;
    };
    for log in tail_logs() {
        let name = log.file_name().unwrap().to_string_lossy().into_owned();
        let dir = fresh_dir("fill-e2e-tail-back");
        let port = free_udp_port();
        let (_sim, lines) = fast_sim(port, &log, &["--lost-from", "0.7"]);
        let session = record(port, &dir, &lines);
        let (dropouts, _) = dropouts_and_edges(&session);
        assert!(dropouts >= 1, "{name}: {dropouts} dropouts");
        let manifest: Json =
            serde_json::from_slice(&std::fs::read(session.join("manifest.json")).unwrap()).unwrap();
        let counted = manifest["end_lost_chunks"].as_u64().unwrap_or(0);
        let log_chunks = std::fs::metadata(&log).unwrap().len() / 249;
        assert!(
            counted > log_chunks / 5,
            "{name}: {counted} chunks counted lost at the end, of ~{log_chunks}"
        );
        let report = fill_tail(&py, &session, &dir, &log, port);
        assert_eq!(report["filled"], report["dropouts"], "{name}: {report}");
    }
}

#[test]
fn a_tail_lost_with_the_link_for_good_is_filled_to_the_sd_logs_end_once_the_vehicle_is_back() {
    // The link gone at 70 % of the flight and not back while the daemon ran (no STOP, no
    // post-flight records): the fill, run once the vehicle is back in reach, takes the SD
    // log's records after the last one received, its post-flight records included.
    let Some(py) = common::venv_python() else {
        return;
    };
    for log in tail_logs() {
        let dir = fresh_dir("fill-e2e-tail-gone");
        let port = free_udp_port();
        let (mut out_of_reach, lines) =
            fast_sim(port, &log, &["--lost-from", "0.7", "--lost-for-good"]);
        let session = record(port, &dir, &lines);
        out_of_reach.terminate();
        // Landed, in reach again: the same vehicle, its SD log the same.
        let (_landed, _) = fast_sim(port, &log, &[]);
        fill_tail(&py, &session, &dir, &log, port);
    }
}
