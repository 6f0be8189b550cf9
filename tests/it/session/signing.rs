//! MAVLink 2 signing between the session and a vehicle that signs, in memory.

use super::*;
use ulog_recv::link::{LinkProblem, SigningKey, SigningSetup};

fn key(b: u8) -> SigningKey {
    SigningKey::from_bytes([b; 32])
}

fn signed_vehicle(k: Option<SigningKey>) -> VehicleConfig {
    VehicleConfig {
        signing: k,
        ..fast_vehicle(Impairment::NONE, 1)
    }
}

fn signed_session(k: Option<SigningKey>) -> SessionConfig {
    SessionConfig {
        signing: k.map(|key| SigningSetup {
            key,
            link_id: 1,
            timestamp: ulog_recv::link::signing::timestamp_at(std::time::SystemTime::now()),
        }),
        ..SessionConfig::default()
    }
}

fn problems(h: &Harness) -> Vec<LinkProblem> {
    h.events
        .iter()
        .filter_map(|e| match e {
            Event::LinkProblem(p) => Some(*p),
            _ => None,
        })
        .collect()
}

#[test]
fn a_signed_link_delivers_every_log_byte_for_byte() {
    for path in all_logs() {
        let file = std::fs::read(&path).unwrap();
        let mut h = Harness::new(
            chunk_log(&file, 0).unwrap(),
            signed_vehicle(Some(key(3))),
            signed_session(Some(key(3))),
        );
        h.run_to_end(Duration::from_secs(120));
        assert_eq!(h.logs.len(), 1, "{}", path.display());
        assert!(
            h.logs[0].bytes == h.vehicle.log().stream,
            "{}",
            path.display()
        );
        let s = h.session.stats();
        assert_eq!(s.refused_frames(), 0, "{s:?}");
        assert_eq!(
            s.signing.valid, s.frames.messages,
            "every frame signed: {s:?}"
        );
        assert_eq!(h.vehicle.stats().refused_frames, 0);
        assert_eq!(h.vehicle.stats().stops_completed, 1);
    }
}

#[test]
fn without_our_key_the_cause_is_named_within_10_s_and_once_a_minute() {
    let file = std::fs::read(&common::synthetic_logs()[0]).unwrap();
    let mut h = Harness::new(
        chunk_log(&file, 0).unwrap(),
        signed_vehicle(Some(key(3))),
        signed_session(None),
    );
    h.run_until(Duration::from_secs(11), |h| !problems(h).is_empty());
    assert!(h.elapsed() < Duration::from_secs(10), "{:?}", h.elapsed());
    assert_eq!(
        problems(&h),
        [LinkProblem::VehicleSignsNoKey { system_id: 1 }]
    );
    assert!(problems(&h)[0].to_string().contains("--signing-key"));
    assert_eq!(h.session.stats().problem, Some(problems(&h)[0]));
    // Two more minutes of retries: the problem is repeated twice more, not every try.
    let until = h.now + Duration::from_secs(120);
    h.run_until(Duration::from_secs(200), |h| h.now >= until);
    let repeated = problems(&h).len();
    assert!((2..=3).contains(&repeated), "{:?}", problems(&h));
    assert!(h.logs.is_empty());
    // The vehicle dropped every unsigned command.
    assert!(h.vehicle.stats().refused_frames > 10);
    assert_eq!(h.vehicle.stats().starts, 0);
}

#[test]
fn with_a_wrong_key_nothing_is_accepted_and_the_key_is_blamed() {
    let file = std::fs::read(&common::synthetic_logs()[0]).unwrap();
    let mut h = Harness::new(
        chunk_log(&file, 0).unwrap(),
        signed_vehicle(Some(key(3))),
        signed_session(Some(key(4))),
    );
    h.run_until(Duration::from_secs(30), |h| {
        h.elapsed() >= Duration::from_secs(20)
    });
    assert!(h.logs.is_empty());
    assert_eq!(h.session.vehicle(), None, "not even its signed heartbeats");
    let s = h.session.stats();
    assert!(s.signing.bad_signature >= 19, "{s:?}");
    assert_eq!(s.signing.valid, 0);
    assert_eq!(problems(&h), [LinkProblem::WrongKey { system_id: 1 }]);
    assert_eq!(h.vehicle.stats().starts, 0);
}

#[test]
fn an_unsigned_heartbeat_never_takes_the_signed_vehicles_place() {
    use mavlink::dialects::ardupilotmega::{HEARTBEAT_DATA, MavAutopilot, MavMessage, MavType};
    let file = std::fs::read(&common::synthetic_logs()[0]).unwrap();
    let mut h = Harness::new(
        chunk_log(&file, 0).unwrap(),
        signed_vehicle(Some(key(3))),
        signed_session(Some(key(3))),
    );
    // Before the vehicle is heard: an unsigned heartbeat of an autopilot of the same
    // system, another component (MAVLink lets unsigned heartbeats through).
    let mut forged = Vec::new();
    ulog_recv::link::frames::encode(
        mavlink::MavHeader {
            system_id: 1,
            component_id: 42,
            sequence: 0,
        },
        &MavMessage::HEARTBEAT(HEARTBEAT_DATA {
            autopilot: MavAutopilot::MAV_AUTOPILOT_PX4,
            mavtype: MavType::MAV_TYPE_QUADROTOR,
            ..Default::default()
        }),
        &mut forged,
    );
    let now = h.now;
    assert!(!h.session.handle_datagram(&forged, now));
    assert_eq!(h.session.vehicle(), None);
    h.run_to_end(Duration::from_secs(60));
    assert_eq!(h.session.vehicle(), Some((1, 1)));
    assert!(h.logs[0].bytes == h.vehicle.log().stream);
}

#[test]
fn a_signed_vehicle_and_an_unsigned_receiver_forged_frames_and_replays_are_refused() {
    // Our key, but replayed: the vehicle's frames seen twice are taken once.
    let file = std::fs::read(&common::synthetic_logs()[0]).unwrap();
    let mut h = Harness::new(
        chunk_log(&file, 0).unwrap(),
        signed_vehicle(Some(key(3))),
        signed_session(Some(key(3))),
    );
    let mut replay = Vec::new();
    h.run_until(Duration::from_secs(30), |h| {
        h.logs.first().is_some_and(|l| l.bytes.len() > 10_000)
    });
    // Capture some of the vehicle's frames and play them again, plus an unsigned forgery.
    while let Some(f) = h.vehicle.poll_transmit() {
        h.session.handle_bytes(&f, h.now);
        replay.push(f);
    }
    let now = h.now;
    for f in &replay {
        h.session.handle_bytes(f, now);
    }
    h.session
        .handle_bytes(&forged_chunk(60_000, 0, &[1, 2, 3]), now);
    h.run_to_end(Duration::from_secs(60));
    let s = h.session.stats();
    assert!(h.logs[0].bytes == h.vehicle.log().stream, "{s:?}");
    assert_eq!(s.signing.replayed, replay.len() as u64, "{s:?}");
    assert_eq!(s.signing.unsigned_refused, 1, "{s:?}");
    assert_eq!(
        s.implausible, 0,
        "the forgery never reached the reorder buffer"
    );
}
