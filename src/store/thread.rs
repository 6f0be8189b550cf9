//! The [`LogStore`] on a thread of its own (blocking I/O), fed by the network loop through a
//! queue bounded in bytes that never makes the network loop wait.
//!
//! - Group commit: the thread writes everything queued and hands it to the OS (a crash of the
//!   process then loses nothing written), then syncs once per `fsync_interval`: a slow fsync
//!   (an SD card under load) delays durability, never throughput.
//! - The bound: when the log bytes waiting would pass [`StoreThread::spawn`]'s limit, the
//!   network loop strips the samples from what it hands over (definitions, parameters, logged
//!   strings go on) and marks the loss ([`QueueBound`]); the store writes a dropout there
//!   whose duration the samples around it tell ([`crate::ulog::gaps`]). Memory stays bounded whatever the card
//!   does, and acks and heartbeats go on.
//! - Start-up recovery of what a crash left runs first on the thread, so the network loop
//!   (and the watchdog) start at once; what arrives meanwhile waits in the queue.
//! - [`StoreThread::stats`] tells what waits, what was dropped, and how long the current step
//!   (a write, a sync) has taken: a stalled card shows in the status line, not as a restart.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use bytes::{Bytes, BytesMut};

use crate::autopilot::LogFormat;
use crate::store::events::{EventOutcome, EventRequest};
use crate::store::queue_bound::{Keeping, QueueBound};
use crate::store::{LogStore, StoreOptions};

/// The store thread's niceness: below the network loop (acks first).
const STORE_NICENESS: i32 = 5;

/// How often the thread wakes up when nothing comes, to sync and keep the budget.
const WAKE_UP: Duration = Duration::from_millis(100);

/// Warnings about dropped samples come at most this often.
const DROP_WARNING_REPEAT: Duration = Duration::from_secs(60);

/// What the network loop asks of the store thread.
enum Command {
    Begin {
        vehicle: (u8, u8),
        started: SystemTime,
        format: LogFormat,
    },
    Bytes(Bytes),
    /// Samples were dropped before the next bytes.
    Lost(u64),
    /// The link marked a dropout: the chunks it lost, and whether a sample came after it.
    LinkDropout {
        chunks: u64,
        resolved: bool,
    },
    End,
    Roll,
    Reconfigure(Box<StoreOptions>),
    Event(EventRequest),
}

/// What the store thread did, for the network loop to tell.
#[derive(Debug)]
pub enum StoreReport {
    /// A log session directory was created.
    Opened(PathBuf),
    /// A log session was completed and synced.
    Closed(PathBuf),
    /// Bytes that could not be written (disk full, I/O error).
    WriteError { bytes: u64 },
    /// An event was entered in the manifest (a trigger fired, or one was asked for), or
    /// refused.
    Event(EventOutcome),
}

/// The store's counters and state, for the status line and the live socket's `stats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct StorageStats {
    /// Log bytes waiting for the store thread.
    pub queued_bytes: u64,
    /// Samples dropped because the queue was full (the disk could not keep up).
    pub lost_samples: u64,
    /// Runs of such drops (each a dropout in the log).
    pub drop_runs: u64,
    /// How long the store thread has been on one step (a write, a sync), when over a second.
    pub stalled_ms: Option<u64>,
    /// Start-up recovery is running.
    pub recovering: bool,
    /// Writing is paused by a failure (the disk is full) until there is room.
    pub paused: bool,
}

/// Shared between the threads: what the store thread is doing.
#[derive(Debug)]
struct Health {
    epoch: Instant,
    /// Microseconds after `epoch` at which the current step began, plus one; 0 when idle.
    busy_since: AtomicU64,
    queued: AtomicUsize,
    recovering: AtomicBool,
    paused: AtomicBool,
}

impl Health {
    fn busy(&self) {
        let us = self.epoch.elapsed().as_micros() as u64 + 1;
        self.busy_since.store(us, Ordering::Relaxed);
    }

    fn idle(&self) {
        self.busy_since.store(0, Ordering::Relaxed);
    }
}

/// See the module docs.
pub struct StoreThread {
    tx: Option<mpsc::Sender<Command>>,
    reports: mpsc::Receiver<StoreReport>,
    handle: Option<std::thread::JoinHandle<()>>,
    health: Arc<Health>,
    bound: QueueBound,
    last_drop_warning: Option<Instant>,
}

impl StoreThread {
    /// Starts the thread: it recovers what a crash left in the log directory, then writes
    /// what it is handed. At most `queue_limit` bytes of samples wait for it.
    pub fn spawn(mut store: LogStore, queue_limit: usize) -> Self {
        let (tx, rx) = mpsc::channel::<Command>();
        let (report_tx, reports) = mpsc::channel();
        let health = Arc::new(Health {
            epoch: Instant::now(),
            busy_since: AtomicU64::new(0),
            queued: AtomicUsize::new(0),
            recovering: AtomicBool::new(true),
            paused: AtomicBool::new(false),
        });
        let shared = health.clone();
        let handle = std::thread::Builder::new()
            .name("ulog-recv-store".into())
            .spawn(move || {
                // Below the network thread: when both want the CPU, the acks come first (the
                // queue absorbs the wait).
                crate::sys::os::lower_thread_priority(STORE_NICENESS);
                store.recover();
                shared.recovering.store(false, Ordering::Relaxed);
                loop {
                    match rx.recv_timeout(WAKE_UP) {
                        Ok(command) => apply(&mut store, command, &report_tx, &shared),
                        Err(mpsc::RecvTimeoutError::Timeout) => {}
                        Err(mpsc::RecvTimeoutError::Disconnected) => break,
                    }
                    // Group commit: everything queued is written before the next sync.
                    while let Ok(command) = rx.try_recv() {
                        apply(&mut store, command, &report_tx, &shared);
                    }
                    shared.busy();
                    // To the OS at once (a crash of the process loses nothing written), to the
                    // disk once per fsync interval.
                    if let Err(e) = store.flush() {
                        tracing::error!(error = %e, "cannot write the log");
                    }
                    if let Err(e) = store.tick(Instant::now()) {
                        tracing::error!(error = %e, "cannot sync the log");
                    }
                    shared.paused.store(store.is_paused(), Ordering::Relaxed);
                    shared.idle();
                }
                shared.busy();
                if let Ok(Some(dir)) = store.end_log() {
                    let _ = report_tx.send(StoreReport::Closed(dir));
                }
                shared.idle();
            })
            .expect("spawn the store thread");
        Self {
            tx: Some(tx),
            reports,
            handle: Some(handle),
            health,
            bound: QueueBound::new(queue_limit),
            last_drop_warning: None,
        }
    }

    /// A new log session for `vehicle`, whose log is in `format`.
    pub fn begin(&mut self, vehicle: (u8, u8), started: SystemTime, format: LogFormat) {
        self.bound.begin(format);
        self.send(Command::Begin {
            vehicle,
            started,
            format,
        });
    }

    /// The log's next bytes (whole messages; the file header first). Never waits: past the
    /// queue's bound, the samples are stripped and the loss marked ([`QueueBound`]).
    pub fn write(&mut self, bytes: Bytes) {
        let queued = self.health.queued.load(Ordering::Relaxed);
        let admitted = self.bound.admit(queued, bytes);
        match admitted.change {
            Some(Keeping::Dropping)
                if self
                    .last_drop_warning
                    .is_none_or(|t| t.elapsed() >= DROP_WARNING_REPEAT) =>
            {
                self.last_drop_warning = Some(Instant::now());
                tracing::warn!(
                    waiting = queued,
                    "the storage cannot keep up: samples are dropped (a dropout in the log \
                     says how long); receiving goes on"
                );
            }
            Some(Keeping::KeepsUpAgain) => tracing::info!(
                lost_samples = self.bound.lost_samples(),
                "the storage keeps up again"
            ),
            _ => {}
        }
        if admitted.lost_samples > 0 {
            self.send(Command::Lost(admitted.lost_samples));
        }
        if admitted.bytes.is_empty() {
            return;
        }
        let len = admitted.bytes.len();
        self.health.queued.fetch_add(len, Ordering::Relaxed);
        self.send(Command::Bytes(admitted.bytes));
    }

    /// The link marked a dropout in the open log that lost `chunks`; `resolved`: a sample
    /// came after it (one that none did is the stream's end lost, and the manifest says
    /// how much).
    pub fn link_dropout(&mut self, chunks: u64, resolved: bool) {
        self.send(Command::LinkDropout { chunks, resolved });
    }

    /// The open log ends.
    pub fn end(&mut self) {
        self.send(Command::End);
    }

    /// A new split before the next sample.
    pub fn roll(&mut self) {
        self.send(Command::Roll);
    }

    /// New storage options (not the directory).
    pub fn reconfigure(&mut self, options: StoreOptions) {
        self.send(Command::Reconfigure(Box::new(options)));
    }

    /// An event asked for from outside; its outcome comes as a [`StoreReport::Event`].
    pub fn event(&mut self, request: EventRequest) {
        self.send(Command::Event(request));
    }

    fn send(&self, command: Command) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(command);
        }
    }

    /// What the store thread did since the last call.
    pub fn reports(&self) -> impl Iterator<Item = StoreReport> + '_ {
        self.reports.try_iter()
    }

    /// The counters and state now.
    pub fn stats(&self) -> StorageStats {
        let busy = self.health.busy_since.load(Ordering::Relaxed);
        let stalled_ms = (busy > 0)
            .then(|| {
                let since = self.health.epoch + Duration::from_micros(busy - 1);
                since.elapsed().as_millis() as u64
            })
            .filter(|&ms| ms >= 1000);
        StorageStats {
            queued_bytes: self.health.queued.load(Ordering::Relaxed) as u64,
            lost_samples: self.bound.lost_samples(),
            drop_runs: self.bound.drop_runs(),
            stalled_ms,
            recovering: self.health.recovering.load(Ordering::Relaxed),
            paused: self.health.paused.load(Ordering::Relaxed),
        }
    }

    /// Lets the thread write everything queued, close the log, and stop; returns its last
    /// reports.
    pub fn finish(mut self) -> Vec<StoreReport> {
        self.tx = None;
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        self.reports.try_iter().collect()
    }
}

fn apply(
    store: &mut LogStore,
    command: Command,
    reports: &mpsc::Sender<StoreReport>,
    health: &Health,
) {
    health.busy();
    match command {
        Command::Begin {
            vehicle,
            started,
            format,
        } => match store.begin_log(vehicle, started, format) {
            Ok(dir) => {
                tracing::info!(dir = %dir.display(), "log session opened");
                let _ = reports.send(StoreReport::Opened(dir));
            }
            Err(e) => tracing::error!(error = %e, "cannot create a log session"),
        },
        Command::Bytes(bytes) => {
            if let Err(e) = store.write(&bytes) {
                tracing::error!(error = %e, bytes = bytes.len(), "cannot write the log");
                let _ = reports.send(StoreReport::WriteError {
                    bytes: bytes.len() as u64,
                });
            }
            health.queued.fetch_sub(bytes.len(), Ordering::Relaxed);
        }
        Command::Lost(samples) => store.lost(samples),
        Command::LinkDropout { chunks, resolved } => store.link_dropout(chunks, resolved),
        Command::End => match store.end_log() {
            Ok(Some(dir)) => {
                tracing::info!(dir = %dir.display(), "log session closed");
                let _ = reports.send(StoreReport::Closed(dir));
            }
            Ok(None) => {}
            Err(e) => tracing::error!(error = %e, "cannot complete the log session"),
        },
        Command::Roll => store.roll(),
        Command::Reconfigure(options) => store.reconfigure(*options),
        Command::Event(request) => {
            if let Err(why) = store.request_event(&request.name, request.after_us) {
                tracing::warn!(name = %request.name, "event refused: {why}");
                let _ = reports.send(StoreReport::Event(EventOutcome::Refused {
                    name: request.name,
                    reason: why.to_string(),
                }));
            }
        }
    }
    for e in store.take_events() {
        let _ = reports.send(StoreReport::Event(EventOutcome::Recorded(e)));
    }
    health.idle();
}

/// Gathers log bytes for a thread behind a queue bounded in bytes: one hand-over per batch,
/// not per datagram.
///
/// What it hands over is a copy of exactly the gathered length (its buffer stays for the next
/// batch): a queue counts [`Bytes::len`], and a slice of a larger, shared allocation would
/// hold memory the count does not see.
#[derive(Debug, Default)]
pub struct Batch {
    bytes: BytesMut,
}

impl Batch {
    /// Appends the log's next bytes.
    pub fn extend(&mut self, bytes: &[u8]) {
        self.bytes.extend_from_slice(bytes);
    }

    /// How many bytes wait.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// What was gathered, in an allocation of its own length; `None` when nothing was.
    pub fn take(&mut self) -> Option<Bytes> {
        if self.bytes.is_empty() {
            return None;
        }
        let taken = Bytes::copy_from_slice(&self.bytes);
        self.bytes.clear();
        Some(taken)
    }

    /// Appends the log's next bytes; hands the batch to `store` once it is worth it.
    pub fn push(&mut self, bytes: &[u8], store: &mut StoreThread) {
        self.extend(bytes);
        if self.len() >= BATCH_BYTES {
            self.hand_over(store);
        }
    }

    /// Hands what was gathered to `store`.
    pub fn hand_over(&mut self, store: &mut StoreThread) {
        if let Some(bytes) = self.take() {
            store.write(bytes);
        }
    }
}

/// A batch is handed over once this big (or when the network loop's timer says).
pub const BATCH_BYTES: usize = 256 << 10;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_hands_over_what_it_gathered_in_an_allocation_of_that_size() {
        let mut batch = Batch::default();
        for i in 0..1000u32 {
            batch.extend(&[i as u8; 249]);
        }
        let taken = batch.take().expect("gathered");
        assert_eq!(taken.len(), 249_000);
        assert_eq!(&taken[249 * 999..], &[231u8; 249][..]);
        // The queue counts the length: the allocation is that, and nothing else shares it.
        let owned = taken
            .try_into_mut()
            .expect("the batch keeps no handle on it");
        assert_eq!(owned.capacity(), 249_000);
        assert!(batch.is_empty());
        assert!(batch.take().is_none());
        batch.extend(b"next");
        assert_eq!(&batch.take().unwrap()[..], b"next");
    }
}
