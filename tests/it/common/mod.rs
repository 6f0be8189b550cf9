//! Helpers shared by the integration tests: where the real logs are, and a decoding of a log
//! into the same JSON shape as pyulog's `NAME.expected.json`, so results compare directly.
#![allow(dead_code)]

pub mod ardupilot;
pub mod flight_review;
pub mod garage;
pub mod http_relay;
pub mod lazyfs;
pub mod machine;
pub mod procs;
pub mod px4;
pub mod px4_compare;
pub mod python_json;
pub mod router;
pub mod slow_link;
pub mod tls;
pub mod tmpfs;
pub mod units;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

pub use machine::alone;
use serde_json::{Value as Json, json};
use ulog_recv::ulog::summary::{OwnedValue, summarize};
use ulog_recv::ulog::{Decoder, Reader, Value};

/// A count a test takes from the environment variable `name` (to run longer or shorter than
/// CI does), or `default`.
pub fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name).map_or(default, |n| {
        n.parse()
            .unwrap_or_else(|_| panic!("{name}={n} is not a number"))
    })
}

/// The project's checkout (where Cargo.toml is).
pub fn project() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The real PX4 logs beside the project. Without them a test says so loudly and returns
/// `None`; under CI (`CI` set) their absence is a failure, so CI can never silently skip.
pub fn shared_logs() -> Option<Vec<PathBuf>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/testdata/ulog");
    let mut logs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "ulg"))
                .collect()
        })
        .unwrap_or_default();
    logs.sort();
    if logs.is_empty() {
        if std::env::var_os("CI").is_some() {
            panic!(
                "{} holds no .ulg files: CI must run the real-log tests",
                dir.display()
            );
        }
        eprintln!(
            "\n!!! SKIPPED: no real logs at {} (put ../shared beside the project) !!!\n",
            dir.display()
        );
        return None;
    }
    Some(logs)
}

/// The project's own synthetic logs (always present).
pub fn synthetic_logs() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata");
    let mut logs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("testdata/ exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "ulg"))
        .collect();
    logs.sort();
    assert!(!logs.is_empty(), "testdata/ holds no .ulg");
    logs
}

/// Every log the engine tests run on: the synthetic ones, and the real ones when present.
pub fn all_logs() -> Vec<PathBuf> {
    let mut logs = if std::env::var_os("NO_SYNTH").is_some() {
        vec![]
    } else {
        synthetic_logs()
    };
    logs.extend(shared_logs().unwrap_or_default());
    logs
}

/// `NAME.expected.json` beside `NAME.ulg`.
pub fn expected_for(log: &std::path::Path) -> Json {
    let path = log.with_extension("expected.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&python_json::to_json(&text))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A float as pyulog's dump writes it: NaN and infinities as strings.
pub fn float_json(v: f64) -> Json {
    if v.is_nan() {
        json!("nan")
    } else if v.is_infinite() {
        json!(if v > 0.0 { "inf" } else { "-inf" })
    } else {
        json!(v)
    }
}

fn value_json(v: Value) -> Json {
    match v {
        Value::F32(f) => float_json(f as f64),
        Value::F64(f) => float_json(f),
        Value::U64(u) => json!(u),
        Value::I64(i) => json!(i),
        Value::Bool(b) | Value::Char(b) => json!(b as i8),
        other => json!(other.as_f64() as i64),
    }
}

fn owned_json(v: &OwnedValue) -> Json {
    match v {
        OwnedValue::Str(s) => json!(s),
        OwnedValue::Int(i) => json!(i),
        OwnedValue::UInt(u) => json!(u),
        OwnedValue::Float(f) => float_json(*f),
        // The dump writes non-text values (e.g. `uint8_t[n]`) as text, invalid bytes replaced.
        OwnedValue::Bytes(b) => json!(String::from_utf8_lossy(b)),
    }
}

#[derive(Default)]
struct DatasetAcc {
    name: String,
    multi_id: u8,
    msg_id: u16,
    fields: Vec<(String, &'static str)>,
    count: u64,
    first: Option<Json>,
    last: Option<Json>,
    sums: Vec<f64>,
    nans: Vec<u64>,
}

/// Decodes `bytes` (pushed to the reader in pieces of `chunk` bytes) into pyulog's dump shape.
pub fn pyulog_view(bytes: &[u8], chunk: usize) -> Json {
    let summary = summarize(bytes).expect("log reads");
    let mut reader = Reader::new();
    let mut decoder = Decoder::new();
    let mut sets: BTreeMap<u16, DatasetAcc> = BTreeMap::new();
    let mut formats = BTreeMap::new();
    for piece in bytes.chunks(chunk.max(1)) {
        reader.push(piece);
        while let Some(item) = reader.next_record() {
            let Ok(record) = item else { continue };
            let Ok(Some(sample)) = decoder.handle(&record.message) else {
                continue;
            };
            let acc = sets.entry(sample.msg_id).or_default();
            if acc.fields.is_empty() || acc.name != sample.name() {
                *acc = DatasetAcc {
                    name: sample.name().to_owned(),
                    multi_id: sample.multi_id,
                    msg_id: sample.msg_id,
                    fields: sample
                        .layout
                        .named_fields()
                        .map(|(name, f)| (name.to_owned(), f.ty.name()))
                        .collect(),
                    sums: vec![0.0; sample.layout.fields.len()],
                    nans: vec![0; sample.layout.fields.len()],
                    ..Default::default()
                };
            }
            acc.count += 1;
            for (i, (_, v)) in sample.values().enumerate() {
                let x = v.as_f64();
                if x.is_nan() {
                    acc.nans[i] += 1;
                } else {
                    acc.sums[i] += x;
                }
            }
            let row = || {
                Json::Object(
                    sample
                        .values()
                        .map(|(name, v)| (name.to_owned(), value_json(v)))
                        .collect(),
                )
            };
            if acc.first.is_none() {
                acc.first = Some(row());
            }
            acc.last = Some(row());
        }
    }
    for (name, def) in decoder.formats() {
        let fields: Vec<Json> = def
            .fields
            .iter()
            .map(|f| json!([f.type_name(), f.array_len.unwrap_or(0), f.name]))
            .collect();
        formats.insert(name.clone(), Json::Array(fields));
    }
    let mut datasets: Vec<&DatasetAcc> = sets.values().filter(|d| d.count > 0).collect();
    datasets.sort_by(|a, b| (&a.name, a.multi_id).cmp(&(&b.name, b.multi_id)));
    let datasets: Vec<Json> = datasets
        .into_iter()
        .map(|d| {
            let sums: serde_json::Map<String, Json> = d
                .fields
                .iter()
                .enumerate()
                .map(|(i, (n, _))| {
                    (
                        n.clone(),
                        json!({"sum": float_json(d.sums[i]), "nan": d.nans[i]}),
                    )
                })
                .collect();
            json!({
                "name": d.name, "multi_id": d.multi_id, "msg_id": d.msg_id, "count": d.count,
                "fields": d.fields.iter().map(|(n, t)| json!([n, t])).collect::<Vec<_>>(),
                "first": d.first, "last": d.last, "sums": sums,
            })
        })
        .collect();

    let untagged: Vec<Json> = summary
        .logged_messages
        .iter()
        .filter(|m| m.tag.is_none())
        .map(|m| json!([m.timestamp, m.level, m.text]))
        .collect();
    let mut tagged: BTreeMap<String, Vec<Json>> = BTreeMap::new();
    for m in summary.logged_messages.iter().filter(|m| m.tag.is_some()) {
        tagged
            .entry(m.tag.unwrap().to_string())
            .or_default()
            .push(json!([m.timestamp, m.level, m.text]));
    }
    let map = |m: &BTreeMap<String, OwnedValue>| -> Json {
        Json::Object(m.iter().map(|(k, v)| (k.clone(), owned_json(v))).collect())
    };
    json!({
        "start_timestamp": summary.start_timestamp,
        "last_timestamp": summary.last_timestamp,
        "compat_flags": summary.compat_flags,
        "incompat_flags": summary.incompat_flags,
        "appended_offsets": summary.appended_offsets,
        "info": map(&summary.info),
        "info_multiple": Json::Object(summary.info_multiple.iter().map(|(k, parts)| {
            (k.clone(), Json::Array(parts.iter().map(|p| Json::Array(p.iter().map(owned_json).collect())).collect()))
        }).collect()),
        "initial_parameters": map(&summary.initial_parameters),
        "changed_parameters": summary.changed_parameters.iter()
            .map(|c| json!([c.timestamp, c.name, owned_json(&c.value)])).collect::<Vec<_>>(),
        "default_parameters": Json::Object(summary.default_parameters.iter()
            .map(|(bit, m)| (bit.to_string(), map(m))).collect()),
        "logged_messages": untagged,
        "logged_messages_tagged": tagged,
        "dropouts": summary.dropouts.iter().map(|d| json!([d.timestamp, d.duration_ms])).collect::<Vec<_>>(),
        "formats": formats,
        "datasets": datasets,
    })
}

/// Compares `ours` with pyulog's `expected` at `path`; numbers equal exactly except under a
/// `sums` key, where the relative error must be under 1e-9. Returns the differences.
pub fn compare(path: &str, ours: &Json, expected: &Json, in_sums: bool, diffs: &mut Vec<String>) {
    if diffs.len() > 30 {
        return;
    }
    match (ours, expected) {
        (Json::Object(a), Json::Object(b)) => {
            for (k, vb) in b {
                match a.get(k) {
                    Some(va) => compare(
                        &format!("{path}.{k}"),
                        va,
                        vb,
                        in_sums || k == "sums",
                        diffs,
                    ),
                    None => diffs.push(format!("{path}.{k}: missing in ours")),
                }
            }
            for k in a.keys().filter(|k| !b.contains_key(*k)) {
                diffs.push(format!("{path}.{k}: extra in ours"));
            }
        }
        (Json::Array(a), Json::Array(b)) => {
            if a.len() != b.len() {
                diffs.push(format!("{path}: length {} vs pyulog {}", a.len(), b.len()));
            }
            for (i, (va, vb)) in a.iter().zip(b).enumerate() {
                compare(&format!("{path}[{i}]"), va, vb, in_sums, diffs);
            }
        }
        (Json::Number(a), Json::Number(b)) => {
            let equal = match (a.as_u64(), b.as_u64(), a.as_i64(), b.as_i64()) {
                (Some(x), Some(y), _, _) => x == y || (in_sums && close(x as f64, y as f64)),
                (_, _, Some(x), Some(y)) => x == y,
                _ => {
                    let (x, y) = (a.as_f64().unwrap(), b.as_f64().unwrap());
                    x == y || (in_sums && close(x, y))
                }
            };
            if !equal {
                diffs.push(format!("{path}: ours {a} vs pyulog {b}"));
            }
        }
        (a, b) if a == b => {}
        (a, b) => diffs.push(format!("{path}: ours {a} vs pyulog {b}")),
    }
}

fn close(x: f64, y: f64) -> bool {
    (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1e-300)
}

/// The messages (raw bytes, in stream order) whose every byte lies in a chunk that arrived
/// (`arrived[i]` for `chunks[i]`): what an ideal receiver can rebuild. Computed from offsets
/// alone, independently of the receiver's code.
pub fn ideal_messages(
    stream: &[u8],
    starts: &[u64],
    chunks: &[ulog_recv::sim::LogChunk],
    arrived: &[bool],
) -> Vec<Vec<u8>> {
    assert_eq!(chunks.len(), arrived.len());
    // Chunks cover the stream back to back: the chunk holding byte `at` by binary search.
    let chunk_of =
        |at: u64| chunks.partition_point(|c| c.stream_offset + c.data.len() as u64 <= at);
    let mut out = Vec::new();
    for (k, &s) in starts.iter().enumerate() {
        let e = starts.get(k + 1).copied().unwrap_or(stream.len() as u64);
        if e > chunks
            .last()
            .map_or(0, |c| c.stream_offset + c.data.len() as u64)
        {
            continue;
        }
        if (chunk_of(s)..=chunk_of(e - 1)).all(|i| arrived[i]) {
            out.push(stream[s as usize..e as usize].to_vec());
        }
    }
    out
}

/// Splits assembled output into messages, with the same offsets logic as the stream.
pub fn split_messages(bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut out = vec![bytes[..16].to_vec()];
    let mut at = 16;
    while at + 3 <= bytes.len() {
        let end = at + 3 + u16::from_le_bytes([bytes[at], bytes[at + 1]]) as usize;
        out.push(bytes[at..end].to_vec());
        at = end;
    }
    assert_eq!(at, bytes.len(), "output ends on a message boundary");
    out
}

/// The data records and strings after the definitions of a ULog log (whole messages),
/// dropouts and syncs left out: what a fill must leave as the SD log has them.
pub fn ulog_records(log: &[u8]) -> Vec<Vec<u8>> {
    use ulog_recv::ulog::message::{FILE_HEADER_LEN, framed, msg_type};
    framed(log.get(FILE_HEADER_LEN..).unwrap_or_default())
        .filter(|m| {
            matches!(
                m[2],
                msg_type::DATA | msg_type::LOGGING | msg_type::LOGGING_TAGGED
            )
        })
        .map(|m| m.to_vec())
        .collect()
}

/// The project's virtualenv Python, with pyulog and pymavlink (`.ci/run` makes it). Missing:
/// a loud skip, or a failure under CI.
pub fn venv_python() -> Option<PathBuf> {
    let py = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    if py.exists() {
        return Some(py);
    }
    if std::env::var_os("CI").is_some() {
        panic!(
            "{} missing: CI must cross-check with pyulog and pymavlink",
            py.display()
        );
    }
    eprintln!(
        "\n!!! SKIPPED cross-check with pyulog/pymavlink: no {} (run .ci/run once) !!!\n",
        py.display()
    );
    None
}

/// pyulog reads `file` as we do.
pub fn check_with_pyulog(file: &std::path::Path) {
    let Some(py) = venv_python() else { return };
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/pyulog_dump.py");
    let out = std::process::Command::new(py)
        .arg(script)
        .arg(file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "pyulog cannot read {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut theirs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        theirs["file_corruption"],
        false,
        "pyulog finds {} corrupt",
        file.display()
    );
    // Fields of the dump that describe pyulog itself or that we do not derive.
    for key in ["decoder", "file", "file_corruption"] {
        theirs.as_object_mut().unwrap().remove(key);
    }
    let ours = pyulog_view(&std::fs::read(file).unwrap(), 1 << 16);
    let mut diffs = Vec::new();
    compare("", &ours, &theirs, false, &mut diffs);
    assert!(
        diffs.is_empty(),
        "{}: pyulog differs: {:?}",
        file.display(),
        &diffs[..diffs.len().min(10)]
    );
}

/// Compares a ROS 2 message as another implementation decoded it from our CDR (nested objects,
/// arrays, strings) with pyulog's flattened sample: every field pyulog names has the same
/// value (numbers compared as numbers: `0` equals `0.0`); a `char[n]` field (a string in
/// ROS 2) equals pyulog's characters up to the first NUL. pyulog's field names are taken
/// through [`ulog_recv::ros::ros2::field_name`], the names ROS 2 allows.
pub fn compare_ros2_sample(what: &str, decoded: &Json, first: &Json, diffs: &mut Vec<String>) {
    let mut flat = BTreeMap::new();
    flatten_fields("", decoded, &mut flat);
    for (key, want) in first.as_object().unwrap() {
        // Padding is left out of the types (pyulog keeps nested padding).
        if key.contains("_padding") {
            continue;
        }
        let key = &ros2_key(key);
        if let Some(got) = flat.get(key) {
            if !same_value(got, want) {
                diffs.push(format!("{what}.{key}: decoded {got} vs pyulog {want}"));
            }
            continue;
        }
        // `name[i]` of a string field.
        let (base, index) = key
            .rsplit_once('[')
            .map(|(b, i)| (b, i.trim_end_matches(']').parse::<usize>().unwrap()))
            .unwrap_or_else(|| panic!("{what}: the decoded message lacks {key}"));
        let Some(Json::String(text)) = flat.get(base) else {
            diffs.push(format!("{what}: the decoded message lacks {key}"));
            continue;
        };
        let bytes = text.as_bytes();
        let want = want.as_u64().unwrap() as u8;
        match bytes.get(index) {
            Some(&b) if b != want => diffs.push(format!("{what}.{key}: {b} vs pyulog {want}")),
            None if index == bytes.len() && want != 0 => {
                diffs.push(format!("{what}.{key}: string ends, pyulog has {want}"))
            }
            _ => {}
        }
    }
}

/// `/NAME` or `/NAME/N` of each pyulog dataset, with the dataset.
pub fn pyulog_topics(expected: &Json) -> BTreeMap<String, &Json> {
    expected["datasets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            let name = d["name"].as_str().unwrap();
            let topic = match d["multi_id"].as_u64().unwrap() {
                0 => format!("/{name}"),
                n => format!("/{name}/{n}"),
            };
            (topic, d)
        })
        .collect()
}

/// A reading of our ROS 2 topics by another implementation (a Foxglove client, an MCAP reader)
/// against pyulog's reading of the log: `report.channels` as `[{topic, schemaName, count,
/// first, last, firstLogTime, lastLogTime (ns, strings), timeMismatches, trailing}]` and
/// `report.logs` the `/log` messages. Every topic instance with samples is one of pyulog's
/// datasets with its count, first and last values and times; `/log` holds its strings.
/// A finding (as `ulog-recv info --diagnostics --json` prints it) as the one status of the
/// `diagnostic_msgs/msg/DiagnosticArray` it is published as, in [`status_of`]'s form.
pub fn expected_status(finding: &Json) -> Json {
    let made = finding["end_timestamp_us"]
        .as_u64()
        .unwrap_or_else(|| finding["timestamp_us"].as_u64().unwrap());
    let level = match finding["severity"].as_str().unwrap() {
        "info" => 0,
        "warning" => 1,
        "critical" => 2,
        other => panic!("severity {other}"),
    };
    let mut values = serde_json::Map::new();
    values.insert("severity".into(), finding["severity"].clone());
    values.insert(
        "start_us".into(),
        finding["timestamp_us"].to_string().into(),
    );
    if let Some(end) = finding["end_timestamp_us"].as_u64() {
        values.insert("end_us".into(), end.to_string().into());
    }
    for (key, value) in finding["evidence"].as_object().unwrap() {
        let key = if key == "type" {
            "evidence"
        } else {
            key.as_str()
        };
        match value {
            Json::Null => {}
            Json::String(s) => {
                values.insert(key.into(), s.clone().into());
            }
            other => {
                values.insert(key.into(), other.to_string().into());
            }
        }
    }
    serde_json::json!({
        "logTime": (made * 1000).to_string(),
        "level": level,
        "name": finding["id"],
        "message": finding["summary"],
        "hardware_id": "px4",
        "values": values,
    })
}

/// A decoded `/diagnostics` message with its log time (`{logTime, message}`, as the MCAP
/// reader and the Foxglove client report them) in a comparable form: its one status, its
/// values as an object.
pub fn status_of(published: &Json) -> Json {
    let message = &published["message"];
    let status = message["status"].as_array().unwrap();
    assert_eq!(status.len(), 1, "one finding a message: {message}");
    let status = &status[0];
    let values: serde_json::Map<String, Json> = status["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|kv| (kv["key"].as_str().unwrap().to_owned(), kv["value"].clone()))
        .collect();
    serde_json::json!({
        "logTime": published["logTime"],
        "level": status["level"],
        "name": status["name"],
        "message": status["message"],
        "hardware_id": status["hardware_id"],
        "values": values,
    })
}

/// The `/diagnostics` messages of a reader's `report` are `findings` (as `info --diagnostics
/// --json` lists them), one each, in order, at the log time each was made.
pub fn check_diagnostics(what: &str, report: &Json, findings: &[Json]) {
    let published: Vec<Json> = report["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(status_of)
        .collect();
    let expected: Vec<Json> = findings.iter().map(expected_status).collect();
    assert_eq!(
        published, expected,
        "{what}: /diagnostics (left), the findings (right)"
    );
}

pub fn check_ros2_report(what: &str, report: &Json, expected: &Json) {
    let mut diffs = Vec::new();
    let channels = report["channels"].as_array().unwrap();
    let pyulog = pyulog_topics(expected);
    let mut seen = BTreeMap::new();
    for ch in channels {
        let topic = ch["topic"].as_str().unwrap();
        assert_eq!(
            ch["timeMismatches"], 0,
            "{what} {topic}: log time is not the timestamp"
        );
        assert_eq!(
            ch["trailing"], 0,
            "{what} {topic}: bytes left after a message"
        );
        if topic == "/log" || topic == "/diagnostics" {
            continue;
        }
        assert!(
            ch["schemaName"].as_str().unwrap().starts_with("px4_ulog/"),
            "{what} {topic}: {}",
            ch["schemaName"]
        );
        // A subscription without samples is a channel too, not a dataset to pyulog.
        if ch["count"] != 0 {
            seen.insert(topic.to_owned(), ch);
        }
    }
    let ours: Vec<&String> = seen.keys().collect();
    let theirs: Vec<&String> = pyulog.keys().collect();
    assert_eq!(
        ours, theirs,
        "{what}: the channels with samples are pyulog's datasets"
    );
    for (topic, d) in &pyulog {
        let ch = seen[topic];
        if ch["count"] != d["count"] {
            diffs.push(format!(
                "{topic}: {} samples, pyulog {}",
                ch["count"], d["count"]
            ));
            continue;
        }
        for (end, time) in [("first", "firstLogTime"), ("last", "lastLogTime")] {
            compare_ros2_sample(&format!("{topic} {end}"), &ch[end], &d[end], &mut diffs);
            let ns: u64 = ch[time].as_str().unwrap().parse().unwrap();
            let us = d[end]["timestamp"].as_u64().unwrap();
            if ns != us * 1000 {
                diffs.push(format!("{topic}: {end} log time {ns} ns, pyulog {us} µs"));
            }
        }
    }
    assert!(
        diffs.is_empty(),
        "{what}: {:#?}",
        &diffs[..diffs.len().min(20)]
    );
    // `/log`: the logged strings, plain and tagged, with their times.
    let mut ours: Vec<(u64, String)> = report["logs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let stamp = &m["stamp"];
            let us = stamp["sec"].as_u64().unwrap() * 1_000_000
                + stamp["nanosec"].as_u64().unwrap() / 1000;
            (us, m["msg"].as_str().unwrap().to_owned())
        })
        .collect();
    // pyulog: [timestamp, level, text] lists, the tagged ones by tag.
    let mut theirs: Vec<&Json> = expected["logged_messages"]
        .as_array()
        .unwrap()
        .iter()
        .collect();
    if let Some(tagged) = expected["logged_messages_tagged"].as_object() {
        theirs.extend(tagged.values().flat_map(|l| l.as_array().unwrap()));
    }
    let mut theirs: Vec<(u64, String)> = theirs
        .iter()
        .map(|m| (m[0].as_u64().unwrap(), m[2].as_str().unwrap().to_owned()))
        .collect();
    ours.sort();
    theirs.sort();
    assert_eq!(ours, theirs, "{what}: /log holds pyulog's logged strings");
    eprintln!(
        "{what}: {} topic instances as pyulog reads them, {} logged strings",
        seen.len(),
        ours.len()
    );
}

/// pyulog's flattened field name (`a.b[2].c`) with each field as ROS 2 names it.
fn ros2_key(key: &str) -> String {
    key.split('.')
        .map(|part| match part.split_once('[') {
            Some((name, index)) => format!("{}[{index}", ulog_recv::ros::ros2::field_name(name)),
            None => ulog_recv::ros::ros2::field_name(part),
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// Equal JSON values, numbers by value whatever their representation (`1` and `1.0`; a
/// 64-bit integer written as a decimal string by a JavaScript decoder).
pub fn same_value(a: &Json, b: &Json) -> bool {
    let as_int = |v: &Json| match v {
        Json::Number(n) => n.as_i64().map(i128::from).or(n.as_u64().map(i128::from)),
        Json::String(s) => s.parse::<i128>().ok(),
        _ => None,
    };
    if let (Some(x), Some(y)) = (as_int(a), as_int(b)) {
        return x == y;
    }
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// Our nested JSON fields flattened to pyulog's names (`q[2]`, `esc[1].esc_rpm`); strings
/// (`char[n]` fields) are left whole.
pub fn flatten_fields(prefix: &str, v: &Json, out: &mut BTreeMap<String, Json>) {
    match v {
        Json::Object(m) => {
            for (k, x) in m {
                let name = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten_fields(&name, x, out);
            }
        }
        Json::Array(items) => {
            for (i, x) in items.iter().enumerate() {
                flatten_fields(&format!("{prefix}[{i}]"), x, out);
            }
        }
        other => {
            out.insert(prefix.to_owned(), other.clone());
        }
    }
}

/// The SHA-256 of the file at `path`, in lower-case hex (as manifests and S3 tools write it).
pub fn sha256_file(path: &std::path::Path) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(std::fs::read(path).unwrap())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Storage options for `dir` with a split every `split_s` seconds of log time and `columns`.
pub fn split_every(
    dir: &Path,
    split_s: u64,
    columns: Vec<ulog_recv::store::columns::ColumnSpec>,
) -> ulog_recv::store::StoreOptions {
    let mut policy = ulog_recv::store::SplitPolicy::unlimited();
    policy.max_duration_us = Some(split_s * 1_000_000);
    ulog_recv::store::StoreOptions {
        policy,
        columns,
        ..ulog_recv::store::StoreOptions::new(dir.to_owned())
    }
}

/// Stores `log` as one closed session of vehicle `system_id` with `options`, written in
/// pieces of `piece` bytes, the session started `started_s` seconds after the epoch; its
/// directory.
pub fn store_session(
    options: ulog_recv::store::StoreOptions,
    system_id: u8,
    log: &[u8],
    piece: usize,
    started_s: u64,
) -> PathBuf {
    let (mut store, _) = store_session_open(options, system_id, log, piece, started_s);
    store.end_log().unwrap().unwrap()
}

/// [`store_session`], the session left open (every write handed to the OS): the store, and
/// the session's directory.
pub fn store_session_open(
    options: ulog_recv::store::StoreOptions,
    system_id: u8,
    log: &[u8],
    piece: usize,
    started_s: u64,
) -> (ulog_recv::store::LogStore, PathBuf) {
    let mut store = ulog_recv::store::LogStore::open(options).unwrap();
    let session = store
        .begin_log(
            (system_id, 1),
            SystemTime::UNIX_EPOCH + Duration::from_secs(started_s),
            ulog_recv::autopilot::LogFormat::ULog,
        )
        .unwrap();
    for piece in log.chunks(piece) {
        store.write(piece).unwrap();
    }
    store.flush().unwrap();
    (store, session)
}

/// Runs `command` (a cross-check script, a command of ours) to its end; asserts it succeeded
/// (its output says why not) and returns its standard output.
pub fn text_output(command: &mut std::process::Command) -> String {
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "{command:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// [`text_output`], parsed as one JSON value.
pub fn json_output(command: &mut std::process::Command) -> Json {
    let text = text_output(command);
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{command:?} printed no JSON ({e}): {text}"))
}

/// How many sets of PX4's post-flight perf counters (`perf_counter_postflight`) pyulog reads
/// in `log`.
pub fn postflight_sets(py: &Path, log: &Path) -> u64 {
    let script = "import sys, json\n\
        from pyulog import ULog\n\
        sets = ULog(sys.argv[1]).msg_info_multiple_dict.get('perf_counter_postflight', [])\n\
        print(json.dumps(len(sets)))";
    json_output(Command::new(py).arg("-c").arg(script).arg(log))
        .as_u64()
        .expect("a count")
}
