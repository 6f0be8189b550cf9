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
use ulog_recv::store::events::EventRecord;
use ulog_recv::store::manifest::{Manifest, read_manifest};

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

/// The split files of the session in `dir`, its columns' included (as `NAME/split_…`), each
/// with its SHA-256.
fn splits_of(dir: &Path) -> BTreeMap<String, [u8; 32]> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return BTreeMap::new();
    };
    let mut splits = BTreeMap::new();
    for entry in entries.flatten() {
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            for (split, sha) in splits_of(&entry.path()) {
                splits.insert(format!("{name}/{split}"), sha);
            }
        } else if name.starts_with("split_")
            && let Ok(bytes) = std::fs::read(entry.path())
        {
            splits.insert(name, Sha256::digest(&bytes).into());
        }
    }
    splits
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
/// `events`: the events the store handed out, with their sessions (a session in columns
/// is judged column by column, [`check_columns`]).
pub fn check(
    fills: &[Filled],
    sd: &[u8],
    deleted: &[PathBuf],
    events: &[(PathBuf, EventRecord)],
) -> Result<(), String> {
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
        let manifest = read_manifest(dir).map_err(|e| format!("{name} after its fill: {e}"))?;
        if !manifest.columns.is_empty() {
            let events = (events.iter()).filter(|(d, _)| d == dir).map(|(_, e)| e);
            check_columns(dir, &manifest, report, sd, events.collect())
                .map_err(|e| format!("{name} after its fill: {e}"))?;
            continue;
        }
        let log = ulog_recv::store::reading::read_session(dir, None)
            .map_err(|e| format!("{name} after its fill: {e}"))?;
        let got = ulog_records(&log);
        in_sd_order(
            &got,
            &sd_records,
            report.unfilled.is_empty() && report.sd_log.is_some(),
        )
        .map_err(|e| format!("{name} after its fill: {e}"))?;
    }
    Ok(())
}

/// A filled session in columns, each read alone: its records the SD log's records of that
/// column (the event buffer's inside the windows of the events the store handed out and of
/// its manifest), each at most once, none invented; with no gap left, every one from its
/// first to its last, but in the event buffer (whose memory bound, or a window its manifest
/// never heard of before a crash, may leave samples out that no gap marks).
fn check_columns(
    dir: &Path,
    manifest: &Manifest,
    report: &FillReport,
    sd: &[u8],
    events: Vec<&EventRecord>,
) -> Result<(), String> {
    let columns = std::iter::once((super::columns::MAIN, None))
        .chain((manifest.columns.iter()).map(|c| (c.name.as_str(), c.event_buffer.as_ref())));
    for (column, buffer) in columns {
        let windows: Option<Vec<[u64; 2]>> = buffer.map(|b| {
            (events.iter().flat_map(|e| &e.windows))
                .filter(|w| w.buffer == column)
                .map(|w| [w.from_us, w.to_us])
                .chain(b.windows.iter().copied())
                .collect()
        });
        let sd_records = super::columns::records_of(sd, column, windows.as_deref());
        let log = ulog_recv::store::reading::read_session(dir, Some(column))
            .map_err(|e| format!("column {column}: {e}"))?;
        let whole = buffer.is_none() && report.unfilled.is_empty() && report.sd_log.is_some();
        in_sd_order(&ulog_records(&log), &sd_records, whole)
            .map_err(|e| format!("column {column}: {e}"))?;
    }
    Ok(())
}

/// `got` is records of `sd_records`, in their order, each at most once, none invented; with
/// `whole`, every one of them from its first to its last.
fn in_sd_order(got: &[Vec<u8>], sd_records: &[Vec<u8>], whole: bool) -> Result<(), String> {
    // Where in the SD log each record is: the next of its copies.
    let mut at = Vec::with_capacity(got.len());
    let mut from = 0;
    for (n, r) in got.iter().enumerate() {
        let Some(k) = (from..sd_records.len()).find(|&k| &sd_records[k] == r) else {
            return Err(format!(
                "record {n} of {} is not the SD log's next (invented, twice or out of \
                 place)",
                got.len()
            ));
        };
        at.push(k);
        from = k + 1;
    }
    // Without a gap left, the session is the SD log's records from its first to its
    // last (a stream after a restart holds the flight from where the logger was).
    let missing = at.windows(2).find(|w| w[1] != w[0] + 1);
    if let (true, Some(w)) = (whole, missing) {
        return Err(format!(
            "its fill left no gap, yet the SD log's records {}..{} are not in it ({} \
             records, from the SD log's {})",
            w[0] + 1,
            w[1],
            got.len(),
            at[0]
        ));
    }
    Ok(())
}
