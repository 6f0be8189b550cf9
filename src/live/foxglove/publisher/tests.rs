//! The publisher with clients as Foxglove connects them: the synthetic flight subscribed to,
//! channels new and late, findings, bad requests and too many clients.

use super::*;
use crate::link::CloseReason;
use serde_json::{Value as Json, json};

fn json_of(o: &Outgoing) -> Json {
    assert!(is_text(&o.message));
    serde_json::from_slice(&o.message).unwrap()
}

fn drain(p: &mut FoxglovePublisher) -> Vec<Outgoing> {
    std::iter::from_fn(|| p.poll_transmit()).collect()
}

/// The synthetic flight through a publisher with one client subscribed to everything.
#[test]
fn a_subscriber_gets_every_sample_of_its_channels_and_the_log_strings() {
    let log = crate::sim::synth::generate(crate::sim::synth::SynthOptions {
        duration_s: 20,
        seed: 1,
        appended_data: false,
    });
    let now = Instant::now();
    let mut p = FoxglovePublisher::new("test", "s1");
    let c = p.connect().unwrap();
    let hello = drain(&mut p);
    assert_eq!(json_of(&hello[0])["op"], "serverInfo");
    let ads = json_of(&hello[1]);
    assert_eq!(ads["channels"][0]["topic"], "/log");
    // Subscribe to /log, then open the log and subscribe to each channel as it comes.
    p.handle_text(
        c,
        r#"{"op":"subscribe","subscriptions":[{"id":100,"channelId":1}]}"#,
        now,
    );
    p.handle_event(
        &Event::LogOpened {
            number: 1,
            format: crate::autopilot::LogFormat::ULog,
        },
        now,
    );
    let mut subs: HashMap<u32, String> = HashMap::new();
    let mut counts: HashMap<String, u64> = HashMap::new();
    let mut removed_in_flight = 0;
    let mut step = |p: &mut FoxglovePublisher, subs: &mut HashMap<u32, String>| {
        for o in drain(p) {
            assert_eq!(o.client, c);
            if is_text(&o.message) {
                let m = json_of(&o);
                assert_ne!(m["op"], "status", "{m}");
                if m["op"] == "unadvertise" {
                    removed_in_flight += m["channelIds"].as_array().unwrap().len();
                }
                if m["op"] == "advertise" {
                    for ch in m["channels"].as_array().unwrap() {
                        let sub = subs.len() as u32;
                        subs.insert(sub, ch["topic"].as_str().unwrap().to_owned());
                        p.handle_text(
                            c,
                            &format!(
                                r#"{{"op":"subscribe","subscriptions":[{{"id":{sub},"channelId":{}}}]}}"#,
                                ch["id"]
                            ),
                            now,
                        );
                    }
                }
            } else {
                assert_eq!(o.message[0], protocol::MESSAGE_DATA);
                let sub = u32::from_le_bytes(o.message[1..5].try_into().unwrap());
                let topic = if sub == 100 {
                    "/log".to_owned()
                } else {
                    subs[&sub].clone()
                };
                *counts.entry(topic).or_default() += 1;
            }
        }
    };
    // The subscription made on an advertise comes after the rest of the piece: the
    // channel's first samples reach it from the hold.
    for piece in log.chunks(1000) {
        p.handle_log_bytes(piece, now);
        step(&mut p, &mut subs);
    }
    let summary = crate::ulog::summary::summarize(&log).unwrap();
    for d in &summary.datasets {
        let topic = match d.multi_id {
            0 => format!("/{}", d.name),
            n => format!("/{}/{n}", d.name),
        };
        let got = counts.get(&topic).copied().unwrap_or(0);
        assert_eq!(got, d.count, "{topic}");
    }
    assert_eq!(counts["/log"], summary.logged_messages.len() as u64);
    // The log ends: its channels go, /log stays.
    p.handle_event(
        &Event::LogClosed {
            number: 1,
            reason: CloseReason::Shutdown,
            bytes: 0,
        },
        now,
    );
    let out = drain(&mut p);
    let un = json_of(&out[0]);
    assert_eq!(un["op"], "unadvertise");
    // battery_status is removed in flight, the others when the log ends.
    assert_eq!(removed_in_flight, 1);
    let at_end = un["channelIds"].as_array().unwrap().len();
    assert_eq!(at_end + removed_in_flight, summary.datasets.len());
    assert!(!un["channelIds"].as_array().unwrap().contains(&1.into()));
}

/// Subscribes `client` to the channel of `topic` (as the latest advertise in `out` has it)
/// at `now`; the message-data frames that follow at once.
fn subscribe_late(p: &mut FoxglovePublisher, c: ClientId, channel: u64, now: Instant) -> usize {
    p.handle_text(
        c,
        &format!(r#"{{"op":"subscribe","subscriptions":[{{"id":7,"channelId":{channel}}}]}}"#),
        now,
    );
    drain(p).iter().filter(|o| !is_text(&o.message)).count()
}

#[test]
fn a_new_channel_holds_its_first_samples_for_a_while_and_within_bounds() {
    let log = crate::sim::synth::generate(crate::sim::synth::SynthOptions {
        duration_s: 5,
        seed: 1,
        appended_data: false,
    });
    let t0 = Instant::now();
    let run = |subscribe_at: Duration| {
        let mut p = FoxglovePublisher::new("test", "s1");
        let c = p.connect().unwrap();
        p.handle_event(
            &Event::LogOpened {
                number: 1,
                format: crate::autopilot::LogFormat::ULog,
            },
            t0,
        );
        // The whole log arrives at t0 (as a burst would).
        p.handle_log_bytes(&log, t0);
        let attitude = drain(&mut p)
            .iter()
            .filter(|o| is_text(&o.message))
            .map(json_of)
            .filter(|m| m["op"] == "advertise")
            .flat_map(|m| m["channels"].as_array().unwrap().clone())
            .find(|ch| ch["topic"] == "/vehicle_attitude")
            .expect("vehicle_attitude advertised")["id"]
            .as_u64()
            .unwrap();
        assert!(p.held_bytes <= HOLD_TOTAL_BYTES);
        subscribe_late(&mut p, c, attitude, t0 + subscribe_at)
    };
    // Within the hold: every sample so far (5 s of attitude is far below the byte bounds).
    let held = run(Duration::from_millis(10));
    let summary = crate::ulog::summary::summarize(&log).unwrap();
    let all = summary
        .datasets
        .iter()
        .find(|d| d.name == "vehicle_attitude")
        .unwrap()
        .count as usize;
    assert_eq!(held, all);
    // After it: nothing from before the subscription.
    assert_eq!(run(HOLD_NEW_CHANNEL), 0);
}

#[test]
fn a_client_that_connects_mid_flight_gets_every_current_channel() {
    let log = crate::sim::synth::generate(crate::sim::synth::SynthOptions {
        duration_s: 10,
        seed: 1,
        appended_data: false,
    });
    let now = Instant::now();
    let mut p = FoxglovePublisher::new("test", "s1");
    p.handle_event(
        &Event::LogOpened {
            number: 1,
            format: crate::autopilot::LogFormat::ULog,
        },
        now,
    );
    // Past the topic added in flight (sensor_accel/1, half a second in).
    let half = log.len() / 2;
    p.handle_log_bytes(&log[..half], now);
    let c = p.connect().unwrap();
    let hello = drain(&mut p);
    assert_eq!(json_of(&hello[0])["op"], "serverInfo");
    let mut topics: Vec<String> = json_of(&hello[1])["channels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|ch| ch["topic"].as_str().unwrap().to_owned())
        .collect();
    topics.sort();
    let summary = crate::ulog::summary::summarize(&log).unwrap();
    let mut want: Vec<String> = summary
        .datasets
        .iter()
        .map(|d| match d.multi_id {
            0 => format!("/{}", d.name),
            n => format!("/{}/{n}", d.name),
        })
        .chain(["/log".to_owned(), DIAGNOSTICS_TOPIC.to_owned()])
        .collect();
    want.sort();
    assert_eq!(topics, want);
    // Subscribed now, it gets the samples from here on (channels 1 and 2 are /log and
    // /diagnostics).
    let channel = json_of(&hello[1])["channels"][2]["id"].as_u64().unwrap();
    assert_eq!(
        subscribe_late(&mut p, c, channel, now + HOLD_NEW_CHANNEL),
        0
    );
    p.handle_log_bytes(&log[half..], now + HOLD_NEW_CHANNEL);
    assert!(drain(&mut p).iter().any(|o| !is_text(&o.message)));
}

/// A finding as the store hands it over, made at `at_us`.
fn finding(at_us: u64) -> Finding {
    crate::diagnose::Finding {
        id: crate::diagnose::AnalyzerId::GpsInterference,
        summary: "GPS interference".into(),
        severity: crate::diagnose::Severity::Warning,
        timestamp_us: at_us,
        end_timestamp_us: None,
        evidence: crate::diagnose::Evidence::GpsInterference {
            eph_m: 9.0,
            epv_m: 12.0,
            num_satellites: 5,
            noise_level: None,
        },
    }
}

#[test]
fn findings_go_to_diagnostics_subscribers_and_a_late_one_gets_the_flights_so_far() {
    let now = Instant::now();
    let mut p = FoxglovePublisher::new("test", "s1");
    let early = p.connect().unwrap();
    let hello = drain(&mut p);
    let diagnostics = &json_of(&hello[1])["channels"][1];
    assert_eq!(diagnostics["topic"], DIAGNOSTICS_TOPIC);
    assert_eq!(diagnostics["schemaName"], DIAGNOSTICS_TYPE);
    let channel = diagnostics["id"].as_u64().unwrap();
    let data = |out: Vec<Outgoing>| -> Vec<(ClientId, u64)> {
        out.into_iter()
            .filter(|o| !is_text(&o.message))
            .map(|o| {
                (
                    o.client,
                    u64::from_le_bytes(o.message[5..13].try_into().unwrap()),
                )
            })
            .collect()
    };
    assert_eq!(subscribe_late(&mut p, early, channel, now), 0);
    // A finding of a previous flight is not this flight's.
    p.handle_finding(&finding(1_000_000), now);
    p.handle_event(
        &Event::LogOpened {
            number: 1,
            format: crate::autopilot::LogFormat::ULog,
        },
        now,
    );
    drain(&mut p);
    p.handle_finding(&finding(20_000_000), now);
    p.handle_finding(&finding(30_000_000), now);
    assert_eq!(
        data(drain(&mut p)),
        [(early, 20_000_000_000), (early, 30_000_000_000)]
    );
    // A client that subscribes now gets both, then the next as it comes.
    let late = p.connect().unwrap();
    drain(&mut p);
    assert_eq!(subscribe_late(&mut p, late, channel, now), 2);
    p.handle_finding(&finding(40_000_000), now);
    assert_eq!(
        data(drain(&mut p)),
        [(early, 40_000_000_000), (late, 40_000_000_000)]
    );
    let has = |out: &[Outgoing], id: &[u8]| {
        out.iter()
            .any(|o| o.message.windows(id.len()).any(|w| w == id))
    };
    // An ArduPilot's flight: its findings say so in their hardware id.
    p.handle_event(
        &Event::LogOpened {
            number: 2,
            format: crate::autopilot::LogFormat::DataFlash,
        },
        now,
    );
    drain(&mut p);
    p.handle_finding(&finding(45_000_000), now);
    let out = drain(&mut p);
    assert_eq!(out.len(), 2);
    assert!(has(&out, b"ardupilot") && !has(&out, b"px4"));
    // Bounded: a flight with more findings keeps the latest.
    for k in 0..KEEP_FINDINGS as u64 + 10 {
        p.handle_finding(&finding(50_000_000 + k), now);
    }
    drain(&mut p);
    let third = p.connect().unwrap();
    drain(&mut p);
    assert_eq!(subscribe_late(&mut p, third, channel, now), KEEP_FINDINGS);
}

#[test]
fn bad_requests_get_a_status_and_nothing_else_changes() {
    let mut p = FoxglovePublisher::new("test", "s1");
    let c = p.connect().unwrap();
    drain(&mut p);
    for bad in [
        "not json",
        r#"{"op":"subscribe","subscriptions":[{"id":1,"channelId":999}]}"#,
        r#"{"op":"unsubscribe","subscriptionIds":[5]}"#,
        r#"{"op":"subscribe"}"#,
    ] {
        p.handle_text(c, bad, Instant::now());
        let out = drain(&mut p);
        assert_eq!(out.len(), 1, "{bad}");
        assert_eq!(json_of(&out[0])["op"], "status", "{bad}");
        assert_eq!(json_of(&out[0])["level"], 2, "{bad}");
    }
    p.handle_text(
        c,
        r#"{"op":"subscribe","subscriptions":[{"id":1,"channelId":1}]}"#,
        Instant::now(),
    );
    assert!(drain(&mut p).is_empty());
    p.handle_text(
        c,
        r#"{"op":"subscribe","subscriptions":[{"id":1,"channelId":1}]}"#,
        Instant::now(),
    );
    assert_eq!(json_of(&drain(&mut p)[0])["op"], "status");
}

#[test]
fn clients_are_bounded() {
    let mut p = FoxglovePublisher::new("test", "s1");
    for _ in 0..MAX_CLIENTS {
        assert!(p.connect().is_some());
    }
    assert!(p.connect().is_none());
    p.disconnect(1);
    assert!(p.connect().is_some());
}

/// An ArduPilot log: a JSON channel per type and instance, messages as the socket's fields,
/// texts on `/log`.
#[test]
fn an_ardupilot_log_gets_json_channels_by_type_and_instance() {
    let now = Instant::now();
    let mut p = FoxglovePublisher::new("test", "s1");
    let c = p.connect().unwrap();
    drain(&mut p);
    p.handle_text(
        c,
        r#"{"op":"subscribe","subscriptions":[{"id":100,"channelId":1}]}"#,
        now,
    );
    p.handle_event(
        &Event::LogOpened {
            number: 1,
            format: crate::autopilot::LogFormat::DataFlash,
        },
        now,
    );
    let log = crate::dataflash::testing::ardupilot_log();
    p.handle_log_bytes(&log, now);
    let mut channels: HashMap<String, Json> = HashMap::new();
    let mut texts = 0;
    for o in drain(&mut p) {
        if is_text(&o.message) {
            let m = json_of(&o);
            assert_eq!(m["op"], "advertise", "{m}");
            for ch in m["channels"].as_array().unwrap() {
                channels.insert(ch["topic"].as_str().unwrap().to_owned(), ch.clone());
            }
        } else {
            texts += 1;
        }
    }
    let mut topics: Vec<&String> = channels.keys().collect();
    topics.sort();
    assert_eq!(topics, ["/ATT", "/BAT", "/BAT/1"]);
    let att = &channels["/ATT"];
    assert_eq!(
        (&att["encoding"], &att["schemaEncoding"]),
        (&json!("json"), &json!("jsonschema"))
    );
    let schema: Json = serde_json::from_str(att["schema"].as_str().unwrap()).unwrap();
    assert_eq!(schema["properties"]["Yaw"]["type"], "number");
    assert_eq!(schema["properties"]["TimeUS"]["type"], "integer");
    // The two texts of the log (its startup's and the dropout mark) on /log.
    assert_eq!(texts, 2);
    // A late subscriber to the new channel gets its held message, as JSON, at its TimeUS.
    let id = att["id"].as_u64().unwrap();
    p.handle_text(
        c,
        &format!(r#"{{"op":"subscribe","subscriptions":[{{"id":7,"channelId":{id}}}]}}"#),
        now,
    );
    let held = drain(&mut p);
    assert_eq!(held.len(), 1);
    let frame = &held[0].message;
    assert_eq!(frame[0], protocol::MESSAGE_DATA);
    assert_eq!(u32::from_le_bytes(frame[1..5].try_into().unwrap()), 7);
    assert_eq!(
        u64::from_le_bytes(frame[5..13].try_into().unwrap()),
        1_000_000
    );
    let fields: Json = serde_json::from_slice(&frame[13..]).unwrap();
    assert_eq!(
        (&fields["Roll"], &fields["Yaw"]),
        (&json!(0.25), &json!(-12.34))
    );
    // The log's end takes its channels away.
    p.handle_event(
        &Event::LogClosed {
            number: 1,
            reason: CloseReason::Shutdown,
            bytes: log.len() as u64,
        },
        now,
    );
    let gone = json_of(&drain(&mut p)[0]);
    assert_eq!(gone["op"], "unadvertise");
    assert_eq!(gone["channelIds"].as_array().unwrap().len(), 3);
}
