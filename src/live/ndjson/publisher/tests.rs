//! The publisher driven line by line: an event request reaches the store and its outcome every
//! client, `stats` tells the vehicle, arming and uploads, `hello` tells the vehicle and the log.

use super::*;

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
