//! Snippets: a window of log time cut from a session of many splits holds, topic by topic,
//! as many samples as pyulog counts in the same window of the original log, and reads on its
//! own in pyulog.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::SystemTime;

use ulog_recv::sim::chunk_log;
use ulog_recv::store::files::read_manifest;
use ulog_recv::store::snippet::snippet;
use ulog_recv::store::{LogStore, SplitPolicy, StoreOptions};
use ulog_recv::ulog::{Decoder, Reader};

/// Samples per "topic/multi_id" stamped inside `[from, to]`, as we read `bytes`.
fn our_counts(bytes: &[u8], from: u64, to: u64) -> BTreeMap<String, u64> {
    let mut reader = Reader::new();
    let mut decoder = Decoder::new();
    reader.push(bytes);
    reader.finish();
    let mut counts = BTreeMap::new();
    while let Some(r) = reader.next_record() {
        let Ok(r) = r else { continue };
        if let Ok(Some(s)) = decoder.handle(&r.message)
            && s.timestamp.is_some_and(|t| t >= from && t <= to)
        {
            *counts
                .entry(format!("{}/{}", s.name(), s.multi_id))
                .or_insert(0) += 1;
        }
    }
    counts
}

/// The same count by pyulog over a file.
fn pyulog_counts(py: &Path, file: &Path, from: u64, to: u64) -> BTreeMap<String, u64> {
    let script = "import sys, json\nfrom pyulog import ULog\nu = ULog(sys.argv[1])\n\
        f, t = int(sys.argv[2]), int(sys.argv[3])\nout = {}\n\
        for d in u.data_list:\n    ts = d.data['timestamp']\n    \
        n = int(((ts >= f) & (ts <= t)).sum())\n    \
        if n:\n        out[f'{d.name}/{d.multi_id}'] = out.get(f'{d.name}/{d.multi_id}', 0) + n\n\
        print(json.dumps(out))";
    let counts = common::json_output(
        std::process::Command::new(py)
            .args(["-c", script])
            .arg(file)
            .arg(from.to_string())
            .arg(to.to_string()),
    );
    serde_json::from_value(counts).unwrap()
}

#[test]
fn a_snippet_holds_what_pyulog_counts_in_the_window_and_stands_alone() {
    // A synthetic flight of two minutes (always there), and two real logs.
    let mut logs = vec![(
        std::path::PathBuf::from("synthetic-120s"),
        ulog_recv::sim::synth::generate(ulog_recv::sim::synth::SynthOptions {
            duration_s: 120,
            seed: 5,
            appended_data: false,
        }),
    )];
    logs.extend(
        common::shared_logs()
            .unwrap_or_default()
            .into_iter()
            .filter(|p| {
                let n = p.file_name().unwrap().to_string_lossy();
                n == "sample_logging_tagged_and_default_params.ulg" || n == "sample.ulg"
            })
            .map(|p| {
                let bytes = std::fs::read(&p).unwrap();
                (p, bytes)
            }),
    );
    let py = common::venv_python();
    for (path, file) in logs {
        let stream = chunk_log(&file, 0).unwrap().stream;
        let dir = std::env::temp_dir().join(format!(
            "ulog-recv-snippet-{}-{}",
            std::process::id(),
            path.file_stem().unwrap().to_string_lossy()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let mut options = StoreOptions::new(dir.clone());
        options.policy = SplitPolicy {
            max_bytes: Some(128 << 10),
            ..SplitPolicy::unlimited()
        };
        let mut store = LogStore::open(options).unwrap();
        let session = store
            .begin_log(
                (1, 1),
                SystemTime::now(),
                ulog_recv::autopilot::LogFormat::ULog,
            )
            .unwrap();
        for piece in stream.chunks(8192) {
            store.write(piece).unwrap();
        }
        store.end_log().unwrap();
        let m = read_manifest(&session).unwrap();
        assert!(
            m.splits.len() >= 3,
            "{}: {} splits",
            path.display(),
            m.splits.len()
        );
        let start = m.splits[0].summary.first_timestamp.unwrap();
        let end = m.splits.last().unwrap().summary.last_timestamp.unwrap();
        let span = end - start;
        for (a, b) in [(0.0, 0.1), (0.3, 0.7), (0.55, 1.0)] {
            let from = start + (span as f64 * a) as u64;
            let to = start + (span as f64 * b) as u64;
            let ctx = format!("{} [{from}, {to}]", path.display());
            let (bytes, stats) = snippet(&session, from, to, &SplitPolicy::unlimited(), None)
                .unwrap_or_else(|e| panic!("{ctx}: {e}"));
            let ours = our_counts(&bytes, from, to);
            let expected = our_counts(&stream, from, to);
            assert_eq!(ours, expected, "{ctx}: samples in the window");
            assert_eq!(stats.samples, ours.values().sum::<u64>(), "{ctx}");
            if let Some(py) = &py {
                let original = dir.join("original.ulg");
                std::fs::write(&original, &stream).unwrap();
                assert_eq!(
                    pyulog_counts(py, &original, from, to),
                    ours,
                    "{ctx}: pyulog's count over the original"
                );
                let cut = dir.join("snippet.ulg");
                std::fs::write(&cut, &bytes).unwrap();
                common::check_with_pyulog(&cut);
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn a_session_with_no_closed_split_says_so() {
    let dir = std::env::temp_dir().join(format!("ulog-recv-snippet-open-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut store = LogStore::open(StoreOptions::new(dir.clone())).unwrap();
    let session = store
        .begin_log(
            (1, 1),
            SystemTime::now(),
            ulog_recv::autopilot::LogFormat::ULog,
        )
        .unwrap();
    let file = std::fs::read(&common::synthetic_logs()[0]).unwrap();
    store.write(&chunk_log(&file, 0).unwrap().stream).unwrap();
    store.sync().unwrap();
    // The session is still being written: its only split is open.
    let e = snippet(&session, 0, u64::MAX, &SplitPolicy::unlimited(), None).unwrap_err();
    assert!(
        matches!(e, ulog_recv::store::snippet::SnippetError::NoClosedSplit),
        "{e}"
    );
    assert!(e.to_string().contains("no closed split"), "{e}");
    store.end_log().unwrap();
    assert!(snippet(&session, 0, u64::MAX, &SplitPolicy::unlimited(), None).is_ok());
    std::fs::remove_dir_all(&dir).unwrap();
}
