//! The ArduPilot session against any script of wire input (proptest, sans-IO): the blocks of
//! a real log (the start of ArduPilot's own hover log; a log made here without
//! `../shared`) in any order, lost, repeated, and beside them forged blocks (from another
//! system, for another client, a seqno far ahead, random bytes as log data), junk bytes,
//! heartbeats, time passing and a shutdown. It never panics; every log it hands out is
//! whole DataFlash messages (a reader never chokes on it); a forged block far ahead costs
//! no flood of NACKs; and the blocks it acks are only those addressed to it by the vehicle.

use std::time::{Duration, Instant};

use mavlink::MavHeader;
use mavlink::dialects::ardupilotmega::{
    HEARTBEAT_DATA, MavAutopilot, MavMessage, MavRemoteLogDataBlockStatuses, MavType,
};
use proptest::prelude::*;
use ulog_recv::dataflash::Format;
use ulog_recv::dataflash::framer::whole_prefix;
use ulog_recv::link::frames::{FrameDecoder, encode};
use ulog_recv::link::log_block::{BLOCK_BYTES, LOG_COMPONENT, LogBlock, encode_block};
use ulog_recv::link::{Event, Session, SessionConfig};

/// One step of a script.
#[derive(Debug, Clone)]
enum Op {
    /// The vehicle's next block, in order.
    Next,
    /// The next block is lost.
    Lose,
    /// A block sent this many blocks before the next one again (late, or a duplicate).
    Late(usize),
    /// The vehicle starts its stream again from block 0 (it dropped its client).
    Restart,
    /// A block of the vehicle's with this seqno and random data.
    Random(u32, Vec<u8>),
    /// Block `k` from system 7 (not the vehicle).
    OtherSystem(usize),
    /// Block `k` addressed to another client.
    OtherClient(usize),
    /// Bytes that are no frame, or a torn one.
    Junk(Vec<u8>),
    Heartbeat,
    /// Time passes (ms).
    Wait(u64),
    Shutdown,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        30 => Just(Op::Next),
        1 => Just(Op::Lose),
        3 => (1..40usize).prop_map(Op::Late),
        1 => Just(Op::Restart),
        1 => (any::<u32>(), prop::collection::vec(any::<u8>(), 0..200))
            .prop_map(|(s, d)| Op::Random(s, d)),
        1 => (0..400usize).prop_map(Op::OtherSystem),
        1 => (0..400usize).prop_map(Op::OtherClient),
        1 => prop::collection::vec(any::<u8>(), 0..300).prop_map(Op::Junk),
        1 => Just(Op::Heartbeat),
        2 => (0..3_000u64).prop_map(Op::Wait),
        1 => Just(Op::Wait(10_500)),
        1 => Just(Op::Shutdown),
    ]
}

/// The log the blocks carry: the start of ArduPilot's own hover log, or one made here.
fn log() -> &'static [u8] {
    static LOG: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    LOG.get_or_init(read_log)
}

fn read_log() -> Vec<u8> {
    let real = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/testdata/bin/sitl_copter_hover.bin");
    if let Ok(mut bytes) = std::fs::read(real) {
        bytes.truncate(400 * BLOCK_BYTES);
        return bytes;
    }
    eprintln!("\n!!! no ArduPilot log in ../shared: the blocks carry a log made here !!!\n");
    let att = Format {
        type_id: 35,
        length: 15,
        name: "ATT".into(),
        format: "Qf".into(),
        labels: vec!["TimeUS".into(), "Roll".into()],
    };
    let mut out: Vec<u8> = [Format::fmt(), att]
        .iter()
        .flat_map(Format::to_bytes)
        .collect();
    for i in 0..5000u64 {
        out.extend_from_slice(&[0xA3, 0x95, 35]);
        out.extend_from_slice(&(10_000 * i).to_le_bytes());
        out.extend_from_slice(&(i as f32).to_le_bytes());
    }
    out
}

fn block(log: &[u8], k: usize, target: (u8, u8)) -> LogBlock {
    let blocks = log.len().div_ceil(BLOCK_BYTES);
    let k = k % blocks;
    let piece = &log[k * BLOCK_BYTES..((k + 1) * BLOCK_BYTES).min(log.len())];
    let mut b = LogBlock {
        target_system: target.0,
        target_component: target.1,
        seqno: k as u32,
        ..LogBlock::default()
    };
    b.data[..piece.len()].copy_from_slice(piece);
    b
}

fn frame(system: u8, b: &LogBlock) -> Vec<u8> {
    let mut f = Vec::new();
    let header = MavHeader {
        system_id: system.into(),
        component_id: LOG_COMPONENT,
        sequence: 0,
    };
    encode_block(header, b, &mut f);
    f
}

fn heartbeat() -> Vec<u8> {
    let mut f = Vec::new();
    let hb = MavMessage::HEARTBEAT(HEARTBEAT_DATA {
        autopilot: MavAutopilot::MAV_AUTOPILOT_ARDUPILOTMEGA,
        mavtype: MavType::MAV_TYPE_QUADROTOR,
        ..Default::default()
    });
    let header = MavHeader {
        system_id: 1,
        component_id: 1,
        sequence: 0,
    };
    encode(header, &hb, &mut f);
    f
}

/// The acks (seqnos) among the frames the session sent, and how many frames.
fn acks(sent: &[Vec<u8>]) -> (Vec<u32>, usize) {
    let mut frames = FrameDecoder::new();
    for f in sent {
        frames.push(f);
    }
    let acks = std::iter::from_fn(|| frames.next_frame())
        .filter_map(|f| match f.message.into_mav()? {
            MavMessage::REMOTE_LOG_BLOCK_STATUS(s)
                if s.status == MavRemoteLogDataBlockStatuses::MAV_REMOTE_LOG_DATA_BLOCK_ACK =>
            {
                Some(s.seqno)
            }
            _ => None,
        })
        .collect();
    (acks, sent.len())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn any_script_of_blocks_forged_ones_and_junk_never_panics_and_leaves_whole_logs(
        script in prop::collection::vec(op(), 1..200),
    ) {
        let log = log();
        let t0 = Instant::now();
        let mut now = t0;
        let mut s = Session::new(SessionConfig::default(), now);
        s.handle_datagram(&heartbeat(), now);
        let us = (s.system_id(), s.config().component_id);
        let mut sent = Vec::new();
        let mut logs: Vec<Vec<u8>> = Vec::new();
        // Seqnos of the blocks of the vehicle addressed to us.
        let mut ours = std::collections::HashSet::new();
        // The vehicle's next block.
        let mut cursor = 0usize;
        for op in &script {
            match op {
                Op::Next | Op::Late(_) => {
                    let k = match op {
                        Op::Late(back) => cursor.saturating_sub(*back),
                        _ => {
                            cursor += 1;
                            cursor - 1
                        }
                    };
                    let b = block(log, k, us);
                    ours.insert(b.seqno);
                    s.handle_datagram(&frame(1, &b), now);
                }
                Op::Lose => cursor += 1,
                Op::Restart => cursor = 0,
                Op::Random(seqno, data) => {
                    let mut b = block(log, 0, us);
                    b.seqno = *seqno;
                    b.data = [0; BLOCK_BYTES];
                    b.data[..data.len()].copy_from_slice(data);
                    ours.insert(*seqno);
                    s.handle_datagram(&frame(1, &b), now);
                }
                Op::OtherSystem(k) => {
                    s.handle_datagram(&frame(7, &block(log, *k, us)), now);
                }
                Op::OtherClient(k) => {
                    s.handle_datagram(&frame(1, &block(log, *k, (us.0.wrapping_add(1), us.1))), now);
                }
                Op::Junk(bytes) => {
                    s.handle_datagram(bytes, now);
                }
                Op::Heartbeat => {
                    s.handle_datagram(&heartbeat(), now);
                }
                Op::Wait(ms) => {
                    let until = now + Duration::from_millis(*ms);
                    let mut turns = 0;
                    while let Some(t) = s.poll_timeout().filter(|&t| t <= until) {
                        turns += 1;
                        prop_assert!(turns < 100_000, "a timer that stays due: {:?} at {:?}", t - t0, now - t0);
                        now = now.max(t);
                        s.handle_timeout(now);
                        sent.extend(std::iter::from_fn(|| s.poll_transmit()));
                    }
                    now = until;
                    s.handle_timeout(now);
                }
                Op::Shutdown => s.shutdown(now),
            }
            sent.extend(std::iter::from_fn(|| s.poll_transmit()));
            while let Some(e) = s.poll_event() {
                match e {
                    Event::LogOpened { .. } => logs.push(Vec::new()),
                    Event::LogBytes(b) => logs.last_mut().expect("bytes of an open log").extend_from_slice(&b),
                    _ => {}
                }
            }
        }
        s.shutdown(now);
        for _ in 0..10 {
            now += Duration::from_millis(100);
            s.handle_timeout(now);
        }
        sent.extend(std::iter::from_fn(|| s.poll_transmit()));
        while let Some(e) = s.poll_event() {
            if let Event::LogBytes(b) = e {
                logs.last_mut().expect("bytes of an open log").extend_from_slice(&b);
            }
        }
        for (n, l) in logs.iter().enumerate() {
            prop_assert_eq!(whole_prefix(l), l.len(), "log {} is not whole messages", n);
        }
        let (acked, frames) = acks(&sent);
        for seqno in &acked {
            prop_assert!(
                ours.contains(seqno) || *seqno >= 2_147_483_645,
                "acked {} that the vehicle never sent us", seqno
            );
        }
        // A few frames per step and per 100 ms of time at most: a forged seqno far ahead
        // sets off no flood of NACKs.
        let seconds = now.duration_since(t0).as_secs() as usize + 1;
        prop_assert!(frames <= 40 * script.len() + 400 * seconds, "{} frames", frames);
    }
}
