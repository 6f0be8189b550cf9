//! The receiving daemon's shell (tokio): moves bytes between a [`Link`] and the sans-IO
//! [`Session`] (telling a listening UDP link which datagrams came from the vehicle), runs its
//! timers, hands each log to the [`LogStore`] (a session directory of rolling splits) on a
//! thread of its own, rolls it on request, and measures the ack latency (from a datagram's
//! arrival to its ack's send). When publishing, the log bytes and events also go to the live
//! socket's thread through a [`PublishFeed`], once per loop turn. With MAVLink signing it
//! keeps the signing clock's [`Reservation`] ahead on disk, off the loop.
//!
//! On shutdown the session's STOP handshake runs to its end (the vehicle's last data goes
//! into the log) before the log is completed.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use mavlink::dialects::ardupilotmega::MavSeverity;

use crate::diagnose::{Finding, FindingFilter, Severity};
use crate::link::ftp::{FtpError, FtpReply, FtpStats};
use crate::link::{Event, Session, SessionConfig, SessionStats};
use crate::live::thread::PublishFeed;
use crate::monitor::catalogue;
use crate::shell::keyfile::Reservation;
use crate::shell::transport::{Link, LinkStats, Received};
use crate::shell::vehicle_files::FtpRequest;
use crate::store::events::{EventOutcome, EventRecord, EventRequest};
use crate::store::thread::{Batch, StorageStats, StoreReport, StoreThread};
use crate::store::{LogStore, StoreError, StoreOptions};
use crate::sys::latency::LatencyHistogram;
use crate::upload::UploadStatus;

/// How the receiver runs.
#[derive(Debug)]
pub struct ReceiverOptions {
    pub store: StoreOptions,
    pub session: SessionConfig,
    /// How often [`Notice::Status`] is reported (the daemon sends systemd its status and
    /// watchdog pings from it, so a stuck loop shows).
    pub status_interval: Duration,
    /// Where to publish the log live (the live socket's server), if anywhere. It is
    /// dropped when the receiver returns, which stops the server.
    pub publish: Option<PublishFeed>,
    /// With MAVLink signing: the signing clock's reservation on disk, renewed as it is used.
    pub signing_reservation: Option<Reservation>,
    /// Log bytes that may wait for the store thread (see [`StoreThread`]).
    pub store_queue_bytes: usize,
    /// The uploader's state, when uploads are on: published with the counters.
    pub uploads: Option<Arc<Mutex<UploadStatus>>>,
    /// MAVLink FTP operations to run on the session, one at a time (the fill's, see
    /// [`crate::shell::fill`]).
    pub ftp: Option<tokio::sync::mpsc::UnboundedReceiver<FtpRequest>>,
    /// Events asked for on the live socket, for the store.
    pub event_requests: Option<tokio::sync::mpsc::UnboundedReceiver<EventRequest>>,
    /// The findings of the flight diagnostics told to the ground station, as a STATUSTEXT
    /// from our component ([`Session::send_status_text`]); none by default.
    pub diagnostics_statustext: FindingFilter,
}

/// Why the receiver stopped other than by its shutdown.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The link failed for good (a closed socket).
    #[error("the link failed: {0}")]
    Link(#[from] io::Error),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What the receiver reports to its caller, as it happens.
#[derive(Debug)]
pub enum Notice<'a> {
    Event(&'a Event),
    /// A log session directory was created.
    SessionOpened(&'a Path),
    /// A log session was completed and synced to disk.
    SessionClosed(&'a Path),
    Status(&'a Status),
    /// An event was entered in the open session's manifest (a trigger, a request, a finding
    /// of the flight diagnostics).
    Recorded(&'a EventRecord),
}

/// Counters of the whole run.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Status {
    pub session: SessionStats,
    pub link: LinkStats,
    /// From a datagram's arrival to the send of the ack it caused.
    pub ack_latency: LatencyHistogram,
    /// Bytes that could not be written (disk full, I/O error).
    pub write_errors: u64,
    /// The store thread: what waits, what was dropped, a stall.
    pub storage: StorageStats,
    /// The log session directories of the run.
    pub sessions: Vec<PathBuf>,
}

/// What the receiver can be asked while it runs (SIGHUP).
#[derive(Debug)]
pub enum Control {
    /// Start a new split before the next sample.
    Roll,
    /// New storage options (split policy, sync interval, budget; not the directory).
    Reconfigure(Box<StoreOptions>),
}

/// Runs the receiver on `link` until `shutdown` completes and the STOP handshake that follows
/// is over; the open log is then completed. Returns the run's counters.
pub async fn run(
    mut link: Link,
    options: ReceiverOptions,
    shutdown: impl std::future::Future<Output = ()>,
    mut control: tokio::sync::mpsc::UnboundedReceiver<Control>,
    mut notify: impl FnMut(Notice<'_>),
) -> Result<Status, RunError> {
    let mut store = StoreThread::spawn(
        LogStore::open(options.store.clone())?,
        options.store_queue_bytes,
    );
    let mut session = Session::new(options.session.clone(), Instant::now());
    let mut status = Status::default();
    let mut buf = Vec::with_capacity(crate::shell::transport::MAX_READ);
    let mut tick = tokio::time::interval(options.status_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut hand_over = tokio::time::interval(HAND_OVER_INTERVAL);
    hand_over.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut batch = Batch::default();
    let mut publish = options.publish;
    let mut publish_tick = tokio::time::interval(PUBLISH_STATS_INTERVAL);
    publish_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut reservation = ReservationKeeper {
        reservation: options.signing_reservation,
        ..ReservationKeeper::default()
    };
    let mut stopping = false;
    // The exposition's histogram (nothing without one installed).
    let ack_latency = metrics::histogram!(catalogue::ACK_LATENCY.name);
    let mut ftp = options.ftp;
    let mut event_requests = options.event_requests;
    let mut ftp_pending: Option<FtpAnswer> = None;
    tokio::pin!(shutdown);
    loop {
        // When the first datagram of this loop turn arrived (what log bytes are timed from).
        let mut turn_arrived = None;
        let wake = session
            .poll_timeout()
            .map(tokio::time::Instant::from_std)
            .unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(3600));
        tokio::select! {
            biased;
            _ = &mut shutdown, if !stopping => {
                stopping = true;
                session.shutdown(Instant::now());
                transmit(&mut session, &mut link).await;
            }
            r = link.recv(&mut buf) => {
                let mut read = r?;
                // Take what else is waiting (up to 64 more reads) without going back to the
                // runtime; an ack goes out as soon as the read that asked for it is handled.
                for more in (0..=64).rev() {
                    let arrived = Instant::now();
                    turn_arrived.get_or_insert(arrived);
                    let acks_before = session.acks_sent();
                    receive(&mut session, &mut link, &buf, read, arrived);
                    if session.acks_sent() > acks_before {
                        transmit(&mut session, &mut link).await;
                        let latency = arrived.elapsed();
                        status.ack_latency.record(latency);
                        ack_latency.record(latency);
                    }
                    if more == 0 {
                        break;
                    }
                    match link.try_recv(&mut buf) {
                        Some(r) => read = r,
                        None => break,
                    }
                }
                transmit(&mut session, &mut link).await;
            }
            _ = tokio::time::sleep_until(wake) => {
                session.handle_timeout(Instant::now());
                transmit(&mut session, &mut link).await;
            }
            Some(c) = control.recv() => {
                batch.hand_over(&mut store);
                match c {
                    Control::Roll => {
                        tracing::info!("rolling to a new split");
                        store.roll();
                    }
                    Control::Reconfigure(options) => {
                        tracing::info!(?options, "storage options reloaded");
                        store.reconfigure(*options);
                    }
                }
            }
            Some((op, answer)) = next_ftp(&mut ftp), if ftp_pending.is_none() && !stopping => {
                match session.ftp_start(op, Instant::now()) {
                    Ok(()) => ftp_pending = Some(answer),
                    Err(e) => {
                        let _ = answer.send((Err(e), session.ftp_stats()));
                    }
                }
                transmit(&mut session, &mut link).await;
            }
            Some(request) = next_request(&mut event_requests) => {
                // The log bytes received so far first: the event's log time is theirs.
                batch.hand_over(&mut store);
                store.event(request);
            }
            _ = hand_over.tick() => batch.hand_over(&mut store),
            _ = tick.tick() => {
                status.session = session.stats();
                status.link = link.stats();
                status.storage = store.stats();
                notify(Notice::Status(&status));
                reservation.tick(&session).await;
            }
            _ = publish_tick.tick(), if publish.is_some() => {
                if let Some(p) = publish.as_mut() {
                    if let Some(u) = &options.uploads {
                        p.uploads(u.lock().expect("upload status lock").clone());
                    }
                    p.stats(session.stats(), store.stats());
                }
            }
        }
        let arrived = turn_arrived.unwrap_or_else(Instant::now);
        handle_events(
            &mut session,
            &mut store,
            &mut batch,
            publish.as_mut(),
            arrived,
            &mut ftp_pending,
            &mut notify,
        );
        if let Some(p) = publish.as_mut() {
            p.flush();
        }
        for r in store.reports() {
            tell_ground_station(&r, options.diagnostics_statustext, &mut session);
            report(r, &mut status, publish.as_mut(), &mut notify);
        }
        transmit(&mut session, &mut link).await;
        if session.is_closed() {
            break;
        }
    }
    handle_events(
        &mut session,
        &mut store,
        &mut batch,
        publish.as_mut(),
        Instant::now(),
        &mut ftp_pending,
        &mut notify,
    );
    if let Some(p) = publish.as_mut() {
        p.stats(session.stats(), store.stats());
    }
    batch.hand_over(&mut store);
    status.storage = store.stats();
    for r in store.finish() {
        report(r, &mut status, publish.as_mut(), &mut notify);
    }
    // The live server stops once its feed is gone.
    drop(publish);
    status.session = session.stats();
    status.link = link.stats();
    reservation.finish().await;
    Ok(status)
}

/// Hands one received read to the session, and tells the link whether the vehicle spoke in it.
fn receive(session: &mut Session, link: &mut Link, buf: &[u8], r: Received, now: Instant) {
    let bytes = &buf[..r.len];
    let authentic = match r.from {
        Some(_) => session.handle_datagram(bytes, now),
        None => {
            session.handle_bytes(bytes, now);
            false
        }
    };
    link.datagram_checked(r, authentic, now);
}

/// Keeps the signing clock's reservation ahead of the session's timestamps: writes the
/// renewal on a blocking thread (an fsync on a slow card must not hold up the acks), one at a
/// time; a failure is told once, and again only after a success.
#[derive(Default)]
struct ReservationKeeper {
    reservation: Option<Reservation>,
    renewing: Option<tokio::task::JoinHandle<(Reservation, io::Result<()>)>>,
    failing: bool,
}

impl ReservationKeeper {
    async fn tick(&mut self, session: &Session) {
        if self.renewing.as_ref().is_some_and(|h| h.is_finished())
            && let Some(h) = self.renewing.take()
            && let Ok((r, result)) = h.await
        {
            match result {
                Err(e) if !self.failing => {
                    tracing::error!(error = %e, "cannot renew the signing timestamp reservation");
                    self.failing = true;
                }
                Err(_) => {}
                Ok(()) => self.failing = false,
            }
            self.reservation = Some(r);
        }
        let Some(timestamp) = session.signing_timestamp(Instant::now()) else {
            return;
        };
        if let Some(until) = self.reservation.as_ref().and_then(|r| r.renewal(timestamp))
            && let Some(mut r) = self.reservation.take()
        {
            self.renewing = Some(tokio::task::spawn_blocking(move || {
                let result = r.write(until);
                (r, result)
            }));
        }
    }

    /// Waits for a write in flight.
    async fn finish(mut self) {
        if let Some(h) = self.renewing.take() {
            let _ = h.await;
        }
    }
}

/// Where an FTP operation's result goes.
type FtpAnswer = tokio::sync::oneshot::Sender<(Result<FtpReply, FtpError>, FtpStats)>;

/// The next FTP operation asked for; never, without a way to ask.
async fn next_ftp(
    ftp: &mut Option<tokio::sync::mpsc::UnboundedReceiver<FtpRequest>>,
) -> Option<FtpRequest> {
    match ftp {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

async fn next_request(
    requests: &mut Option<tokio::sync::mpsc::UnboundedReceiver<EventRequest>>,
) -> Option<EventRequest> {
    match requests {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

async fn transmit(session: &mut Session, link: &mut Link) {
    while let Some(frame) = session.poll_transmit() {
        link.send(&frame).await;
    }
}

/// Log bytes wait at most this long before they go to the store thread (or until a batch is
/// full).
const HAND_OVER_INTERVAL: Duration = Duration::from_millis(50);

/// How often the live socket's clients get the session's counters.
const PUBLISH_STATS_INTERVAL: Duration = Duration::from_secs(1);

/// Hands the session's log events to the store thread (log bytes in batches) and to the
/// live socket (log bytes taken as arrived at `arrived`); reports them all.
fn handle_events(
    session: &mut Session,
    store: &mut StoreThread,
    batch: &mut Batch,
    mut publish: Option<&mut PublishFeed>,
    arrived: Instant,
    ftp_pending: &mut Option<FtpAnswer>,
    notify: &mut impl FnMut(Notice<'_>),
) {
    while let Some(event) = session.poll_event() {
        if let Event::Ftp(result) = event {
            if let Some(answer) = ftp_pending.take() {
                let _ = answer.send((result, session.ftp_stats()));
            }
            continue;
        }
        if let Some(p) = publish.as_deref_mut() {
            match &event {
                Event::LogBytes(bytes) => p.log_bytes(bytes, arrived),
                other => p.event(other),
            }
        }
        match &event {
            Event::LogOpened { format, .. } => {
                batch.hand_over(store);
                store.begin(
                    session.vehicle().unwrap_or((0, 0)),
                    SystemTime::now(),
                    *format,
                );
            }
            Event::LogBytes(bytes) => batch.push(bytes, store),
            Event::Dropout {
                lost_chunks,
                duration_ms,
            } => store.link_dropout(*lost_chunks, duration_ms.is_some()),
            Event::LogClosed { .. } => {
                batch.hand_over(store);
                store.end();
            }
            _ => {}
        }
        notify(Notice::Event(&event));
    }
}

/// A finding the store made, as a text for the ground station when `filter` takes it.
fn tell_ground_station(r: &StoreReport, filter: FindingFilter, session: &mut Session) {
    if let StoreReport::Event(EventOutcome::Recorded(record)) = r
        && let Some(finding) = &record.finding
        && filter.takes(finding)
    {
        let (severity, text) = status_text(finding);
        if session.send_status_text(severity, &text, Instant::now()) {
            tracing::info!(?severity, text = %text, "STATUSTEXT for the ground station");
        } else {
            tracing::warn!(finding = %finding.summary, "not told the ground station: too many texts wait");
        }
    }
}

/// A finding as a STATUSTEXT: its severity in MAVLink's terms, its brief line named as ours.
pub fn status_text(finding: &Finding) -> (MavSeverity, String) {
    let severity = match finding.severity {
        Severity::Critical => MavSeverity::MAV_SEVERITY_CRITICAL,
        Severity::Warning => MavSeverity::MAV_SEVERITY_WARNING,
        Severity::Info => MavSeverity::MAV_SEVERITY_INFO,
    };
    (severity, format!("ulog-recv: {}", finding.brief()))
}

/// Tells what the store thread did.
fn report(
    r: StoreReport,
    status: &mut Status,
    publish: Option<&mut PublishFeed>,
    notify: &mut impl FnMut(Notice<'_>),
) {
    match r {
        StoreReport::Opened(dir) => {
            notify(Notice::SessionOpened(&dir));
            status.sessions.push(dir);
        }
        StoreReport::Closed(dir) => notify(Notice::SessionClosed(&dir)),
        StoreReport::WriteError { bytes } => status.write_errors += bytes,
        StoreReport::Event(outcome) => {
            if let EventOutcome::Recorded(record) = &outcome {
                notify(Notice::Recorded(record));
            }
            if let EventOutcome::Recorded(record) = &outcome
                && let Some(finding) = &record.finding
            {
                metrics::counter!(
                    catalogue::FINDINGS.name,
                    "analyzer" => finding.id.as_str(),
                    "severity" => finding.severity.as_str()
                )
                .increment(1);
            }
            if let Some(p) = publish {
                p.event_outcome(outcome);
            }
        }
    }
}
