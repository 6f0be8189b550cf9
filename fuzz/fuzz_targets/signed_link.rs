//! Fuzz target: a session with a signing key, fed signed and mis-signed frames. The input is a
//! script: frames of fuzzed messages (chunks, heartbeats, command acks) signed with our key,
//! with another key, signed then altered at a fuzzed byte, replayed, or unsigned; raw bytes;
//! each through the byte-stream path or the datagram path; time steps. The session must never
//! panic, never take a frame that is not validly signed with our key (but an unsigned
//! heartbeat or radio status), and every log it hands out must be whole ULog messages.
#![no_main]

use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use mavlink::MavHeader;
use mavlink::dialects::ardupilotmega::{
    COMMAND_ACK_DATA, HEARTBEAT_DATA, LOGGING_DATA_ACKED_DATA, LOGGING_DATA_DATA, MavAutopilot,
    MavCmd, MavMessage, MavResult, MavType,
};
use ulog_recv::link::frames::encode;
use ulog_recv::link::signing::{Signer, SigningKey};
use ulog_recv::link::{Event, Session, SessionConfig, SigningSetup};

const VEHICLE: MavHeader = MavHeader {
    system_id: 1,
    component_id: 1,
    sequence: 0,
};

fn message(kind: u8, arg: &[u8]) -> MavMessage {
    let byte = |i: usize| arg.get(i).copied().unwrap_or(0);
    match kind % 4 {
        0 => MavMessage::HEARTBEAT(HEARTBEAT_DATA {
            autopilot: MavAutopilot::MAV_AUTOPILOT_PX4,
            mavtype: MavType::MAV_TYPE_QUADROTOR,
            ..Default::default()
        }),
        1 => MavMessage::COMMAND_ACK(COMMAND_ACK_DATA {
            command: if byte(0) & 1 == 1 {
                MavCmd::MAV_CMD_LOGGING_START
            } else {
                MavCmd::MAV_CMD_LOGGING_STOP
            },
            result: if byte(1) & 1 == 1 {
                MavResult::MAV_RESULT_IN_PROGRESS
            } else {
                MavResult::MAV_RESULT_ACCEPTED
            },
        }),
        k => {
            let seq = u16::from_le_bytes([byte(0), byte(1)]);
            let data_in = arg.get(3..).unwrap_or(&[]);
            let mut data = [0u8; 249];
            let n = data_in.len().min(249);
            data[..n].copy_from_slice(&data_in[..n]);
            if k == 2 {
                MavMessage::LOGGING_DATA_ACKED(LOGGING_DATA_ACKED_DATA {
                    sequence: seq,
                    target_system: 1,
                    target_component: 155,
                    length: n as u8,
                    first_message_offset: byte(2),
                    data,
                })
            } else {
                MavMessage::LOGGING_DATA(LOGGING_DATA_DATA {
                    sequence: seq,
                    target_system: 1,
                    target_component: 155,
                    length: n as u8,
                    first_message_offset: byte(2),
                    data,
                })
            }
        }
    }
}

fuzz_target!(|input: &[u8]| {
    let t0 = Instant::now();
    let mut now = t0;
    let key = SigningKey::from_bytes([7; 32]);
    let mut s = Session::new(
        SessionConfig {
            signing: Some(SigningSetup {
                key: key.clone(),
                link_id: 0,
                timestamp: 1_000_000_000,
            }),
            ..SessionConfig::default()
        },
        now,
    );
    let mut vehicle = Signer::new(key, 0, 1_000_000_000, now);
    let mut stranger = Signer::new(SigningKey::from_bytes([8; 32]), 0, 1_000_000_000, now);
    let mut last = Vec::new();
    let mut logs: Vec<Vec<u8>> = Vec::new();
    let mut rest = input;
    while let Some((&op, tail)) = rest.split_first() {
        let (len, tail) = match tail.split_first() {
            Some((&l, t)) => (l as usize, t),
            None => (0, tail),
        };
        let (arg, tail) = tail.split_at(len.min(tail.len()));
        rest = tail;
        let kind = arg.first().copied().unwrap_or(0);
        let body = arg.get(1..).unwrap_or(&[]);
        let mut frame = Vec::new();
        let refused_before = s.stats().refused_frames();
        let valid_before = s.stats().signing.valid;
        let mut must_refuse = false;
        match op % 8 {
            0 | 1 => vehicle.sign(VEHICLE, &message(kind, body), now, &mut frame),
            2 => {
                stranger.sign(VEHICLE, &message(kind, body), now, &mut frame);
                must_refuse = true;
            }
            3 => {
                // Signed, then one signature or timestamp byte altered.
                vehicle.sign(VEHICLE, &message(kind, body), now, &mut frame);
                let at = frame.len() - 1 - (body.first().copied().unwrap_or(0) as usize % 12);
                frame[at] ^= body.get(1).copied().unwrap_or(0) | 1;
                must_refuse = true;
            }
            4 => {
                frame = last.clone();
                must_refuse = !frame.is_empty();
            }
            5 => {
                encode(VEHICLE, &message(kind, body), &mut frame);
                must_refuse = kind % 4 != 0;
            }
            6 => {
                let ms = u16::from_le_bytes([kind, body.first().copied().unwrap_or(0)]);
                now += Duration::from_millis(ms as u64);
                s.handle_timeout(now);
            }
            _ => frame = arg.to_vec(),
        }
        if op & 0x80 == 0 {
            s.handle_datagram(&frame, now);
        } else {
            s.handle_bytes(&frame, now);
        }
        if op % 8 != 7 && op & 0x80 == 0 {
            let st = s.stats();
            if must_refuse {
                assert_eq!(
                    st.signing.valid, valid_before,
                    "a bad frame was taken: op {op}"
                );
                assert!(
                    st.refused_frames() > refused_before || frame.is_empty(),
                    "op {op} kind {kind} {st:?}"
                );
            }
        }
        // A frame pushed into the byte stream may still wait behind a torn one: only one
        // that surely reached the session is a replay when sent again.
        if matches!(op % 8, 0 | 1) && op & 0x80 == 0 {
            last = frame;
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
    s.handle_timeout(now + Duration::from_secs(10));
    assert!(s.is_closed());
    while let Some(e) = s.poll_event() {
        if let Event::LogBytes(b) = e {
            logs.last_mut().unwrap().extend_from_slice(&b);
        }
    }
    for log in &logs {
        assert!(log.len() >= 16 && log[..7] == ulog_recv::ulog::message::FILE_MAGIC);
        let mut at = 16;
        while at < log.len() {
            assert!(at + 3 <= log.len(), "a torn message header");
            at += 3 + u16::from_le_bytes([log[at], log[at + 1]]) as usize;
        }
        assert_eq!(at, log.len(), "a torn message");
    }
});
