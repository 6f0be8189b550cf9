//! Snippets that copy nothing (`snippet --reference`): the directory holds a preamble and byte
//! spans of the session's splits; read back it is the copied snippet byte for byte, it is
//! under 1 % of its size on a long flight, its export holds the same messages as the copied
//! snippet's in the `mcap` reader, and the disk budget gives it its own copy before deleting
//! the session (a snippet whose session changed under it is an error, never a wrong log).

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use common::procs::{BIN, fresh_dir};
use ulog_recv::store::columns::ColumnSpec;
use ulog_recv::store::files::read_manifest;
use ulog_recv::store::reference::{
    ReferenceError, read_reference, read_reference_file, referencing_snippets, snippet_reference,
};
use ulog_recv::store::snippet::snippet;
use ulog_recv::store::{LogStore, SplitPolicy, StoreOptions};

fn synthetic(duration_s: u32) -> Vec<u8> {
    ulog_recv::sim::synth::generate(ulog_recv::sim::synth::SynthOptions {
        duration_s,
        seed: 21,
        appended_data: false,
    })
}

/// Stores `log` as a closed session under `dir` (splits of 60 s of log time).
fn store(dir: &Path, log: &[u8], columns: Vec<ColumnSpec>, started: u64) -> PathBuf {
    common::store_session(
        common::split_every(dir, 60, columns),
        1,
        log,
        64 << 10,
        started,
    )
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

/// The window from `a` to `b` (fractions of the session's time span), µs.
fn window(session: &Path, a: f64, b: f64) -> (u64, u64) {
    let m = read_manifest(session).unwrap();
    let start = m.splits[0].summary.first_timestamp.unwrap();
    let end = m.splits.last().unwrap().summary.last_timestamp.unwrap();
    let span = (end - start) as f64;
    (start + (span * a) as u64, start + (span * b) as u64)
}

#[test]
fn a_referencing_snippet_reads_as_the_copied_one_at_under_one_percent_of_its_size() {
    let root = fresh_dir("reference-size");
    let mut cases = vec![("synthetic-1h", synthetic(3600), Vec::new(), 0.2, 0.8)];
    cases.push((
        "synthetic-1h-columns",
        synthetic(3600),
        vec![ColumnSpec::parse("imu=sensor_*,vehicle_imu*").unwrap()],
        0.2,
        0.8,
    ));
    if let Some(logs) = common::shared_logs() {
        let sample = logs.iter().find(|p| p.ends_with("sample.ulg")).unwrap();
        cases.push((
            "sample",
            std::fs::read(sample).unwrap(),
            Vec::new(),
            0.1,
            0.9,
        ));
    }
    for (k, (name, log, columns, a, b)) in cases.into_iter().enumerate() {
        let session = store(&root.join(name), &log, columns, 1_800_000_000 + k as u64);
        let (from, to) = window(&session, a, b);
        let latched = SplitPolicy::unlimited();
        let (copied, stats) = snippet(&session, from, to, &latched, None).unwrap();
        let out = root.join(format!("{name}.snippet"));
        let (ref_stats, copied_len) =
            snippet_reference(&session, from, to, &latched, None, &out).unwrap();
        assert_eq!(ref_stats, stats, "{name}");
        assert_eq!(copied_len, copied.len() as u64, "{name}");
        // Read back: the copied snippet, byte for byte.
        let read = read_reference(&out, None).unwrap();
        assert!(read == copied, "{name}: read back differs");
        let size = dir_bytes(&out);
        let ratio = size as f64 / copied.len() as f64;
        eprintln!(
            "{name}: reference {size} bytes, copy {} bytes: {:.3} %",
            copied.len(),
            100.0 * ratio
        );
        if name.starts_with("synthetic") {
            assert!(ratio < 0.01, "{name}: {size} of {} bytes", copied.len());
        } else {
            // A real log's preamble (its ~1,000 parameters and ~100 definitions) is ~36 KB: a
            // fixed cost that a 70 s flight's window does not dwarf. Beyond it, under 1 %.
            let preamble = std::fs::metadata(out.join("preamble_main.ulg"))
                .unwrap()
                .len();
            assert!(
                (size - preamble) as f64 / (copied.len() as f64) < 0.01,
                "{name}: {size} bytes ({preamble} of preamble) of {}",
                copied.len()
            );
        }
        // The session knows of it.
        assert_eq!(
            referencing_snippets(&session),
            [out.canonicalize().unwrap()],
            "{name}"
        );
        // export and snippet read it as a file.
        let exported = root.join(format!("{name}-ref.ulg"));
        let status = std::process::Command::new(BIN)
            .args([
                "export",
                out.to_str().unwrap(),
                "-o",
                exported.to_str().unwrap(),
            ])
            .status()
            .unwrap();
        assert!(status.success());
        assert!(std::fs::read(&exported).unwrap() == copied, "{name}");
    }
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn its_export_holds_the_copied_snippets_messages_in_the_mcap_reader() {
    let Some(py) = common::venv_python() else {
        return;
    };
    let root = fresh_dir("reference-export");
    let session = store(
        &root.join("logs"),
        &synthetic(900),
        Vec::new(),
        1_800_000_000,
    );
    let (from, to) = window(&session, 0.3, 0.6);
    let (from_s, to_s) = (from as f64 / 1e6, to as f64 / 1e6);
    let run = common::procs::run_ok;
    let s = session.to_str().unwrap();
    let (copy, reference) = (root.join("copy.ulg"), root.join("reference"));
    let f = format!("{from_s}");
    let t = format!("{to_s}");
    run(&[
        "snippet",
        s,
        "--from",
        &f,
        "--to",
        &t,
        "-o",
        copy.to_str().unwrap(),
    ]);
    let said = run(&[
        "snippet",
        s,
        "--from",
        &f,
        "--to",
        &t,
        "--reference",
        "-o",
        reference.to_str().unwrap(),
    ]);
    assert!(said.contains("referencing"), "{said}");
    let (a, b) = (root.join("a.mcap"), root.join("b.mcap"));
    run(&["export", copy.to_str().unwrap(), "-o", a.to_str().unwrap()]);
    run(&[
        "export",
        reference.to_str().unwrap(),
        "-o",
        b.to_str().unwrap(),
    ]);
    let report = common::json_output(
        std::process::Command::new(py)
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcap_same.py"))
            .args([&a, &b]),
    );
    assert_eq!(report["differ"], serde_json::json!({}), "{report}");
    assert_eq!(report["metadata_differ"], false, "{report}");
    assert!(report["samples"][0].as_u64().unwrap() > 10_000, "{report}");
    // info reads it too.
    let info = run(&["info", reference.to_str().unwrap()]);
    assert!(info.contains("vehicle_attitude"), "{info}");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn the_budget_gives_a_snippet_its_own_copy_before_it_deletes_the_session() {
    let root = fresh_dir("reference-budget");
    let logs = root.join("logs");
    let log = synthetic(600);
    let first = store(&logs, &log, Vec::new(), 1_800_000_000);
    let (from, to) = window(&first, 0.4, 0.5);
    let latched = SplitPolicy::unlimited();
    let (copied, _) = snippet(&first, from, to, &latched, None).unwrap();
    // The snippet lives beside the sessions, in the log directory itself.
    let out = logs.join("landing");
    snippet_reference(&first, from, to, &latched, None, &out).unwrap();
    // A budget that holds one session: the next session pushes the first out.
    let session_size: u64 = read_manifest(&first)
        .unwrap()
        .splits
        .iter()
        .map(|s| s.summary.bytes)
        .sum();
    let options = StoreOptions {
        max_total: Some(session_size * 3 / 2),
        ..StoreOptions::new(logs.clone())
    };
    let mut store = LogStore::open(options).unwrap();
    store
        .begin_log(
            (1, 1),
            SystemTime::UNIX_EPOCH + Duration::from_secs(1_900_000_000),
            ulog_recv::autopilot::LogFormat::ULog,
        )
        .unwrap();
    store.write(&log).unwrap();
    store.end_log().unwrap();
    store.enforce_budget().unwrap();
    assert!(!first.exists(), "the first session is deleted");
    let reference = read_reference_file(&out).unwrap();
    assert_eq!(reference.materialised.as_deref(), Some("snippet.ulg"));
    assert!(read_reference(&out, None).unwrap() == copied);
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn a_snippet_whose_session_changed_is_an_error_not_a_wrong_log() {
    let root = fresh_dir("reference-changed");
    let session = store(
        &root.join("logs"),
        &synthetic(300),
        Vec::new(),
        1_800_000_000,
    );
    let (from, to) = window(&session, 0.2, 0.6);
    let out = root.join("snippet");
    snippet_reference(&session, from, to, &SplitPolicy::unlimited(), None, &out).unwrap();
    let split = session.join(&read_reference_file(&out).unwrap().columns[0].splits[0].file);
    let mut bytes = std::fs::read(&split).unwrap();
    let n = bytes.len();
    bytes[n / 2] ^= 0xff;
    let _ = std::fs::remove_file(&split);
    std::fs::write(&split, &bytes).unwrap();
    let e = read_reference(&out, None).unwrap_err();
    assert!(matches!(e, ReferenceError::Changed { .. }), "{e}");
    assert!(e.to_string().contains("changed or is gone"), "{e}");
    // A second referencing snippet into an existing, non-empty directory is refused.
    let e =
        snippet_reference(&session, from, to, &SplitPolicy::unlimited(), None, &out).unwrap_err();
    assert!(matches!(e, ReferenceError::Exists(_)), "{e}");
    let _ = std::fs::remove_dir_all(&root);
}
