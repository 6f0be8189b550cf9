//! `ulog-recv export FLIGHT --dataset DIR`: a flight as Parquet tables in the fleet's layout,
//! read back by pyarrow alone (`tests/dataset_read.py`) and held against pyulog's decoding of
//! the same log: every real log and the synthetic one, every topic instance's row count,
//! first and last rows and column sums, names, types and metadata as documented; the logged
//! strings and parameters beside them; the `flights` row and the dropouts, every column
//! computed from pyulog's data (`tests/dataset_flights.py`); the layout's keys; an export run twice writes the same
//! files, not twice as many; a window and topics cut; a full disk (a real tmpfs) fails the
//! export with its own error and leaves nothing behind.

use crate::common;
use crate::common::project;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::procs::{files_under, fresh_dir, run_ok};
use common::{all_logs, json_output, text_output, venv_python};
use serde_json::Value as Json;

fn export_dataset(log: &Path, root: &Path, extra: &[&str]) {
    let mut args = vec![
        "export",
        log.to_str().unwrap(),
        "--dataset",
        root.to_str().unwrap(),
    ];
    args.extend(extra);
    run_ok(&args);
}

/// The real log `name` of `../shared`, or `None` (said loudly) without it.
fn shared_log(name: &str) -> Option<PathBuf> {
    let logs = common::shared_logs()?;
    Some(logs.into_iter().find(|l| l.ends_with(name)).expect(name))
}

/// What the Python `script` prints, given `args`; fails the test when it fails.
fn python(py: &Path, script: &str, args: &[&Path]) -> String {
    text_output(Command::new(py).args(["-c", script]).args(args))
}

/// pyarrow's reading of the dataset at `root`, held against `expected` (pyulog's dump).
fn read_with_pyarrow(py: &Path, root: &Path, expected: &Path) -> Json {
    json_output(
        Command::new(py)
            .arg(project().join("tests/dataset_read.py"))
            .arg(root)
            .arg(expected),
    )
}

#[test]
fn every_log_exports_to_tables_that_pyarrow_reads_as_pyulog_decodes_them() {
    let Some(py) = venv_python() else { return };
    let dir = fresh_dir("dataset-every-log");
    let mut checked = 0;
    for log in all_logs() {
        let name = log.file_stem().unwrap().to_string_lossy().into_owned();
        let root = dir.join(&name);
        export_dataset(&log, &root, &[]);
        let report = read_with_pyarrow(&py, &root, &log.with_extension("expected.json"));
        checked += report["checked_values"].as_u64().unwrap();
        // The flight's row and its dropouts, column by column, as pyulog's data says.
        let flights = json_output(
            Command::new(&py)
                .arg(project().join("tests/dataset_flights.py"))
                .arg(&root)
                .arg(&log),
        );
        assert!(flights["columns"].as_u64().unwrap() >= 25, "{flights}");
        // The layout: parquet/v1/TOPIC/date=YYYY-MM-DD/vehicle=UID/FLIGHT.parquet, nothing else:
        // the topics, log_messages and params pyarrow read, `flights`, and `dropouts` when the
        // log has any.
        let files = files_under(&root);
        let dropouts = files.iter().any(|f| f.starts_with("parquet/v1/dropouts/"));
        let diagnostics = files
            .iter()
            .any(|f| f.starts_with("parquet/v1/diagnostics/"));
        assert_eq!(
            files.len() as u64,
            report["tables"].as_u64().unwrap() + 1 + u64::from(dropouts) + u64::from(diagnostics),
            "{files:?}"
        );
        // The diagnostics, as pyarrow reads them: those `info --diagnostics` finds (held
        // against Flight Review v2's in the diagnostics tests), a row each.
        let found = json_output(
            Command::new(crate::common::procs::BIN)
                .args(["info", "--diagnostics", "--json"])
                .arg(&log),
        );
        let expected: Vec<Json> = (found["diagnostics"].as_array().unwrap().iter())
            .map(|f| {
                serde_json::json!([
                    f["id"],
                    f["severity"],
                    f["timestamp_us"],
                    f["end_timestamp_us"]
                ])
            })
            .collect();
        let rows = python(
            &py,
            "import sys, json, pyarrow.parquet as pq, pathlib\n\
             rows = []\n\
             for f in pathlib.Path(sys.argv[1]).glob('parquet/v1/diagnostics/*/*/*.parquet'):\n\
             \x20   t = pq.read_table(f).to_pylist()\n\
             \x20   rows += [[r['analyzer'], r['severity'], r['timestamp'], r['end_timestamp']] for r in t]\n\
             print(json.dumps(rows))",
            &[&root],
        );
        let mut rows: Vec<Json> = serde_json::from_str(&rows).unwrap();
        let mut expected = expected;
        rows.sort_by_key(Json::to_string);
        expected.sort_by_key(Json::to_string);
        assert_eq!(diagnostics, !expected.is_empty(), "{name}");
        assert_eq!(rows, expected, "{name}: the diagnostics table");
        for file in &files {
            let parts: Vec<&str> = file.split('/').collect();
            assert_eq!(parts.len(), 6, "{file}");
            assert_eq!(&parts[..2], ["parquet", "v1"], "{file}");
            assert!(
                parts[3].starts_with("date=") && parts[3].len() == 15,
                "{file}"
            );
            assert!(
                parts[4].starts_with("vehicle=") && parts[4].len() > 8,
                "{file}"
            );
            assert_eq!(parts[5], format!("{name}.parquet"), "{file}");
        }
    }
    assert!(checked > 1_000_000, "only {checked} values checked");
}

#[test]
fn the_vehicle_the_day_and_utc_come_from_the_log() {
    let Some(py) = venv_python() else { return };
    let Some(log) = shared_log("sample_log_small.ulg") else {
        return;
    };
    let root = fresh_dir("dataset-identity");
    export_dataset(
        &log,
        &root,
        &["--topics", "vehicle_gps_position", "vehicle_status"],
    );
    // Its sys_uuid, and the day its GPS time says.
    let at =
        "date=2021-04-21/vehicle=000600000000383638393239510d0035002d/sample_log_small.parquet";
    assert_eq!(
        files_under(&root),
        [
            format!("parquet/v1/vehicle_gps_position/{at}"),
            format!("parquet/v1/vehicle_status/{at}")
        ]
    );
    // UTC: the log time shifted by the first GPS fix's UTC time, so that fix's row reads its
    // own time_utc_usec; every table shares the shift.
    let script = "import sys, pyarrow.dataset as ds
t = ds.dataset(sys.argv[1] + '/parquet/v1/vehicle_gps_position', format='parquet', partitioning='hive').to_table()
rows = [r for r in t.to_pylist() if r['time_utc_usec'] > 0]
first = rows[0]
utc = int(first['timestamp_utc'].timestamp() * 1e6 + 0.5)
s = ds.dataset(sys.argv[1] + '/parquet/v1/vehicle_status', format='parquet', partitioning='hive').to_table().to_pylist()[0]
print(utc, first['time_utc_usec'], first['flight_id'], first['vehicle_uid'], first['flight_date'], str(first['date']),
      int(s['timestamp_utc'].timestamp() * 1e6 + 0.5) - s['timestamp'] - (utc - first['timestamp']))";
    let text = python(&py, script, &[&root]);
    let v: Vec<&str> = text.split_whitespace().collect();
    assert_eq!(
        v[0], v[1],
        "timestamp_utc of the first fix is its time_utc_usec: {text}"
    );
    assert_eq!(
        &v[2..],
        [
            "sample_log_small",
            "000600000000383638393239510d0035002d",
            "2021-04-21",
            "2021-04-21",
            "0"
        ],
        "{text}"
    );
}

#[test]
fn exporting_again_replaces_the_same_files_and_options_cut() {
    let Some(py) = venv_python() else { return };
    let log = project().join("testdata/synthetic.ulg");
    let root = fresh_dir("dataset-again");
    export_dataset(&log, &root, &[]);
    let first = files_under(&root);
    let bytes: Vec<Vec<u8>> = first
        .iter()
        .map(|f| std::fs::read(root.join(f)).unwrap())
        .collect();
    export_dataset(&log, &root, &[]);
    assert_eq!(files_under(&root), first, "the same keys, none doubled");
    for (f, before) in first.iter().zip(&bytes) {
        assert_eq!(
            &std::fs::read(root.join(f)).unwrap(),
            before,
            "{f} is deterministic"
        );
    }

    // Topics and a window: only those tables, only rows inside the window.
    let cut = fresh_dir("dataset-cut");
    export_dataset(
        &log,
        &cut,
        &[
            "--topics",
            "sensor_accel",
            "vehicle_attitude",
            "--from",
            "21",
            "--to",
            "22",
        ],
    );
    let files = files_under(&cut);
    assert_eq!(files.len(), 2, "{files:?}");
    let script = "import sys, pyarrow.dataset as ds
t = ds.dataset(sys.argv[1], format='parquet', partitioning='hive').to_table()
ts = t['timestamp'].to_pylist()
print(len(ts), min(ts), max(ts))";
    for topic in ["sensor_accel", "vehicle_attitude"] {
        let text = python(&py, script, &[&cut.join("parquet/v1").join(topic)]);
        let v: Vec<u64> = text
            .split_whitespace()
            .map(|x| x.parse().unwrap())
            .collect();
        assert!(v[0] > 0, "{topic}: no rows");
        assert!(v[1] >= 21_000_000 && v[2] <= 22_000_000, "{topic}: {text}");
    }
}

/// Every folder an export makes (the dataset's root, each topic's, day's and vehicle's) is
/// synced into the folder it was made in before the export ends, as each table is into its
/// own: a power cut after the export finds the whole path to every table. Seen by strace:
/// each successful mkdir's parent is fsynced after it.
#[test]
fn every_folder_an_export_makes_is_synced_into_its_parent() {
    let Some(strace) = common::procs::strace("watch which folders an export syncs") else {
        return;
    };
    let dir = fresh_dir("dataset-folders-synced");
    std::fs::create_dir_all(&dir).unwrap();
    let root = dir.join("fleet");
    let trace = dir.join("trace");
    let status = Command::new(strace)
        .args(["-ff", "-ttt", "-y", "-e", "trace=mkdir,mkdirat,fsync", "-o"])
        .arg(&trace)
        .args([common::procs::BIN, "export"])
        .arg(project().join("testdata/synthetic.ulg"))
        .arg("--dataset")
        .arg(&root)
        .status()
        .unwrap();
    assert!(status.success());
    // Each thread's calls, in one file each (`-ff`): (time, what, path).
    let mut made = Vec::new();
    let mut synced = Vec::new();
    for file in std::fs::read_dir(&dir).unwrap() {
        let file = file.unwrap().path();
        if !file
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("trace.")
        {
            continue;
        }
        for line in std::fs::read_to_string(&file).unwrap().lines() {
            let Some((time, call)) = line.split_once(' ') else {
                continue;
            };
            let time: f64 = time.parse().unwrap();
            if call.starts_with("mkdir") && call.ends_with(" = 0") {
                let path = call.split('"').nth(1).expect("a quoted path");
                made.push((time, PathBuf::from(path)));
            } else if let Some(rest) = call.strip_prefix("fsync(") {
                let path = rest.split_once('<').and_then(|(_, p)| p.split_once('>'));
                synced.push((time, PathBuf::from(path.expect("strace -y's path").0)));
            }
        }
    }
    let topics = files_under(&root).len();
    assert!(
        made.len() > 3 * topics,
        "{} folders made for {topics} tables: {made:?}",
        made.len()
    );
    for (at, folder) in &made {
        let parent = folder.parent().unwrap();
        assert!(
            synced.iter().any(|(t, p)| t > at && p == parent),
            "{} was made in {} at {at}, which was never synced after it",
            folder.display(),
            parent.display()
        );
    }
}

/// A real full disk (a small tmpfs): the export fails with the disk's own error, whichever of
/// its threads (the walk's, an encoder's, the filer's) meets it first, and leaves neither a
/// table under its final name nor a temporary; with room again, the same export succeeds.
#[test]
fn an_export_to_a_full_disk_fails_with_its_error_and_leaves_nothing() {
    let Some(disk) = common::tmpfs::Tmpfs::mount("dataset-full", "1M") else {
        return;
    };
    let log = project().join("testdata/synthetic.ulg");
    // Room for some of the tables, not for all.
    let filler = disk.0.join("filler");
    std::fs::write(&filler, vec![0u8; 960 << 10]).unwrap();
    let root = disk.0.join("dataset");
    let out = Command::new(common::procs::BIN)
        .args(["export", log.to_str().unwrap(), "--dataset"])
        .arg(&root)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("No space left on device"), "{stderr}");
    assert!(
        !stderr.contains("filer"),
        "the cause, not a thread's stop: {stderr}"
    );
    let left = if root.exists() {
        files_under(&root)
    } else {
        Vec::new()
    };
    assert_eq!(left, Vec::<String>::new(), "nothing whole, nothing left");

    std::fs::remove_file(&filler).unwrap();
    export_dataset(&log, &root, &[]);
    let tables = files_under(&root);
    let again = fresh_dir("dataset-full-reference");
    export_dataset(&log, &again, &[]);
    assert_eq!(
        tables,
        files_under(&again),
        "the same tables as on a disk with room"
    );
}

#[test]
fn a_long_flight_is_written_a_row_group_at_a_time_and_loses_nothing() {
    let Some(py) = venv_python() else { return };
    let Some(log) = shared_log("sample.ulg") else {
        return;
    };
    // sample.ulg's data section 16 times over (64 MB): more than a topic holds before
    // writing a row group, and than all topics hold together.
    let bytes = std::fs::read(&log).unwrap();
    let mut reader = ulog_recv::ulog::Reader::new();
    reader.push(&bytes);
    reader.finish();
    let mut data_start = None;
    while let Some(item) = reader.next_record() {
        let record = item.unwrap();
        if let ulog_recv::ulog::Message::AddLogged { .. } = record.message {
            data_start = Some(record.offset as usize);
            break;
        }
    }
    let data_start = data_start.expect("a subscription");
    let mut long = bytes[..data_start].to_vec();
    for _ in 0..16 {
        long.extend_from_slice(&bytes[data_start..]);
    }
    let dir = fresh_dir("dataset-long");
    std::fs::create_dir_all(&dir).unwrap();
    let long_log = dir.join("long.ulg");
    std::fs::write(&long_log, &long).unwrap();
    let root = dir.join("tables");
    export_dataset(
        &long_log,
        &root,
        &["--topics", "sensor_combined", "vehicle_attitude"],
    );

    let expected = common::expected_for(&log);
    let count = |topic: &str| {
        expected["datasets"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["name"] == topic)
            .unwrap()["count"]
            .as_u64()
            .unwrap()
    };
    let script = "import sys, glob, pyarrow.parquet as pq
f = pq.ParquetFile(glob.glob(sys.argv[1] + '/*/*/*.parquet')[0])
groups = [f.read_row_group(i)['timestamp'].to_pylist() for i in range(f.num_row_groups)]
print(f.metadata.num_rows, f.num_row_groups, all(g == sorted(g) for g in groups))";
    for topic in ["sensor_combined", "vehicle_attitude"] {
        let text = python(&py, script, &[&root.join("parquet/v1").join(topic)]);
        let v: Vec<&str> = text.split_whitespace().collect();
        assert_eq!(
            v[0].parse::<u64>().unwrap(),
            16 * count(topic),
            "{topic}: {text}"
        );
        assert_eq!(v[2], "True", "{topic}: a row group not sorted: {text}");
        if topic == "sensor_combined" {
            assert!(
                v[1].parse::<u64>().unwrap() > 1,
                "{topic}: one row group: {text}"
            );
        }
    }
}

#[test]
fn the_guides_queries_run_as_printed_in_duckdb_and_spark_and_answer_as_pyulog() {
    let Some(py) = venv_python() else { return };
    let mut logs = all_logs();
    // ArduPilot's flights beside PX4's, read by pymavlink.
    let ardupilot = common::ardupilot::ardupilot_logs().unwrap_or_default();
    logs.extend(ardupilot.iter().cloned());
    let root = fresh_dir("dataset-queries");
    for log in &logs {
        export_dataset(log, &root, &[]);
    }
    let report = json_output(
        Command::new(&py)
            .current_dir(&root)
            .arg(project().join("tests/dataset_queries.py"))
            .arg(project().join("docs/src/tables.md"))
            .arg(&root)
            .arg("--spark")
            .args(&logs),
    );
    assert_eq!(report["queries"], 5, "{report}");
    assert_eq!(report["ardupilot_flights"], ardupilot.len(), "{report}");
    // Flight Review v2 finds GPS interference in two of the real logs.
    if common::shared_logs().is_some() {
        assert!(report["gps_flights"].as_u64().unwrap() >= 2, "{report}");
    }
    assert_eq!(report["engines"], serde_json::json!(["duckdb", "spark"]));
    assert!(report["rows"].as_u64().unwrap() >= 2, "{report}");
}
