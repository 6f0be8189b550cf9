//! The receiver's session against the simulated PX4 vehicle, frame by frame in memory with a
//! fake clock (no sockets, no sleeping), on every log: START/STOP handshakes, the acked phase,
//! loss, duplication, reordering, lost acks and outages, restarts and reboots.
//!
//! Impaired runs are judged against an ideal receiver computed here, independently of the
//! session code: from the chunks the vehicle reports as having got through the link, the
//! messages all of whose bytes arrived. The output must hold exactly those, byte for byte and
//! in order, plus our dropout ('O') messages.

mod corrupted_chunks;
mod signing;

use crate::common;

use std::time::{Duration, Instant};

use common::{all_logs, ideal_messages, split_messages};
use ulog_recv::link::{CloseReason, Event, Session, SessionConfig};
use ulog_recv::sim::{ChunkedLog, Impairment, SimVehicle, VehicleConfig, chunk_log};

/// One log as the session handed it out.
#[derive(Debug, Default)]
struct ReceivedLog {
    bytes: Vec<u8>,
    closed: Option<CloseReason>,
    dropouts: Vec<Option<u64>>,
}

/// A vehicle and a receiver joined by the vehicle's impaired link, on a fake clock.
struct Harness {
    vehicle: SimVehicle,
    session: Session,
    now: Instant,
    t0: Instant,
    logs: Vec<ReceivedLog>,
    events: Vec<Event>,
    /// Steps in a row that did not advance the clock (a timer that never clears would spin).
    stuck: u32,
}

impl Harness {
    fn new(log: ChunkedLog, vehicle: VehicleConfig, session: SessionConfig) -> Self {
        let now = Instant::now();
        Self {
            vehicle: SimVehicle::new(log, vehicle, now, std::time::SystemTime::now()),
            session: Session::new(session, now),
            now,
            t0: now,
            logs: Vec::new(),
            events: Vec::new(),
            stuck: 0,
        }
    }

    /// The events without log bytes and dropouts (for failure messages).
    fn control_events(&self) -> Vec<&Event> {
        self.events
            .iter()
            .filter(|e| !matches!(e, Event::LogBytes(_) | Event::Dropout { .. }))
            .collect()
    }

    fn elapsed(&self) -> Duration {
        self.now - self.t0
    }

    /// Moves frames both ways until both sides are quiet; collects the session's events.
    fn exchange(&mut self) {
        loop {
            let mut moved = false;
            while let Some(f) = self.vehicle.poll_transmit() {
                self.session.handle_bytes(&f, self.now);
                moved = true;
            }
            while let Some(f) = self.session.poll_transmit() {
                self.vehicle.handle_bytes(&f, self.now);
                moved = true;
            }
            self.collect_events();
            if !moved {
                break;
            }
        }
    }

    fn collect_events(&mut self) {
        while let Some(e) = self.session.poll_event() {
            match &e {
                Event::LogOpened { .. } => self.logs.push(ReceivedLog::default()),
                Event::LogBytes(b) => self.logs.last_mut().unwrap().bytes.extend_from_slice(b),
                Event::Dropout { duration_ms, .. } => {
                    self.logs.last_mut().unwrap().dropouts.push(*duration_ms)
                }
                Event::LogClosed { reason, bytes, .. } => {
                    let log = self.logs.last_mut().unwrap();
                    assert_eq!(*bytes, log.bytes.len() as u64);
                    log.closed = Some(*reason);
                }
                _ => {}
            }
            self.events.push(e);
        }
    }

    /// One step: exchange, then advance the clock to the next timer of either side.
    fn step(&mut self) {
        self.exchange();
        let next = [self.vehicle.poll_timeout(), self.session.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
            .expect("the session always has a heartbeat timer");
        if next > self.now {
            self.now = next;
            self.stuck = 0;
        } else {
            self.stuck += 1;
            assert!(
                self.stuck < 100_000,
                "timers do not advance: vehicle {:?}, session {:?}",
                self.vehicle.poll_timeout().map(|t| t - self.now),
                self.session.poll_timeout().map(|t| t - self.now)
            );
        }
        self.vehicle.handle_timeout(self.now);
        self.session.handle_timeout(self.now);
    }

    fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&Self) -> bool) {
        while !done(self) {
            assert!(
                self.elapsed() < limit,
                "not done after {limit:?}: {:?}",
                self.session.stats()
            );
            self.step();
        }
    }

    /// Runs the whole file through, lets the reorder buffer settle, shuts down and runs the
    /// STOP handshake to its end.
    fn run_to_end(&mut self, limit: Duration) {
        self.run_until(limit, |h| h.vehicle.finished());
        let settle = self.now + Duration::from_millis(500);
        self.run_until(limit, |h| h.now >= settle);
        self.shut_down(limit);
    }

    /// Shuts the session down and runs until it has closed.
    fn shut_down(&mut self, limit: Duration) {
        self.session.shutdown(self.now);
        self.exchange();
        self.run_until(limit, |h| h.session.is_closed());
        self.exchange();
    }
}

fn fast_vehicle(impairment: Impairment, seed: u64) -> VehicleConfig {
    VehicleConfig {
        // 2 MB/s of fake time: a few seconds per log, many timer steps.
        link_rate: Some(2_800_000),
        impairment,
        seed,
        ..VehicleConfig::default()
    }
}

fn messages_without_dropouts(bytes: &[u8]) -> (Vec<Vec<u8>>, usize) {
    let all = split_messages(bytes);
    let dropouts = all.iter().skip(1).filter(|m| m[2] == b'O').count();
    let rest = all
        .into_iter()
        .enumerate()
        .filter(|(i, m)| *i == 0 || m[2] != b'O')
        .map(|(_, m)| m)
        .collect();
    (rest, dropouts)
}

#[test]
fn a_clean_link_delivers_every_log_byte_for_byte() {
    for path in all_logs() {
        let file = std::fs::read(&path).unwrap();
        let log = chunk_log(&file, 0).unwrap();
        let (stream, postflight) = (log.stream.clone(), log.postflight.clone());
        let mut h = Harness::new(
            log,
            fast_vehicle(Impairment::NONE, 1),
            SessionConfig::default(),
        );
        h.run_to_end(Duration::from_secs(120));
        assert_eq!(h.logs.len(), 1, "{}", path.display());
        // The whole stream, then the post-flight data of the STOP handshake.
        assert!(
            h.logs[0].bytes == [stream, postflight].concat(),
            "{}: bytes differ",
            path.display()
        );
        assert_eq!(h.logs[0].closed, Some(CloseReason::Shutdown));
        let s = h.session.stats();
        assert_eq!(s.lost_chunks + s.duplicates + s.dropouts, 0, "{s:?}");
        assert_eq!(s.acks_sent, s.acked_chunks);
        assert_eq!(s.start_requests, 1, "one START on a clean link");
        // The vehicle addressed the stream to our default ids.
        assert_eq!(h.session.system_id(), 1);
        assert_eq!(h.session.config().component_id, 155);
        // Shutdown sent a STOP, every post-flight chunk was acked, the vehicle confirmed.
        let v = h.vehicle.stats();
        assert_eq!((v.stops, v.stops_completed), (1, 1), "{}", path.display());
        assert!(v.postflight_chunks > 1, "{v:?}");
        assert_eq!(v.postflight_acked, v.postflight_chunks);
        assert_eq!(
            s.stops_confirmed, 2,
            "the STOP before the START and the last one"
        );
        assert!(!h.vehicle.streaming());
    }
}

/// Acked chunks after the first unacked one: what the vehicle sent reliably in flight (an
/// 'A', a run of 'M', the post-flight data).
fn acked_in_flight(log: &ChunkedLog) -> usize {
    let first_unacked = log.chunks.iter().position(|c| !c.acked).unwrap_or(0);
    log.chunks[first_unacked..]
        .iter()
        .filter(|c| c.acked)
        .count()
}

/// Runs every log through the impaired link; the output must be what an ideal receiver
/// rebuilds.
fn check_impaired(imp: Impairment, seed: u64) {
    let mut resends = 0;
    for path in all_logs() {
        let file = std::fs::read(&path).unwrap();
        let log = chunk_log(&file, 0).unwrap();
        let mut h = Harness::new(log, fast_vehicle(imp, seed), SessionConfig::default());
        h.run_to_end(Duration::from_secs(600));
        // What the vehicle streamed, post-flight data included.
        let log = h.vehicle.log();
        let (stream, starts, chunks) = (&log.stream, &log.message_starts, &log.chunks);
        let ctx = format!("{}: {imp:?} seed {seed}", path.display());
        let v = h.vehicle.stats();
        assert_eq!(v.ack_timeouts, 0, "{ctx}: the acked phase stalled: {v:?}");
        assert_eq!(
            h.logs.len(),
            1,
            "{ctx}: {:?} {:?} {v:?}",
            h.control_events(),
            h.session.stats()
        );
        let ideal = ideal_messages(stream, starts, chunks, h.vehicle.arrived());
        let (ideal, ideal_dropouts) = messages_without_dropouts(&ideal.concat());
        let (got, got_dropouts) = messages_without_dropouts(&h.logs[0].bytes);
        let s = h.session.stats();
        assert_eq!(
            got.len(),
            ideal.len(),
            "{ctx}: messages rebuilt vs ideal; {s:?}"
        );
        assert!(
            got == ideal,
            "{ctx}: rebuilt messages differ from the ideal"
        );
        // One 'O' per dropout event.
        let ours = got_dropouts - ideal_dropouts;
        assert_eq!(ours as u64, s.dropouts, "{ctx}");
        assert_eq!(h.logs[0].dropouts.len(), ours, "{ctx}");
        if imp.loss > 0.0 {
            assert!(s.lost_chunks > 0 && s.dropouts > 0, "{ctx}: {s:?}");
        }
        if imp.duplicate > 0.0 {
            assert!(s.duplicates > 0, "{ctx}: {s:?}");
        }
        if imp.reorder > 0.0 {
            assert!(s.reordered > 0 && s.recovered > 0, "{ctx}: {s:?}");
        }
        // Every acked chunk that arrived was acked, duplicates included.
        assert_eq!(s.acks_sent, s.acked_chunks, "{ctx}");
        // The STOP handshake ran to its end: every post-flight chunk acked, then ACCEPTED.
        assert_eq!(v.postflight_acked, v.postflight_chunks, "{ctx}: {v:?}");
        assert!(v.postflight_chunks > 0, "{ctx}: {v:?} {s:?}");
        resends += v.resends;
    }
    if imp.uplink_loss > 0.0 {
        assert!(resends > 0, "{imp:?}: lost acks must have caused resends");
    }
}

#[test]
fn reliable_chunks_in_flight_under_loss_and_lost_acks_lose_only_what_never_arrived() {
    // As PX4 sends them: an 'A' when a topic instance appears, its perf output, the
    // post-flight data; each flushed short, the stream paused until its ack.
    let imp = Impairment {
        loss: 0.03,
        duplicate: 0.02,
        reorder: 0.03,
        reorder_depth: 8,
        uplink_loss: 0.20,
        ..Impairment::NONE
    };
    for seed in [5, 6] {
        check_impaired(imp, seed);
    }
    // The logs do hold reliable chunks in flight (before any STOP): the synthetic one an 'A'
    // and a run of 'M', four of the five real ones some 'A' or 'M'.
    let in_flight: Vec<usize> = all_logs()
        .iter()
        .map(|p| acked_in_flight(&chunk_log(&std::fs::read(p).unwrap(), 0).unwrap()))
        .collect();
    assert!(in_flight[0] >= 2, "{in_flight:?}");
    if in_flight.len() > 1 {
        assert!(
            in_flight[1..].iter().filter(|&&n| n > 0).count() >= 4,
            "{in_flight:?}"
        );
    }
}

#[test]
fn loss_duplication_reordering_lost_acks_and_outages_lose_only_what_never_arrived() {
    let cases = [
        (0.01, 0.01, 0.02, 4, 0.01, None),
        (0.05, 0.05, 0.10, 8, 0.10, Some(1500)),
        (0.20, 0.10, 0.20, 16, 0.20, Some(700)),
    ];
    for (i, &(loss, duplicate, reorder, reorder_depth, uplink_loss, outage_every)) in
        cases.iter().enumerate()
    {
        let imp = Impairment {
            loss,
            duplicate,
            reorder,
            reorder_depth,
            uplink_loss,
            outage_every: outage_every.map(Duration::from_millis),
            outage_len: Duration::from_millis(150),
            ..Impairment::NONE
        };
        for seed in 0..2 {
            check_impaired(imp, 100 * i as u64 + seed);
        }
    }
}

/// A synthetic log long enough to wrap the 16-bit sequence number twice.
fn long_log() -> ChunkedLog {
    let file = ulog_recv::sim::synth::generate(ulog_recv::sim::synth::SynthOptions {
        duration_s: 4_600,
        seed: 7,
        appended_data: false,
    });
    chunk_log(&file, 0).unwrap()
}

#[test]
fn the_sequence_number_wraps_twice_without_a_loss() {
    let log = long_log();
    assert!(
        log.chunks.len() > 2 * 65_536 + 1000,
        "only {} chunks",
        log.chunks.len()
    );
    let stream = log.stream.clone();
    let mut h = Harness::new(
        log,
        VehicleConfig {
            link_rate: Some(28_000_000),
            ..fast_vehicle(Impairment::NONE, 1)
        },
        SessionConfig::default(),
    );
    h.run_to_end(Duration::from_secs(120));
    let s = h.session.stats();
    assert_eq!((s.lost_chunks, s.gaps, s.dropouts), (0, 0, 0), "{s:?}");
    assert_eq!(h.logs.len(), 1);
    assert!(
        h.logs[0].bytes.starts_with(&stream) && h.logs[0].bytes == h.vehicle.log().stream,
        "bytes differ after wrapping"
    );
}

/// The synthetic log streamed at 40 KB/s (2 s for the whole log), run until 20 KB of it were
/// received: something can now happen mid-stream. Returns the stream and the harness.
fn synthetic_mid_stream() -> (Vec<u8>, Harness) {
    let file = std::fs::read(&common::synthetic_logs()[0]).unwrap();
    let log = chunk_log(&file, 0).unwrap();
    let stream = log.stream.clone();
    let mut h = Harness::new(
        log,
        VehicleConfig {
            link_rate: Some(57_000),
            ..VehicleConfig::default()
        },
        SessionConfig::default(),
    );
    h.run_until(Duration::from_secs(30), |h| {
        h.logs.first().is_some_and(|l| l.bytes.len() > 20_000)
    });
    (stream, h)
}

#[test]
fn a_vehicle_reboot_closes_the_log_and_a_new_one_begins_after_it() {
    let (stream, mut h) = synthetic_mid_stream();
    let now = h.now;
    h.vehicle.reboot(now, Duration::from_secs(8));
    h.run_until(Duration::from_secs(60), |h| h.logs.len() == 2);
    h.run_to_end(Duration::from_secs(90));
    let ev = h.control_events();
    let lost = ev
        .iter()
        .position(|e| matches!(e, Event::VehicleLost))
        .expect("the reboot is noticed");
    assert!(matches!(
        ev[lost - 1],
        Event::LogClosed {
            number: 1,
            reason: CloseReason::VehicleLost,
            ..
        }
    ));
    // The first log is a clean prefix of the stream, cut at a message boundary.
    let first = &h.logs[0].bytes;
    assert!(first.len() < stream.len() && stream.starts_with(first));
    split_messages(first);
    // After the reboot the vehicle is asked again, and its new log arrives whole.
    assert!(h.logs[1].bytes == h.vehicle.log().stream);
    assert_eq!(h.vehicle.stats().starts, 2);
}

#[test]
fn a_stalled_stream_is_stopped_and_started_again_without_an_empty_log() {
    let file = std::fs::read(&common::synthetic_logs()[0]).unwrap();
    let log = chunk_log(&file, 0).unwrap();
    let stream = log.stream.clone();
    let mut h = Harness::new(
        log,
        fast_vehicle(Impairment::NONE, 1),
        SessionConfig::default(),
    );
    // The file ends; the simulated vehicle goes silent but keeps "streaming", as a PX4 whose
    // stream died would look.
    h.run_until(Duration::from_secs(30), |h| h.vehicle.finished());
    let silent_since = h.now;
    h.run_until(Duration::from_secs(60), |h| h.logs.len() == 2);
    let stalled = h.events.iter().any(|e| {
        matches!(
            e,
            Event::LogClosed {
                reason: CloseReason::Stalled,
                ..
            }
        )
    });
    assert!(stalled, "{:?}", h.control_events());
    assert!(h.now - silent_since >= SessionConfig::default().stream_timeout);
    h.run_to_end(Duration::from_secs(90));
    assert_eq!(h.logs.len(), 2);
    assert!(h.logs[0].bytes == stream, "the first log is whole");
    // The STOP of the restart was answered with post-flight data, acked but of no log.
    assert_eq!(h.vehicle.stats().stops_completed, 2);
    assert_eq!(h.vehicle.stats().ack_timeouts, 0);
    assert!(
        h.logs[1].bytes == h.vehicle.log().stream,
        "the second log is whole"
    );
    assert_ne!(h.logs[0].bytes[..16], h.logs[1].bytes[..16], "a new header");
    // STOP before the new START: the vehicle saw one stop per restart plus the shutdown.
    assert_eq!(h.vehicle.stats().stops, 2);
}

#[test]
fn a_refused_start_names_the_cause_and_is_retried_slowly() {
    let file = std::fs::read(&common::synthetic_logs()[0]).unwrap();
    let log = chunk_log(&file, 0).unwrap();
    let mut h = Harness::new(
        log,
        VehicleConfig {
            refuse_start: Some(mavlink::dialects::ardupilotmega::MavResult::MAV_RESULT_DENIED),
            ..VehicleConfig::default()
        },
        SessionConfig::default(),
    );
    let two_minutes = Duration::from_secs(120);
    h.run_until(two_minutes + Duration::from_secs(1), |h| {
        h.elapsed() >= two_minutes
    });
    let refusals: Vec<_> = h
        .events
        .iter()
        .filter_map(|e| match e {
            Event::StartRefused { hint, retry_in, .. } => Some((*hint, *retry_in)),
            _ => None,
        })
        .collect();
    assert!(!refusals.is_empty());
    assert!(refusals[0].0.contains("5000 B/s"), "{}", refusals[0].0);
    assert_eq!(refusals[0].1, Duration::from_secs(30));
    // One START, then one every 30 s: never a tight loop.
    let starts = h.session.stats().start_requests;
    assert!(
        (4..=5).contains(&starts),
        "{starts} START requests in two minutes"
    );
    assert!(h.logs.is_empty());
}

/// Sends `command` to the vehicle as if from our ids (someone else's STOP or START).
fn command_to_vehicle(h: &mut Harness, command: mavlink::dialects::ardupilotmega::MavCmd) {
    use mavlink::dialects::ardupilotmega::{COMMAND_LONG_DATA, MavMessage};
    let mut frame = Vec::new();
    let header = mavlink::MavHeader {
        system_id: 1,
        component_id: 155,
        sequence: 0,
    };
    let msg = MavMessage::COMMAND_LONG(COMMAND_LONG_DATA {
        command,
        target_system: 1,
        target_component: 1,
        ..Default::default()
    });
    ulog_recv::link::frames::encode(header, &msg, &mut frame);
    let now = h.now;
    h.vehicle.handle_bytes(&frame, now);
}

#[test]
fn a_stream_restarted_at_sequence_0_closes_the_log_and_opens_a_new_one() {
    use mavlink::dialects::ardupilotmega::MavCmd;
    let (_, mut h) = synthetic_mid_stream();
    // The vehicle restarts its stream to us (as if our STOP and START had crossed an old
    // stream): it stops (its post-flight data ends the log), then chunks begin again at 0
    // with a new header.
    command_to_vehicle(&mut h, MavCmd::MAV_CMD_LOGGING_STOP);
    h.run_until(Duration::from_secs(60), |h| !h.vehicle.streaming());
    let stopped = h.vehicle.log().stream.clone();
    command_to_vehicle(&mut h, MavCmd::MAV_CMD_LOGGING_START);
    h.run_to_end(Duration::from_secs(60));
    assert_eq!(h.logs.len(), 2, "{:?}", h.control_events());
    assert_eq!(h.logs[0].closed, Some(CloseReason::NewLog));
    assert!(
        h.logs[0].bytes == stopped,
        "the first log, post-flight data included"
    );
    assert!(h.logs[1].bytes == h.vehicle.log().stream);
    assert_eq!(h.session.stats().implausible, 0);
}

/// A CRC-valid LOGGING_DATA from the vehicle to us, as anyone on the link could send it.
fn forged_chunk(seq: u16, first_message_offset: u8, bytes: &[u8]) -> Vec<u8> {
    use mavlink::dialects::ardupilotmega::{LOGGING_DATA_DATA, MavMessage};
    let mut data = [0u8; 249];
    data[..bytes.len()].copy_from_slice(bytes);
    let msg = MavMessage::LOGGING_DATA(LOGGING_DATA_DATA {
        sequence: seq,
        target_system: 1,
        target_component: 155,
        length: bytes.len() as u8,
        first_message_offset,
        data,
    });
    let header = mavlink::MavHeader {
        system_id: 1,
        component_id: 1,
        sequence: 0,
    };
    let mut frame = Vec::new();
    ulog_recv::link::frames::encode(header, &msg, &mut frame);
    frame
}

#[test]
fn a_forged_or_stale_chunk_costs_at_most_itself() {
    let (_, mut h) = synthetic_mid_stream();
    let sent = h.vehicle.stats().chunks_sent as u16;
    let now = h.now;
    // Far ahead (a forgery, or a frame of an older, longer stream), with junk that would
    // otherwise pass for messages; behind the stream; and another log's first chunk.
    let junk: Vec<u8> = (0..249u32).map(|i| (i * 7 % 251) as u8).collect();
    let mut header = ulog_recv::ulog::message::FILE_MAGIC.to_vec();
    header.extend_from_slice(&[1, 0xaa, 0xbb, 0, 0, 0, 0, 0, 0]);
    for frame in [
        forged_chunk(sent.wrapping_add(20_000), 0, &junk),
        forged_chunk(sent.wrapping_sub(3_000), 0, &junk),
        forged_chunk(0, 0, &header),
    ] {
        h.session.handle_bytes(&frame, now);
    }
    h.run_to_end(Duration::from_secs(60));
    assert_eq!(h.logs.len(), 1, "{:?}", h.control_events());
    let s = h.session.stats();
    assert!(
        h.logs[0].bytes == h.vehicle.log().stream,
        "the log is whole, byte for byte: {s:?}"
    );
    assert_eq!((s.lost_chunks, s.dropouts), (0, 0), "{s:?}");
    assert_eq!(s.implausible, 2, "the far one and the stray chunk 0: {s:?}");
    assert_eq!(s.too_late, 1, "{s:?}");
}

#[test]
fn a_long_outage_jumps_the_stream_once_the_next_chunk_confirms_it() {
    // Outages of 60 ms at ~7000 chunks/s: gaps of ~400 chunks, beyond the 256 the reorder
    // buffer covers.
    let imp = Impairment {
        outage_every: Some(Duration::from_millis(200)),
        outage_len: Duration::from_millis(60),
        ..Impairment::NONE
    };
    let file = ulog_recv::sim::synth::generate(ulog_recv::sim::synth::SynthOptions {
        duration_s: 120,
        seed: 4,
        appended_data: false,
    });
    let log = chunk_log(&file, 0).unwrap();
    let mut h = Harness::new(log, fast_vehicle(imp, 1), SessionConfig::default());
    h.run_to_end(Duration::from_secs(600));
    let log = h.vehicle.log();
    let ideal = ideal_messages(
        &log.stream,
        &log.message_starts,
        &log.chunks,
        h.vehicle.arrived(),
    );
    let (ideal, _) = messages_without_dropouts(&ideal.concat());
    let (got, _) = messages_without_dropouts(&h.logs[0].bytes);
    let s = h.session.stats();
    assert!(s.suspects > 0 && s.implausible == 0, "{s:?}");
    assert!(got == ideal, "the ideal receiver's messages: {s:?}");
}

#[test]
fn a_daemon_restart_while_the_vehicle_streams_ends_the_old_stream_and_starts_a_new_log() {
    let (_, mut h) = synthetic_mid_stream();
    // The receiver dies without a word (kill -9); a new one starts while the vehicle streams.
    h.session = Session::new(SessionConfig::default(), h.now);
    h.logs.clear();
    h.events.clear();
    h.run_to_end(Duration::from_secs(60));
    assert_eq!(h.logs.len(), 1, "{:?}", h.control_events());
    assert!(
        h.logs[0].bytes == h.vehicle.log().stream,
        "a new log, from its header, whole"
    );
    let v = h.vehicle.stats();
    // The old stream ended with its post-flight data acked: the vehicle never waited in vain.
    assert_eq!(
        (v.starts, v.stops_completed, v.ack_timeouts),
        (2, 2, 0),
        "{v:?}"
    );
    assert_eq!(v.postflight_acked, v.postflight_chunks);
    assert_eq!(
        h.session.stats().start_requests,
        1,
        "no TEMPORARILY_REJECTED: {v:?}"
    );
}

#[test]
fn a_link_below_5000_bytes_per_second_is_refused_and_says_why() {
    let file = std::fs::read(&common::synthetic_logs()[0]).unwrap();
    let mut h = Harness::new(
        chunk_log(&file, 0).unwrap(),
        VehicleConfig {
            link_rate: Some(4800),
            ..VehicleConfig::default()
        },
        SessionConfig::default(),
    );
    h.run_until(Duration::from_secs(10), |h| {
        h.elapsed() >= Duration::from_secs(5)
    });
    let refused = h.events.iter().find_map(|e| match e {
        Event::StartRefused { hint, .. } => Some(*hint),
        _ => None,
    });
    assert!(
        refused.is_some_and(|h| h.contains("5000 B/s")),
        "{refused:?}"
    );
    // 57600 baud (5760 B/s) streams: 2 chunks per 100 ms, as PX4's rate limiter allows.
    let mut h = Harness::new(
        chunk_log(&file, 0).unwrap(),
        VehicleConfig {
            link_rate: Some(5760),
            ..VehicleConfig::default()
        },
        SessionConfig::default(),
    );
    h.run_until(Duration::from_secs(60), |h| {
        h.logs.first().is_some_and(|l| l.bytes.len() > 30_000)
    });
    let started = h.elapsed();
    let bytes_then = h.logs[0].bytes.len();
    let ten_s = h.now + Duration::from_secs(10);
    h.run_until(Duration::from_secs(90), |h| h.now >= ten_s);
    let rate = (h.logs[0].bytes.len() - bytes_then) as f64 / 10.0;
    assert!(
        (4500.0..=5000.0).contains(&rate),
        "{rate} B/s after {started:?}"
    );
}
