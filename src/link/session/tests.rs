//! The session's state machine driven frame by frame: back-off after refusals, every acked
//! chunk acked first.

use std::time::{Duration, Instant};

use mavlink::MavHeader;
use mavlink::dialects::common::{
    COMMAND_ACK_DATA, HEARTBEAT_DATA, LOGGING_DATA_ACKED_DATA, MavAutopilot, MavCmd, MavMessage,
    MavResult, MavType,
};

use super::{DEFAULT_COMPONENT_ID, Event, Session, SessionConfig};
use crate::link::frames::{FrameDecoder, encode};
use crate::ulog::message::FILE_MAGIC;

fn vehicle_frame(msg: MavMessage) -> Vec<u8> {
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
    vehicle_frame(MavMessage::HEARTBEAT(HEARTBEAT_DATA {
        autopilot: MavAutopilot::MAV_AUTOPILOT_PX4,
        mavtype: MavType::MAV_TYPE_QUADROTOR,
        ..Default::default()
    }))
}

fn ack(command: MavCmd, result: MavResult) -> Vec<u8> {
    vehicle_frame(MavMessage::COMMAND_ACK(COMMAND_ACK_DATA {
        command,
        result,
    }))
}

fn sent(s: &mut Session) -> Vec<MavMessage> {
    let mut dec = FrameDecoder::new();
    while let Some(f) = s.poll_transmit() {
        dec.push(&f);
    }
    std::iter::from_fn(|| dec.next_frame().map(|f| f.message)).collect()
}

fn command_of(m: &MavMessage) -> Option<MavCmd> {
    match m {
        MavMessage::COMMAND_LONG(c) => Some(c.command),
        _ => None,
    }
}

/// A session that found the vehicle and had its STOP accepted: START is out.
fn starting(t0: Instant) -> Session {
    let mut s = Session::new(SessionConfig::default(), t0);
    s.handle_timeout(t0);
    s.handle_bytes(&heartbeat(), t0);
    s.handle_bytes(
        &ack(MavCmd::MAV_CMD_LOGGING_STOP, MavResult::MAV_RESULT_ACCEPTED),
        t0,
    );
    let out = sent(&mut s);
    let commands: Vec<_> = out.iter().filter_map(command_of).collect();
    assert_eq!(
        commands,
        [MavCmd::MAV_CMD_LOGGING_STOP, MavCmd::MAV_CMD_LOGGING_START]
    );
    assert!(
        matches!(out[0], MavMessage::HEARTBEAT(ref h) if h.mavtype == MavType::MAV_TYPE_ONBOARD_CONTROLLER)
    );
    s
}

#[test]
fn temporarily_rejected_backs_off_and_stops_first() {
    let t0 = Instant::now();
    let mut s = starting(t0);
    let mut now = t0;
    for expected in [1, 2, 4, 8, 10, 10] {
        s.handle_bytes(
            &ack(
                MavCmd::MAV_CMD_LOGGING_START,
                MavResult::MAV_RESULT_TEMPORARILY_REJECTED,
            ),
            now,
        );
        let retry_in = Duration::from_secs(expected);
        let events: Vec<_> = std::iter::from_fn(|| s.poll_event()).collect();
        assert!(
            events.contains(&Event::StartRejected { retry_in }),
            "{events:?}"
        );
        // Nothing but heartbeats until the back-off has passed.
        let before = now + retry_in - Duration::from_millis(1);
        s.handle_bytes(&heartbeat(), before);
        s.handle_timeout(before);
        assert!(sent(&mut s).iter().all(|m| command_of(m).is_none()));
        now += retry_in;
        s.handle_bytes(&heartbeat(), now);
        s.handle_timeout(now);
        let commands: Vec<_> = sent(&mut s).iter().filter_map(command_of).collect();
        assert_eq!(commands, [MavCmd::MAV_CMD_LOGGING_STOP]);
        s.handle_bytes(
            &ack(
                MavCmd::MAV_CMD_LOGGING_STOP,
                MavResult::MAV_RESULT_IN_PROGRESS,
            ),
            now,
        );
        assert!(
            sent(&mut s).is_empty(),
            "START waits for the stop to finish"
        );
        s.handle_bytes(
            &ack(MavCmd::MAV_CMD_LOGGING_STOP, MavResult::MAV_RESULT_ACCEPTED),
            now,
        );
        let commands: Vec<_> = sent(&mut s).iter().filter_map(command_of).collect();
        assert_eq!(commands, [MavCmd::MAV_CMD_LOGGING_START]);
    }
}

#[test]
fn every_acked_chunk_is_acked_first_duplicates_included() {
    let t0 = Instant::now();
    let mut s = starting(t0);
    s.handle_bytes(
        &ack(
            MavCmd::MAV_CMD_LOGGING_START,
            MavResult::MAV_RESULT_ACCEPTED,
        ),
        t0,
    );
    let mut chunk = LOGGING_DATA_ACKED_DATA {
        sequence: 0,
        target_system: 1,
        target_component: DEFAULT_COMPONENT_ID,
        length: 16,
        first_message_offset: 0,
        ..Default::default()
    };
    chunk.data[..7].copy_from_slice(&FILE_MAGIC);
    chunk.data[7] = 1;
    let frame = vehicle_frame(MavMessage::LOGGING_DATA_ACKED(chunk.clone()));
    for copy in 0..3 {
        s.handle_bytes(&frame, t0);
        let out = sent(&mut s);
        assert!(
            matches!(out.first(), Some(MavMessage::LOGGING_ACK(a)) if a.sequence == 0),
            "copy {copy}: {out:?}"
        );
    }
    let st = s.stats();
    assert_eq!((st.acks_sent, st.duplicates, st.logs), (3, 2, 1));
    // Someone else's stream is neither acked nor logged.
    let mut other = chunk;
    other.target_component = 190;
    other.sequence = 1;
    s.handle_bytes(&vehicle_frame(MavMessage::LOGGING_DATA_ACKED(other)), t0);
    assert!(sent(&mut s).is_empty());
    assert_eq!(s.stats().ignored_chunks, 1);
}
