//! A fleet's flights as tables in its bucket, read by the engines users run: three vehicles
//! over two days, one flight with a failsafe, each session uploaded by `ulog-recv upload
//! --upload-tables` (the daemon's uploader, by hand) to Garage, one of them cut by kill -9
//! while its tables go up and resumed. Then, with tools independent of ours:
//! - boto3: every table object is there once, byte for byte the session's file, no
//!   temporary key, the manifest lists them;
//! - pyarrow reads them straight from the bucket, pruning partitions (`tests/fleet_bucket.py`),
//!   and pyiceberg registers the files into an Iceberg table without rewriting them;
//! - DuckDB and Spark (pyspark, local mode) run the guide's queries as printed on a mirror of
//!   the bucket and answer as pyulog does (`tests/dataset_queries.py`).
//!
//! Garage as in `tests/it/upload.rs`; without it (or the virtualenv) the test says SKIPPED, and
//! fails under CI.

use crate::common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use common::garage::{ACCESS_KEY, BUCKET, Garage, SECRET_KEY, credentials};
use common::procs::{BIN, fresh_dir};
use common::{json_output, sha256_file, store_session, venv_python};
use ulog_recv::sim::synth::{SynthOptions, SynthVehicle, generate_for};

/// The dataset's prefix in the bucket.
const PREFIX: &str = "fleet";

/// One flight of the fleet: the vehicle, UTC start (s since the epoch), a failsafe.
struct Flight {
    uid: u64,
    system_id: u8,
    start_s: u64,
    failsafe: bool,
}

/// 2026-11-20 and 2026-11-21, 09:00 UTC.
const DAY1: u64 = 1_795_165_200;
const DAY2: u64 = 1_795_251_600;

fn fleet() -> Vec<Flight> {
    let flight = |uid, system_id, start_s, failsafe| Flight {
        uid,
        system_id,
        start_s,
        failsafe,
    };
    vec![
        flight(0xA1, 1, DAY1, false),
        flight(0xB2, 2, DAY1 + 600, false),
        flight(0xC3, 3, DAY1 + 1200, false),
        flight(0xA1, 1, DAY2, false),
        flight(0xB2, 2, DAY2 + 600, true),
        flight(0xC3, 3, DAY2 + 1200, false),
    ]
}

/// The keys `ulog-recv upload` said it uploaded ("  FILE → KEY  (0.1 s)").
fn keys_said(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter_map(|l| l.split(" → ").nth(1)?.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

fn upload(session: &Path, garage: &Garage, creds: &Path, extra: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .arg("upload")
        .arg(session)
        .args(garage.upload_args(PREFIX, creds))
        .arg("--upload-tables")
        .args(extra);
    command
}

#[test]
fn a_fleets_tables_reach_the_bucket_once_and_arrow_duckdb_spark_and_iceberg_read_them() {
    let Some(py) = venv_python() else { return };
    let garage = match Garage::start(fresh_dir("garage-fleet")) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("SKIPPED: {e}");
            assert!(std::env::var_os("CI").is_none(), "CI must run: {e}");
            return;
        }
    };
    let dir = fresh_dir("fleet");
    let creds = credentials(&dir, SECRET_KEY);
    let ulgs = dir.join("ulg");
    std::fs::create_dir_all(&ulgs).unwrap();
    let mut sessions = Vec::new();
    let mut logs = Vec::new();
    for (k, f) in fleet().iter().enumerate() {
        let opts = SynthOptions {
            duration_s: 8 + k as u32,
            seed: k as u64 + 1,
            appended_data: false,
        };
        let vehicle = SynthVehicle {
            uid: f.uid,
            system_id: f.system_id,
            utc_start_us: f.start_s * 1_000_000,
            failsafe: f.failsafe,
        };
        let log = generate_for(opts, &vehicle);
        let options = ulog_recv::store::StoreOptions::new(dir.join("logs"));
        let session = store_session(options, f.system_id, &log, 4096, f.start_s);
        // The log under the session's name: the flight id its tables carry.
        let name = session.file_name().unwrap().to_string_lossy().into_owned();
        let path = ulgs.join(format!("{name}.ulg"));
        std::fs::write(&path, &log).unwrap();
        sessions.push(session);
        logs.push(path);
    }

    // Every session but the last uploaded whole.
    let (last, others) = sessions.split_last().unwrap();
    for session in others {
        let out = upload(session, &garage, &creds, &[]).output().unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{said}");
        let keys = keys_said(&said);
        // Splits and manifest first, the tables after them, the manifest listing them last.
        let first_table = keys
            .iter()
            .position(|k| k.contains("/parquet/v1/"))
            .unwrap();
        assert!(
            keys[..first_table].iter().any(|k| k.ends_with(".ulg")),
            "{keys:?}"
        );
        assert!(keys.last().unwrap().ends_with("manifest.json"), "{keys:?}");
    }
    // The last one cut by kill -9 once its first table is up, then resumed.
    let mut child = upload(last, &garage, &creds, &["--upload-rate", "20K"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut before = Vec::new();
    for line in BufReader::new(child.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        before.extend(keys_said(&line));
        if line.contains("/parquet/v1/") {
            child.kill().unwrap(); // SIGKILL
            break;
        }
    }
    child.wait().unwrap();
    let out = upload(last, &garage, &creds, &[]).output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    let after = keys_said(&said);
    let tables_before: Vec<_> = before.iter().filter(|k| k.contains("/parquet/")).collect();
    assert!(!tables_before.is_empty(), "{before:?}");
    for key in &tables_before {
        assert!(!after.contains(key), "{key} uploaded twice: {after:?}");
    }
    let tables_after = after.iter().filter(|k| k.contains("/parquet/")).count();
    assert!(tables_after > 0, "nothing left after the kill: {after:?}");
    eprintln!(
        "killed after {} table(s); the rerun uploaded {tables_after} more",
        tables_before.len()
    );

    // `ulog-recv uploads` says each session's tables are up.
    let listing = common::procs::run_ok(&[
        "uploads",
        "--json",
        "--log-dir",
        &dir.join("logs").display().to_string(),
    ]);
    let reports: Vec<serde_json::Value> = listing
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(reports.len(), sessions.len(), "{listing}");
    for r in &reports {
        let tables = r["tables"].as_str().unwrap();
        let (up, all) = tables.split_once('/').unwrap();
        assert!(up == all && up != "0", "{r}");
        assert_eq!(r["complete"], true, "{r}");
    }

    // boto3: every session's tables are in the bucket once, as the session holds them.
    let found = garage.objects(&py, &format!("{PREFIX}/"));
    let objects = found["objects"].as_object().unwrap();
    let mut tables = BTreeMap::new();
    for session in &sessions {
        let journal = ulog_recv::upload::journal::load_journal(session)
            .unwrap()
            .unwrap();
        let built = journal.tables.expect("tables built");
        assert!(built.failed.is_none() && built.listed, "{built:?}");
        let manifest = ulog_recv::store::files::read_manifest(session).unwrap();
        let keys: Vec<_> = built.files.iter().map(|f| f.key.clone()).collect();
        assert_eq!(manifest.tables, keys);
        for file in &built.files {
            assert_eq!(
                objects[&file.key]["sha256"].as_str().unwrap(),
                sha256_file(&session.join(&file.file)),
                "{}",
                file.key
            );
            tables.insert(file.key.clone(), ());
        }
        let manifest_key = format!("{}/manifest.json", journal.prefix);
        assert_eq!(
            objects[&manifest_key]["sha256"].as_str().unwrap(),
            sha256_file(&session.join("manifest.json"))
        );
    }
    let in_bucket: Vec<_> = objects
        .keys()
        .filter(|k| k.starts_with(&format!("{PREFIX}/parquet/")))
        .collect();
    assert_eq!(in_bucket.len(), tables.len(), "{in_bucket:?}");
    assert!(found["open_multipart"].as_array().unwrap().is_empty());
    // Three vehicles, two days, the layout's keys.
    let vehicles: std::collections::BTreeSet<_> = in_bucket
        .iter()
        .filter_map(|k| k.split('/').find(|p| p.starts_with("vehicle=")))
        .collect();
    let days: std::collections::BTreeSet<_> = in_bucket
        .iter()
        .filter_map(|k| k.split('/').find(|p| p.starts_with("date=")))
        .collect();
    assert_eq!(vehicles.len(), 3, "{vehicles:?}");
    assert_eq!(
        days.into_iter().collect::<Vec<_>>(),
        ["date=2026-11-20", "date=2026-11-21"]
    );

    // `export --dataset s3://…`: the same objects a local export writes as files.
    let local = dir.join("local-export");
    let exported = |to: &str| {
        let mut args = vec!["export".to_owned(), last.display().to_string()];
        args.extend(["--dataset".to_owned(), to.to_owned()]);
        if to.starts_with("s3://") {
            args.extend(garage.upload_args("", &creds).into_iter().skip(2));
        }
        common::procs::run_ok(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };
    exported(&local.display().to_string());
    let said = exported(&format!("s3://{BUCKET}/adhoc"));
    let adhoc = garage.objects(&py, "adhoc/");
    let adhoc = adhoc["objects"].as_object().unwrap();
    let files = common::procs::files_under(&local);
    assert!(files.len() >= 10, "{files:?}");
    assert_eq!(adhoc.len(), files.len(), "{said}");
    for file in &files {
        assert_eq!(
            adhoc[&format!("adhoc/{file}")]["sha256"].as_str().unwrap(),
            sha256_file(&local.join(file)),
            "{file}"
        );
    }

    // pyarrow from the bucket, pyiceberg on a mirror of it.
    let mirror = dir.join("mirror");
    let report = json_output(
        Command::new(&py)
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/fleet_bucket.py"
            ))
            .args([&garage.endpoint(), "garage", BUCKET, PREFIX])
            .arg(&mirror)
            .arg(dir.join("iceberg"))
            .args(&logs)
            .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
            .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY),
    );
    assert_eq!(report["flights"], 6, "{report}");
    assert_eq!(report["files"].as_u64().unwrap() as usize, tables.len());
    assert_eq!(report["pruned_to"], 1, "{report}");
    eprintln!("pyarrow and pyiceberg: {report}");

    // The guide's queries, in DuckDB and Spark, on the mirror.
    let report = json_output(
        Command::new(&py)
            .current_dir(&mirror)
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/dataset_queries.py"
            ))
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/src/tables.md"))
            .arg(&mirror)
            .arg("--spark")
            .args(&logs),
    );
    assert_eq!(report["failsafe_flights"], 1, "{report}");
    eprintln!("DuckDB and Spark: {report}");
    assert_eq!(report["engines"], serde_json::json!(["duckdb", "spark"]));
}
