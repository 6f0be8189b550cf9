//! The ArduPilot log stream's session tests (sans-IO): blocks late, lost, duplicated,
//! forged; holes marked; restarts; the drain at shutdown.

use super::*;
use crate::dataflash::framer::whole_prefix;
use crate::dataflash::gaps::DROPOUT_PREFIX;
use crate::dataflash::{FMT_TYPE, Format};
use crate::link::frames::{FrameDecoder, encode};
use crate::link::log_block::{LOG_COMPONENT, encode_block};
use crate::link::session::SessionConfig;
use mavlink::dialects::ardupilotmega::{HEARTBEAT_DATA, MavAutopilot, MavType};

/// A DataFlash log: FMT (MSG, ATT), then `n` ATT 10 ms apart (15 bytes each).
fn log(n: u64, t0_us: u64) -> Vec<u8> {
    let msg = Format {
        type_id: 91,
        length: 75,
        name: "MSG".into(),
        format: "QZ".into(),
        labels: vec!["TimeUS".into(), "Message".into()],
    };
    let att = Format {
        type_id: 35,
        length: 15,
        name: "ATT".into(),
        format: "Qf".into(),
        labels: vec!["TimeUS".into(), "Roll".into()],
    };
    let mut out: Vec<u8> = [Format::fmt(), msg, att]
        .iter()
        .flat_map(Format::to_bytes)
        .collect();
    for i in 0..n {
        out.extend_from_slice(&[0xA3, 0x95, 35]);
        out.extend_from_slice(&(t0_us + 10_000 * i).to_le_bytes());
        out.extend_from_slice(&(i as f32).to_le_bytes());
    }
    out
}

fn blocks(log: &[u8]) -> Vec<LogBlock> {
    log.chunks(BLOCK_BYTES)
        .enumerate()
        .map(|(k, c)| {
            let mut b = LogBlock {
                target_system: 1,
                target_component: 155,
                seqno: k as u32,
                ..LogBlock::default()
            };
            b.data[..c.len()].copy_from_slice(c);
            b
        })
        .collect()
}

fn from(system_id: u32, component_id: u8) -> MavHeader {
    MavHeader {
        system_id,
        component_id,
        sequence: 0,
    }
}

fn block_frame(b: &LogBlock) -> Vec<u8> {
    let mut f = Vec::new();
    encode_block(from(1, LOG_COMPONENT), b, &mut f);
    f
}

fn heartbeat() -> Vec<u8> {
    let mut hb = Vec::new();
    let heartbeat = MavMessage::HEARTBEAT(HEARTBEAT_DATA {
        autopilot: MavAutopilot::MAV_AUTOPILOT_ARDUPILOTMEGA,
        mavtype: MavType::MAV_TYPE_QUADROTOR,
        ..Default::default()
    });
    encode(from(1, 1), &heartbeat, &mut hb);
    hb
}

/// A session that found an ArduPilot vehicle; what it sent is read out.
fn found(t0: Instant) -> Session {
    let mut s = Session::new(SessionConfig::default(), t0);
    s.handle_datagram(&heartbeat(), t0);
    assert_eq!(s.autopilot(), Some(crate::autopilot::Autopilot::ArduPilot));
    assert_eq!(statuses(&mut s), [(BLOCK_START, true)]);
    s
}

/// The block statuses the session sent: (seqno, ack).
fn statuses(s: &mut Session) -> Vec<(u32, bool)> {
    let mut dec = FrameDecoder::new();
    while let Some(f) = s.poll_transmit() {
        dec.push(&f);
    }
    std::iter::from_fn(|| dec.next_frame())
        .filter_map(|f| match f.message.into_mav()? {
            MavMessage::REMOTE_LOG_BLOCK_STATUS(b) => Some((
                b.seqno,
                b.status == MavRemoteLogDataBlockStatuses::MAV_REMOTE_LOG_DATA_BLOCK_ACK,
            )),
            _ => None,
        })
        .collect()
}

/// The log bytes handed out, and the other events.
fn drain(s: &mut Session) -> (Vec<u8>, Vec<Event>) {
    let mut bytes = Vec::new();
    let mut events = Vec::new();
    while let Some(e) = s.poll_event() {
        match e {
            Event::LogBytes(b) => bytes.extend_from_slice(&b),
            e => events.push(e),
        }
    }
    (bytes, events)
}

fn marks(bytes: &[u8]) -> Vec<String> {
    let mut framer = Framer::new();
    let mut out = Vec::new();
    framer.push(bytes, |m, f| {
        if let Some(ms) = crate::dataflash::gaps::dropout_ms(m, f) {
            out.push(format!("{ms:?}"));
        }
    });
    out
}

#[test]
fn blocks_late_twice_or_lost_once_come_out_as_the_log_each_acked_at_once() {
    let t0 = Instant::now();
    let mut s = found(t0);
    let whole = log(2000, 1_000_000);
    let bs = blocks(&whole);
    // Block 3 lost and resent later (after its NACK), block 5 late, 7 twice.
    let mut order: Vec<usize> = (0..bs.len()).filter(|&k| k != 3 && k != 5).collect();
    order.insert(8, 5);
    order.insert(12, 7);
    order.insert(20, 3);
    let mut now = t0;
    let mut all = Vec::new();
    for &k in &order {
        now += Duration::from_millis(1);
        s.handle_datagram(&block_frame(&bs[k]), now);
        s.handle_timeout(now);
        all.extend(statuses(&mut s));
    }
    let acks: Vec<u32> = all.iter().filter(|a| a.1).map(|a| a.0).collect();
    let nacks: Vec<u32> = all.iter().filter(|a| !a.1).map(|a| a.0).collect();
    assert_eq!(acks, order.iter().map(|&k| k as u32).collect::<Vec<_>>());
    // Block 3 NACKed as soon as block 4 showed it missing, and 5 when 6 did.
    assert_eq!(nacks[..2], [3, 5]);
    s.shutdown(now);
    assert_eq!(statuses(&mut s), [(BLOCK_STOP, true), (BLOCK_STOP, true)]);
    let (bytes, events) = drain(&mut s);
    // The last block is zero-padded: the log is its whole messages.
    assert_eq!(bytes, whole);
    assert!(events.contains(&Event::LogOpened {
        number: 1,
        format: LogFormat::DataFlash
    }));
    assert!(matches!(events.last(), Some(Event::LogClosed { .. })));
    let st = s.stats();
    assert_eq!((st.duplicates, st.lost_chunks, st.dropouts), (1, 0, 0));
    assert!(s.is_closed());
}

#[test]
fn at_shutdown_a_missing_block_is_awaited_a_moment_before_the_stop() {
    let t0 = Instant::now();
    let whole = log(400, 1_000_000);
    let bs = blocks(&whole);
    for comes_back in [true, false] {
        let mut s = found(t0);
        let mut now = t0;
        // Block 10 lost: the ones after it wait behind the hole.
        for b in bs.iter().filter(|b| b.seqno != 10) {
            now += Duration::from_millis(1);
            s.handle_datagram(&block_frame(b), now);
        }
        statuses(&mut s);
        s.shutdown(now);
        assert!(!s.is_closed(), "the hole is awaited");
        assert_eq!(statuses(&mut s), [], "no STOP yet");
        if comes_back {
            // The vehicle's own resend (or our NACK's answer) fills it: STOP at once,
            // the whole log, no mark.
            now += Duration::from_millis(100);
            s.handle_datagram(&block_frame(&bs[10]), now);
            assert_eq!(
                statuses(&mut s),
                [(10, true), (BLOCK_STOP, true), (BLOCK_STOP, true)]
            );
            assert_eq!(drain(&mut s).0, whole);
        } else {
            // Never: NACKed meanwhile, then STOP once the drain's time is up, the hole
            // marked.
            let end = now + DRAIN;
            while let Some(t) = s.poll_timeout().filter(|&t| t < end) {
                s.handle_timeout(t);
                assert!(!s.is_closed());
            }
            s.handle_timeout(end);
            let sent = statuses(&mut s);
            assert!(sent.contains(&(10, false)), "{sent:?}");
            assert_eq!(
                sent[sent.len() - 2..],
                [(BLOCK_STOP, true), (BLOCK_STOP, true)]
            );
            assert_eq!(marks(&drain(&mut s).0).len(), 1);
        }
        assert!(s.is_closed());
    }
}

#[test]
fn a_hole_never_filled_is_marked_with_its_length_and_no_torn_message_passes() {
    let t0 = Instant::now();
    let mut s = found(t0);
    let whole = log(2000, 1_000_000);
    let bs = blocks(&whole);
    let mut now = t0;
    for (k, b) in bs.iter().enumerate() {
        if (40..45).contains(&k) {
            continue;
        }
        now += Duration::from_millis(1);
        s.handle_datagram(&block_frame(b), now);
    }
    // NACKed again while missing, then given up.
    let nacks = statuses(&mut s).iter().filter(|a| !a.1).count();
    assert_eq!(nacks, 5);
    s.handle_timeout(now + NACK_INTERVAL);
    assert_eq!(statuses(&mut s).iter().filter(|a| !a.1).count(), 5);
    s.handle_timeout(now + GIVE_UP);
    let (bytes, events) = drain(&mut s);
    assert!(events.iter().any(|e| matches!(
        e,
        Event::Dropout {
            lost_chunks: 5,
            duration_ms: Some(_)
        }
    )));
    // Whole messages only, the hole's length as the log tells it: 1000 bytes of ATT at
    // 15 bytes per 10 ms, and the messages torn at its two ends.
    assert_eq!(whole_prefix(&bytes), bytes.len());
    let m = marks(&bytes);
    assert_eq!(m.len(), 1);
    let ms: u64 = m[0]
        .trim_start_matches("Some(")
        .trim_end_matches(')')
        .parse()
        .unwrap();
    assert!((660..=700).contains(&ms), "{ms} ms");
    assert!(bytes.len() < whole.len() - 1000 + 75);
    let _ = (DROPOUT_PREFIX, FMT_TYPE);
}

#[test]
fn a_hole_that_moves_on_to_the_next_missing_block_waits_its_own_time() {
    let t0 = Instant::now();
    let mut s = found(t0);
    let bs = blocks(&log(400, 1_000_000));
    // Blocks 10 and 20 missing; 20's hole begins only when 10 comes, late.
    for b in bs.iter().filter(|b| b.seqno != 10 && b.seqno != 20) {
        s.handle_datagram(&block_frame(b), t0);
    }
    let late = t0 + GIVE_UP - Duration::from_millis(100);
    s.handle_datagram(&block_frame(&bs[10]), late);
    // Had the hole kept the first one's start, block 20 would be given up now, while the
    // vehicle still resends it.
    s.handle_timeout(t0 + GIVE_UP);
    s.handle_datagram(
        &block_frame(&bs[20]),
        t0 + GIVE_UP + Duration::from_millis(50),
    );
    let (bytes, events) = drain(&mut s);
    assert!(marks(&bytes).is_empty(), "{:?}", marks(&bytes));
    assert!(
        !events.iter().any(|e| matches!(e, Event::Dropout { .. })),
        "{events:?}"
    );
    // Its own wait runs out all the same when it never comes.
    let mut s = found(t0);
    for b in bs.iter().filter(|b| b.seqno != 10 && b.seqno != 20) {
        s.handle_datagram(&block_frame(b), t0);
    }
    s.handle_datagram(&block_frame(&bs[10]), late);
    s.handle_timeout(late + GIVE_UP);
    let (bytes, _) = drain(&mut s);
    assert_eq!(marks(&bytes).len(), 1);
}

#[test]
fn forged_far_stray_and_foreign_blocks_cost_nothing() {
    let t0 = Instant::now();
    let mut s = found(t0);
    let bs = blocks(&log(100, 0));
    s.handle_datagram(&block_frame(&bs[0]), t0);
    statuses(&mut s);
    // Far ahead: not acked, not kept, no NACK for the millions before it.
    let mut far = bs[1].clone();
    far.seqno = 2_000_000_000;
    s.handle_datagram(&block_frame(&far), t0);
    assert_eq!(statuses(&mut s), []);
    assert_eq!(s.stats().implausible, 1);
    // Another system's block, or one for another receiver: ignored.
    let mut other = Vec::new();
    encode_block(from(2, LOG_COMPONENT), &bs[1], &mut other);
    s.handle_datagram(&other, t0);
    let mut not_ours = bs[1].clone();
    not_ours.target_component = 190;
    s.handle_datagram(&block_frame(&not_ours), t0);
    assert_eq!(statuses(&mut s), []);
    assert_eq!(s.stats().ignored_chunks, 2);
    // A short (trimmed) block is zero-filled, as MAVLink 2 wants.
    for b in &bs[1..] {
        s.handle_datagram(&block_frame(b), t0);
    }
    s.shutdown(t0);
    let (bytes, _) = drain(&mut s);
    assert_eq!(bytes, log(100, 0));
}

#[test]
fn a_stream_found_in_its_middle_is_stopped_and_started_from_its_beginning_once_quiet() {
    let t0 = Instant::now();
    let mut s = found(t0);
    let bs = blocks(&log(1000, 0));
    // At once, though our own START went out a moment ago (a daemon that restarted:
    // the vehicle still streams to the client it had, and ignores STARTs meanwhile).
    let mut now = t0 + Duration::from_millis(10);
    s.handle_datagram(&block_frame(&bs[3]), now);
    assert_eq!(statuses(&mut s), [(BLOCK_STOP, true)]);
    // The STOP was lost: the vehicle resends every 100 ms. Neither acked nor answered with
    // a START while they come (a block carries no stream: one of the stopped stream after
    // our START would pass for the new stream's); the STOP again a START_INTERVAL on.
    let mut sent = Vec::new();
    for b in &bs[4..30] {
        now += Duration::from_millis(100);
        s.handle_timeout(now);
        s.handle_datagram(&block_frame(b), now);
        sent.extend(statuses(&mut s));
    }
    assert!(
        sent.iter().all(|&st| st == (BLOCK_STOP, true)) && (2..=3).contains(&sent.len()),
        "{sent:?}"
    );
    // The STOP got through: quiet. The START goes once the stream has been quiet so long.
    s.handle_timeout(now + STOPPED_QUIET - Duration::from_millis(1));
    assert_eq!(statuses(&mut s), []);
    assert_eq!(s.poll_timeout(), Some(now + STOPPED_QUIET));
    now += STOPPED_QUIET;
    s.handle_timeout(now);
    assert_eq!(statuses(&mut s), [(BLOCK_START, true)]);
    // The new stream, from its beginning, is the log.
    let second = log(100, 5_000_000);
    for b in blocks(&second) {
        now += Duration::from_millis(1);
        s.handle_datagram(&block_frame(&b), now);
    }
    s.shutdown(now);
    let (bytes, events) = drain(&mut s);
    assert_eq!(bytes, second);
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, Event::LogOpened { .. }))
            .count(),
        1
    );
}

/// A session that received a stream of 20 s of ATT from 1 s of log time on, then nothing
/// for 4 s while the vehicle is heard: it asked for a new stream (START). When that was.
fn a_stream_then_silence() -> (Session, Instant) {
    let t0 = Instant::now();
    let mut s = found(t0);
    let mut now = t0;
    for b in blocks(&log(2000, 1_000_000)) {
        now += Duration::from_millis(1);
        s.handle_datagram(&block_frame(&b), now);
    }
    now += Duration::from_secs(4);
    s.handle_datagram(&heartbeat(), now);
    s.handle_timeout(now);
    assert!(statuses(&mut s).contains(&(BLOCK_START, true)));
    (s, now)
}

#[test]
fn a_new_stream_after_an_outage_goes_on_in_the_same_log_and_a_reboot_opens_the_next() {
    let (mut s, mut now) = a_stream_then_silence();
    // The vehicle starts a new stream 15 s of log later.
    let second = log(500, 36_000_000);
    for b in blocks(&second) {
        now += Duration::from_millis(1);
        s.handle_datagram(&block_frame(&b), now);
    }
    let (bytes, events) = drain(&mut s);
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, Event::LogOpened { .. }))
            .count(),
        1
    );
    // 1 s + 20 s of ATT in the first stream ends at 20.99 s; the second begins at 36 s.
    assert_eq!(marks(&bytes), ["Some(15010)"]);
    assert_eq!(whole_prefix(&bytes), bytes.len());
    // A third stream whose time starts over: another boot, another log.
    now += Duration::from_secs(4);
    s.handle_datagram(&heartbeat(), now);
    s.handle_timeout(now);
    statuses(&mut s);
    for b in blocks(&log(100, 500_000)) {
        now += Duration::from_millis(1);
        s.handle_datagram(&block_frame(&b), now);
    }
    s.shutdown(now);
    let (bytes, events) = drain(&mut s);
    let opened: Vec<u32> = events
        .iter()
        .filter_map(|e| match e {
            Event::LogOpened { number, .. } => Some(*number),
            _ => None,
        })
        .collect();
    assert_eq!(opened, [2]);
    assert!(bytes.ends_with(&log(100, 500_000)[3 * 89..]));
    assert!(marks(&bytes).is_empty());
}

#[test]
fn a_new_stream_whose_first_block_comes_late_loses_nothing() {
    let (mut s, mut now) = a_stream_then_silence();
    // The new stream's block 0 is lost: 1..5 come first (acked, the vehicle sends them no
    // more), 0 again 100 ms later (unacked), then the rest.
    let second = log(500, 36_000_000);
    let bs = blocks(&second);
    for b in bs[1..6].iter().chain(&bs[..1]).chain(&bs[6..]) {
        now += Duration::from_millis(20);
        s.handle_datagram(&block_frame(b), now);
        s.handle_timeout(now);
    }
    s.shutdown(now);
    let (bytes, _) = drain(&mut s);
    assert_eq!(marks(&bytes), ["Some(15010)"]);
    assert!(
        bytes.ends_with(&second[3 * 89..]),
        "the second stream whole"
    );
}
