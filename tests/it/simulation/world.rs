//! One simulated run: a vehicle (PX4's logger or ArduPilot's) and the receiver's link
//! session, joined by the vehicle's impaired link, in simulated time, with a [`Schedule`]'s
//! faults applied as the clock reaches them; beside the session, when the schedule says so,
//! the live socket's publisher and the Foxglove server's ([`super::foxglove`]), each with a
//! client, the store writing files ([`super::disk`]) behind its thread's queue
//! ([`super::store_thread`]), and the uploader sending them to a failing bucket
//! ([`super::bucket`]); after the flight, the fill from the vehicle's SD log
//! ([`super::fill`]). With signing, both sides sign with one key, the daemon keeps its
//! signing clock's reservation as the daemon's loop does, and junk includes replays of the
//! vehicle's frames and frames forged with another key. Every event the receiver hands out
//! goes into an event log, whose digest says whether two runs were the same.

use std::time::{Duration, Instant, SystemTime};

use mavlink::MavHeader;
use mavlink::dialects::ardupilotmega::{LOGGING_DATA_ACKED_DATA, MavMessage, MavResult};
use ulog_recv::link::ftp::{FtpError, FtpReply};
use ulog_recv::link::log_block::{BLOCK_BYTES, LOG_COMPONENT, LogBlock};
use ulog_recv::link::signing::{Signer, SigningKey, SigningStats, timestamp_at};
use ulog_recv::link::{CloseReason, Event, Session, SessionConfig, SigningSetup};
use ulog_recv::live::ndjson::protocol::Line;
use ulog_recv::live::ndjson::{ClientId, Publisher};
use ulog_recv::sim::ardupilot::{ArduPilotConfig, ArduPilotStats, SimArduPilot};
use ulog_recv::sim::signing::stored_signing_timestamp;
use ulog_recv::sim::synth::{SynthOptions, generate};
use ulog_recv::sim::{SimVehicle, Simulated, VehicleConfig, VehicleStats, chunk_log};

use ulog_recv::shell::keyfile;

use super::bucket::{PassRun, UPLOAD_EVERY, Uploads};
use super::disk::{Budget, Disk};
use super::fill::{FillRun, Filled, Step};
use super::foxglove::{Foxglove, Sent};
use super::schedule::{Autopilot, CompanionClock, FaultKind, Schedule};
use super::splits::{LogSplitter, Splits, policy};
use super::store_thread::{StoreThread, Stored};

/// The event log's line for a power cut in a fill.
pub const FILL_POWER_CUT: &str = "the power fails in the fill";

/// The wall clock at a run's start (the store names sessions by it).
fn simulated_epoch() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_780_000_000)
}

/// The simulated vehicle of a run.
pub enum Vehicle {
    Px4(Box<SimVehicle>),
    ArduPilot(Box<ArduPilotBoots>),
}

/// A simulated ArduPilot and what its reboots need.
pub struct ArduPilotBoots {
    vehicle: SimArduPilot,
    /// The log it plays (again from its start after a reboot).
    log: std::sync::Arc<Vec<u8>>,
    config: ArduPilotConfig,
    /// The counters of its earlier boots, summed.
    earlier: ArduPilotStats,
    /// What the streams of its earlier boots put into blocks.
    earlier_streams: Vec<Vec<u8>>,
}

impl Vehicle {
    fn sim(&mut self) -> &mut dyn Simulated {
        match self {
            Vehicle::Px4(v) => v.as_mut(),
            Vehicle::ArduPilot(a) => &mut a.vehicle,
        }
    }

    fn sim_ref(&self) -> &dyn Simulated {
        match self {
            Vehicle::Px4(v) => v.as_ref(),
            Vehicle::ArduPilot(a) => &a.vehicle,
        }
    }

    fn set_impairment(&mut self, imp: ulog_recv::sim::Impairment) {
        match self {
            Vehicle::Px4(v) => v.set_impairment(imp),
            Vehicle::ArduPilot(a) => a.vehicle.set_impairment(imp),
        }
    }

    /// ArduPilot's counters over all its boots.
    pub fn ardupilot_stats(&self) -> Option<ArduPilotStats> {
        let Vehicle::ArduPilot(a) = self else {
            return None;
        };
        Some(sum(&a.earlier, &a.vehicle.stats()))
    }

    /// What each of ArduPilot's streams put into blocks, over all its boots, in order.
    pub fn ardupilot_streams(&self) -> Vec<&[u8]> {
        let Vehicle::ArduPilot(a) = self else {
            return Vec::new();
        };
        (a.earlier_streams.iter())
            .chain(a.vehicle.streams())
            .map(Vec::as_slice)
            .collect()
    }

    pub fn px4(&self) -> Option<&SimVehicle> {
        match self {
            Vehicle::Px4(v) => Some(v),
            Vehicle::ArduPilot(_) => None,
        }
    }

    pub fn px4_stats(&self) -> Option<VehicleStats> {
        self.px4().map(|v| v.stats())
    }
}

/// `b`'s refusals added to `a`.
fn add_signing(a: &mut SigningStats, b: &SigningStats) {
    a.valid += b.valid;
    a.unsigned_refused += b.unsigned_refused;
    a.bad_signature += b.bad_signature;
    a.replayed += b.replayed;
    a.too_old += b.too_old;
}

/// Two sets of an ArduPilot's counters, added.
fn sum(a: &ArduPilotStats, b: &ArduPilotStats) -> ArduPilotStats {
    ArduPilotStats {
        starts: a.starts + b.starts,
        stops: a.stops + b.stops,
        blocks_sent: a.blocks_sent + b.blocks_sent,
        resends: a.resends + b.resends,
        nacks: a.nacks + b.nacks,
        dropped_messages: a.dropped_messages + b.dropped_messages,
        client_timeouts: a.client_timeouts + b.client_timeouts,
        unserved_messages: a.unserved_messages + b.unserved_messages,
        abandoned_blocks: a.abandoned_blocks + b.abandoned_blocks,
        frames_sent: a.frames_sent + b.frames_sent,
        frames_dropped: a.frames_dropped + b.frames_dropped,
        refused_frames: a.refused_frames + b.refused_frames,
    }
}

/// With signing: what the receiver refused, and what the junk held.
#[derive(Debug, Default, Clone, Copy)]
pub struct SigningFigures {
    /// The receiver's signature checks over all the daemon's lives.
    pub receiver: SigningStats,
    /// The vehicle's signature checks (over all its boots).
    pub vehicle: SigningStats,
    /// Junk datagrams that were the vehicle's own frames sent again.
    pub replays: u64,
    /// Junk datagrams that were a vehicle's frames signed with another key.
    pub forged: u64,
}

/// The key the simulated vehicle and the receiver share.
fn signing_key() -> SigningKey {
    SigningKey::from_file_text(b"simulated vehicle").expect("a passphrase")
}

/// Captured vehicle frames kept to be replayed, at most.
const CAPTURED: usize = 256;

/// One log as a session handed it out, and as the store split it.
#[derive(Default)]
pub struct ReceivedLog {
    pub format: Option<ulog_recv::autopilot::LogFormat>,
    pub bytes: Vec<u8>,
    pub splits: Splits,
    pub closed: Option<CloseReason>,
    /// Its dropout events' durations.
    pub dropouts: Vec<Option<u64>>,
    /// Opened by the session that ran to the end (not one a restart cut off).
    pub last_session: bool,
    /// With a live client: what it was sent while the log was open, the data and dropout
    /// lines (JSON).
    pub published: Option<Vec<serde_json::Value>>,
    /// With a live client: what the Foxglove client was sent of the log's samples.
    pub foxglove: Option<Vec<Sent>>,
    /// With the store on: what the store did with it (its session folder, the bytes it
    /// wrote).
    pub stored: Stored,
}

/// What a run left to be judged.
pub struct Outcome {
    pub schedule: Schedule,
    /// The store's folder, kept while the outcome is judged (removed when it is dropped).
    pub disk: Option<Disk>,
    /// The uploader's bucket, with its last passes run without faults.
    pub uploads: Option<Uploads>,
    /// The first time the upload journal was ahead of the bucket, as a pass ended.
    pub journal_ahead: Option<String>,
    pub vehicle: Vehicle,
    pub logs: Vec<ReceivedLog>,
    /// One line per event and fault, in order, with its simulated time.
    pub event_log: Vec<String>,
    /// Reboots and restarts that happened (power cuts among the restarts).
    pub reboots: u32,
    pub restarts: u32,
    pub power_cuts: u32,
    /// Spells of a full disk.
    pub disk_fulls: u32,
    /// Spells the store stalled in a slow sync, and the samples its queue's bound stripped.
    pub stalls: u32,
    pub stripped: u64,
    /// Spells of failing syncs.
    pub sync_failures: u32,
    /// The most log bytes that waited for the store beyond its queue's bound.
    pub past_bound: usize,
    /// The fills that ran to their end, in order.
    pub fills: Vec<Filled>,
    /// With signing: the receiver's refusals over all the daemon's lives, and the junk
    /// datagrams that were replays of the vehicle's frames and forgeries.
    pub signing: Option<SigningFigures>,
    /// Simulated time from power-up to the last session's close.
    pub simulated: Duration,
    /// The run ended before its time limit with its last session closed.
    pub finished: bool,
}

impl Outcome {
    /// The bucket's faults (requests refused, answers lost, kills, uploads forgotten).
    pub fn bucket_faults(&self) -> u64 {
        let said = |l: &&String| l.contains(" bucket: ") || l.contains(" bucket forgets ");
        self.event_log.iter().filter(said).count() as u64
    }

    /// Answers the bucket gave late, and upload passes that died with the daemon while they
    /// waited for one (or for a request's end).
    pub fn slow_answers(&self) -> (u64, u64) {
        let count = |text: &str| self.event_log.iter().filter(|l| l.contains(text)).count();
        (
            count(" ms late") as u64,
            count("the pass dies with the daemon") as u64,
        )
    }

    /// FNV-1a of the event log: equal for equal runs.
    pub fn digest(&self) -> u64 {
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        for line in &self.event_log {
            for b in line.bytes().chain([b'\n']) {
                h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
            }
        }
        h
    }
}

/// A simulated run's longest time: half an hour, and three times as long as the link takes
/// to carry the log (PX4 streams a long log for longer on a slow link), however bad the
/// schedule.
fn time_limit(vehicle: &Vehicle, link_rate: u64) -> Duration {
    let bytes = vehicle.px4().map_or(0, |v| v.log().stream.len() as u64);
    let carried = Duration::from_secs_f64(bytes as f64 / (0.7 * link_rate as f64));
    Duration::from_secs(1800).max(3 * carried)
}

/// Kills in upload passes that restart the whole daemon, at most: a PX4 log streams again
/// from its start after each, and a flight must end.
const MAX_KILL_RESTARTS: u32 = 3;

/// Whether a fault's spell that lasts `until` is over at `now` (then it is cleared).
fn spell_over(until: &mut Option<Instant>, now: Instant) -> bool {
    let over = until.is_some_and(|t| t <= now);
    if over {
        *until = None;
    }
    over
}

/// A live-socket publisher with one client subscribed to every topic.
fn live_client() -> (Publisher, ClientId) {
    let mut publisher = Publisher::new("ulog-recv simulation");
    let client = publisher.connect().expect("room for one client");
    publisher.handle_request(client, Line::Text(br#"{"subscribe": ["*"]}"#));
    while publisher.poll_transmit().is_some() {}
    (publisher, client)
}

/// The ArduPilot logs a run may fly.
pub type ArduPilotLogs = [std::sync::Arc<Vec<u8>>];

struct World {
    schedule: Schedule,
    vehicle: Vehicle,
    session: Session,
    /// The live socket's publisher beside the session (a daemon's restart starts a new one,
    /// and the client connects again), with its client.
    live: Option<(Publisher, ClientId)>,
    /// The Foxglove server beside it, with its client.
    foxglove: Option<Foxglove>,
    /// The receiver's store, writing each log to files, when the schedule says so, and the
    /// thread it runs on (its queue).
    disk: Option<Disk>,
    store_thread: StoreThread,
    /// Spells the store stalled in, and samples its queue's bound stripped over all the
    /// daemon's lives.
    stalls: u32,
    stripped: u64,
    past_bound: usize,
    /// The uploader's bucket and its next pass, when the schedule says so.
    uploads: Option<(Uploads, Instant)>,
    /// The upload pass under way, waiting for a slow answer.
    passing: Option<PassRun>,
    journal_ahead: Option<String>,
    /// Upload passes a kill ended.
    upload_kills: u32,
    t0: Instant,
    now: Instant,
    logs: Vec<ReceivedLog>,
    event_log: Vec<String>,
    rng: fastrand::Rng,
    /// The open log's splitter.
    splitter: Option<LogSplitter>,
    reboots: u32,
    restarts: u32,
    power_cuts: u32,
    /// While another program holds the disk's room: until then; and how often it did.
    disk_full_until: Option<Instant>,
    disk_fulls: u32,
    /// While the disk fails every sync: until then; and how often it did.
    syncs_fail_until: Option<Instant>,
    sync_failures: u32,
    stuck: u32,
    /// The fills' queue, once the fill began after the flight (a restart queues again).
    fill_queue: Option<Vec<std::path::PathBuf>>,
    /// The fill under way, the result of the FTP operation it waits for, and the operations
    /// fills asked for so far.
    filling: Option<FillRun>,
    ftp_result: Option<Result<FtpReply, FtpError>>,
    fill_asked: u32,
    fills: Vec<Filled>,
    /// When the fill under way must be over (the run's time limit, as long as it runs).
    fill_limit: Option<Instant>,
    /// With signing: the receiver's signing clock's reservation, and the junk's makings.
    signing: Option<SigningWorld>,
}

/// With signing: the daemon's signing clock's reservation on disk as the daemon keeps it
/// (`ulog_recv::shell::keyfile`'s policy), and what the junk's replays and forgeries are made
/// of.
struct SigningWorld {
    clock: CompanionClock,
    /// The reservation on disk (written whole and synced before it counts).
    reserved: u64,
    /// A renewal being written (on the daemon's blocking thread): it counts once written,
    /// which a slow or failing disk delays, and a crash loses.
    renewing: Option<u64>,
    /// Frames of the vehicle's seen on the network, to replay.
    captured: Vec<Vec<u8>>,
    figures: SigningFigures,
}

/// Runs `schedule` to its end.
pub fn run(schedule: &Schedule, ardupilot_logs: &ArduPilotLogs) -> Outcome {
    let t0 = Instant::now();
    let vehicle = match schedule.autopilot {
        Autopilot::Px4 => {
            let file = generate(SynthOptions {
                duration_s: schedule.flight_s,
                seed: schedule.seed,
                appended_data: false,
            });
            let log = chunk_log(&file, 0).expect("the synthetic log chunks");
            let config = VehicleConfig {
                link_rate: Some(schedule.link_rate),
                impairment: schedule.base,
                seed: schedule.seed,
                sd_log: schedule.fill.is_some(),
                signing: schedule.signing.map(|_| signing_key()),
                ..VehicleConfig::default()
            };
            let epoch = SystemTime::UNIX_EPOCH + Duration::from_secs(1_780_000_000);
            Vehicle::Px4(Box::new(SimVehicle::new(log, config, t0, epoch)))
        }
        Autopilot::ArduPilot => {
            let whole = &ardupilot_logs[schedule.ardupilot_log];
            let cut = (whole.len() as f64 * schedule.ardupilot_share) as usize;
            let log = std::sync::Arc::new(whole[..cut].to_vec());
            let config = ArduPilotConfig {
                link_rate: Some(schedule.link_rate),
                buffer_blocks: schedule.buffer_blocks,
                impairment: schedule.base,
                seed: schedule.seed,
                record_streams: true,
                signing: schedule.signing.map(|_| SigningSetup {
                    key: signing_key(),
                    link_id: 0,
                    timestamp: timestamp_at(simulated_epoch()),
                }),
                ..ArduPilotConfig::default()
            };
            Vehicle::ArduPilot(Box::new(ArduPilotBoots {
                vehicle: SimArduPilot::new(log.to_vec(), config.clone(), t0),
                log,
                config,
                earlier: ArduPilotStats::default(),
                earlier_streams: Vec::new(),
            }))
        }
    };
    let log_bytes = match &vehicle {
        Vehicle::Px4(v) => v.log().stream.len(),
        Vehicle::ArduPilot(a) => a.log.len(),
    };
    let mut world = World {
        schedule: schedule.clone(),
        vehicle,
        session: Session::new(SessionConfig::default(), t0),
        live: schedule.live.then(live_client),
        foxglove: schedule.live.then(|| Foxglove::new(t0)),
        disk: (schedule.disk).then(|| {
            Disk::new(
                schedule.seed,
                policy(schedule.split_bytes, schedule.split_us),
                (schedule.budget_share).map(|share| {
                    let bytes = (share * log_bytes as f64) as u64;
                    match schedule.budget_min_free {
                        true => Budget::MinFree(bytes),
                        false => Budget::MaxTotal(bytes),
                    }
                }),
                schedule.bucket.is_some(),
                schedule.fills_disk(),
                schedule.columns.as_ref(),
            )
        }),
        store_thread: StoreThread::new(schedule.store_queue),
        stalls: 0,
        stripped: 0,
        past_bound: 0,
        uploads: (schedule.bucket.filter(|_| schedule.disk))
            .map(|faults| (Uploads::new(schedule.seed, faults), t0 + UPLOAD_EVERY)),
        passing: None,
        journal_ahead: None,
        upload_kills: 0,
        t0,
        now: t0,
        logs: Vec::new(),
        event_log: Vec::new(),
        rng: fastrand::Rng::with_seed(schedule.seed.rotate_left(17) ^ 0x6a75_6e6b),
        splitter: None,
        reboots: 0,
        restarts: 0,
        power_cuts: 0,
        disk_full_until: None,
        disk_fulls: 0,
        syncs_fail_until: None,
        sync_failures: 0,
        stuck: 0,
        fill_queue: None,
        filling: None,
        ftp_result: None,
        fill_asked: 0,
        fills: Vec::new(),
        fill_limit: None,
        signing: schedule.signing.map(|clock| SigningWorld {
            clock,
            reserved: 0,
            renewing: None,
            captured: Vec::new(),
            figures: SigningFigures::default(),
        }),
    };
    world.session = world.new_session();
    let finished = world.run();
    if let Some(disk) = &mut world.disk
        && world.syncs_fail_until.take().is_some()
    {
        disk.fail_syncs(false);
    }
    // A stall the run ended in ends: the store writes what waited.
    world.store_thread.stalled_until = None;
    world.run_store();
    world.stripped += world.store_thread.lost_samples();
    world.past_bound = world.past_bound.max(world.store_thread.most_past_bound());
    if let Some(disk) = &mut world.disk
        && (world.disk_full_until.take().is_some() || disk.has_ballast())
    {
        // All the room comes back after the flight: what the full disk held back is
        // completed.
        disk.free_up();
        disk.settle(world.now);
        let ms = (world.now - world.t0).as_millis();
        world
            .event_log
            .push(format!("{ms:>9} room on the disk again, after the flight"));
    }
    world.last_uploads();
    if let Some(disk) = &mut world.disk {
        disk.settle(world.now);
    }
    let session = world.session.stats();
    if let Some(signing) = &mut world.signing {
        add_signing(&mut signing.figures.receiver, &session.signing);
        let vehicle = match &world.vehicle {
            Vehicle::Px4(v) => v.signing_stats(),
            Vehicle::ArduPilot(a) => a.vehicle.signing_stats(),
        };
        add_signing(&mut signing.figures.vehicle, &vehicle.expect("signing"));
    }
    let simulated = world.now - world.t0;
    world.event_log.push(format!("session {session:?}"));
    world.event_log.push(format!(
        "vehicle {:?} {:?}",
        world.vehicle.px4_stats(),
        world.vehicle.ardupilot_stats()
    ));
    Outcome {
        schedule: world.schedule,
        disk: world.disk,
        uploads: world.uploads.map(|(u, _)| u),
        journal_ahead: world.journal_ahead,
        vehicle: world.vehicle,
        logs: world.logs,
        event_log: world.event_log,
        reboots: world.reboots,
        restarts: world.restarts,
        power_cuts: world.power_cuts,
        disk_fulls: world.disk_fulls,
        stalls: world.stalls,
        sync_failures: world.sync_failures,
        past_bound: world.past_bound,
        stripped: world.stripped,
        fills: world.fills,
        signing: world.signing.map(|s| s.figures),
        simulated,
        finished,
    }
}

impl World {
    fn elapsed(&self) -> Duration {
        self.now - self.t0
    }

    /// A daemon's session as it starts now: with signing, its clock begins above the
    /// reservation on disk and the companion's wall clock, and reserves ahead (written
    /// before the daemon goes on).
    fn new_session(&mut self) -> Session {
        let wall = self.companion_wall();
        let Some(signing) = &mut self.signing else {
            return Session::new(SessionConfig::default(), self.now);
        };
        let timestamp = keyfile::start_above(signing.reserved, wall);
        signing.reserved = timestamp + keyfile::RESERVATION;
        let config = SessionConfig {
            signing: Some(SigningSetup {
                key: signing_key(),
                link_id: 0,
                timestamp,
            }),
            ..SessionConfig::default()
        };
        Session::new(config, self.now)
    }

    /// The signing timestamp of the companion computer's wall clock now.
    fn companion_wall(&self) -> u64 {
        let now = simulated_epoch() + self.elapsed();
        match self.signing.as_ref().map(|s| s.clock) {
            None | Some(CompanionClock::True) => timestamp_at(now),
            Some(CompanionClock::Behind(d)) => timestamp_at(now - d),
            Some(CompanionClock::Ahead(d)) => timestamp_at(now + d),
            Some(CompanionClock::Unset) => 0,
        }
    }

    /// The daemon's loop keeps its signing reservation ahead of the session's clock: a
    /// renewal once half of it is used, written on a blocking thread, and counted once
    /// written (not while the disk stalls or fails its syncs).
    fn keep_reservation(&mut self) {
        let disk_stuck = self.store_thread.stalled(self.now) || self.syncs_fail_until.is_some();
        let Some(signing) = &mut self.signing else {
            return;
        };
        if let Some(until) = signing.renewing {
            if disk_stuck {
                return;
            }
            signing.reserved = until;
            signing.renewing = None;
        }
        let timestamp = self.session.signing_timestamp(self.now).expect("signing");
        signing.renewing = keyfile::renewal(signing.reserved, timestamp);
    }

    /// With signing, one in 32 of the vehicle's frames is kept to be replayed as junk.
    fn capture(&mut self, frame: Vec<u8>) {
        let Some(signing) = &mut self.signing else {
            return;
        };
        if self.rng.u8(..32) != 0 {
            return;
        }
        if signing.captured.len() < CAPTURED {
            signing.captured.push(frame);
        } else {
            let i = self.rng.usize(..CAPTURED);
            signing.captured[i] = frame;
        }
    }

    /// A junk datagram of a signing run: one of the vehicle's own frames sent again, or a
    /// log chunk (block) in the vehicle's name signed with another key.
    fn replayed_or_forged(&mut self) -> Vec<u8> {
        let signing = self.signing.as_mut().expect("signing");
        if !signing.captured.is_empty() && self.rng.bool() {
            signing.figures.replays += 1;
            return signing.captured[self.rng.usize(..signing.captured.len())].clone();
        }
        signing.figures.forged += 1;
        let other = SigningKey::from_file_text(b"not the vehicle's key").expect("a passphrase");
        let mut forger = Signer::new(other, 0, timestamp_at(simulated_epoch()), self.t0);
        let mut data = [0u8; 249];
        self.rng.fill(&mut data);
        let mut frame = Vec::new();
        let header = |component_id| MavHeader {
            system_id: 1,
            component_id,
            sequence: 0,
        };
        match self.schedule.autopilot {
            Autopilot::Px4 => {
                let chunk = MavMessage::LOGGING_DATA_ACKED(LOGGING_DATA_ACKED_DATA {
                    sequence: self.rng.u16(..),
                    length: 249,
                    first_message_offset: 0,
                    data,
                    ..Default::default()
                });
                forger.sign(header(1), &chunk, self.now, &mut frame);
            }
            Autopilot::ArduPilot => {
                let mut block = LogBlock {
                    seqno: self.rng.u32(..20_000),
                    ..LogBlock::default()
                };
                block.data.copy_from_slice(&data[..BLOCK_BYTES]);
                forger.sign_data(header(LOG_COMPONENT), &block, self.now, &mut frame);
            }
        }
        frame
    }

    fn say(&mut self, what: String) {
        let ms = self.elapsed().as_millis();
        self.event_log.push(format!("{ms:>9} {what}"));
    }

    /// Until the vehicle's log is all out and the last session has shut down; false when
    /// the time limit came first.
    fn run(&mut self) -> bool {
        let changes = self.schedule.link_changes();
        let events = self.schedule.events();
        let (mut next_change, mut next_event) = (0, 0);
        // Events asked for of the store (`ulog-recv event`), in flight.
        let requests = (self.schedule.columns.as_ref()).map_or(Vec::new(), |c| c.requests.clone());
        let mut next_request = 0;
        let mut settle_until: Option<Instant> = None;
        // The run ends once the vehicle's log is out and the receiver had time to find it
        // again after the last fault (its vehicle timeout, a START's retries).
        let quiet_from = (changes.last().copied().into_iter())
            .chain(events.last().map(|f| f.at + f.len))
            .max()
            .map_or(Duration::ZERO, |t| t + Duration::from_secs(15));
        let mut shutting_down = false;
        let mut logger_off = false;
        let limit = time_limit(&self.vehicle, self.schedule.link_rate);
        loop {
            let t = self.elapsed();
            while next_change < changes.len() && changes[next_change] <= t {
                next_change += 1;
                let imp = self.schedule.impairment_at(t);
                self.vehicle.set_impairment(imp);
                self.say(format!(
                    "link loss {:.2} dup {:.2} reorder {:.2} corrupt {:.2} uplink {:.2}",
                    imp.loss, imp.duplicate, imp.reorder, imp.corrupt, imp.uplink_loss
                ));
            }
            while next_event < events.len() && events[next_event].at <= t {
                let fault = events[next_event];
                next_event += 1;
                // Reboots, restarts and junk happen in flight: once the vehicle's log is all
                // out (a simulated vehicle's log ends; a real one's goes on), there are none.
                if !self.vehicle.sim_ref().finished() {
                    self.apply(fault.kind, fault.len, fault.level);
                }
            }
            while next_request < requests.len() && requests[next_request] <= t {
                next_request += 1;
                let name = format!("asked-{next_request}");
                self.say(format!("event {name} asked for"));
                self.store_thread.request_event(name);
            }
            self.exchange_and_fill();
            self.keep_reservation();
            let done =
                self.vehicle.sim_ref().finished() && next_event >= events.len() && t >= quiet_from;
            let flight_over = if self.schedule.fill.is_some() {
                // The vehicle's logger is off after its flight (the simulated one would
                // stream the flight again when the receiver asks after the log's stall):
                // the flight is over once, for good.
                if done && !logger_off {
                    self.vehicle_logger_off();
                    logger_off = true;
                }
                logger_off
            } else {
                done
            };
            if shutting_down {
                if self.session.is_closed() {
                    return true;
                }
            } else if flight_over && self.fill_over() {
                let settle = *settle_until.get_or_insert(self.now + Duration::from_millis(500));
                if self.now >= settle {
                    self.say("shutdown".into());
                    self.session.shutdown(self.now);
                    shutting_down = true;
                    continue;
                }
            }
            if t > limit && self.fill_limit.is_none_or(|l| self.now > l) {
                self.say("time limit".into());
                return false;
            }
            let mut next = [
                self.vehicle.sim_ref().poll_timeout(),
                self.session.poll_timeout(),
                changes.get(next_change).map(|&d| self.t0 + d),
                Some(self.t0 + quiet_from).filter(|&t| t > self.now),
                events.get(next_event).map(|f| self.t0 + f.at),
                requests.get(next_request).map(|&d| self.t0 + d),
                settle_until.filter(|&t| t > self.now),
                self.uploads.as_ref().map(|(_, at)| *at),
                (self.uploads.as_ref()).and_then(|(u, _)| u.store.due()),
                self.disk_full_until,
                self.store_thread.stalled_until,
                self.syncs_fail_until,
            ]
            .into_iter()
            .flatten()
            .min()
            .expect("the session always has a heartbeat timer");
            if next <= self.now {
                self.stuck += 1;
                assert!(self.stuck < 100_000, "timers do not advance");
                next = self.now;
            } else {
                self.stuck = 0;
            }
            self.now = next;
            self.vehicle.sim().handle_timeout(self.now);
            self.session.handle_timeout(self.now);
            if let Some(disk) = &mut self.disk {
                let ms = (self.now - self.t0).as_millis();
                if spell_over(&mut self.disk_full_until, self.now) {
                    let line = match disk.ease_up() {
                        true => "room on the disk again, less than min-free asks",
                        false => "room on the disk again",
                    };
                    self.event_log.push(format!("{ms:>9} {line}"));
                }
                if spell_over(&mut self.syncs_fail_until, self.now) {
                    disk.fail_syncs(false);
                    self.event_log.push(format!("{ms:>9} the disk syncs again"));
                }
                if spell_over(&mut self.store_thread.stalled_until, self.now) {
                    let line = format!("{ms:>9} the store's slow sync is over");
                    self.event_log.push(line);
                }
                let mut stored: Vec<&mut Stored> =
                    self.logs.iter_mut().map(|l| &mut l.stored).collect();
                self.store_thread.run(self.now, disk, &mut stored);
                // (A store stuck in a slow sync keeps neither the sync rounds nor the budget.)
                if !self.store_thread.stalled(self.now) {
                    let before = disk.deleted.len();
                    disk.tick(self.now);
                    let deleted: Vec<String> = (disk.deleted[before..].iter())
                        .filter_map(|d| Some(d.file_name()?.to_string_lossy().into_owned()))
                        .collect();
                    for name in deleted {
                        self.say(format!("the disk budget deletes {name}"));
                    }
                }
            }
            self.upload_pass();
        }
    }

    /// An upload pass over the store's sessions, begun when its time comes (the uploader is
    /// one thread: the next begins after the one under way) and run again when its slow
    /// answer comes. A daemon killed in it restarts, its first [`MAX_KILL_RESTARTS`] times
    /// while the vehicle's log streams (the schedule's restarts are as few); the next pass is
    /// a restarted uploader's anyway.
    fn upload_pass(&mut self) {
        let (Some((uploads, at)), Some(disk)) = (&mut self.uploads, &self.disk) else {
            return;
        };
        let mut run = match self.passing.take() {
            Some(run) if uploads.store.due().is_some_and(|due| due > self.now) => {
                self.passing = Some(run);
                if *at <= self.now {
                    *at = self.now + UPLOAD_EVERY;
                }
                return;
            }
            Some(run) => run,
            None if *at <= self.now => uploads.start(disk.dir()),
            None => return,
        };
        if *at <= self.now {
            *at = self.now + UPLOAD_EVERY;
        }
        let Some(pass) = uploads.resume(&mut run, self.now) else {
            self.passing = Some(run);
            return;
        };
        if self.journal_ahead.is_none() {
            let objects = uploads.objects();
            self.journal_ahead = super::bucket::check_journals(disk.dir(), &objects).err();
        }
        for line in pass.said {
            self.say(line);
        }
        if let Some(disk) = &mut self.disk {
            disk.look();
        }
        if pass.killed {
            self.upload_kills += 1;
            if self.upload_kills <= MAX_KILL_RESTARTS && !self.vehicle.sim_ref().finished() {
                self.apply(FaultKind::DaemonRestart, Duration::ZERO, 0.0);
            }
        }
    }

    /// The pass under way dies with the daemon; the journal is held to the bucket as the
    /// daemon left them.
    fn upload_pass_dies(&mut self) {
        let (Some((uploads, _)), Some(run)) = (&self.uploads, self.passing.take()) else {
            return;
        };
        let said = uploads.abandon(run);
        for line in said {
            self.say(line);
        }
        self.say("upload: the pass dies with the daemon".into());
    }

    /// After the flight: passes without bucket faults until every session is up (a few:
    /// each pass takes every session as far as it goes, and a multipart upload the server
    /// forgot costs one more).
    fn last_uploads(&mut self) {
        let Some((uploads, _)) = &mut self.uploads else {
            return;
        };
        uploads.store.set_failing(false);
        // The daemon shut down: the pass under way with it.
        self.upload_pass_dies();
        for _ in 0..4 {
            if let Some((_, at)) = &mut self.uploads {
                *at = self.now;
            }
            self.upload_pass();
            assert!(
                self.passing.is_none(),
                "a pass without faults waits for nothing"
            );
        }
    }

    fn apply(&mut self, kind: FaultKind, len: Duration, level: f64) {
        match kind {
            FaultKind::VehicleReboot => {
                self.reboots += 1;
                self.say(format!("vehicle reboot, {} ms down", len.as_millis()));
                match &mut self.vehicle {
                    Vehicle::Px4(v) => v.reboot(self.now, len),
                    Vehicle::ArduPilot(a) => {
                        // A new boot plays the log from its start: its log time goes back.
                        a.earlier = sum(&a.earlier, &a.vehicle.stats());
                        if let (Some(signing), Some(stats)) =
                            (&mut self.signing, a.vehicle.signing_stats())
                        {
                            add_signing(&mut signing.figures.vehicle, &stats);
                        }
                        a.earlier_streams.extend_from_slice(a.vehicle.streams());
                        // Its signing clock starts again from the timestamp it stored.
                        let signing = (a.config.signing.clone()).map(|s| SigningSetup {
                            timestamp: (a.vehicle.signing_timestamp(self.now))
                                .map_or(s.timestamp, stored_signing_timestamp),
                            ..s
                        });
                        let config = ArduPilotConfig {
                            impairment: self.schedule.impairment_at(self.now - self.t0),
                            seed: a.config.seed.wrapping_add(u64::from(self.reboots)),
                            signing,
                            ..a.config.clone()
                        };
                        a.vehicle = SimArduPilot::new(a.log.to_vec(), config, self.now + len);
                    }
                }
            }
            FaultKind::DaemonRestart => {
                self.restarts += 1;
                self.say("daemon restart".into());
                self.daemon_starts_again(false);
            }
            FaultKind::PowerCut => {
                self.restarts += 1;
                self.power_cuts += 1;
                self.daemon_starts_again(true);
            }
            FaultKind::DiskFull => {
                let room = level as u64;
                let Some(disk) = &mut self.disk else { return };
                if disk.fill_up(room) {
                    self.disk_fulls += 1;
                    self.say(format!(
                        "the disk full, {room} bytes left, for {} ms",
                        len.as_millis()
                    ));
                    let until = self.now + len;
                    self.disk_full_until =
                        Some(self.disk_full_until.map_or(until, |u| u.max(until)));
                }
            }
            FaultKind::SyncFails => {
                let Some(disk) = &mut self.disk else { return };
                disk.fail_syncs(true);
                self.sync_failures += 1;
                self.say(format!(
                    "the disk fails every sync for {} ms",
                    len.as_millis()
                ));
                let until = self.now + len;
                self.syncs_fail_until = Some(self.syncs_fail_until.map_or(until, |u| u.max(until)));
            }
            FaultKind::SlowDisk => {
                if self.disk.is_none() {
                    return;
                }
                self.stalls += 1;
                self.say(format!(
                    "the store stalls in a slow sync for {} ms",
                    len.as_millis()
                ));
                let until = self.now + len;
                let stalled = &mut self.store_thread.stalled_until;
                *stalled = Some(stalled.map_or(until, |u| u.max(until)));
            }
            FaultKind::Junk => {
                let n = level as usize;
                self.say(format!("{n} junk datagrams"));
                for _ in 0..n {
                    if self.signing.is_some() && self.rng.u8(..3) != 0 {
                        let datagram = self.replayed_or_forged();
                        self.session.handle_datagram(&datagram, self.now);
                        continue;
                    }
                    let len = self.rng.usize(1..300);
                    let mut junk: Vec<u8> = (0..len).map(|_| self.rng.u8(..)).collect();
                    // Some look like MAVLink 2 frames at first sight.
                    if self.rng.bool() {
                        junk[0] = 0xFD;
                    }
                    self.session.handle_datagram(&junk, self.now);
                }
            }
            _ => unreachable!("link faults change the impairment"),
        }
    }

    /// The daemon dies, with the power (`power_cut`) or alone, and starts again: its session
    /// begins anew, the store repairs what the disk kept.
    fn daemon_starts_again(&mut self, power_cut: bool) {
        self.collect_events();
        self.upload_pass_dies();
        // The store's recovery closes the split a crash left open.
        self.end_splits();
        for log in &mut self.logs {
            log.last_session = false;
        }
        if let Some(signing) = &mut self.signing {
            add_signing(&mut signing.figures.receiver, &self.session.stats().signing);
            // A renewal being written dies with the daemon.
            signing.renewing = None;
        }
        self.session = self.new_session();
        // What waited for the store dies with it, never written; a slow disk stays slow.
        self.stripped += self.store_thread.lost_samples();
        self.past_bound = self.past_bound.max(self.store_thread.most_past_bound());
        let stalled_until = self.store_thread.stalled_until;
        self.store_thread = StoreThread::new(self.schedule.store_queue);
        self.store_thread.stalled_until = stalled_until;
        // The fill thread dies with the daemon; the new one queues what is not done.
        self.filling = None;
        self.fill_queue = None;
        self.ftp_result = None;
        self.live = self.schedule.live.then(live_client);
        self.foxglove = self.schedule.live.then(|| Foxglove::new(self.now));
        let Some(disk) = &mut self.disk else {
            return;
        };
        if !power_cut {
            disk.crash_and_restart();
            return;
        }
        let cut = disk.power_cut(&mut self.rng);
        for log in &mut self.logs {
            if log.stored.dir.as_ref().is_some_and(|d| !d.exists()) {
                log.stored.dir = None;
            }
        }
        self.say(format!(
            "power cut: {} names found as before their folder's sync, {} unsynced bytes lost, \
             {} torn",
            cut.names_reverted, cut.bytes_lost, cut.torn
        ));
        // What the power left of the journal is never ahead of the bucket.
        if let (Some((uploads, _)), Some(disk), None) =
            (&self.uploads, &self.disk, &self.journal_ahead)
        {
            let objects = uploads.objects();
            self.journal_ahead = super::bucket::check_journals(disk.dir(), &objects)
                .err()
                .map(|e| format!("after a power cut: {e}"));
        }
    }

    /// `e` to the store's queue, as the daemon's network loop hands it over; the store
    /// takes it at once unless it stalls.
    fn store(&mut self, e: &Event) {
        if self.disk.is_none() {
            return;
        }
        let thread = &mut self.store_thread;
        match e {
            Event::LogOpened { format, .. } => {
                let vehicle = self.session.vehicle().unwrap_or((0, 0));
                let started = simulated_epoch() + (self.now - self.t0);
                thread.begin(self.logs.len() - 1, vehicle, started, *format);
            }
            Event::LogBytes(b) => {
                let dropping = thread.write(b);
                let ms = (self.now - self.t0).as_millis();
                let line = format!("{ms:>9} the store's queue is full: samples dropped");
                if dropping {
                    self.event_log.push(line);
                }
            }
            Event::Dropout {
                lost_chunks,
                duration_ms,
            } => thread.link_dropout(*lost_chunks, duration_ms.is_some()),
            Event::LogClosed { .. } => thread.end(),
            _ => {}
        }
        self.run_store();
    }

    /// The store takes what waits in its queue, unless it stalls.
    fn run_store(&mut self) {
        let Some(disk) = &mut self.disk else {
            return;
        };
        let mut stored: Vec<&mut Stored> = self.logs.iter_mut().map(|l| &mut l.stored).collect();
        self.store_thread.run(self.now, disk, &mut stored);
    }

    /// The live clients' messages of `e`: the samples and dropout lines go with the open
    /// log.
    fn publish(&mut self, e: &Event) {
        if let Some(foxglove) = &mut self.foxglove {
            let mut sent = Vec::new();
            foxglove.handle_event(e, self.now, &mut sent);
            let log = self.logs.last_mut().and_then(|l| l.foxglove.as_mut());
            match log {
                Some(log) => log.append(&mut sent),
                None => assert!(sent.is_empty(), "samples while no log is open"),
            }
        }
        let Some((publisher, client)) = &mut self.live else {
            return;
        };
        publisher.handle_event(e, self.now);
        let mut published = (self.logs.last_mut()).and_then(|l| l.published.as_mut());
        while let Some(out) = publisher.poll_transmit() {
            assert_eq!(out.client, *client, "a line for a client that is not there");
            if !(out.line.starts_with(br#"{"type":"data""#)
                || out.line.starts_with(br#"{"type":"dropout""#))
            {
                continue;
            }
            let line = serde_json::from_slice(&out.line).expect("every line is JSON");
            (published.as_mut())
                .expect("data lines while a log is open")
                .push(line);
        }
    }

    /// The open log's last split ends (its log closed, or the store recovered it).
    fn end_splits(&mut self) {
        if let (Some(mut s), Some(log)) = (self.splitter.take(), self.logs.last_mut()) {
            s.finish(&mut log.splits);
        }
    }

    /// Moves frames both ways until both sides are quiet; collects the session's events.
    fn exchange(&mut self) {
        loop {
            let mut moved = false;
            while let Some(f) = self.vehicle.sim().poll_transmit() {
                self.session.handle_datagram(&f, self.now);
                self.capture(f);
                moved = true;
            }
            while let Some(f) = self.session.poll_transmit() {
                self.vehicle.sim().handle_bytes(&f, self.now);
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
            self.publish(&e);
            let line = match &e {
                Event::LogOpened { number, format } => {
                    self.end_splits();
                    let split = policy(self.schedule.split_bytes, self.schedule.split_us);
                    self.splitter = Some(LogSplitter::new(*format, split));
                    self.logs.push(ReceivedLog {
                        format: Some(*format),
                        last_session: true,
                        published: self.schedule.live.then(Vec::new),
                        foxglove: self.schedule.live.then(Vec::new),
                        ..ReceivedLog::default()
                    });
                    format!("log {number} opened, {format:?}")
                }
                Event::LogBytes(b) => {
                    let log = self.logs.last_mut().expect("bytes after LogOpened");
                    log.bytes.extend_from_slice(b);
                    if let Some(s) = &mut self.splitter {
                        s.push(b, &mut log.splits);
                    }
                    format!("{} bytes", b.len())
                }
                Event::Dropout {
                    lost_chunks,
                    duration_ms,
                } => {
                    let log = self.logs.last_mut().expect("a dropout after LogOpened");
                    log.dropouts.push(*duration_ms);
                    format!("dropout: {lost_chunks} lost, {duration_ms:?} ms")
                }
                Event::LogClosed {
                    number,
                    reason,
                    bytes,
                } => {
                    let log = self.logs.last_mut().expect("LogClosed after LogOpened");
                    assert_eq!(*bytes, log.bytes.len() as u64, "LogClosed's byte count");
                    log.closed = Some(*reason);
                    self.end_splits();
                    format!("log {number} closed, {reason:?}, {bytes} bytes")
                }
                Event::Ftp(result) => {
                    if self.filling.is_some() {
                        self.ftp_result = Some(result.clone());
                    }
                    e.to_string()
                }
                other => other.to_string(),
            };
            self.store(&e);
            self.say(line);
        }
    }

    /// From now on the vehicle refuses a new stream: its logger stopped with its flight.
    fn vehicle_logger_off(&mut self) {
        if let Vehicle::Px4(v) = &mut self.vehicle {
            v.refuse_starts(Some(MavResult::MAV_RESULT_TEMPORARILY_REJECTED));
        }
    }

    /// Whether the fill after the flight is over (or none was planned); when the last log is
    /// closed and the vehicle heard, starts the queue's next session's fill.
    fn fill_over(&mut self) -> bool {
        let Some(disk) = self.disk.as_ref().filter(|_| self.schedule.fill.is_some()) else {
            return true;
        };
        if self.filling.is_some() || self.session.is_logging() || self.session.vehicle().is_none() {
            return false;
        }
        // The daemon fills the sessions its store closed: a store stuck in a slow sync has
        // not closed the last yet.
        if !self.store_thread.idle() {
            return false;
        }
        let queue = (self.fill_queue)
            .get_or_insert_with(|| ulog_recv::shell::fill::never_filled(disk.dir()));
        if queue.is_empty() {
            return true;
        }
        let dir = queue.remove(0);
        let name = dir.file_name().unwrap_or_default().to_string_lossy();
        self.say(format!("fill of {name} begins"));
        self.filling = Some(FillRun::start(dir, self.now));
        // A fill may read the whole SD log (a session's tail lost to its end), three times
        // as long as the link takes to carry it.
        let sd = (self.vehicle.px4().and_then(|v| v.sd_log())).map_or(0, |(_, b)| b.len());
        let carried = Duration::from_secs_f64(sd as f64 / (0.7 * self.schedule.link_rate as f64));
        self.fill_limit = Some(self.now + 3 * carried + Duration::from_secs(60));
        false
    }

    /// [`exchange`](Self::exchange), and the fill under way run as far as it goes now: each
    /// FTP operation it asks for runs on the session, as the daemon's loop runs them.
    fn exchange_and_fill(&mut self) {
        loop {
            self.exchange();
            let Some(run) = &mut self.filling else {
                return;
            };
            if let Some(result) = self.ftp_result.take() {
                run.answer(result, self.session.ftp_stats());
            }
            match run.step(self.now) {
                Step::Waiting => return,
                Step::Done(filled) => {
                    self.filling = None;
                    let name = filled.dir.file_name().unwrap_or_default().to_string_lossy();
                    let line = match &filled.result {
                        Ok(r) => format!(
                            "fill of {name}: {} filled, {} not, {} records, {} bytes fetched",
                            r.filled,
                            r.unfilled.len(),
                            r.records,
                            r.fetched_bytes
                        ),
                        Err(e) => format!("fill of {name} failed: {e}"),
                    };
                    self.say(line);
                    self.fills.push(*filled);
                    return;
                }
                Step::Run(op) => {
                    let asked = self.fill_asked;
                    self.fill_asked += 1;
                    if self.schedule.fill.and_then(|p| p.power_cut_at) == Some(asked) {
                        self.say(FILL_POWER_CUT.into());
                        self.apply(FaultKind::PowerCut, Duration::ZERO, 0.0);
                        return;
                    }
                    if let Err(e) = self.session.ftp_start(op, self.now) {
                        self.ftp_result = Some(Err(e));
                    }
                }
            }
        }
    }
}
