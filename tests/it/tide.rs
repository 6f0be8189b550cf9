//! `ulog-recv export -o NAME.tide`, read back by a reader written from the seed's text
//! (`tests/tide_read.py`, Python's standard library only) and by our own (`ulog-recv info`):
//! every real log and the synthetic one, each topic instance with pyulog's sample count, first
//! and last values (decoded from CDR through the file's own TYPE blocks) and log times; every
//! index entry points at its entry; every type hash exists; chunks bound their entries; the
//! three compressions; `--topics` and `--from/--to` cut; a block of an unknown tag and fields
//! appended to blocks are skipped by both readers (the Size rule); kill -9 mid-export leaves
//! nothing under the output's name.

use crate::common;
use crate::common::project;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::procs::{BIN, fresh_dir, run_ok};
use common::{all_logs, expected_for};
use serde_json::Value as Json;

fn export(input: &Path, output: &Path, extra: &[&str]) {
    let mut args = vec![
        "export",
        input.to_str().unwrap(),
        "-o",
        output.to_str().unwrap(),
    ];
    args.extend(extra);
    run_ok(&args);
}

/// The seed-text reader's report of a TIDE file.
fn read(py: &Path, file: &Path) -> Json {
    let out = Command::new(py)
        .arg(project().join("tests/tide_read.py"))
        .arg(file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "tide_read.py {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Our reader's `info --json` of a TIDE file.
fn info(file: &Path) -> Json {
    serde_json::from_str(&run_ok(&["info", "--json", file.to_str().unwrap()])).unwrap()
}

fn meta(report: &Json) -> BTreeMap<String, String> {
    report["meta"]
        .as_array()
        .unwrap()
        .iter()
        .map(|kv| {
            (
                kv[0].as_str().unwrap().to_owned(),
                kv[1].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// What the seed-text reader found wrong, and what both readers count per channel.
fn check_file(what: &str, report: &Json, ours: &Json, compression: &str) {
    assert_eq!(report["problems"], serde_json::json!([]), "{what}");
    assert_eq!(report["unknown"], serde_json::json!([]), "{what}");
    assert_eq!(report["version"], serde_json::json!([2, 0]), "{what}");
    assert_eq!(report["blocks"]["TIDE"], 1, "{what}");
    assert_eq!(
        report["compressions"],
        serde_json::json!([compression]),
        "{what}"
    );
    // Our reader: the same channels with the same counts, the same compression.
    let theirs: BTreeMap<&str, &Json> = report["channels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["topic"].as_str().unwrap(), &c["count"]))
        .collect();
    let mine: BTreeMap<&str, &Json> = ours["channels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["name"].as_str().unwrap(), &c["entries"]))
        .collect();
    assert_eq!(mine, theirs, "{what}: info's channels and entries");
    assert_eq!(
        ours["compressions"],
        serde_json::json!([compression]),
        "{what}"
    );
    let total: u64 = theirs.values().map(|c| c.as_u64().unwrap()).sum();
    assert_eq!(ours["entries"], total, "{what}: info's entries");
}

#[test]
fn every_log_exports_to_tide_that_a_reader_written_from_the_seed_reads_as_pyulog() {
    let Some(py) = common::venv_python() else {
        return;
    };
    let dir = fresh_dir("tide-logs");
    std::fs::create_dir_all(&dir).unwrap();
    for log in all_logs() {
        let name = log.file_stem().unwrap().to_string_lossy().into_owned();
        let tide = dir.join(format!("{name}.tide"));
        export(&log, &tide, &[]);
        let expected = expected_for(&log);
        let report = read(&py, &tide);
        check_file(&name, &report, &info(&tide), "gzip");
        // Counts, first and last values, log times: pyulog's.
        common::check_ros2_report(&name, &report, &expected);

        // META: Dublin Core and the time base.
        let meta = meta(&report);
        let hardware = expected["info"]["ver_hw"].as_str().unwrap();
        assert!(meta["dc:Title"].contains(hardware), "{name}: {meta:?}");
        assert!(meta["dc:Source"].contains(hardware), "{name}: {meta:?}");
        // Times: UTC when a GPS sample carries a UTC time (then dc:Date), else the log's own.
        let offset: i128 = meta["ulog-recv:time_offset_ns"].parse().unwrap();
        let utc = meta["dc:Description"].contains("times are UTC");
        let gps_utc = expected["datasets"].as_array().unwrap().iter().any(|t| {
            ["vehicle_gps_position", "sensor_gps"].contains(&t["name"].as_str().unwrap())
                && ["first", "last"]
                    .iter()
                    .any(|end| t[end]["time_utc_usec"].as_u64().unwrap_or(0) > 0)
        });
        assert_eq!(utc, gps_utc, "{name}: {meta:?}");
        assert_eq!(meta.contains_key("dc:Date"), utc, "{name}: {meta:?}");
        if utc {
            assert!(meta["dc:Date"].as_str() > "2000", "{name}: {meta:?}");
        } else {
            assert_eq!(offset, 0, "{name}");
        }
        // Sources: the uORB topic and instance, and its ULog format text.
        let sources = report["sources"].as_object().unwrap();
        for (topic, source) in sources {
            if topic == "/log" {
                continue;
            }
            let (format, instance) = match topic[1..].rsplit_once('/') {
                Some((f, n)) => (f, n),
                None => (&topic[1..], "0"),
            };
            assert_eq!(
                source[0],
                format!("uORB {format}, instance {instance}"),
                "{name}"
            );
            assert!(
                source[1]
                    .as_str()
                    .unwrap()
                    .starts_with(&format!("{format}:")),
                "{name} {topic}: {}",
                source[1]
            );
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn every_compression_holds_the_same_entries_and_options_cut() {
    let Some(py) = common::venv_python() else {
        return;
    };
    let log = common::shared_logs()
        .and_then(|logs| {
            logs.into_iter()
                .find(|l| l.ends_with("sample_log_small.ulg"))
        })
        .unwrap_or_else(|| common::synthetic_logs()[0].clone());
    let dir = fresh_dir("tide-options");
    std::fs::create_dir_all(&dir).unwrap();
    let mut reports = Vec::new();
    for compression in ["gzip", "bzip2", "none"] {
        let tide = dir.join(format!("{compression}.tide"));
        export(&log, &tide, &["--compression", compression]);
        let report = read(&py, &tide);
        check_file(compression, &report, &info(&tide), compression);
        reports.push((
            report["channels"].clone(),
            std::fs::metadata(&tide).unwrap().len(),
        ));
    }
    // The text `info` prints: version, compression, channels with their types and counts.
    let text = run_ok(&["info", dir.join("bzip2.tide").to_str().unwrap()]);
    assert!(text.starts_with("TIDE 2.0, "), "{text}");
    assert!(text.contains(" chunks (bzip2), "), "{text}");
    assert!(text.contains(" px4_ulog/msg/"), "{text}");
    assert!(text.contains("dc:Source: "), "{text}");
    assert_eq!(
        reports[0].0, reports[1].0,
        "gzip and bzip2 hold the same entries"
    );
    assert_eq!(
        reports[0].0, reports[2].0,
        "gzip and none hold the same entries"
    );
    assert!(reports[0].1 < reports[2].1, "gzip is smaller than none");

    // --topics: those channels only (and /log only when asked).
    let cut = dir.join("topics.tide");
    export(&log, &cut, &["--topics", "vehicle_*"]);
    let report = read(&py, &cut);
    assert_eq!(report["problems"], serde_json::json!([]));
    let topics: Vec<&str> = report["channels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["topic"].as_str().unwrap())
        .collect();
    assert!(!topics.is_empty());
    assert!(
        topics.iter().all(|t| t.starts_with("/vehicle_")),
        "{topics:?}"
    );

    // --from/--to: entries of that window of log time only (the middle third of the busiest
    // channel's span).
    let all = info(&dir.join("gzip.tide"));
    let offset: i128 = meta(&read(&py, &dir.join("gzip.tide")))["ulog-recv:time_offset_ns"]
        .parse()
        .unwrap();
    let busiest = all["channels"]
        .as_array()
        .unwrap()
        .iter()
        .max_by_key(|c| c["entries"].as_u64().unwrap())
        .unwrap();
    let log_s = |ns: &Json| (ns.as_u64().unwrap() as i128 - offset) as f64 / 1e9;
    let (start, end) = (log_s(&busiest["first_ns"]), log_s(&busiest["last_ns"]));
    let (from, to) = (
        start + (end - start) / 3.0,
        start + (end - start) * 2.0 / 3.0,
    );
    let window = dir.join("window.tide");
    export(
        &log,
        &window,
        &["--from", &format!("{from:.6}"), "--to", &format!("{to:.6}")],
    );
    let report = read(&py, &window);
    assert_eq!(report["problems"], serde_json::json!([]));
    let cut = info(&window);
    assert!(cut["entries"].as_u64().unwrap() > 0);
    assert!(cut["entries"].as_u64() < all["entries"].as_u64());
    for channel in report["channels"].as_array().unwrap() {
        for key in ["firstLogTime", "lastLogTime"] {
            if let Some(ns) = channel[key].as_str() {
                let s = ns.parse::<f64>().unwrap() / 1e9;
                assert!(
                    s >= from - 1e-6 && s <= to + 1e-6,
                    "{} {key} {s} outside {from}..{to}",
                    channel["topic"]
                );
            }
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The blocks of a TIDE file: (tag, data).
fn blocks(bytes: &[u8]) -> Vec<([u8; 4], Vec<u8>)> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let tag: [u8; 4] = bytes[at..at + 4].try_into().unwrap();
        let size = u64::from_le_bytes(bytes[at + 4..at + 12].try_into().unwrap()) as usize;
        out.push((tag, bytes[at + 12..at + 12 + size].to_vec()));
        at += 12 + size;
    }
    out
}

#[test]
fn a_block_of_an_unknown_tag_and_fields_appended_to_blocks_are_skipped_by_both_readers() {
    let Some(py) = common::venv_python() else {
        return;
    };
    let log = &common::synthetic_logs()[0];
    let dir = fresh_dir("tide-size-rule");
    std::fs::create_dir_all(&dir).unwrap();
    let plain = dir.join("plain.tide");
    export(log, &plain, &[]);
    let bytes = std::fs::read(&plain).unwrap();
    // A later minor version's file: an unknown block after TIDE and before the end, and 7
    // bytes appended to every block whose fields end before its size (all but the chunks,
    // whose entries run to the end).
    let grown = |tag: &[u8; 4], data: &[u8]| -> Vec<u8> {
        let mut data = data.to_vec();
        if tag != b"CHNK" {
            data.extend_from_slice(b"\x01later!");
        }
        data
    };
    let unknown = |k: usize| -> &'static [u8] {
        if k == 0 || k == 5 {
            b"XTRA\x09\x00\x00\x00\x00\x00\x00\x00\x00\xffunknown"
        } else {
            b""
        }
    };
    // Where each block lands in the new file: the index's chunk starts move with them.
    let (mut old_at, mut new_at) = (0u64, 0u64);
    let mut moved = BTreeMap::new();
    for (k, (tag, data)) in blocks(&bytes).iter().enumerate() {
        moved.insert(old_at, new_at);
        old_at += 12 + data.len() as u64;
        new_at += 12 + grown(tag, data).len() as u64 + unknown(k).len() as u64;
    }
    let mut later = Vec::new();
    for (k, (tag, data)) in blocks(&bytes).into_iter().enumerate() {
        let mut data = grown(&tag, &data);
        if &tag == b"INDX" {
            let count = u32::from_le_bytes(data[4..8].try_into().unwrap()) as usize;
            for e in 0..count {
                let at = 8 + e * 20;
                let start = u64::from_le_bytes(data[at..at + 8].try_into().unwrap());
                data[at..at + 8].copy_from_slice(&moved[&start].to_le_bytes());
            }
        }
        later.extend_from_slice(&tag);
        later.extend_from_slice(&(data.len() as u64).to_le_bytes());
        later.extend_from_slice(&data);
        later.extend_from_slice(unknown(k));
    }
    let extended = dir.join("extended.tide");
    std::fs::write(&extended, &later).unwrap();

    let (before, after) = (read(&py, &plain), read(&py, &extended));
    assert_eq!(after["problems"], serde_json::json!([]));
    assert_eq!(after["unknown"], serde_json::json!(["XTRA", "XTRA"]));
    assert_eq!(
        after["channels"], before["channels"],
        "the seed reader reads the same"
    );
    assert_eq!(after["meta"], before["meta"]);
    let (mine_before, mut mine_after) = (info(&plain), info(&extended));
    assert_eq!(
        mine_after["unknown_blocks"],
        serde_json::json!(["XTRA", "XTRA"])
    );
    mine_after["unknown_blocks"] = serde_json::json!([]);
    mine_after["bytes"] = mine_before["bytes"].clone();
    assert_eq!(mine_after, mine_before, "our reader reads the same");

    // A file cut inside a block: our reader says where, and writes nothing else.
    let cut = dir.join("cut.tide");
    std::fs::write(&cut, &bytes[..bytes.len() - 5]).unwrap();
    let out = Command::new(BIN).arg("info").arg(&cut).output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("META block at byte"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn kill_9_during_an_export_leaves_nothing_under_the_output_name() {
    let Some(log) = common::shared_logs().and_then(|logs| {
        logs.into_iter()
            .max_by_key(|l| std::fs::metadata(l).unwrap().len())
    }) else {
        return;
    };
    let dir = fresh_dir("tide-kill");
    std::fs::create_dir_all(&dir).unwrap();
    let output = dir.join("flight.tide");
    let partial = dir.join(".flight.tide.partial");
    // bzip2, the slowest: the export is caught while it writes.
    let mut child = Command::new(BIN)
        .arg("export")
        .arg(&log)
        .arg("-o")
        .arg(&output)
        .args(["--compression", "bzip2"])
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while std::fs::metadata(&partial).map_or(true, |m| m.len() == 0) {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the export ended before it could be killed"
        );
        assert!(t0.elapsed() < Duration::from_secs(30));
        std::thread::sleep(Duration::from_millis(1));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!output.exists(), "a cut export under the output's name");
    // Run again, the export completes and replaces its stale temporary.
    export(&log, &output, &["--compression", "bzip2"]);
    assert!(output.exists());
    assert!(!partial.exists());
    assert!(info(&output)["entries"].as_u64().unwrap() > 0);
    std::fs::remove_dir_all(&dir).unwrap();
}
