//! Chunks mangled in ways no real link mangles them (wrong offsets, flipped bytes, wild
//! sequence numbers, bogus lengths): the session must not panic, and every log it hands out
//! must still be a header followed by whole messages.

use super::*;
use mavlink::MavHeader;
use mavlink::dialects::ardupilotmega::{
    COMMAND_ACK_DATA, HEARTBEAT_DATA, LOGGING_DATA_ACKED_DATA, LOGGING_DATA_DATA, MavAutopilot,
    MavCmd, MavMessage, MavResult, MavType,
};
use proptest::prelude::*;

const VEHICLE: MavHeader = MavHeader {
    system_id: 1,
    component_id: 1,
    sequence: 0,
};

#[derive(Debug, Clone)]
enum Mangle {
    Keep,
    Drop,
    Duplicate,
    FlipByte(usize, u8),
    Offset(u8),
    Sequence(u16),
    Length(u8),
    Wait(u16),
}

fn mangle() -> impl Strategy<Value = Mangle> {
    prop_oneof![
        6 => Just(Mangle::Keep),
        1 => Just(Mangle::Drop),
        1 => Just(Mangle::Duplicate),
        1 => (0..249usize, any::<u8>()).prop_map(|(i, b)| Mangle::FlipByte(i, b)),
        1 => any::<u8>().prop_map(Mangle::Offset),
        1 => any::<u16>().prop_map(Mangle::Sequence),
        1 => any::<u8>().prop_map(Mangle::Length),
        1 => (0..2000u16).prop_map(Mangle::Wait),
    ]
}

fn started_session(now: Instant) -> Session {
    let mut s = Session::new(SessionConfig::default(), now);
    s.handle_timeout(now);
    let hb = MavMessage::HEARTBEAT(HEARTBEAT_DATA {
        autopilot: MavAutopilot::MAV_AUTOPILOT_PX4,
        mavtype: MavType::MAV_TYPE_QUADROTOR,
        ..Default::default()
    });
    s.handle_message(VEHICLE, &hb, now);
    for command in [MavCmd::MAV_CMD_LOGGING_STOP, MavCmd::MAV_CMD_LOGGING_START] {
        let ack = MavMessage::COMMAND_ACK(COMMAND_ACK_DATA {
            command,
            result: MavResult::MAV_RESULT_ACCEPTED,
        });
        s.handle_message(VEHICLE, &ack, now);
    }
    s
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        if std::env::var_os("CI").is_some() { 64 } else { 256 }
    ))]
    #[test]
    fn logs_stay_whole_messages(mangles in proptest::collection::vec(mangle(), 1..400)) {
        let file = std::fs::read(&common::synthetic_logs()[0]).unwrap();
        let log = chunk_log(&file, 0).unwrap();
        let mut now = Instant::now();
        let mut s = started_session(now);
        let mut logs: Vec<Vec<u8>> = Vec::new();
        for (chunk, m) in log.chunks.iter().zip(mangles.iter().cycle()) {
            let mut data = [0u8; 249];
            data[..chunk.data.len()].copy_from_slice(&chunk.data);
            let (mut seq, mut fmo, mut len) =
                (chunk.seq, chunk.first_message_offset, chunk.data.len() as u8);
            let mut copies = 1;
            match *m {
                Mangle::Keep => {}
                Mangle::Drop => copies = 0,
                Mangle::Duplicate => copies = 2,
                Mangle::FlipByte(i, b) => data[i] ^= b | 1,
                Mangle::Offset(o) => fmo = o,
                Mangle::Sequence(q) => seq = q,
                Mangle::Length(l) => len = l,
                Mangle::Wait(ms) => {
                    now += Duration::from_millis(ms as u64);
                    s.handle_timeout(now);
                }
            }
            let msg = if chunk.acked {
                MavMessage::LOGGING_DATA_ACKED(LOGGING_DATA_ACKED_DATA {
                    sequence: seq,
                    target_system: 1,
                    target_component: 155,
                    length: len,
                    first_message_offset: fmo,
                    data,
                })
            } else {
                MavMessage::LOGGING_DATA(LOGGING_DATA_DATA {
                    sequence: seq,
                    target_system: 1,
                    target_component: 155,
                    length: len,
                    first_message_offset: fmo,
                    data,
                })
            };
            for _ in 0..copies {
                s.handle_message(VEHICLE, &msg, now);
            }
            while s.poll_transmit().is_some() {}
            while let Some(e) = s.poll_event() {
                match e {
                    Event::LogOpened { .. } => logs.push(Vec::new()),
                    Event::LogBytes(b) => logs.last_mut().unwrap().extend_from_slice(&b),
                    _ => {}
                }
            }
        }
        s.shutdown(now);
        // No vehicle answers the STOP here: its wait runs out.
        s.handle_timeout(now + Duration::from_secs(10));
        prop_assert!(s.is_closed());
        while let Some(e) = s.poll_event() {
            if let Event::LogBytes(b) = e {
                logs.last_mut().unwrap().extend_from_slice(&b);
            }
        }
        for l in &logs {
            prop_assert!(l.len() >= 16 && l[..7] == ulog_recv::ulog::message::FILE_MAGIC);
            // split_messages asserts the messages end exactly at the end.
            split_messages(l);
        }
    }
}
