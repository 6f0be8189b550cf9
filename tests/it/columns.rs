//! Columns: a log stored with `imu=sensor_*,vehicle_imu*` in a column of its own. Every split
//! of every column opens alone in pyulog and holds only its own formats and subscriptions;
//! the session read back (columns joined) holds, topic by topic, the same samples in the same
//! order as the log (and as the same log stored in one column), with its strings, parameters
//! and dropouts once; exports of both agree in pyulog and in the `mcap` reader; reading the
//! main column alone opens none of the column's files (seen by strace); a crash leaves every
//! column repairable; the daemon takes `--column` from the command line and the config file.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use common::procs::{BIN, Proc, finish_recording, fresh_dir, run_ok};
use ulog_recv::store::columns::ColumnSpec;
use ulog_recv::store::files::read_manifest;
use ulog_recv::store::reading::{ColumnStream, read_session};
use ulog_recv::store::{LogStore, SplitPolicy, StoreOptions};
use ulog_recv::ulog::message::{Message, framed, msg_type};
use ulog_recv::ulog::{Decoder, glob};

const IMU: &[&str] = &["sensor_*", "vehicle_imu*"];

fn imu_column() -> ColumnSpec {
    ColumnSpec::parse(&format!("imu={}", IMU.join(","))).unwrap()
}

fn is_imu(name: &str) -> bool {
    IMU.iter().any(|p| glob::matches(p, name))
}

/// The logs: a synthetic flight (always there) and the real ones.
fn logs() -> Vec<(String, Vec<u8>)> {
    let mut logs = vec![(
        "synthetic-300s".to_owned(),
        ulog_recv::sim::synth::generate(ulog_recv::sim::synth::SynthOptions {
            duration_s: 300,
            seed: 11,
            appended_data: false,
        }),
    )];
    for p in common::shared_logs().unwrap_or_default() {
        logs.push((
            p.file_name().unwrap().to_string_lossy().into_owned(),
            std::fs::read(&p).unwrap(),
        ));
    }
    logs
}

/// Stores `log` in a session under `dir` (splits of 20 s of log time), with `columns`.
fn store(dir: &Path, log: &[u8], columns: Vec<ColumnSpec>) -> PathBuf {
    common::store_session(
        common::split_every(dir, 20, columns),
        1,
        log,
        7_001,
        1_800_000_000,
    )
}

/// A stream's content as readers see it: per subscription (topic/multi_id) its samples in
/// order, and the other messages of the data section (strings, parameter changes, dropouts)
/// in order.
#[derive(Debug, PartialEq, Eq)]
struct Content {
    samples: BTreeMap<String, Vec<Vec<u8>>>,
    others: Vec<Vec<u8>>,
}

fn content(stream: &[u8]) -> Content {
    let mut decoder = Decoder::new();
    let header: [u8; 16] = stream[..16].try_into().unwrap();
    let _ = decoder.handle(&Message::Header(
        ulog_recv::ulog::FileHeader::parse(&header).unwrap(),
    ));
    let mut samples: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
    let mut others = Vec::new();
    let mut in_data = false;
    for m in framed(&stream[16..]) {
        let parsed = Message::parse_framed(m);
        if let Some(p) = &parsed {
            let _ = decoder.handle(p);
        }
        match (m[2], parsed) {
            (msg_type::DATA, Some(Message::Data { msg_id, data })) => {
                let sub = decoder.subscription(msg_id).unwrap();
                samples
                    .entry(format!("{}/{}", sub.name(), sub.multi_id))
                    .or_default()
                    .push(data.to_vec());
            }
            (msg_type::ADD_LOGGED | msg_type::REMOVE_LOGGED | msg_type::FORMAT, _) => {
                in_data |= m[2] != msg_type::FORMAT
            }
            (msg_type::FLAG_BITS | msg_type::INFO | msg_type::INFO_MULTIPLE, _)
            | (msg_type::PARAMETER | msg_type::PARAMETER_DEFAULT, _)
                if !in_data => {}
            _ => {
                in_data = true;
                others.push(m.to_vec())
            }
        }
    }
    Content { samples, others }
}

/// The names of the formats and subscriptions a split holds.
fn formats_and_topics(split: &[u8]) -> (Vec<String>, Vec<String>) {
    let (mut formats, mut topics) = (Vec::new(), Vec::new());
    for m in framed(&split[16..]) {
        match Message::parse_framed(m) {
            Some(Message::Format(text)) => formats.push(text.split(':').next().unwrap().to_owned()),
            Some(Message::AddLogged { name, .. }) => topics.push(name.to_owned()),
            _ => {}
        }
    }
    (formats, topics)
}

#[test]
fn each_column_split_stands_alone_and_the_session_reads_back_as_the_log() {
    let root = fresh_dir("columns-content");
    let mut checked_with_pyulog = 0;
    for (name, log) in logs() {
        let session = store(&root.join(&name), &log, vec![imu_column()]);
        let manifest = read_manifest(&session).unwrap();
        assert_eq!(manifest.columns.len(), 1, "{name}");
        assert_eq!(manifest.columns[0].name, "imu");
        let imu_splits = &manifest.columns[0].splits;
        assert!(
            !imu_splits.is_empty(),
            "{name}: the imu column has no split"
        );
        assert!(imu_splits.iter().all(|s| s.closed && s.sha256.is_some()));
        assert!(
            imu_splits.iter().all(|s| s.file.starts_with("imu/split_")),
            "{name}"
        );
        // Only its own topics in each column; formats: its own and what they nest.
        for split in manifest.all_splits() {
            let bytes = std::fs::read(session.join(&split.file)).unwrap();
            let (formats, topics) = formats_and_topics(&bytes);
            let in_imu = split.file.starts_with("imu/");
            assert!(
                topics.iter().all(|t| is_imu(t) == in_imu),
                "{name} {}: topics {topics:?}",
                split.file
            );
            if in_imu {
                assert!(
                    formats.iter().any(|f| is_imu(f)),
                    "{name} {}: no imu format",
                    split.file
                );
            } else {
                assert!(
                    !formats.iter().any(|f| is_imu(f)),
                    "{name} {}: imu formats in the main column: {formats:?}",
                    split.file
                );
            }
        }
        // Each split of each column opens alone in pyulog (two logs: pyulog is slow).
        if name == "synthetic-300s" || name == "sample.ulg" {
            for split in manifest.all_splits() {
                common::check_with_pyulog(&session.join(&split.file));
                checked_with_pyulog += 1;
            }
        }
        // Read back: the log's samples topic by topic in order, its strings, parameter
        // changes and dropouts once.
        let joined = read_session(&session, None).unwrap();
        let (want, got) = (content(&log), content(&joined));
        assert_eq!(
            want.samples.keys().collect::<Vec<_>>(),
            got.samples.keys().collect::<Vec<_>>(),
            "{name}"
        );
        for (topic, samples) in &want.samples {
            assert!(samples == &got.samples[topic], "{name}: {topic} differs");
        }
        assert!(
            want.others == got.others,
            "{name}: strings/params/dropouts differ"
        );
        // The same log in one column reads back the same.
        let single = store(&root.join(format!("{name}-single")), &log, Vec::new());
        assert_eq!(
            content(&read_session(&single, None).unwrap()),
            got,
            "{name}"
        );
        // Read split by split (what a whole export streams), a column is the same bytes;
        // columns to join are not one stream.
        let streamed = |dir: &std::path::Path, column: Option<&str>| {
            let mut bytes = Vec::new();
            let mut stream = ColumnStream::open(dir, column).unwrap().unwrap();
            std::io::Read::read_to_end(&mut stream, &mut bytes).unwrap();
            bytes
        };
        assert!(streamed(&single, None) == read_session(&single, None).unwrap());
        for column in ["imu", "main"] {
            let whole = read_session(&session, Some(column)).unwrap();
            assert!(streamed(&session, Some(column)) == whole, "{name} {column}");
        }
        assert!(ColumnStream::open(&session, None).unwrap().is_none());
        // One column alone: only its topics.
        let imu_only = content(&read_session(&session, Some("imu")).unwrap());
        assert!(
            imu_only
                .samples
                .keys()
                .all(|t| is_imu(t.split('/').next().unwrap()))
        );
        assert!(!imu_only.samples.is_empty(), "{name}");
        let main_only = content(&read_session(&session, Some("main")).unwrap());
        assert!(
            !main_only
                .samples
                .keys()
                .any(|t| is_imu(t.split('/').next().unwrap()))
        );
        assert_eq!(
            imu_only.samples.len() + main_only.samples.len(),
            got.samples.len(),
            "{name}"
        );
    }
    if common::venv_python().is_some() {
        assert!(
            checked_with_pyulog >= 4,
            "{checked_with_pyulog} splits checked"
        );
    }
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn the_joined_export_equals_the_single_column_export_in_independent_readers() {
    let Some(py) = common::venv_python() else {
        return;
    };
    let root = fresh_dir("columns-export");
    let (name, log) = logs()
        .into_iter()
        .find(|(n, _)| n == "sample.ulg")
        .or_else(|| logs().into_iter().next())
        .unwrap();
    let columns = store(&root.join("columns"), &log, vec![imu_column()]);
    let single = store(&root.join("single"), &log, Vec::new());
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    for ext in ["ulg", "mcap"] {
        let (a, b) = (root.join(format!("a.{ext}")), root.join(format!("b.{ext}")));
        run_ok(&[
            "export",
            columns.to_str().unwrap(),
            "-o",
            a.to_str().unwrap(),
        ]);
        run_ok(&[
            "export",
            single.to_str().unwrap(),
            "-o",
            b.to_str().unwrap(),
        ]);
        let script = match ext {
            "ulg" => "tests/same_samples.py",
            _ => "tests/mcap_same.py",
        };
        let report = common::json_output(
            std::process::Command::new(&py)
                .arg(here.join(script))
                .args([&a, &b]),
        );
        assert_eq!(
            report["differ"],
            serde_json::json!({}),
            "{name} {ext}: {report}"
        );
        assert_eq!(report["samples"][0], report["samples"][1], "{report}");
        assert!(report["samples"][0].as_u64().unwrap() > 1000, "{report}");
        if ext == "ulg" {
            assert_eq!(report["extra_in_a"], 0, "{report}");
        }
    }
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn reading_the_main_column_opens_none_of_the_other_columns_files() {
    let Some(strace) = common::procs::strace("watch which files an export opens") else {
        return;
    };
    let root = fresh_dir("columns-strace");
    let (_, log) = logs().remove(0);
    let session = store(&root.join("s"), &log, vec![imu_column()]);
    let opened = |column: Option<&str>| -> Vec<String> {
        let trace = root.join("trace");
        let out = root.join("out.mcap");
        let mut args = vec![
            "-f".to_owned(),
            "-e".into(),
            "trace=open,openat".into(),
            "-o".into(),
            trace.to_string_lossy().into_owned(),
            BIN.into(),
            "export".into(),
            session.to_string_lossy().into_owned(),
            "-o".into(),
            out.to_string_lossy().into_owned(),
        ];
        if let Some(c) = column {
            args.extend(["--column".into(), c.to_owned()]);
        }
        let status = std::process::Command::new(strace)
            .args(&args)
            .status()
            .unwrap();
        assert!(status.success());
        std::fs::read_to_string(&trace)
            .unwrap()
            .lines()
            .filter(|l| l.contains(".ulg") && !l.contains("ENOENT"))
            .map(String::from)
            .collect()
    };
    let main = opened(Some("main"));
    assert!(
        main.iter().any(|l| l.contains("/split_0000.ulg")),
        "{main:?}"
    );
    assert!(!main.iter().any(|l| l.contains("/imu/")), "{main:?}");
    // The watch sees the column's files when they are read.
    let all = opened(None);
    assert!(all.iter().any(|l| l.contains("/imu/split_")), "{all:?}");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn a_crash_leaves_every_column_repairable() {
    let root = fresh_dir("columns-crash");
    let (_, log) = logs().remove(0);
    let mut policy = SplitPolicy::unlimited();
    policy.max_duration_us = Some(20_000_000);
    let options = StoreOptions {
        policy,
        columns: vec![imu_column()],
        ..StoreOptions::new(root.clone())
    };
    let mut store = LogStore::open(options.clone()).unwrap();
    store
        .begin_log(
            (1, 1),
            SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
            ulog_recv::autopilot::LogFormat::ULog,
        )
        .unwrap();
    // The daemon's group commit: synced as it goes, then a last piece only handed to the OS.
    let half = log.len() / 2;
    for piece in log[..half].chunks(64 << 10) {
        store.write(piece).unwrap();
        store.sync().unwrap();
    }
    store.write(&log[half..half + 10_000]).unwrap();
    store.flush().unwrap();
    let session = store.session_dir().unwrap().to_owned();
    // The process dies here: nothing closes the open splits.
    std::mem::forget(store);
    let recovered =
        ulog_recv::store::files::recover(&root, ulog_recv::store::files::this_boot().as_deref());
    assert_eq!(
        recovered,
        [ulog_recv::store::files::Recovered::Repaired(
            session.clone()
        )]
    );
    let manifest = read_manifest(&session).unwrap();
    assert!(manifest.closed);
    for (k, splits) in [&manifest.splits, &manifest.columns[0].splits]
        .iter()
        .enumerate()
    {
        assert!(splits.len() >= 2, "column {k}: {} splits", splits.len());
        assert!(splits.iter().all(|s| s.closed && s.sha256.is_some()));
        for s in splits.iter() {
            assert!(session.join(&s.file).exists());
        }
    }
    // What was written reads back: the samples of the first half, in order.
    let got = content(&read_session(&session, None).unwrap());
    let want = content(&log[..half + 10_000]);
    for (topic, samples) in &got.samples {
        let all = &want.samples[topic];
        let common_prefix = samples.iter().zip(all).take_while(|(a, b)| a == b).count();
        assert!(
            samples.len() <= all.len() && common_prefix == samples.len(),
            "{topic}: {} read, {} logged, alike for {common_prefix}",
            samples.len(),
            all.len()
        );
        if is_imu(topic.split('/').next().unwrap()) {
            assert!(
                samples.len() * 10 >= all.len() * 9,
                "{topic}: {} of {}",
                samples.len(),
                all.len()
            );
        }
    }
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn the_daemon_stores_columns_given_on_the_command_line_or_in_the_config_file() {
    for (how, extra) in [("cli", true), ("config", false)] {
        let dir = fresh_dir(&format!("columns-daemon-{how}"));
        std::fs::create_dir_all(&dir).unwrap();
        let port = common::procs::free_udp_port();
        let mut args = vec![
            "--udp".to_owned(),
            format!("127.0.0.1:{port}"),
            "--log-dir".into(),
            dir.join("logs").to_string_lossy().into_owned(),
            "--no-socket".into(),
        ];
        if extra {
            args.extend(["--column".into(), "imu=sensor_*,vehicle_imu*".into()]);
            args.extend(["--column".into(), "attitude=vehicle_attitude*".into()]);
        } else {
            let config = dir.join("ulog-recv.toml");
            std::fs::write(
                &config,
                "[column]\nimu = [\"sensor_*\", \"vehicle_imu*\"]\nattitude = \"vehicle_attitude*\"\n",
            )
            .unwrap();
            args.extend(["--config".into(), config.to_string_lossy().into_owned()]);
        }
        let mut daemon = Proc::spawn("the daemon", &args);
        let (mut sim, lines) = Proc::spawn_watched(
            "the simulator",
            &[
                "sim".into(),
                "--synthetic".into(),
                "--duration".into(),
                "20".into(),
                "--once".into(),
                "--udp-connect".into(),
                format!("127.0.0.1:{port}"),
            ],
        );
        let session = finish_recording(&mut daemon, &mut sim, &lines, &dir.join("logs"));
        let manifest = read_manifest(&session).unwrap();
        let names: Vec<&str> = manifest.column_names().collect();
        assert_eq!(names.len(), 3, "{how}: {names:?}");
        assert!(
            names.contains(&"imu") && names.contains(&"attitude"),
            "{names:?}"
        );
        for c in &manifest.columns {
            assert!(!c.splits.is_empty(), "{how}: column {} is empty", c.name);
            for s in &c.splits {
                common::check_with_pyulog(&session.join(&s.file));
            }
        }
        let info = run_ok(&["info", session.to_str().unwrap()]);
        assert!(info.contains("column imu:"), "{info}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
