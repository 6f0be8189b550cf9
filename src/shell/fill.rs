//! Fills a closed session's dropouts, head and tail from the vehicle's SD log over MAVLink
//! FTP (the shell around [`crate::fill`]): finds the SD log of the same boot and flight by
//! its records (the newest logs first: the one where a dropout is found again, its records
//! around it the stream's), fetches only the byte ranges the locators ask for, and writes the
//! recovered records as amendments beside the splits, each amendment durable before the
//! manifest names it, every 64 gaps or 5 s (a fill cut short loses at most that; run again,
//! it goes on with the dropouts not filled yet, never twice). Once records are recovered,
//! the flight diagnostics are made again on the whole flight and the manifest lists theirs.
//! The daemon's `--fill auto` ([`AutoFill`]) fills an ArduPilot session too, through
//! [`crate::shell::fill_bin`].

use std::collections::HashMap;
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::autopilot::LogFormat;
use crate::fill::amendment::{Recovered, build};
use crate::fill::{ColumnSplits, Edge, Filler, Flight, Outcome, SiteFill};
use crate::link::ftp::FtpError;
use crate::shell::fill_bin::{BinFillError, BinFillReport, Card, fill_bin_session};
use crate::shell::vehicle_files::{FilesError, VehicleFiles};
use crate::store::amend::{self, AmendmentEntry, amendment_name, is_filled};
use crate::store::files::{hex, read_manifest, update_manifest, write_file_durably};
use crate::store::manifest::Manifest;
use crate::ulog::message::{FILE_HEADER_LEN, FileHeader};

/// An amendment is written every this many gaps or [`FLUSH_EVERY`], whichever comes first:
/// what a fill cut short loses at most.
const BATCH: usize = 64;
const FLUSH_EVERY: std::time::Duration = std::time::Duration::from_secs(5);
/// SD logs tried, newest first, before giving up.
const CANDIDATES: usize = 5;

/// Why a fill could not run.
#[derive(Debug, thiserror::Error)]
pub enum FillError {
    #[error("cannot read or write the session: {0}")]
    Io(#[from] std::io::Error),
    #[error("the session is still being recorded (its manifest is not closed)")]
    NotClosed,
    #[error(transparent)]
    Files(#[from] FilesError),
    #[error(
        "no SD log of this flight on the vehicle ({checked} newest checked: none holds the \
         stream's records around its first dropout)"
    )]
    NoSdLog { checked: usize },
}

/// A gap not filled: its split, its offset there (a window's start time for an event
/// buffer's window without a site), and why.
pub type NotFilled = (String, u64, String);

/// What a fill did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct FillReport {
    /// The SD log used, and its size when it was opened (what the fill could read of it).
    pub sd_log: Option<String>,
    pub sd_log_bytes: u64,
    /// Dropouts in the session.
    pub dropouts: usize,
    /// Filled by an earlier fill.
    pub already_filled: usize,
    /// Filled now (partial ones included).
    pub filled: usize,
    /// Filled now, with a dropout of the SD log's own among the records.
    pub partial: usize,
    /// Not filled, with why.
    pub unfilled: Vec<NotFilled>,
    /// Records recovered from the SD log, and their bytes.
    pub records: u64,
    pub record_bytes: u64,
    /// Of those, the ones before the stream's first record (the head) and after its last
    /// (the tail).
    pub head_records: u64,
    pub tail_records: u64,
    /// File bytes received to find the head and the tail (of `fetched_bytes`).
    pub head_fetched_bytes: u64,
    pub tail_fetched_bytes: u64,
    /// File bytes received over FTP (duplicates included).
    pub fetched_bytes: u64,
    /// Dropouts read where the gap before put them (the others were searched for by time).
    pub walked: usize,
    pub amendments: Vec<String>,
}

/// The splits of column `k` of the session in `dir`: each `(file, bytes, preamble bytes)`.
fn read_column(
    dir: &Path,
    manifest: &Manifest,
    k: usize,
) -> std::io::Result<Vec<(String, Vec<u8>, usize)>> {
    manifest
        .column_splits(k)
        .iter()
        .map(|split| {
            Ok((
                split.file.clone(),
                std::fs::read(dir.join(&split.file))?,
                split.summary.preamble_bytes as usize,
            ))
        })
        .collect()
}

/// The session in `dir` as a fill sees it, and the event buffers' windows that cannot be
/// filled, as unfilled gaps.
fn read_flight(dir: &Path, manifest: &Manifest) -> std::io::Result<(Flight, Vec<NotFilled>)> {
    let raw: Vec<Vec<(String, Vec<u8>, usize)>> = (0..=manifest.columns.len())
        .map(|k| read_column(dir, manifest, k))
        .collect::<Result<_, _>>()?;
    let columns: Vec<ColumnSplits> = raw
        .iter()
        .enumerate()
        .map(|(k, splits)| ColumnSplits {
            splits: splits
                .iter()
                .map(|(name, bytes, skip)| (name.as_str(), &bytes[..], *skip))
                .collect(),
            patterns: k
                .checked_sub(1)
                .map_or(&[][..], |c| &manifest.columns[c].patterns[..]),
            windows: k
                .checked_sub(1)
                .and_then(|c| manifest.columns[c].event_buffer.as_ref())
                .map(|b| &b.windows[..]),
        })
        .collect();
    let (mut flight, left) = Flight::new(&columns);
    flight.stream_end.lost_chunks = manifest.end_lost_chunks;
    let unfillable = left
        .into_iter()
        .map(|(k, [from, to])| {
            (
                format!("{}/", manifest.columns[k - 1].name),
                from,
                format!(
                    "the event buffer's window {from}..{to} µs has no samples in one split to \
                     put the SD log's beside"
                ),
            )
        })
        .collect();
    Ok((flight, unfillable))
}

/// Fills the dropouts, head and tail of the closed session in `dir` from the vehicle
/// `files` reaches; a session stored in columns column by column, each taking its own
/// topics (an event buffer only inside its windows).
pub async fn fill_session(dir: &Path, files: &mut VehicleFiles) -> Result<FillReport, FillError> {
    fill_session_timed(dir, files, &std::time::Instant::now).await
}

/// [`fill_session`], the 5 s between its amendments timed by `clock` (a simulation's
/// clock; [`fill_session`] reads the real one).
pub async fn fill_session_timed(
    dir: &Path,
    files: &mut VehicleFiles,
    clock: &dyn Fn() -> std::time::Instant,
) -> Result<FillReport, FillError> {
    let mut manifest = read_manifest(dir)?;
    if !manifest.closed {
        return Err(FillError::NotClosed);
    }
    let (flight, unfillable) = read_flight(dir, &manifest)?;
    let mut report = FillReport {
        unfilled: unfillable,
        ..FillReport::default()
    };
    let filled: Vec<Vec<bool>> = flight
        .columns
        .iter()
        .map(|c| {
            c.flight
                .sites
                .iter()
                .map(|s| is_filled(&manifest.amendments, &s.split, s.offset))
                .collect()
        })
        .collect();
    report.dropouts = filled.iter().map(Vec::len).sum();
    report.already_filled = filled.iter().flatten().filter(|f| **f).count();
    if report.already_filled == report.dropouts {
        return Ok(report);
    }
    // The SD log stays open from the search to the end: no other user of a shared session
    // opens a file meanwhile.
    let _turn = files.turn().await;
    let fetched_before = files.stats().bytes_received;
    let Some(probe) = flight.probe(|c, k| !filled[c][k]) else {
        // No site with a record on either side: nothing to find any of them by.
        for (c, column) in flight.columns.iter().enumerate() {
            for (k, site) in column.flight.sites.iter().enumerate() {
                if !filled[c][k] {
                    report.unfilled.push((
                        site.split.clone(),
                        site.offset,
                        crate::fill::Unfilled::NoAnchors.to_string(),
                    ));
                }
            }
        }
        return Ok(report);
    };
    let (sd_log, sd_len, mut filler, probe_cost) =
        find_sd_log(files, &flight, filled, probe).await?;
    report.sd_log = Some(sd_log.clone());
    report.sd_log_bytes = sd_len;
    // Per column: the recovered records not yet written.
    let mut batches: Vec<Vec<Recovered>> = vec![Vec::new(); flight.columns.len()];
    let mut flushed = clock();
    let mut stalled = false;
    // Records were recovered (the flight diagnostics are made again on the whole flight).
    let mut recovered = false;
    // What each site's search has fetched so far.
    let mut costs: HashMap<(usize, usize), u64> = HashMap::from([(probe, probe_cost)]);
    loop {
        while let Some(done) = filler.poll() {
            let c = done.column;
            let site = &flight.columns[c].flight.sites[done.site];
            let cost = costs.remove(&(c, done.site)).unwrap_or(0);
            if let Some(recovered) = take(&mut report, site, done, cost) {
                batches[c].push(recovered);
            }
        }
        let waiting: usize = batches.iter().map(Vec::len).sum();
        // Done, or nothing more to read (which is done too: the filler asks for what it
        // needs until its work is over).
        let over = filler.is_done() || stalled;
        if over || waiting >= BATCH || clock().duration_since(flushed) >= FLUSH_EVERY {
            flushed = clock();
            let unfilled: Vec<_> = report
                .unfilled
                .iter()
                .map(|(split, offset, reason)| amend::UnfilledGap {
                    split: split.clone(),
                    offset: *offset,
                    reason: reason.clone(),
                })
                .collect();
            let mut added = Vec::new();
            for (c, batch) in batches.iter_mut().enumerate() {
                if batch.is_empty() {
                    continue;
                }
                let name = amendment_name(manifest.amendments.len() + added.len());
                let (bytes, fills) = build(&flight.columns[c].flight, batch);
                write_file_durably(dir, &name, &bytes)?;
                added.push(AmendmentEntry {
                    file: name.clone(),
                    sha256: hex(&Sha256::digest(&bytes)),
                    source: sd_log.clone(),
                    fills,
                });
                report.amendments.push(name);
                batch.clear();
            }
            recovered |= !added.is_empty();
            // Onto the manifest as it is now: the uploader may have changed it meanwhile.
            manifest = update_manifest(dir, |m| {
                if over {
                    m.fill = Some("done".into());
                }
                m.unfilled = unfilled;
                m.amendments.extend(added);
            })?;
        }
        if over {
            break;
        }
        let Some((at, n)) = filler.next_read() else {
            stalled = true;
            continue;
        };
        tracing::trace!(at, n, doing = filler.doing(), "reading the SD log");
        let received = files.stats().bytes_received;
        let data = files.read(at, n).await?;
        if let Some(site) = filler.searching() {
            *costs.entry(site).or_default() += files.stats().bytes_received - received;
        }
        filler.handle_read(at, &data);
    }
    files.close().await?;
    report.fetched_bytes = files.stats().bytes_received - fetched_before;
    if recovered && let Err(e) = diagnose_again(dir) {
        tracing::warn!("cannot make the flight diagnostics again after the fill: {e}");
    }
    Ok(report)
}

/// The flight diagnostics made again on the whole flight, its amendments merged: what the
/// gaps hid from the live detectors is seen now, and the manifest lists what they find.
fn diagnose_again(dir: &Path) -> Result<(), crate::export::ExportError> {
    let Some(entry) = read_manifest(dir)?.diagnostics else {
        return Ok(());
    };
    let selection = entry.analyzers.parse().unwrap_or_default();
    let detectors = crate::export::flight::diagnose(dir, selection)?;
    update_manifest(dir, |m| {
        m.replace_findings(detectors.findings(), detectors.blind())
    })?;
    Ok(())
}

/// Counts what one dropout came to in `report` (its search having fetched `fetched`
/// bytes); the records to write, if it was filled.
fn take(
    report: &mut FillReport,
    site: &crate::fill::DropoutSite,
    done: SiteFill,
    fetched: u64,
) -> Option<Recovered> {
    match done.outcome {
        Outcome::Filled {
            from,
            to,
            records,
            recovered,
            recovered_bytes,
            complete,
            edge,
        } => {
            report.filled += 1;
            report.walked += usize::from(done.walked);
            report.partial += usize::from(!complete);
            report.records += recovered;
            report.record_bytes += recovered_bytes;
            match edge {
                Some(Edge::Head) => {
                    report.head_records += recovered;
                    report.head_fetched_bytes += fetched;
                }
                Some(Edge::Tail) => {
                    report.tail_records += recovered;
                    report.tail_fetched_bytes += fetched;
                }
                Some(Edge::Window) | None => {}
            }
            Some(Recovered {
                split: site.split.clone(),
                offset: site.offset,
                from,
                to,
                records,
                recovered,
                complete,
                edge,
                fetched,
            })
        }
        Outcome::Unfilled(why) => {
            report
                .unfilled
                .push((site.split.clone(), site.offset, why.to_string()));
            None
        }
    }
}

/// Records in the session's manifest how its fill ended (`done`, `failed: WHY`): the uploader
/// sends a flight to Flight Review once its fill is over.
pub fn mark(dir: &Path, outcome: &str) -> std::io::Result<()> {
    update_manifest(dir, |m| m.fill = Some(outcome.to_string()))?;
    Ok(())
}

/// The flight's SD log (newest first): the first where the dropout `probe` is found again,
/// its records around it the stream's; its path, its size, the filler on it and the bytes
/// the probe fetched in it (not in the logs before it). Several
/// logs of one boot (one per arming), an SD log that began after the stream, samples older
/// than a header: the records decide.
async fn find_sd_log<'a>(
    files: &mut VehicleFiles,
    flight: &'a Flight,
    filled: Vec<Vec<bool>>,
    probe: (usize, usize),
) -> Result<(String, u64, Filler<'a>, u64), FillError> {
    let logs = files.list_logs().await?;
    let mut checked = 0;
    for log in logs
        .iter()
        .rev()
        .filter(|l| l.size > FILE_HEADER_LEN as u64)
        .take(CANDIDATES)
    {
        checked += 1;
        let len = files.open(&log.path).await?;
        let first = files.read(0, FILE_HEADER_LEN as u64).await?;
        let start_us = match FileHeader::check_file_start(&first) {
            Ok(header) => header.timestamp,
            Err(why) => {
                tracing::debug!(log = log.path, "not a ULog log ({why})");
                continue;
            }
        };
        let mut filler = Filler::new(flight, filled.clone(), Some(probe), len, start_us);
        let received = files.stats().bytes_received;
        while !filler.probed() && filler.wrong_log().is_none() {
            let Some((at, n)) = filler.next_read() else {
                break;
            };
            tracing::trace!(at, n, doing = filler.doing(), "reading the SD log");
            let data = files.read(at, n).await?;
            filler.handle_read(at, &data);
        }
        if filler.probed() {
            tracing::info!(log = log.path, len, "the flight's SD log");
            let cost = files.stats().bytes_received - received;
            return Ok((log.path.clone(), len, filler, cost));
        }
        tracing::debug!(
            log = log.path,
            "not this flight's SD log: {}",
            filler
                .wrong_log()
                .map_or_else(|| "no answer".into(), |why| why.to_string())
        );
    }
    Err(FillError::NoSdLog { checked })
}

/// What a fill came to, whichever the autopilot: its counts, or why it failed.
enum Filled {
    Done {
        /// Gaps filled now, and not filled.
        filled: usize,
        unfilled: usize,
        records: u64,
        record_bytes: u64,
        fetched_bytes: u64,
    },
    /// The daemon is stopping: not a fill's outcome.
    Stopped,
    Failed(String),
}

impl From<Result<FillReport, FillError>> for Filled {
    fn from(result: Result<FillReport, FillError>) -> Self {
        match result {
            Ok(r) => Filled::Done {
                filled: r.filled,
                unfilled: r.unfilled.len(),
                records: r.records,
                record_bytes: r.record_bytes,
                fetched_bytes: r.fetched_bytes,
            },
            Err(FillError::Files(FilesError::Stopped)) => Filled::Stopped,
            Err(e) => Filled::Failed(e.to_string()),
        }
    }
}

impl From<Result<BinFillReport, BinFillError>> for Filled {
    fn from(result: Result<BinFillReport, BinFillError>) -> Self {
        match result {
            Ok(r) => Filled::Done {
                filled: r.filled,
                unfilled: r.unfilled.len(),
                records: r.records,
                record_bytes: r.record_bytes,
                fetched_bytes: r.fetched_bytes,
            },
            Err(BinFillError::Files(FilesError::Stopped)) => Filled::Stopped,
            Err(e) => Filled::Failed(e.to_string()),
        }
    }
}

/// Fills the session in `dir` through `files`, as its autopilot's log is filled (a ULog's
/// dropouts by [`fill_session`], a DataFlash log's gaps by [`fill_bin_session`]); tried
/// again while no vehicle was heard yet (its heartbeat will come).
fn fill_any(runtime: &tokio::runtime::Runtime, dir: &Path, files: &mut VehicleFiles) -> Filled {
    let no_vehicle = |e: &FilesError| matches!(e, FilesError::Ftp(FtpError::NoVehicle));
    let dataflash = read_manifest(dir).is_ok_and(|m| m.log_format == LogFormat::DataFlash);
    loop {
        // `waiting`: no vehicle heard yet.
        let (filled, waiting) = if dataflash {
            let result = runtime.block_on(fill_bin_session(dir, Card::Vehicle(files)));
            let waiting = matches!(&result, Err(BinFillError::Files(e)) if no_vehicle(e));
            (Filled::from(result), waiting)
        } else {
            let result = runtime.block_on(fill_session(dir, files));
            let waiting = matches!(&result, Err(FillError::Files(e)) if no_vehicle(e));
            (Filled::from(result), waiting)
        };
        if !waiting {
            return filled;
        }
        std::thread::sleep(std::time::Duration::from_secs(2));
    }
}

/// A fill's outcome in the metrics (a fill the daemon's stop cut is not one).
fn count_fill(filled: &Filled) {
    use crate::monitor::catalogue::{
        FILL_FETCHED_BYTES, FILL_MISSING_DROPOUTS, FILL_RECOVERED_BYTES, FILL_RUNS,
    };
    match filled {
        Filled::Done {
            unfilled,
            record_bytes,
            fetched_bytes,
            ..
        } => {
            metrics::counter!(FILL_RUNS.name, "outcome" => "done").increment(1);
            metrics::counter!(FILL_FETCHED_BYTES.name).increment(*fetched_bytes);
            metrics::counter!(FILL_RECOVERED_BYTES.name).increment(*record_bytes);
            metrics::gauge!(FILL_MISSING_DROPOUTS.name).set(*unfilled as f64);
        }
        Filled::Stopped => {}
        Filled::Failed(_) => metrics::counter!(FILL_RUNS.name, "outcome" => "failed").increment(1),
    }
}

/// The closed sessions under `log_dir` whose fill never ran to its end (the daemon stopped,
/// or the power failed, first), oldest first: what `--fill auto` fills as it starts.
pub fn never_filled(log_dir: &Path) -> Vec<std::path::PathBuf> {
    (crate::store::files::list_sessions(log_dir)
        .unwrap_or_default()
        .into_iter())
    .filter(|dir| read_manifest(dir).is_ok_and(|m| m.closed && m.fill.is_none()))
    .collect()
}

/// `--fill auto`: fills each session the daemon closes, on its own thread (reading splits
/// and writing amendments never holds up the network loop), through the daemon's session
/// (the loop runs the FTP operations it asks for, beside the stream), once the vehicle is
/// disarmed.
pub struct AutoFill {
    sessions: std::sync::mpsc::Sender<std::path::PathBuf>,
    armed: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl AutoFill {
    /// Starts the thread; its FTP operations go through `shared` (the daemon's session, taking
    /// turns with its other users). The closed sessions in `log_dir` whose fill never ran (the
    /// daemon stopped first) are filled first.
    pub fn start(
        shared: crate::shell::vehicle_files::SharedFiles,
        log_dir: &Path,
    ) -> std::io::Result<Self> {
        let (sessions, rx) = std::sync::mpsc::channel::<std::path::PathBuf>();
        for dir in never_filled(log_dir) {
            let _ = sessions.send(dir);
        }
        let armed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let armed_seen = armed.clone();
        let thread = std::thread::Builder::new()
            .name("fill".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(r) => r,
                    Err(e) => return tracing::error!(error = %e, "the fill cannot run"),
                };
                let mut files = VehicleFiles::shared(shared);
                while let Ok(dir) = rx.recv() {
                    // Only on the ground: the link is the stream's in flight.
                    while armed_seen.load(std::sync::atomic::Ordering::Relaxed) {
                        std::thread::sleep(std::time::Duration::from_millis(500));
                    }
                    let filled = fill_any(&runtime, &dir, &mut files);
                    count_fill(&filled);
                    match filled {
                        Filled::Done {
                            filled: 0,
                            unfilled: 0,
                            ..
                        } => {}
                        Filled::Done {
                            filled,
                            unfilled,
                            records,
                            fetched_bytes,
                            ..
                        } => tracing::info!(
                            session = %dir.display(),
                            filled,
                            not_filled = unfilled,
                            records,
                            fetched = fetched_bytes,
                            "filled from the vehicle's SD log"
                        ),
                        Filled::Stopped => break,
                        Filled::Failed(e) => {
                            tracing::warn!(session = %dir.display(), "not filled: {e}");
                            if let Err(e) = mark(&dir, &format!("failed: {e}")) {
                                tracing::warn!(session = %dir.display(), "cannot mark the fill: {e}");
                            }
                        }
                    }
                }
            })?;
        Ok(Self {
            sessions,
            armed,
            thread,
        })
    }

    /// The vehicle's armed state, as its heartbeat tells it.
    pub fn set_armed(&self, armed: bool) {
        self.armed
            .store(armed, std::sync::atomic::Ordering::Relaxed);
    }

    /// A session was closed and synced: fill it (once disarmed).
    pub fn session_closed(&self, dir: &Path) {
        let _ = self.sessions.send(dir.to_owned());
    }

    /// The queue of sessions to fill, for another thread to add one (the web page's "fill
    /// now"). The thread ends once [`stop`](Self::stop) ran and every such sender is gone.
    pub fn queue(&self) -> std::sync::mpsc::Sender<std::path::PathBuf> {
        self.sessions.clone()
    }

    /// Ends the thread (a fill under way stops at its next FTP operation: the loop is gone).
    pub fn stop(self) {
        drop(self.sessions);
        self.armed
            .store(false, std::sync::atomic::Ordering::Relaxed);
        let _ = self.thread.join();
    }
}
