//! The ROS 2 types we generate, read by an independent implementation: rosbags (Python)
//! parses every schema text of every real log and the synthetic one, and deserialises the CDR
//! of each topic instance's first sample; the values must be pyulog's (`NAME.expected.json`
//! for the real logs, pyulog run on the synthetic one). The first logged strings go the same
//! way as `rcl_interfaces/msg/Log`.

use crate::common;

use std::path::{Path, PathBuf};

use serde_json::{Value as Json, json};
use ulog_recv::ros::ros2::{LOG_SCHEMA, LOG_TYPE, Ros2Type, encode_log, log_level};
use ulog_recv::ulog::{Decoder, Message, Reader};

/// What one log gives rosbags: per topic instance, its type, schema and first sample's CDR;
/// then its first logged strings.
struct Encoded {
    items: Vec<Json>,
    /// (topic, multi id) of each sample item, in order.
    topics: Vec<(String, u8)>,
    /// (timestamp, level, text) of each log item, after the samples.
    logs: Vec<(u64, u8, String)>,
}

fn encode_log_file(bytes: &[u8]) -> Encoded {
    let mut reader = Reader::new();
    let mut decoder = Decoder::new();
    reader.push(bytes);
    let mut seen = std::collections::HashSet::new();
    let mut out = Encoded {
        items: Vec::new(),
        topics: Vec::new(),
        logs: Vec::new(),
    };
    let mut cdr = Vec::new();
    while let Some(item) = reader.next_record() {
        let Ok(record) = item else { continue };
        if let Message::Logging {
            level,
            timestamp,
            text,
        } = record.message
            && out.logs.len() < 5
        {
            encode_log(timestamp, level, "px4", text, &mut cdr);
            out.logs
                .push((timestamp, level, String::from_utf8_lossy(text).into_owned()));
            out.items.push(json!({
                "type": LOG_TYPE, "schema": LOG_SCHEMA, "cdr": hex(&cdr), "log": true
            }));
        }
        let Ok(Some(sample)) = decoder.handle(&record.message) else {
            continue;
        };
        let key = (sample.name().to_owned(), sample.multi_id);
        if !seen.insert(key.clone()) {
            continue;
        }
        let data = sample.data.to_vec();
        let ty = Ros2Type::compile(&key.0, decoder.formats()).unwrap();
        ty.encode(&data, &mut cdr).unwrap();
        out.items
            .push(json!({"type": ty.name, "schema": ty.schema, "cdr": hex(&cdr)}));
        out.topics.push(key);
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// rosbags' reading of `items`.
fn rosbags(py: &Path, items: &[Json], name: &str) -> Vec<Json> {
    let input = common::procs::fresh_dir(&format!("ros2msg-{name}"));
    std::fs::create_dir_all(&input).unwrap();
    let file = input.join("items.json");
    std::fs::write(&file, serde_json::to_vec(items).unwrap()).unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/rosbags_decode.py");
    let out = std::process::Command::new(py)
        .arg(script)
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "rosbags: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// pyulog's first sample of `(name, multi_id)`, and the format's char-array fields.
fn pyulog_first<'e>(expected: &'e Json, name: &str, multi_id: u8) -> &'e Json {
    expected["datasets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == name && d["multi_id"] == multi_id)
        .map(|d| &d["first"])
        .unwrap_or_else(|| panic!("pyulog has no {name}/{multi_id}"))
}

fn check(log: &Path, expected: &Json, py: &Path) {
    let name = log.file_stem().unwrap().to_string_lossy().into_owned();
    let encoded = encode_log_file(&std::fs::read(log).unwrap());
    let decoded = rosbags(py, &encoded.items, &name);
    assert_eq!(decoded.len(), encoded.items.len());
    let mut diffs = Vec::new();
    let (mut topics, mut logs) = (encoded.topics.iter(), encoded.logs.iter());
    for (item, got) in encoded.items.iter().zip(&decoded) {
        if item["log"] == true {
            let (timestamp, level, text) = logs.next().unwrap();
            assert_eq!(got["msg"], json!(text), "{name}");
            assert_eq!(got["name"], "px4");
            assert_eq!(got["level"], log_level(*level));
            let stamp = &got["stamp"];
            assert_eq!(
                stamp["sec"].as_u64().unwrap() * 1_000_000
                    + stamp["nanosec"].as_u64().unwrap() / 1000,
                *timestamp
            );
            continue;
        }
        let (topic, multi_id) = topics.next().unwrap();
        let first = pyulog_first(expected, topic, *multi_id);
        common::compare_ros2_sample(
            &format!("{name}/{topic}/{multi_id}"),
            got,
            first,
            &mut diffs,
        );
    }
    assert!(diffs.is_empty(), "{:#?}", &diffs[..diffs.len().min(20)]);
    // pyulog's logged strings are the ones rosbags read.
    let pyulog_logs: Vec<&Json> = expected["logged_messages"]
        .as_array()
        .unwrap()
        .iter()
        .take(5)
        .collect();
    assert_eq!(pyulog_logs.len(), encoded.logs.len(), "{name}");
    for (p, (t, _, text)) in pyulog_logs.iter().zip(&encoded.logs) {
        assert_eq!(p[0], json!(t));
        assert_eq!(p[2], json!(text));
    }
    eprintln!(
        "{name}: {} topic instances and {} logged strings read back by rosbags",
        encoded.topics.len(),
        encoded.logs.len()
    );
}

#[test]
fn rosbags_reads_our_schemas_and_cdr_as_pyulog_reads_the_log() {
    let Some(py) = common::venv_python() else {
        return;
    };
    for log in common::all_logs() {
        check(&log, &common::expected_for(&log), &py);
    }
}
