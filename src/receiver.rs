//! The receiving daemon's shell (tokio): moves bytes between a [`Link`] and the sans-IO
//! [`Session`], runs its timers, hands each log to the [`LogStore`] (a session directory of
//! rolling splits), syncs it, rolls it on request, and measures the ack latency (from a
//! datagram's arrival to its ack's send).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::link::{Event, Session, SessionConfig, SessionStats};
use crate::store::{LogStore, StoreOptions};
use crate::transport::Link;

/// How the receiver runs.
#[derive(Debug, Clone)]
pub struct ReceiverOptions {
    pub store: StoreOptions,
    pub session: SessionConfig,
    /// How often [`Notice::Status`] is reported (and files flushed to the OS).
    pub status_interval: Duration,
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
}

/// Counters of the whole run.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Status {
    pub session: SessionStats,
    pub ack_latency: AckLatency,
    /// Bytes that could not be written (disk full, I/O error).
    pub write_errors: u64,
    /// The log session directories of the run.
    pub sessions: Vec<PathBuf>,
}

/// Time from a datagram's arrival to the send of the ack it caused, in microseconds, as a
/// histogram with 1 µs buckets up to 65 ms.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AckLatency {
    #[serde(skip)]
    buckets: Vec<u32>,
    pub count: u64,
    pub max_us: u64,
}

impl Default for AckLatency {
    fn default() -> Self {
        Self {
            buckets: vec![0; 1 << 16],
            count: 0,
            max_us: 0,
        }
    }
}

impl AckLatency {
    pub fn record(&mut self, d: Duration) {
        let us = d.as_micros().min(u64::MAX as u128) as u64;
        let i = (us as usize).min(self.buckets.len() - 1);
        self.buckets[i] += 1;
        self.count += 1;
        self.max_us = self.max_us.max(us);
    }

    /// The `q` quantile (0..=1) in microseconds; `None` before any ack.
    pub fn quantile_us(&self, q: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0u64;
        for (us, &n) in self.buckets.iter().enumerate() {
            seen += n as u64;
            if seen >= rank {
                return Some(us as u64);
            }
        }
        Some(self.max_us)
    }
}

/// Runs the receiver on `link` until `shutdown` completes; then STOP goes to the vehicle and
/// the open log is completed. Returns the run's counters.
pub async fn run(
    mut link: Link,
    options: ReceiverOptions,
    shutdown: impl std::future::Future<Output = ()>,
    roll: Arc<tokio::sync::Notify>,
    mut notify: impl FnMut(Notice<'_>),
) -> io::Result<Status> {
    let mut store = LogStore::open(options.store.clone())?;
    let mut session = Session::new(options.session.clone(), Instant::now());
    let mut status = Status::default();
    let mut buf = Vec::with_capacity(crate::transport::MAX_READ);
    let mut tick = tokio::time::interval(options.status_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sync = tokio::time::interval(options.store.fsync_interval);
    sync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(shutdown);
    loop {
        let wake = session
            .poll_timeout()
            .map(tokio::time::Instant::from_std)
            .unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(3600));
        tokio::select! {
            biased;
            _ = &mut shutdown => break,
            r = link.recv(&mut buf) => {
                let n = r?;
                let arrived = Instant::now();
                let acks_before = session.stats().acks_sent;
                session.handle_bytes(&buf[..n], arrived);
                // Drain what else is waiting without going back to the runtime.
                for _ in 0..64 {
                    match link.try_recv(&mut buf) {
                        Some(n) => session.handle_bytes(&buf[..n], Instant::now()),
                        None => break,
                    }
                }
                let acked = session.stats().acks_sent > acks_before;
                transmit(&mut session, &mut link).await;
                if acked {
                    status.ack_latency.record(arrived.elapsed());
                }
            }
            _ = tokio::time::sleep_until(wake) => {
                session.handle_timeout(Instant::now());
                transmit(&mut session, &mut link).await;
            }
            _ = sync.tick() => {
                if let Err(e) = store.tick(Instant::now()) {
                    tracing::error!(error = %e, "cannot sync the log");
                }
            }
            _ = roll.notified() => {
                tracing::info!("rolling to a new split");
                store.roll();
            }
            _ = tick.tick() => {
                status.session = session.stats();
                notify(Notice::Status(&status));
            }
        }
        handle_events(&mut session, &mut store, &mut status, &mut notify);
    }
    session.shutdown(Instant::now());
    transmit(&mut session, &mut link).await;
    handle_events(&mut session, &mut store, &mut status, &mut notify);
    status.session = session.stats();
    Ok(status)
}

async fn transmit(session: &mut Session, link: &mut Link) {
    while let Some(frame) = session.poll_transmit() {
        link.send(&frame).await;
    }
}

fn handle_events(
    session: &mut Session,
    store: &mut LogStore,
    status: &mut Status,
    notify: &mut impl FnMut(Notice<'_>),
) {
    while let Some(event) = session.poll_event() {
        match &event {
            Event::LogOpened { .. } => {
                let vehicle = session.vehicle().unwrap_or((0, 0));
                match store.begin_log(vehicle, SystemTime::now()) {
                    Ok(dir) => {
                        tracing::info!(dir = %dir.display(), "log session opened");
                        notify(Notice::SessionOpened(&dir));
                        status.sessions.push(dir);
                    }
                    Err(e) => tracing::error!(error = %e, "cannot create a log session"),
                }
            }
            Event::LogBytes(bytes) => {
                if let Err(e) = store.write(bytes) {
                    status.write_errors += bytes.len() as u64;
                    tracing::error!(error = %e, bytes = bytes.len(), "cannot write the log");
                }
            }
            Event::LogClosed { .. } => match store.end_log() {
                Ok(Some(dir)) => {
                    tracing::info!(dir = %dir.display(), "log session closed");
                    notify(Notice::SessionClosed(&dir));
                }
                Ok(None) => {}
                Err(e) => tracing::error!(error = %e, "cannot complete the log session"),
            },
            _ => {}
        }
        notify(Notice::Event(&event));
    }
}
