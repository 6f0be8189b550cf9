//! Fuzz target: bytes → MAVLink → session. The input is a script of operations: raw bytes
//! (garbage, torn frames), well-formed LOGGING_DATA(_ACKED) frames with fuzzed sequence,
//! offset, length and data (so they pass the CRC and reach the reorder buffer and the
//! assembler), heartbeats, command acks, time steps, shutdown. The session must never panic,
//! and every log it hands out must be whole ULog messages back to back after the header.
#![no_main]

use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use mavlink::MavHeader;
use mavlink::dialects::ardupilotmega::{
    COMMAND_ACK_DATA, HEARTBEAT_DATA, LOGGING_DATA_ACKED_DATA, LOGGING_DATA_DATA, MavAutopilot,
    MavCmd, MavMessage, MavResult, MavType,
};
use ulog_recv::link::frames::encode;
use ulog_recv::link::{Event, Session, SessionConfig};

fn frame(msg: MavMessage) -> Vec<u8> {
    let mut f = Vec::new();
    let header = MavHeader {
        system_id: 1,
        component_id: 1,
        sequence: 0,
    };
    encode(header, &msg, &mut f);
    f
}

fn heartbeat() -> Vec<u8> {
    frame(MavMessage::HEARTBEAT(HEARTBEAT_DATA {
        autopilot: MavAutopilot::MAV_AUTOPILOT_PX4,
        mavtype: MavType::MAV_TYPE_QUADROTOR,
        ..Default::default()
    }))
}

fn ack(command: MavCmd, result: MavResult) -> Vec<u8> {
    frame(MavMessage::COMMAND_ACK(COMMAND_ACK_DATA {
        command,
        result,
    }))
}

/// Checks that `log` is a file header followed by whole messages.
fn check_framing(log: &[u8]) {
    assert!(log.len() >= 16, "a log without its header");
    assert_eq!(&log[..7], &ulog_recv::ulog::message::FILE_MAGIC);
    let mut at = 16;
    while at < log.len() {
        assert!(at + 3 <= log.len(), "a torn message header");
        at += 3 + u16::from_le_bytes([log[at], log[at + 1]]) as usize;
    }
    assert_eq!(at, log.len(), "a torn message");
}

fuzz_target!(|input: &[u8]| {
    let t0 = Instant::now();
    let mut now = t0;
    let mut s = Session::new(SessionConfig::default(), now);
    s.handle_timeout(now);
    s.handle_bytes(&heartbeat(), now);
    s.handle_bytes(
        &ack(MavCmd::MAV_CMD_LOGGING_STOP, MavResult::MAV_RESULT_ACCEPTED),
        now,
    );
    s.handle_bytes(
        &ack(
            MavCmd::MAV_CMD_LOGGING_START,
            MavResult::MAV_RESULT_ACCEPTED,
        ),
        now,
    );
    let mut logs: Vec<Vec<u8>> = Vec::new();
    let mut open = false;
    let mut rest = input;
    while let Some((&op, tail)) = rest.split_first() {
        let (len, tail) = match tail.split_first() {
            Some((&l, t)) => (l as usize, t),
            None => (0, tail),
        };
        let (arg, tail) = tail.split_at(len.min(tail.len()));
        rest = tail;
        match op % 8 {
            0 => s.handle_bytes(arg, now),
            1 | 2 | 3 => {
                // A chunk: seq (2), fmo (1), then data; op 1 acked.
                let seq = u16::from_le_bytes([
                    arg.first().copied().unwrap_or(0),
                    arg.get(1).copied().unwrap_or(0),
                ]);
                let fmo = arg.get(2).copied().unwrap_or(0);
                let data = arg.get(3..).unwrap_or(&[]);
                let mut d = [0u8; 249];
                let n = data.len().min(249);
                d[..n].copy_from_slice(&data[..n]);
                let msg = if op % 8 == 1 {
                    MavMessage::LOGGING_DATA_ACKED(LOGGING_DATA_ACKED_DATA {
                        sequence: seq,
                        target_system: 1,
                        target_component: 155,
                        length: n as u8,
                        first_message_offset: fmo,
                        data: d,
                    })
                } else {
                    MavMessage::LOGGING_DATA(LOGGING_DATA_DATA {
                        sequence: seq,
                        target_system: 1,
                        target_component: 155,
                        length: if op % 8 == 3 { 255 } else { n as u8 },
                        first_message_offset: fmo,
                        data: d,
                    })
                };
                s.handle_bytes(&frame(msg), now);
            }
            4 => s.handle_bytes(&heartbeat(), now),
            5 => {
                let command = if arg.first().is_some_and(|b| b & 1 == 1) {
                    MavCmd::MAV_CMD_LOGGING_START
                } else {
                    MavCmd::MAV_CMD_LOGGING_STOP
                };
                let result = match arg.get(1).copied().unwrap_or(0) % 6 {
                    0 => MavResult::MAV_RESULT_ACCEPTED,
                    1 => MavResult::MAV_RESULT_TEMPORARILY_REJECTED,
                    2 => MavResult::MAV_RESULT_DENIED,
                    3 => MavResult::MAV_RESULT_UNSUPPORTED,
                    4 => MavResult::MAV_RESULT_FAILED,
                    _ => MavResult::MAV_RESULT_IN_PROGRESS,
                };
                s.handle_bytes(&ack(command, result), now);
            }
            6 => {
                let ms = u16::from_le_bytes([
                    arg.first().copied().unwrap_or(0),
                    arg.get(1).copied().unwrap_or(0),
                ]);
                now += Duration::from_millis(ms as u64);
                s.handle_timeout(now);
            }
            _ => s.shutdown(now),
        }
        while s.poll_transmit().is_some() {}
        while let Some(e) = s.poll_event() {
            match e {
                Event::LogOpened { .. } => {
                    assert!(!open, "a log opened inside another");
                    open = true;
                    logs.push(Vec::new());
                }
                Event::LogBytes(b) => {
                    assert!(open, "log bytes outside a log");
                    logs.last_mut().unwrap().extend_from_slice(&b);
                }
                Event::LogClosed { bytes, .. } => {
                    assert!(open);
                    assert_eq!(bytes, logs.last().unwrap().len() as u64);
                    open = false;
                }
                _ => {}
            }
        }
    }
    s.shutdown(now);
    // The STOP handshake's wait runs out: nothing answers here.
    s.handle_timeout(now + Duration::from_secs(10));
    assert!(s.is_closed());
    while let Some(e) = s.poll_event() {
        match e {
            Event::LogBytes(b) => logs.last_mut().unwrap().extend_from_slice(&b),
            Event::LogClosed { .. } => open = false,
            _ => {}
        }
    }
    assert!(!open, "shutdown closes the log");
    for log in &logs {
        check_framing(log);
    }
});
