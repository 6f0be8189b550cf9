//! The session's state machine driven frame by frame: back-off after refusals, every acked
//! chunk acked first.

use std::time::{Duration, Instant};

use mavlink::MavHeader;
use mavlink::dialects::ardupilotmega::{
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
    std::iter::from_fn(|| dec.next_frame())
        .filter_map(|f| f.message.into_mav())
        .collect()
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

/// The texts a batch of frames holds, with their severity.
fn texts(out: &[MavMessage]) -> Vec<(mavlink::dialects::ardupilotmega::MavSeverity, String)> {
    out.iter()
        .filter_map(|m| match m {
            MavMessage::STATUSTEXT(t) => Some((t.severity, t.text.to_str().unwrap().to_owned())),
            _ => None,
        })
        .collect()
}

#[test]
fn status_texts_wait_for_the_vehicle_go_one_a_second_and_a_full_queue_drops() {
    use super::{STATUS_TEXT_INTERVAL, STATUS_TEXT_QUEUE};
    use mavlink::dialects::ardupilotmega::MavSeverity::{
        MAV_SEVERITY_CRITICAL, MAV_SEVERITY_WARNING,
    };
    let t0 = Instant::now();
    let mut s = Session::new(SessionConfig::default(), t0);
    s.handle_timeout(t0);
    sent(&mut s);
    // No vehicle yet: the text waits.
    assert!(s.send_status_text(MAV_SEVERITY_CRITICAL, "motor 2 output dropped to 0", t0));
    assert!(texts(&sent(&mut s)).is_empty());
    s.handle_bytes(&heartbeat(), t0);
    sent(&mut s);
    // Found: it goes at the next timer, from our component under the vehicle's system id.
    let t1 = t0 + Duration::from_millis(10);
    s.handle_timeout(t1);
    let mut dec = FrameDecoder::new();
    while let Some(f) = s.poll_transmit() {
        dec.push(&f);
    }
    let frames: Vec<_> = std::iter::from_fn(|| dec.next_frame()).collect();
    let text = frames
        .iter()
        .find(|f| matches!(f.message.mav(), Some(MavMessage::STATUSTEXT(_))))
        .expect("the text went out");
    assert_eq!(text.header.system_id, 1);
    assert_eq!(text.header.component_id, DEFAULT_COMPONENT_ID);
    assert_eq!(
        texts(std::slice::from_ref(text.message.mav().unwrap())),
        [(
            MAV_SEVERITY_CRITICAL,
            "motor 2 output dropped to 0".to_owned()
        )]
    );
    // A burst: one a second, in order; past the queue's bound the rest are dropped.
    let burst = STATUS_TEXT_QUEUE + 3;
    let taken = (0..burst)
        .filter(|k| {
            s.send_status_text(
                MAV_SEVERITY_WARNING,
                &format!("text {k} {}", "x".repeat(60)),
                t1,
            )
        })
        .count();
    assert_eq!(taken, STATUS_TEXT_QUEUE);
    assert_eq!(s.stats().status_texts_dropped, 3);
    let mut got = Vec::new();
    let mut now = t1;
    for _ in 0..STATUS_TEXT_QUEUE {
        assert!(texts(&sent(&mut s)).is_empty(), "not before its second");
        let next = s.poll_timeout().unwrap();
        assert!(next <= now + STATUS_TEXT_INTERVAL);
        now += STATUS_TEXT_INTERVAL;
        s.handle_bytes(&heartbeat(), now);
        s.handle_timeout(now);
        let out = texts(&sent(&mut s));
        assert_eq!(out.len(), 1);
        got.extend(out);
    }
    for (k, (severity, text)) in got.iter().enumerate() {
        assert_eq!(*severity, MAV_SEVERITY_WARNING);
        assert_eq!(text.len(), 50, "cut to the message's 50 bytes");
        assert!(text.starts_with(&format!("text {k} ")));
    }
    assert_eq!(s.stats().status_texts, 1 + STATUS_TEXT_QUEUE as u64);
}
