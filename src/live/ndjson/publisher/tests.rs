//! The publisher driven line by line: an event request reaches the store and its outcome every
//! client, `stats` tells the vehicle, arming and uploads, `hello` tells the vehicle and the log.

use super::*;
use crate::dataflash::testing::ardupilot_log;

fn hello_of_a_new_client(p: &mut Publisher) -> Json {
    while p.poll_transmit().is_some() {}
    p.connect().unwrap();
    let hello = p.poll_transmit().unwrap();
    assert_eq!(hello.keep, Keep::Always);
    serde_json::from_slice(&hello.line).unwrap()
}

/// The `stats` line a client gets next.
fn next_stats(p: &mut Publisher) -> Json {
    std::iter::from_fn(|| p.poll_transmit())
        .map(|o| serde_json::from_slice::<Json>(&o.line).unwrap())
        .find(|j| j["type"] == "stats")
        .expect("a stats line")
}

#[test]
fn an_event_request_goes_to_the_store_and_its_outcome_to_every_client() {
    use crate::store::events::{EventRecord, EventSource};
    let mut p = Publisher::new("test");
    hello_of_a_new_client(&mut p);
    let asker = p.connect().unwrap();
    while p.poll_transmit().is_some() {}
    p.handle_request(asker, Line::Text(br#"{"event": "drop", "after_s": 3}"#));
    assert_eq!(
        p.poll_request(),
        Some(EventRequest {
            name: "drop".into(),
            after_us: Some(3_000_000)
        })
    );
    assert_eq!(p.poll_request(), None);
    // No reply of its own: the outcome comes from the store, to both clients.
    assert!(p.poll_transmit().is_none());
    p.handle_event_outcome(&EventOutcome::Recorded(EventRecord {
        name: "drop".into(),
        source: EventSource::Request,
        at_us: 42_000_000,
        detail: String::new(),
        after_us: Some(3_000_000),
        windows: Vec::new(),
        finding: None,
    }));
    let lines: Vec<Outgoing> = std::iter::from_fn(|| p.poll_transmit()).collect();
    assert_eq!(lines.len(), 2);
    for o in &lines {
        assert_eq!(o.keep, Keep::Always);
        let v: Json = serde_json::from_slice(&o.line).unwrap();
        assert_eq!(
            (v["type"].as_str(), v["name"].as_str(), v["source"].as_str()),
            (Some("event"), Some("drop"), Some("request"))
        );
        assert_eq!(
            (v["at_us"].as_u64(), v["after_us"].as_u64()),
            (Some(42_000_000), Some(3_000_000))
        );
    }
    p.handle_event_outcome(&EventOutcome::Refused {
        name: "drop".into(),
        reason: "no log is open".into(),
    });
    let refused: Vec<Outgoing> = std::iter::from_fn(|| p.poll_transmit()).collect();
    assert_eq!(refused.len(), 2);
    assert!(refused.iter().all(|o| o.keep == Keep::Droppable));
}

#[test]
fn stats_tell_the_vehicle_arming_and_the_uploads_once_there_are_any() {
    let mut p = Publisher::new("test");
    let now = Instant::now();
    hello_of_a_new_client(&mut p);
    let server = ServerStats {
        latency_p50_us: None,
        latency_p99_us: None,
        lagged_lines: 0,
    };
    p.handle_stats(
        &SessionStats::default(),
        &StorageStats::default(),
        server,
        now,
    );
    assert!(next_stats(&mut p)["uploads"].is_null());
    p.handle_event(&Event::Armed(true), now);
    let armed: Json = serde_json::from_slice(&p.poll_transmit().unwrap().line).unwrap();
    assert_eq!(armed["event"], "armed");
    p.handle_uploads(UploadStatus {
        pending_sessions: 2,
        bytes: 1234,
        waiting_for_disarm: true,
        failing: Some("bucket gone".into()),
    });
    p.handle_stats(
        &SessionStats::default(),
        &StorageStats::default(),
        server,
        now,
    );
    let stats = next_stats(&mut p);
    assert_eq!(stats["uploads"]["pending_sessions"], 2);
    assert_eq!(stats["uploads"]["bytes"], 1234);
    assert_eq!(stats["uploads"]["waiting_for_disarm"], true);
    assert_eq!(stats["uploads"]["failing"], "bucket gone");
}

#[test]
fn hello_tells_the_vehicle_and_the_log_as_they_are_now() {
    let mut p = Publisher::new("test");
    let now = Instant::now();
    let hello = hello_of_a_new_client(&mut p);
    assert_eq!(
        (hello["vehicle"].is_null(), hello["log"].is_null()),
        (true, true)
    );
    p.handle_event(
        &Event::VehicleFound {
            system_id: 7,
            component_id: 1,
            autopilot: crate::autopilot::Autopilot::Px4,
        },
        now,
    );
    p.handle_event(
        &Event::LogOpened {
            number: 3,
            format: crate::autopilot::LogFormat::ULog,
        },
        now,
    );
    let hello = hello_of_a_new_client(&mut p);
    assert_eq!(hello["vehicle"]["sysid"], 7);
    assert_eq!(hello["log"]["number"], 3);
    p.handle_event(
        &Event::LogClosed {
            number: 3,
            reason: CloseReason::VehicleLost,
            bytes: 0,
        },
        now,
    );
    p.handle_event(&Event::VehicleLost, now);
    let hello = hello_of_a_new_client(&mut p);
    assert_eq!(
        (hello["vehicle"].is_null(), hello["log"].is_null()),
        (true, true)
    );
}

#[test]
fn an_ardupilot_log_is_published_by_its_own_names_instances_and_scaling() {
    let log = ardupilot_log();

    let mut p = Publisher::new("test");
    let now = Instant::now();
    p.handle_event(
        &Event::VehicleFound {
            system_id: 1,
            component_id: 1,
            autopilot: crate::autopilot::Autopilot::ArduPilot,
        },
        now,
    );
    p.handle_event(
        &Event::LogOpened {
            number: 1,
            format: crate::autopilot::LogFormat::DataFlash,
        },
        now,
    );
    let client = p.connect().unwrap();
    p.handle_request(client, Line::Text(br#"{"subscribe": ["*"]}"#));
    while p.poll_transmit().is_some() {}
    // In pieces that cut messages anywhere.
    for piece in log.chunks(37) {
        p.handle_log_bytes(piece, now);
    }
    let lines: Vec<Json> = std::iter::from_fn(|| p.poll_transmit())
        .map(|o| serde_json::from_slice(&o.line).unwrap())
        .collect();
    let data: Vec<&Json> = lines.iter().filter(|l| l["type"] == "data").collect();
    assert_eq!(data.len(), 3, "{lines:?}");
    assert_eq!(
        (&data[0]["topic"], &data[0]["multi_id"]),
        (&json!("ATT"), &json!(0))
    );
    assert_eq!(data[0]["timestamp"], 1_000);
    assert_eq!(data[0]["fields"]["Roll"], 0.25);
    assert_eq!(data[0]["fields"]["Yaw"], -12.34);
    assert_eq!(
        (&data[1]["topic"], &data[1]["multi_id"]),
        (&json!("BAT"), &json!(1))
    );
    assert_eq!(data[1]["fields"]["Volt"], 12.5);
    assert_eq!(data[2]["multi_id"], 0);
    // The startup's texts and parameters: a text line; a param line only for the change.
    let kinds: Vec<&str> = lines
        .iter()
        .filter_map(|l| l["type"].as_str())
        .filter(|k| *k != "data")
        .collect();
    assert_eq!(kinds, ["log", "param", "dropout"], "{lines:?}");
    let log_line = lines.iter().find(|l| l["type"] == "log").unwrap();
    assert_eq!(log_line["text"], "ArduCopter V4.6.0");
    let param = lines.iter().find(|l| l["type"] == "param").unwrap();
    assert_eq!(
        (&param["name"], &param["value"]),
        (&json!("LOG_BACKEND_TYPE"), &json!(7.0))
    );
    let dropout = lines.iter().find(|l| l["type"] == "dropout").unwrap();
    assert_eq!(dropout["duration_ms"], 250);

    let hello = hello_of_a_new_client(&mut p);
    assert_eq!(hello["vehicle"]["autopilot"], "ardupilot");
    assert_eq!(hello["log"]["format"], "bin");
    assert_eq!(hello["log"]["start_us"], 1);
    let catalogue: Json = serde_json::from_slice(&p.poll_transmit().unwrap().line).unwrap();
    let names: Vec<String> = catalogue["topics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| format!("{}[{}]", t["name"].as_str().unwrap(), t["multi_id"]))
        .collect();
    assert_eq!(names, ["ATT[0]", "BAT[0]", "BAT[1]"]);
    assert_eq!(catalogue["topics"][1]["instance_field"], "Inst");
    assert_eq!(catalogue["topics"][0]["fields"][3]["type"], "double");
}
