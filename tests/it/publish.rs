//! The live socket's core, in memory:
//! - samples rendered as JSON hold pyulog's values: the first and last sample of every dataset
//!   of every log, flattened back to pyulog's names (`q[2]`, `esc[1].esc_rpm`, `char[n]` as
//!   character codes, booleans as 0/1), equal `NAME.expected.json` less padding;
//! - the publisher gives each client exactly what it subscribed to, as pyulog counts it, and
//!   answers bad requests with errors.

use crate::common;

use std::collections::BTreeMap;

use std::time::Instant;

use common::{all_logs, compare, expected_for, synthetic_logs};
use serde_json::{Map, Value as Json, json};
use ulog_recv::link::Event;
use ulog_recv::live::ndjson::protocol::Line;
use ulog_recv::live::ndjson::{JsonShape, Publisher, ServerStats};
use ulog_recv::ulog::{BasicType, Decoder, Reader};

/// Flattens our nested JSON into pyulog's field names. Strings become character codes,
/// padded with zeros to the array length `char_len(name)`.
fn flatten(v: &Json, char_len: &dyn Fn(&str) -> usize) -> Map<String, Json> {
    let mut flat = BTreeMap::new();
    common::flatten_fields("", v, &mut flat);
    let mut out = Map::new();
    for (name, value) in flat {
        match value {
            Json::String(s) => {
                let mut bytes = s.into_bytes();
                bytes.resize(char_len(&name), 0);
                for (i, b) in bytes.iter().enumerate() {
                    out.insert(format!("{name}[{i}]"), Json::from(*b));
                }
            }
            other => {
                out.insert(name, other);
            }
        }
    }
    out
}

#[test]
fn rendered_samples_hold_pyulogs_values() {
    for path in all_logs() {
        let bytes = std::fs::read(&path).unwrap();
        let expected = expected_for(&path);
        let mut reader = Reader::new();
        let mut decoder = Decoder::new();
        reader.push(&bytes);
        reader.finish();
        // Per message id: first and last rendering, flattened.
        let mut rows: BTreeMap<(String, u8), (Json, Json)> = BTreeMap::new();
        let mut shapes: BTreeMap<String, JsonShape> = BTreeMap::new();
        while let Some(r) = reader.next_record() {
            let Ok(r) = r else { continue };
            let Ok(Some(sample)) = decoder.handle(&r.message) else {
                continue;
            };
            let shape = shapes
                .entry(sample.name().to_owned())
                .or_insert_with(|| JsonShape::new(sample.layout));
            let rendered = Json::Object(shape.render(&sample));
            let char_len = |name: &str| {
                sample
                    .layout
                    .named_fields()
                    .filter(|(n, f)| f.ty == BasicType::Char && n.starts_with(&format!("{name}[")))
                    .count()
            };
            let mut flat = flatten(&rendered, &char_len);
            // `float`s are written in their shortest form (0.1, not pyulog's
            // 0.10000000149011612): read them back as `float`, as a client would.
            for (name, _) in sample
                .layout
                .named_fields()
                .filter(|(_, f)| f.ty == BasicType::Float)
            {
                if let Some(x) = flat.get(name).and_then(Json::as_f64) {
                    flat.insert(name.to_owned(), Json::from(x as f32 as f64));
                }
            }
            let row = Json::Object(flat);
            rows.entry((sample.name().to_owned(), sample.multi_id))
                .and_modify(|e| e.1 = row.clone())
                .or_insert((row.clone(), row));
        }
        let mut diffs = Vec::new();
        for ds in expected["datasets"].as_array().unwrap() {
            let key = (
                ds["name"].as_str().unwrap().to_owned(),
                ds["multi_id"].as_u64().unwrap() as u8,
            );
            let Some((first, last)) = rows.get(&key) else {
                diffs.push(format!("{key:?}: missing"));
                continue;
            };
            for (which, ours, theirs) in
                [("first", first, &ds["first"]), ("last", last, &ds["last"])]
            {
                // Padding is not published; NaN and infinities are null in JSON.
                let mut theirs = theirs.as_object().unwrap().clone();
                theirs.retain(|k, _| !k.contains("_padding"));
                let mut ours = ours.as_object().unwrap().clone();
                for (k, v) in ours.iter_mut() {
                    // We publish booleans as JSON booleans; pyulog's dump has 0 and 1.
                    if let Some(b) = v.as_bool() {
                        *v = Json::from(b as u8);
                    }
                    if v.is_null()
                        && let Some(t) = theirs.get(k)
                        && matches!(t.as_str(), Some("nan" | "inf" | "-inf"))
                    {
                        *v = t.clone();
                    }
                }
                compare(
                    &format!("{}:{key:?}.{which}", path.display()),
                    &Json::Object(ours),
                    &Json::Object(theirs),
                    false,
                    &mut diffs,
                );
            }
        }
        assert!(diffs.is_empty(), "{}", diffs.join("\n"));
    }
}

/// Lines per client, parsed.
type Inbox = BTreeMap<u64, Vec<Json>>;

/// What PX4 streams of a log file: everything before its first appended-data section (a
/// hardfault dump after a cut-off message), which is written to the file afterwards.
fn streamed_part(bytes: &[u8]) -> &[u8] {
    let flags = &bytes[16..];
    if flags[2] != b'B' {
        return bytes;
    }
    let incompat = flags[3 + 8];
    let first = u64::from_le_bytes(flags[3 + 16..3 + 24].try_into().unwrap()) as usize;
    if incompat & 1 != 0 && first > 0 && first < bytes.len() {
        &bytes[..first]
    } else {
        bytes
    }
}

fn drain(p: &mut Publisher, inbox: &mut Inbox) {
    while let Some(out) = p.poll_transmit() {
        let (id, line) = (out.client, out.line);
        assert_eq!(line.last(), Some(&b'\n'), "every line ends in a newline");
        assert!(
            !line[..line.len() - 1].contains(&b'\n'),
            "one line per message"
        );
        let json: Json = serde_json::from_slice(&line).expect("every line is JSON");
        inbox.entry(id).or_default().push(json);
    }
}

fn subscribe(p: &mut Publisher, id: u64, request: Json) {
    p.handle_request(id, Line::Text(request.to_string().as_bytes()));
}

/// Samples per (topic, multi id) in a client's lines.
fn counts(lines: &[Json]) -> BTreeMap<(String, u64), u64> {
    let mut out = BTreeMap::new();
    for l in lines.iter().filter(|l| l["type"] == "data") {
        *out.entry((
            l["topic"].as_str().unwrap().to_owned(),
            l["multi_id"].as_u64().unwrap(),
        ))
        .or_insert(0) += 1;
    }
    out
}

/// The publisher fed each log as the session hands it out (in uneven pieces), with clients
/// subscribed to different patterns, one decimated, one connecting half-way: each gets
/// exactly the samples of its topics (as many as pyulog counts), logged strings, parameter
/// changes and dropouts as pyulog lists them, and a late client gets the catalogue first.
#[test]
fn clients_get_exactly_the_samples_of_their_topics() {
    for path in all_logs() {
        let file = std::fs::read(&path).unwrap();
        let bytes = streamed_part(&file);
        let expected = expected_for(&path);
        let name = path.display().to_string();
        let now = Instant::now();
        let mut p = Publisher::new("test");
        let mut inbox = Inbox::new();
        let all = p.connect().unwrap();
        let vehicles = p.connect().unwrap();
        let slow = p.connect().unwrap();
        subscribe(&mut p, all, json!({"subscribe": ["*"]}));
        subscribe(
            &mut p,
            vehicles,
            json!({"subscribe": ["vehicle_*", "sensor_combined"]}),
        );
        subscribe(&mut p, slow, json!({"subscribe": ["*"], "max_rate_hz": 2}));
        p.handle_event(
            &Event::VehicleFound {
                system_id: 1,
                component_id: 1,
                autopilot: ulog_recv::autopilot::Autopilot::Px4,
            },
            now,
        );
        p.handle_event(
            &Event::LogOpened {
                number: 1,
                format: ulog_recv::autopilot::LogFormat::ULog,
            },
            now,
        );
        let mut late = None;
        let mut at = 0;
        let mut step = 1;
        while at < bytes.len() {
            let end = (at + step).min(bytes.len());
            p.handle_log_bytes(&bytes[at..end], now);
            at = end;
            step = step * 7 % 4099 + 1;
            if late.is_none() && at > bytes.len() / 2 {
                drain(&mut p, &mut inbox);
                let id = p.connect().unwrap();
                subscribe(&mut p, id, json!({"subscribe": ["*"]}));
                late = Some((id, inbox[&all].len()));
            }
        }
        p.handle_event(
            &Event::LogClosed {
                number: 1,
                reason: ulog_recv::link::CloseReason::Shutdown,
                bytes: bytes.len() as u64,
            },
            now,
        );
        drain(&mut p, &mut inbox);

        // Everything, as pyulog counts it.
        let got = counts(&inbox[&all]);
        let mut want = BTreeMap::new();
        for ds in expected["datasets"].as_array().unwrap() {
            let key = (
                ds["name"].as_str().unwrap().to_owned(),
                ds["multi_id"].as_u64().unwrap(),
            );
            want.insert(key, ds["count"].as_u64().unwrap());
        }
        assert_eq!(got, want, "{name}: samples per topic instance");
        let of_type = |lines: &[Json], t: &str| lines.iter().filter(|l| l["type"] == t).count();
        let logged = expected["logged_messages"].as_array().unwrap().len()
            + expected["logged_messages_tagged"]
                .as_object()
                .map_or(0, |m| m.values().map(|v| v.as_array().unwrap().len()).sum());
        assert_eq!(
            of_type(&inbox[&all], "log"),
            logged,
            "{name}: logged strings"
        );
        assert_eq!(
            of_type(&inbox[&all], "param"),
            expected["changed_parameters"].as_array().unwrap().len(),
            "{name}: parameter changes"
        );
        assert_eq!(
            of_type(&inbox[&all], "dropout"),
            expected["dropouts"].as_array().unwrap().len(),
            "{name}: dropouts"
        );
        // The first and last sample of each instance carry pyulog's timestamps.
        for ds in expected["datasets"].as_array().unwrap() {
            let mine: Vec<&Json> = inbox[&all]
                .iter()
                .filter(|l| {
                    l["type"] == "data"
                        && l["topic"] == ds["name"]
                        && l["multi_id"] == ds["multi_id"]
                })
                .collect();
            assert_eq!(mine[0]["timestamp"], ds["first"]["timestamp"], "{name}");
            assert_eq!(
                mine.last().unwrap()["timestamp"],
                ds["last"]["timestamp"],
                "{name}"
            );
        }

        // Patterns: exactly the matching topics, every sample of them.
        let vehicle_counts = counts(&inbox[&vehicles]);
        let matching: BTreeMap<_, _> = want
            .iter()
            .filter(|((t, _), _)| t.starts_with("vehicle_") || t == "sensor_combined")
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        assert_eq!(vehicle_counts, matching, "{name}: glob subscription");
        let reply = inbox[&vehicles]
            .iter()
            .find(|l| l["type"] == "subscribed")
            .unwrap();
        assert_eq!(reply["patterns"], json!(["vehicle_*", "sensor_combined"]));

        // Decimation: at most 2 per second of each instance's own log time (+1 for the
        // first), and at least one sample of each.
        let slow_counts = counts(&inbox[&slow]);
        for ds in expected["datasets"].as_array().unwrap() {
            let key = (
                ds["name"].as_str().unwrap().to_owned(),
                ds["multi_id"].as_u64().unwrap(),
            );
            let times: Vec<u64> = inbox[&all]
                .iter()
                .filter(|l| {
                    l["type"] == "data"
                        && l["topic"] == ds["name"]
                        && l["multi_id"] == ds["multi_id"]
                })
                .filter_map(|l| l["timestamp"].as_u64())
                .collect();
            let span_s = times
                .iter()
                .max()
                .map_or(0.0, |max| (max - times.iter().min().unwrap()) as f64 * 1e-6);
            let n = slow_counts.get(&key).copied().unwrap_or(0);
            assert!(n >= 1, "{name}: {key:?} decimated to nothing");
            assert!(
                n as f64 <= 2.0 * span_s + 1.0 && n <= want[&key],
                "{name}: {key:?}: {n} samples over {span_s:.1} s at 2 Hz"
            );
        }

        // The late client: hello (log open), the catalogue of what is defined, then only data
        // from where it joined, the same as the first client received from there.
        let (late, from) = late.unwrap();
        let lines = &inbox[&late];
        assert_eq!(lines[0]["type"], "hello", "{name}");
        assert_eq!(lines[0]["protocol"], 1);
        assert_eq!(lines[0]["log"]["number"], 1);
        assert_eq!(lines[0]["vehicle"]["sysid"], 1);
        assert_eq!(lines[1]["type"], "topics", "{name}");
        assert!(!lines[1]["topics"].as_array().unwrap().is_empty(), "{name}");
        let after: Vec<&Json> = inbox[&all][from..]
            .iter()
            .filter(|l| l["type"] == "data")
            .collect();
        let late_data: Vec<&Json> = lines.iter().filter(|l| l["type"] == "data").collect();
        assert_eq!(late_data, after, "{name}: the late client's samples");
        // Both see the log end.
        for id in [all, late] {
            let end = inbox[&id]
                .iter()
                .rev()
                .find(|l| l["type"] == "session")
                .unwrap();
            assert_eq!(end["event"], "end");
            assert_eq!(end["reason"], "shutdown");
        }
    }
}

/// Bad requests get an error line naming the problem, and the client stays subscribed as
/// before; a disconnected client gets nothing more; the catalogue follows the log.
#[test]
fn bad_requests_are_answered_and_change_nothing() {
    let bytes = std::fs::read(&synthetic_logs()[0]).unwrap();
    let now = Instant::now();
    let mut p = Publisher::new("test");
    let mut inbox = Inbox::new();
    let a = p.connect().unwrap();
    let gone = p.connect().unwrap();
    subscribe(&mut p, a, json!({"subscribe": ["vehicle_attitude"]}));
    subscribe(&mut p, gone, json!({"subscribe": ["*"]}));
    for bad in [
        &b"not json"[..],
        b"[\"subscribe\"]",
        br#"{"subscribe": ["*"], "rate": 3}"#,
        br#"{"subscribe": "vehicle_*"}"#,
        br#"{"subscribe": ["*"], "max_rate_hz": -1}"#,
    ] {
        p.handle_request(a, Line::Text(bad));
    }
    p.handle_request(a, Line::TooLong);
    p.disconnect(gone);
    p.handle_request(gone, Line::Text(b"{}"));
    p.handle_event(
        &Event::LogOpened {
            number: 0,
            format: ulog_recv::autopilot::LogFormat::ULog,
        },
        now,
    );
    p.handle_log_bytes(&bytes, now);
    let stats = ulog_recv::link::SessionStats::default();
    p.handle_stats(&stats, &Default::default(), ServerStats::default(), now);
    drain(&mut p, &mut inbox);
    let lines = &inbox[&a];
    let errors: Vec<&str> = lines
        .iter()
        .filter(|l| l["type"] == "error")
        .map(|l| l["message"].as_str().unwrap())
        .collect();
    assert_eq!(errors.len(), 6, "{errors:?}");
    assert!(errors[0].starts_with("request is not JSON"));
    assert!(errors[2].contains("unknown key 'rate'"));
    assert!(errors[5].contains("longer than"));
    let topics: std::collections::BTreeSet<&str> = lines
        .iter()
        .filter(|l| l["type"] == "data")
        .map(|l| l["topic"].as_str().unwrap())
        .collect();
    assert_eq!(topics.into_iter().collect::<Vec<_>>(), ["vehicle_attitude"]);
    // The catalogue came again once the log's topics were known, before the stats.
    let catalogue = lines.iter().rev().find(|l| l["type"] == "topics").unwrap();
    assert!(catalogue["topics"].as_array().unwrap().len() > 5);
    assert_eq!(lines.last().unwrap()["type"], "stats");
    assert_eq!(lines.last().unwrap()["clients"], 1);
    // Nothing was queued for the client that left, after it left.
    let before_leaving = inbox[&gone].len();
    assert!(before_leaving <= 3, "hello, topics, subscribed only");
}
