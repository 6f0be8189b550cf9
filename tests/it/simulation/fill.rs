//! The fill in the simulation: once the flight is over and its last log closed, the daemon's
//! `--fill auto` fills each closed session whose fill never ran, oldest first, from the
//! simulated PX4's SD log over MAVLink FTP. The fill is the receiver's own
//! ([`fill_session_timed`]), its future polled here as the daemon's fill thread would run it;
//! each FTP operation it asks for, the world runs on the link session, as the daemon's loop
//! does ([`FillRun`]). A power cut may come between two operations: the restarted daemon
//! fills again what its manifest says is not done.
//!
//! Judged ([`check`]): a fill never changes a split; a filled session holds the SD log's
//! records in its order, each at most once, none invented; a fill that left no gap unfilled
//! holds all of them.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use sha2::{Digest, Sha256};
use ulog_recv::link::ftp::{FtpError, FtpOp, FtpReply, FtpStats};
use ulog_recv::shell::fill::{FillError, FillReport, fill_session_timed};
use ulog_recv::shell::vehicle_files::{FtpRequest, SharedFiles, VehicleFiles};

use crate::common::ulog_records;

type Answer = tokio::sync::oneshot::Sender<(Result<FtpReply, FtpError>, FtpStats)>;
type Filling = Pin<Box<dyn Future<Output = Result<FillReport, FillError>>>>;

/// One session's fill under way.
pub struct FillRun {
    pub dir: PathBuf,
    fill: Filling,
    requests: tokio::sync::mpsc::UnboundedReceiver<FtpRequest>,
    /// Where the answer to the operation being run goes.
    waiting: Option<Answer>,
    /// The simulated time the fill's clock reads.
    clock: Rc<Cell<Instant>>,
    /// The session's splits as the fill found them: name and SHA-256.
    splits_before: BTreeMap<String, [u8; 32]>,
}

/// What a fill asks of the world next.
pub enum Step {
    /// It is over.
    Done(Box<Filled>),
    /// Run this FTP operation on the link session, and [`answer`](FillRun::answer) it.
    Run(FtpOp),
    /// Its operation is still running.
    Waiting,
}

/// One fill that ran to its end.
pub struct Filled {
    pub dir: PathBuf,
    pub result: Result<FillReport, String>,
    splits_before: BTreeMap<String, [u8; 32]>,
}

/// The split files of the session in `dir`, each with its SHA-256.
fn splits_of(dir: &Path) -> BTreeMap<String, [u8; 32]> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return BTreeMap::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("split_"))
        .filter_map(|n| {
            let bytes = std::fs::read(dir.join(&n)).ok()?;
            Some((n, Sha256::digest(&bytes).into()))
        })
        .collect()
}

impl FillRun {
    /// The fill of the session in `dir`, begun at `now`.
    pub fn start(dir: PathBuf, now: Instant) -> Self {
        let (tx, requests) = tokio::sync::mpsc::unbounded_channel();
        let clock = Rc::new(Cell::new(now));
        let read_clock = clock.clone();
        let fill_dir = dir.clone();
        let fill = Box::pin(async move {
            let mut files = VehicleFiles::shared(SharedFiles::new(tx));
            let clock = move || read_clock.get();
            fill_session_timed(&fill_dir, &mut files, &clock).await
        });
        Self {
            splits_before: splits_of(&dir),
            dir,
            fill,
            requests,
            waiting: None,
            clock,
        }
    }

    /// The operation being run is over: `result`, the session's FTP counters then.
    pub fn answer(&mut self, result: Result<FtpReply, FtpError>, stats: FtpStats) {
        let answer = self.waiting.take().expect("an operation was being run");
        let _ = answer.send((result, stats));
    }

    /// Runs the fill at `now` until it is over or waits for an FTP operation.
    pub fn step(&mut self, now: Instant) -> Step {
        if self.waiting.is_some() {
            return Step::Waiting;
        }
        self.clock.set(now);
        let mut cx = Context::from_waker(Waker::noop());
        if let Poll::Ready(result) = self.fill.as_mut().poll(&mut cx) {
            return Step::Done(Box::new(Filled {
                dir: self.dir.clone(),
                result: result.map_err(|e| e.to_string()),
                splits_before: std::mem::take(&mut self.splits_before),
            }));
        }
        let (op, answer) = (self.requests.try_recv())
            .expect("a fill that waits, waits for an FTP operation (nothing else)");
        self.waiting = Some(answer);
        Step::Run(op)
    }
}

/// The first broken promise of the fills that ran to their end (the last of each session's),
/// against the vehicle's SD log `sd`; sessions the disk budget deleted are not judged.
pub fn check(fills: &[Filled], sd: &[u8], deleted: &[PathBuf]) -> Result<(), String> {
    let sd_records = ulog_records(sd);
    let mut last: BTreeMap<&Path, &Filled> = BTreeMap::new();
    for f in fills {
        last.insert(&f.dir, f);
    }
    for (dir, filled) in last {
        if deleted.iter().any(|d| d == dir) {
            continue;
        }
        let name = dir.file_name().unwrap_or_default().to_string_lossy();
        let report = (filled.result.as_ref()).map_err(|e| format!("the fill of {name}: {e}"))?;
        let after = splits_of(dir);
        for (split, sha) in &filled.splits_before {
            if after.get(split) != Some(sha) {
                return Err(format!("the fill of {name} changed or removed {split}"));
            }
        }
        let log = ulog_recv::store::reading::read_session(dir, None)
            .map_err(|e| format!("{name} after its fill: {e}"))?;
        let got = ulog_records(&log);
        // Where in the SD log each record is: the next of its copies.
        let mut at = Vec::with_capacity(got.len());
        let mut from = 0;
        for (n, r) in got.iter().enumerate() {
            let Some(k) = (from..sd_records.len()).find(|&k| &sd_records[k] == r) else {
                return Err(format!(
                    "{name} after its fill: record {n} of {} is not the SD log's next \
                     (invented, twice or out of place)",
                    got.len()
                ));
            };
            at.push(k);
            from = k + 1;
        }
        // Without a gap left, the session is the SD log's records from its first to its
        // last (a stream after a restart holds the flight from where the logger was).
        let missing = at.windows(2).find(|w| w[1] != w[0] + 1);
        if let (true, Some(_), Some(w)) = (report.unfilled.is_empty(), &report.sd_log, missing) {
            return Err(format!(
                "{name}: its fill left no gap, yet the SD log's records {}..{} are not in it \
                 ({} records, from the SD log's {})",
                w[0] + 1,
                w[1],
                got.len(),
                at[0]
            ));
        }
    }
    Ok(())
}
