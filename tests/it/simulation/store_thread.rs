//! The daemon's store thread in the simulation: the queue the network loop hands the log to,
//! bounded as the daemon bounds it (its own [`QueueBound`]), and a store that can stall.
//!
//! A stall is a slow sync (an SD card under load, a busy eMMC): from its start to its end the
//! store does nothing, neither writes nor syncs, while the session goes on receiving and
//! acking. What comes meanwhile waits in the queue; past the queue's bound, the samples are
//! stripped and the store is told how many went, as in the daemon. When the stall ends, the
//! store writes what waited, in order. Without a stall the queue is empty after each
//! event: the store takes each at once.
//!
//! The daemon's death (a restart, a power cut) takes what still waits with it (the next
//! daemon has a new queue): it was never written. A log is held on disk to what its store wrote of it (`handed`), not to what the
//! session received.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use ulog_recv::autopilot::LogFormat;
use ulog_recv::store::queue_bound::{Keeping, QueueBound};

use super::disk::Disk;

/// What the network loop hands the store.
enum Command {
    Begin {
        /// The received log's index in the run.
        log: usize,
        vehicle: (u8, u8),
        started: SystemTime,
        format: LogFormat,
    },
    Bytes(Bytes),
    /// Samples stripped; whether a run of drops began with them.
    Lost {
        samples: u64,
        run: bool,
    },
    LinkDropout {
        chunks: u64,
        resolved: bool,
    },
    /// An event asked for (`ulog-recv event NAME`).
    Event(String),
    End,
}

/// What the store did with one log, once it took it from the queue.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Stored {
    /// Its session folder, once the store began it.
    pub dir: Option<PathBuf>,
    /// The bytes the store wrote of it, in order.
    pub handed: Vec<u8>,
    /// Runs of samples the queue's bound stripped from it (each a dropout of the store's),
    /// and where in [`handed`](Self::handed) the first was.
    pub drop_runs: u32,
    pub first_drop_at: Option<usize>,
}

/// See the module docs.
pub struct StoreThread {
    bound: QueueBound,
    waiting: VecDeque<Command>,
    /// Log bytes waiting.
    queued: usize,
    /// The received log the store is on.
    storing: Option<usize>,
    /// The store is stuck in a slow sync until then.
    pub stalled_until: Option<Instant>,
    /// The most log bytes that ever waited.
    most_queued: usize,
    limit: usize,
}

impl StoreThread {
    /// A store thread at most `limit` log bytes wait for.
    pub fn new(limit: usize) -> Self {
        Self {
            bound: QueueBound::new(limit),
            waiting: VecDeque::new(),
            queued: 0,
            storing: None,
            stalled_until: None,
            most_queued: 0,
            limit,
        }
    }

    /// Received log `log` begins.
    pub fn begin(&mut self, log: usize, vehicle: (u8, u8), started: SystemTime, format: LogFormat) {
        self.bound.begin(format);
        self.waiting.push_back(Command::Begin {
            log,
            vehicle,
            started,
            format,
        });
    }

    /// The open log's next bytes; whether they began a run of drops.
    pub fn write(&mut self, bytes: &[u8]) -> bool {
        let admitted = self.bound.admit(self.queued, Bytes::copy_from_slice(bytes));
        let run = admitted.change == Some(Keeping::Dropping);
        if admitted.lost_samples > 0 {
            self.waiting.push_back(Command::Lost {
                samples: admitted.lost_samples,
                run,
            });
        }
        if !admitted.bytes.is_empty() {
            self.queued += admitted.bytes.len();
            self.most_queued = self.most_queued.max(self.queued);
            self.waiting.push_back(Command::Bytes(admitted.bytes));
        }
        run
    }

    pub fn link_dropout(&mut self, chunks: u64, resolved: bool) {
        self.waiting
            .push_back(Command::LinkDropout { chunks, resolved });
    }

    pub fn end(&mut self) {
        self.waiting.push_back(Command::End);
    }

    /// An event asked for now: the store takes it in its turn, behind what waits.
    pub fn request_event(&mut self, name: String) {
        self.waiting.push_back(Command::Event(name));
    }

    /// The most log bytes that waited beyond the queue's bound (what is kept of a piece
    /// past it: its definitions, parameters and texts).
    pub fn most_past_bound(&self) -> usize {
        self.most_queued.saturating_sub(self.limit)
    }

    /// Samples stripped so far (over the daemon's life).
    pub fn lost_samples(&self) -> u64 {
        self.bound.lost_samples()
    }

    /// Whether nothing waits for the store.
    pub fn idle(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Whether the store is stuck at `now`.
    pub fn stalled(&self, now: Instant) -> bool {
        self.stalled_until.is_some_and(|t| t > now)
    }

    /// The store takes what waits, unless it is stuck at `now`; `logs[i]` gets what it
    /// did with received log `i`.
    pub fn run(&mut self, now: Instant, disk: &mut Disk, logs: &mut [&mut Stored]) {
        if self.stalled(now) {
            return;
        }
        self.stalled_until = None;
        while let Some(command) = self.waiting.pop_front() {
            match command {
                Command::Begin {
                    log,
                    vehicle,
                    started,
                    format,
                } => {
                    self.storing = Some(log);
                    let dir = disk.begin(vehicle, started, format);
                    if let Some(s) = logs.get_mut(log) {
                        s.dir = Some(dir);
                    }
                }
                Command::Bytes(b) => {
                    self.queued -= b.len();
                    disk.write(&b);
                    if let Some(s) = self.storing.and_then(|k| logs.get_mut(k)) {
                        s.handed.extend_from_slice(&b);
                    }
                }
                Command::Lost { samples, run } => {
                    disk.lost(samples);
                    if let Some(s) = self.storing.and_then(|k| logs.get_mut(k)) {
                        s.drop_runs += u32::from(run);
                        s.first_drop_at.get_or_insert(s.handed.len());
                    }
                }
                Command::LinkDropout { chunks, resolved } => disk.link_dropout(chunks, resolved),
                Command::Event(name) => disk.request_event(&name),
                Command::End => {
                    disk.end();
                    self.storing = None;
                }
            }
        }
    }
}
