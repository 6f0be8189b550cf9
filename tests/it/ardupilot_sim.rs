//! The session against the simulated ArduPilot (sans-IO, in simulated time), on ArduPilot's
//! own logs (`../shared/testdata/bin/`): the log it receives, framed, is the vehicle's,
//! message for message, through loss, duplication, reordering and lost acks (no gap
//! stays: every lost block is NACKed or resent); across an outage longer than the vehicle's
//! 10 s client timeout, one flight with one dropout mark and nothing but the outage's
//! messages missing; a buffer too small for the link drops at the source, counted by the
//! vehicle, never invented; and a vehicle that signs its frames streams whole, through
//! reordering, to a receiver with its key, and to none without.

use std::time::{Duration, Instant};

use ulog_recv::dataflash::Framer;
use ulog_recv::dataflash::gaps::dropout_ms;
use ulog_recv::dataflash::preamble::is_startup;
use ulog_recv::link::signing::{SigningKey, timestamp_at};
use ulog_recv::link::{Event, Session, SessionConfig, SigningSetup};
use ulog_recv::sim::Impairment;
use ulog_recv::sim::ardupilot::{ArduPilotConfig, SimArduPilot};

/// ArduPilot's own logs' bytes, or None (said loudly; CI fails).
fn logs() -> Option<Vec<Vec<u8>>> {
    let logs = crate::common::ardupilot::ardupilot_logs()?;
    Some(logs.iter().map(|p| std::fs::read(p).unwrap()).collect())
}

/// A log's messages: (type name, bytes), startup records and dropout marks told apart.
#[derive(Debug, Default)]
struct Messages {
    data: Vec<Vec<u8>>,
    marks: Vec<Option<u64>>,
    /// Log time of the first and the last timed message, µs.
    span_us: (Option<u64>, u64),
    /// The last DMS record's count of messages dropped at the source.
    dms_dropped: u64,
    /// Definitions, parameters, texts after the first data: records that are not data.
    not_data: u64,
}

/// Field `label` of message `m` of type `f`, an unsigned integer.
fn values_of(m: &[u8], f: &ulog_recv::dataflash::Format, label: &str) -> u64 {
    let (at, _) = f.field(label).expect("the field");
    u64::from(u32::from_le_bytes(m[at..at + 4].try_into().unwrap()))
}

fn messages(bytes: &[u8]) -> Messages {
    let mut out = Messages::default();
    let mut framer = Framer::new();
    let mut startup = true;
    framer.push(bytes, |m, f| {
        if let Some(ms) = dropout_ms(m, f) {
            out.marks.push(ms);
            startup = true;
            return;
        }
        // The startup records (again after each restart of the stream) are not data; DMS
        // is the stream's own statistics (the vehicle's, not the log's).
        if f.name == "DMS" {
            out.dms_dropped = values_of(m, f, "Dp");
            return;
        }
        if is_startup(&f.name) || (startup && f.name == "MODE") {
            out.not_data += u64::from(!startup);
            return;
        }
        startup = false;
        if let Some(t) = ulog_recv::dataflash::format::time_us(f, m) {
            out.span_us.0.get_or_insert(t);
            out.span_us.1 = t;
        }
        out.data.push(m.to_vec());
    });
    out
}

struct Run {
    vehicle: SimArduPilot,
    session: Session,
    now: Instant,
    t0: Instant,
    received: Vec<u8>,
    logs_opened: usize,
}

impl Run {
    fn new(log: Vec<u8>, config: ArduPilotConfig) -> Self {
        Self::with_session(log, config, SessionConfig::default())
    }

    fn with_session(log: Vec<u8>, config: ArduPilotConfig, session: SessionConfig) -> Self {
        let now = Instant::now();
        Self {
            vehicle: SimArduPilot::new(log, config, now),
            session: Session::new(session, now),
            now,
            t0: now,
            received: Vec::new(),
            logs_opened: 0,
        }
    }

    fn exchange(&mut self) {
        loop {
            let mut moved = false;
            while let Some(f) = self.vehicle.poll_transmit() {
                self.session.handle_datagram(&f, self.now);
                moved = true;
            }
            while let Some(f) = self.session.poll_transmit() {
                self.vehicle.handle_bytes(&f, self.now);
                moved = true;
            }
            while let Some(e) = self.session.poll_event() {
                match e {
                    Event::LogOpened { .. } => self.logs_opened += 1,
                    Event::LogBytes(b) => self.received.extend_from_slice(&b),
                    _ => {}
                }
            }
            if !moved {
                break;
            }
        }
    }

    /// Until the vehicle has written, sent and had acked its whole log; then the session
    /// shuts down.
    fn run_to_end(&mut self, limit: Duration) {
        while !self.vehicle.finished() {
            assert!(
                self.now - self.t0 < limit,
                "not done after {limit:?}: {:?} {:?}",
                self.vehicle.stats(),
                self.session.stats()
            );
            self.step();
        }
        self.exchange();
        self.session.shutdown(self.now);
        self.exchange();
    }

    /// Frames both ways, then on to the next timer.
    fn step(&mut self) {
        self.exchange();
        let next = [self.vehicle.poll_timeout(), self.session.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
            .expect("timers");
        self.now = self.now.max(next);
        self.vehicle.handle_timeout(self.now);
        self.session.handle_timeout(self.now);
    }
}

/// `received` is a run of `original`'s data messages, in order, but the `holes`: the index in
/// `original` of its first message, and the messages skipped.
fn held_against(original: &Messages, received: &Messages) -> (usize, usize) {
    let first = received.data.first().expect("something received");
    let start = original
        .data
        .iter()
        .position(|m| m == first)
        .expect("the first message received is the vehicle's");
    let mut k = start;
    let mut skipped = 0;
    for (i, m) in received.data.iter().enumerate() {
        let at = original.data[k..]
            .iter()
            .position(|o| o == m)
            .unwrap_or_else(|| panic!("received message {i} is not the vehicle's next ones"));
        skipped += at;
        k += at + 1;
    }
    (start, skipped)
}

#[test]
fn through_loss_duplicates_reordering_and_lost_acks_every_message_arrives_in_order() {
    let Some(logs) = logs() else { return };
    for (n, log) in logs.into_iter().enumerate() {
        let original = messages(&log);
        let config = ArduPilotConfig {
            impairment: Impairment {
                loss: 0.03,
                duplicate: 0.01,
                reorder: 0.03,
                reorder_depth: 4,
                uplink_loss: 0.10,
                ..Impairment::NONE
            },
            // A buffer no loss can fill: nothing dropped at the source.
            buffer_blocks: 4096,
            seed: 7 + n as u64,
            ..ArduPilotConfig::default()
        };
        let mut run = Run::new(log, config);
        run.run_to_end(Duration::from_secs(600));
        let stats = run.vehicle.stats();
        assert!(
            stats.frames_dropped > 100 && stats.resends > 100,
            "{stats:?}"
        );
        assert!(stats.nacks > 10, "the session NACKs: {stats:?}");
        assert_eq!(stats.dropped_messages, 0);
        assert_eq!(run.logs_opened, 1);
        let received = messages(&run.received);
        assert!(received.marks.is_empty(), "{:?}", received.marks);
        let (start, skipped) = held_against(&original, &received);
        assert_eq!(skipped, 0, "messages lost though no gap was marked");
        // The stream began with the vehicle's first messages (those it wrote before the
        // START are on its card only) and went to the end.
        assert!(start < 200, "the stream began at message {start}");
        assert_eq!(start + received.data.len(), original.data.len());
    }
}

#[test]
fn an_outage_longer_than_the_vehicles_patience_is_one_flight_with_one_mark() {
    let Some(logs) = logs() else { return };
    let log = logs.into_iter().max_by_key(Vec::len).unwrap();
    let original = messages(&log);
    let config = ArduPilotConfig {
        impairment: Impairment {
            outage_every: Some(Duration::from_secs(40)),
            outage_len: Duration::from_secs(15),
            ..Impairment::NONE
        },
        buffer_blocks: 4096,
        ..ArduPilotConfig::default()
    };
    let mut run = Run::new(log, config);
    run.run_to_end(Duration::from_secs(900));
    let stats = run.vehicle.stats();
    assert!(stats.client_timeouts >= 1, "{stats:?}");
    assert!(stats.starts >= 2, "{stats:?}");
    assert_eq!(run.logs_opened, 1, "one flight");
    let received = messages(&run.received);
    // A mark per outage the stream came back from (the log may end in the last one).
    assert_eq!(
        received.marks.len() as u64,
        stats.starts - 1,
        "a mark per restart: {stats:?}"
    );
    for ms in &received.marks {
        let ms = ms.expect("the mark says its length");
        assert!((15_000..20_000).contains(&ms), "a dropout of {ms} ms");
    }
    let (_, skipped) = held_against(&original, &received);
    // What the outages took, and no more: the log's rate for 15 s or so each.
    let seconds = (original.span_us.1 - original.span_us.0.unwrap()) as f64 / 1e6;
    let per_s = original.data.len() as f64 / seconds;
    assert!(skipped > 0, "nothing missing across an outage");
    assert!(
        (skipped as f64) < per_s * 25.0 * received.marks.len() as f64,
        "{skipped} messages missing"
    );
}

#[test]
fn a_buffer_too_small_for_the_link_drops_at_the_source_and_nothing_else() {
    let Some(logs) = logs() else { return };
    let log = logs.into_iter().min_by_key(Vec::len).unwrap();
    let original = messages(&log);
    let config = ArduPilotConfig {
        // A slow radio: 20 KB/s, less than the log's rate.
        link_rate: Some(20_000),
        buffer_blocks: 37,
        ..ArduPilotConfig::default()
    };
    let mut run = Run::new(log, config);
    run.run_to_end(Duration::from_secs(900));
    let stats = run.vehicle.stats();
    assert!(stats.dropped_messages > 100, "{stats:?}");
    let received = messages(&run.received);
    assert!(
        received.marks.is_empty(),
        "the link lost nothing: {:?}",
        received.marks
    );
    let (start, skipped) = held_against(&original, &received);
    // Every message missing is one the vehicle dropped at the source (it drops data while
    // its startup records go out, before the first data received: at 20 KB/s, seconds).
    // Drops of what is not data (a FMT, a PARM, a text, a DMS of its own once a second)
    // are not missing data.
    let seconds = (original.span_us.1 - original.span_us.0.unwrap()) / 1_000_000 + 1;
    let others = original.not_data + seconds;
    let (skipped, dropped) = (skipped as u64, stats.dropped_messages);
    assert!(
        skipped <= dropped && dropped <= skipped + start as u64 + others,
        "{skipped} missing, {start} before the first received, {stats:?}"
    );
    // The vehicle's DMS records say so, as a real one's do (the last one may precede the
    // last drops by up to a second).
    assert!(
        received.dms_dropped > 0 && received.dms_dropped <= dropped,
        "DMS says {}, {stats:?}",
        received.dms_dropped
    );
}

#[test]
fn a_signing_ardupilot_streams_whole_through_reordering_to_its_key_and_to_nobody_else() {
    let Some(logs) = logs() else { return };
    let log = logs.into_iter().min_by_key(Vec::len).unwrap();
    let original = messages(&log);
    let t = timestamp_at(std::time::SystemTime::now());
    let setup = |passphrase: &[u8], timestamp| SigningSetup {
        key: SigningKey::from_file_text(passphrase).unwrap(),
        link_id: 0,
        timestamp,
    };
    let config = ArduPilotConfig {
        impairment: Impairment {
            duplicate: 0.02,
            reorder: 0.05,
            reorder_depth: 4,
            ..Impairment::NONE
        },
        buffer_blocks: 4096,
        signing: Some(setup(b"ardupilot", t)),
        ..ArduPilotConfig::default()
    };
    // Our clock a few seconds behind the vehicle's: it follows the vehicle's.
    let session = SessionConfig {
        signing: Some(setup(b"ardupilot", t - 300_000)),
        ..SessionConfig::default()
    };
    let mut run = Run::with_session(log.clone(), config.clone(), session);
    run.run_to_end(Duration::from_secs(600));
    let vehicle = run.vehicle.signing_stats().unwrap();
    assert_eq!(run.vehicle.stats().refused_frames, 0, "{vehicle:?}");
    assert!(vehicle.valid > 100, "{vehicle:?}");
    let ours = run.session.stats().signing;
    assert!(ours.valid > 1000, "{ours:?}");
    assert!(ours.replayed > 0, "the link's duplicates: {ours:?}");
    assert_eq!(ours.bad_signature + ours.too_old, 0, "{ours:?}");
    let received = messages(&run.received);
    assert!(received.marks.is_empty(), "{:?}", received.marks);
    let (start, skipped) = held_against(&original, &received);
    assert_eq!(skipped, 0, "late blocks are taken, not refused as replays");
    assert_eq!(start + received.data.len(), original.data.len());

    // Another key, or none: the vehicle takes nothing of ours, and no log begins.
    for signing in [Some(setup(b"not ardupilot", t)), None] {
        let session = SessionConfig {
            signing,
            ..SessionConfig::default()
        };
        let mut run = Run::with_session(log.clone(), config.clone(), session);
        while run.now - run.t0 < Duration::from_secs(30) {
            run.step();
        }
        assert!(run.vehicle.stats().refused_frames > 10);
        assert_eq!(run.vehicle.stats().starts, 0);
        assert_eq!(run.logs_opened, 0);
    }
}
