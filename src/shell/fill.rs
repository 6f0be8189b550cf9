//! Fills a closed session's dropouts, head and tail from the vehicle's SD log over MAVLink
//! FTP (the shell around [`crate::fill`]): finds the SD log of the same boot and flight by
//! its records (the newest logs first: the one where a dropout is found again, its records
//! around it the stream's), fetches only the byte ranges the locators ask for, and writes the
//! recovered records as amendments beside the splits, each amendment durable before the
//! manifest names it, every 64 gaps or 5 s (a fill cut short loses at most that; run again,
//! it goes on with the dropouts not filled yet, never twice).

use std::path::Path;

use sha2::{Digest, Sha256};

use crate::fill::amendment::{Recovered, build};
use std::collections::HashSet;

use crate::fill::{
    BlockCache, ColumnFilter, DropoutSite, Edge, FlightScan, Landmark, Locator, Outcome, StreamEnd,
    Unfilled,
};
use crate::link::ftp::FtpError;
use crate::shell::vehicle_files::{FilesError, VehicleFiles};
use crate::store::amend::{self, AmendmentEntry, amendment_name, is_filled};
use crate::store::files::{hex, read_manifest, write_file_durably, write_manifest};
use crate::store::manifest::Manifest;
use crate::ulog::message::{FILE_HEADER_LEN, FILE_MAGIC};

/// An amendment is written every this many gaps or [`FLUSH_EVERY`], whichever comes first:
/// what a fill cut short loses at most.
const BATCH: usize = 64;
const FLUSH_EVERY: std::time::Duration = std::time::Duration::from_secs(5);
/// Bytes of the SD log kept after fetching (dropouts close together read the same stretch).
const CACHE_BYTES: u64 = 4 << 20;
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
    /// The SD log used.
    pub sd_log: Option<String>,
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
    /// File bytes received over FTP (duplicates included).
    pub fetched_bytes: u64,
    /// Dropouts looked for where the dropout before predicted them, and how many were
    /// right there (the others were found by bisection).
    pub hinted: usize,
    pub hints_held: usize,
    pub amendments: Vec<String>,
}

/// One column of the session as a fill sees it: the flight as received in it (with every
/// column's definitions: the SD log's records are read with all of them) and what of the SD
/// log it takes.
struct ColumnScan {
    flight: FlightScan,
    filter: ColumnFilter,
    /// Where the stream stopped, across every column (a column's tail starts from it).
    stream_end: StreamEnd,
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

/// The splits as [`crate::fill::scan::scan`] takes them (the first one whole).
fn as_scanned(raw: &[(String, Vec<u8>, usize)]) -> impl Iterator<Item = (&str, &[u8], usize)> {
    raw.iter()
        .enumerate()
        .map(|(k, (name, bytes, skip))| (name.as_str(), &bytes[..], if k == 0 { 0 } else { *skip }))
}

/// When a gap may have lost samples (log time, µs): from its last anchor before (less what
/// PX4 logs late) to its first after.
fn gap_span(flight: &FlightScan, site: &DropoutSite) -> Option<[u64; 2]> {
    let lag = crate::fill::locate::TAIL_LAG_US;
    match site.edge() {
        Some(Edge::Window) => None,
        Some(Edge::Head) => Some([flight.start_us, site.after_us.unwrap_or(u64::MAX)]),
        _ => Some([
            site.last_before_us.saturating_sub(lag),
            site.after_us.unwrap_or(u64::MAX),
        ]),
    }
}

/// Scans each column of the session in `dir` (the main column first); an event buffer's
/// sites are its windows that a gap of the other columns may have touched (those that cannot
/// be filled come back with why, as unfilled gaps).
fn scan_columns(
    dir: &Path,
    manifest: &Manifest,
) -> std::io::Result<(Vec<ColumnScan>, Vec<NotFilled>)> {
    let mut flights = Vec::new();
    for k in 0..=manifest.columns.len() {
        let raw = read_column(dir, manifest, k)?;
        flights.push(crate::fill::scan::scan(as_scanned(&raw)));
    }
    let buffer = |k: usize| {
        k.checked_sub(1)
            .and_then(|c| manifest.columns[c].event_buffer.as_ref())
    };
    let spans: Vec<[u64; 2]> = flights
        .iter()
        .enumerate()
        .filter(|(k, _)| buffer(*k).is_none())
        .flat_map(|(_, f)| f.sites.iter().filter_map(|s| gap_span(f, s)))
        .collect();
    let mut unfillable = Vec::new();
    for (k, flight) in flights.iter_mut().enumerate() {
        let Some(buffer) = buffer(k) else { continue };
        let raw = read_column(dir, manifest, k)?;
        let touched = |[from, to]: [u64; 2]| spans.iter().any(|[a, b]| *a <= to && from <= *b);
        let (sites, left) =
            crate::fill::scan::window_sites(as_scanned(&raw), &buffer.windows, touched);
        flight.sites = sites;
        let column = &manifest.columns[k - 1].name;
        unfillable.extend(left.into_iter().map(|[from, to]| {
            (
                format!("{column}/"),
                from,
                format!(
                    "the event buffer's window {from}..{to} µs has no samples in one split to \
                     put the SD log's beside"
                ),
            )
        }));
    }
    let ids: Vec<HashSet<u16>> = flights
        .iter()
        .map(|f| f.subscriptions.keys().copied().collect())
        .collect();
    let mut formats: Vec<Vec<u8>> = Vec::new();
    let mut subscriptions = std::collections::HashMap::new();
    for f in &flights {
        for format in &f.formats {
            if !formats.contains(format) {
                formats.push(format.clone());
            }
        }
        subscriptions.extend(f.subscriptions.iter().map(|(id, a)| (*id, a.clone())));
    }
    let one_column = flights.len() == 1;
    let stream_end = StreamEnd::of(&flights);
    let columns = flights
        .into_iter()
        .enumerate()
        .map(|(k, mut flight)| {
            let filter = if one_column {
                ColumnFilter::all()
            } else {
                let others = ids
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| *j != k)
                    .flat_map(|(_, ids)| ids.iter().copied())
                    .collect();
                let filter = ColumnFilter::column(ids[k].clone(), others, k == 0);
                match k
                    .checked_sub(1)
                    .and_then(|c| manifest.columns[c].event_buffer.as_ref())
                {
                    Some(buffer) => filter.with_windows(buffer.windows.clone()),
                    None => filter,
                }
            };
            flight.formats = formats.clone();
            flight.subscriptions = subscriptions.clone();
            ColumnScan {
                flight,
                filter,
                stream_end: stream_end.clone(),
            }
        })
        .collect();
    Ok((columns, unfillable))
}

/// Fills the dropouts, head and tail of the closed session in `dir` from the vehicle
/// `files` reaches; a session stored in columns column by column, each taking its own
/// topics (an event buffer only inside its windows).
pub async fn fill_session(dir: &Path, files: &mut VehicleFiles) -> Result<FillReport, FillError> {
    let mut manifest = read_manifest(dir)?;
    if !manifest.closed {
        return Err(FillError::NotClosed);
    }
    let (columns, unfillable) = scan_columns(dir, &manifest)?;
    let mut report = FillReport {
        unfilled: unfillable,
        ..FillReport::default()
    };
    // Each column's sites not filled yet.
    let mut todo: Vec<Vec<&DropoutSite>> = Vec::new();
    for column in &columns {
        report.dropouts += column.flight.sites.len();
        todo.push(
            column
                .flight
                .sites
                .iter()
                .filter(|s| !is_filled(&manifest.amendments, &s.split, s.offset))
                .collect(),
        );
    }
    let left: usize = todo.iter().map(Vec::len).sum();
    report.already_filled = report.dropouts - left;
    if left == 0 {
        return Ok(report);
    }
    let fetched_before = files.stats().bytes_received;
    // The SD log is told by a dropout with records on both sides (the head's may be missing
    // from an SD log that began later), else by the head or the tail; the main column's
    // first.
    let all = || {
        todo.iter()
            .enumerate()
            .flat_map(|(c, sites)| sites.iter().enumerate().map(move |(k, s)| (c, k, *s)))
    };
    let probe = all()
        .find(|(_, _, s)| s.edge().is_none())
        .or_else(|| all().find(|(_, _, s)| !s.before.is_empty() || !s.after.is_empty()))
        .map(|(c, k, _)| (c, k));
    let Some(probe) = probe else {
        for (c, sites) in todo.iter().enumerate() {
            for site in sites {
                let outcome = Locator::new(&columns[c].flight, site, 0, 0)
                    .outcome()
                    .cloned();
                if let Some(Outcome::Unfilled(why)) = outcome {
                    report
                        .unfilled
                        .push((site.split.clone(), site.offset, why.to_string()));
                }
            }
        }
        return Ok(report);
    };
    let (c, k) = probe;
    let sd = find_sd_log(files, &columns[c], todo[c][k]).await?;
    let (sd_log, mut cache) = (sd.path, sd.cache);
    report.sd_log = Some(sd_log.clone());
    let mut first = Some(sd.outcome);
    let mut flushed = std::time::Instant::now();
    for (c, sites) in todo.iter().enumerate() {
        let column = &columns[c];
        let mut from = 0;
        // Where the last dropout's first anchor after it lies: in its split and the SD log.
        let mut landmark: Option<Landmark> = None;
        let mut batch: Vec<Recovered> = Vec::new();
        for (k, site) in sites.iter().enumerate() {
            let outcome = match first.take_if(|_| (c, k) == probe) {
                Some(o) => o,
                None => {
                    let hint = landmark.as_ref().and_then(|l| l.hint(site));
                    report.hinted += usize::from(hint.is_some());
                    let located =
                        locate(files, column, site, &sd.log, &mut from, hint, &mut cache).await?;
                    report.hints_held += usize::from(located.hint_held);
                    landmark = located.landmark;
                    located.outcome
                }
            };
            match outcome {
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
                    report.partial += usize::from(!complete);
                    report.records += recovered;
                    report.record_bytes += recovered_bytes;
                    match edge {
                        Some(Edge::Head) => report.head_records += recovered,
                        Some(Edge::Tail) => report.tail_records += recovered,
                        Some(Edge::Window) | None => {}
                    }
                    batch.push(Recovered {
                        split: site.split.clone(),
                        offset: site.offset,
                        from,
                        to,
                        records,
                        recovered,
                        complete,
                        edge,
                    });
                }
                Outcome::Unfilled(why) => {
                    report
                        .unfilled
                        .push((site.split.clone(), site.offset, why.to_string()));
                }
            }
            let column_done = k + 1 == sites.len();
            if batch.len() >= BATCH || flushed.elapsed() >= FLUSH_EVERY || column_done {
                flushed = std::time::Instant::now();
                let all_done = column_done && todo[c + 1..].iter().all(Vec::is_empty);
                if all_done {
                    manifest.fill = Some("done".into());
                }
                manifest.unfilled = report
                    .unfilled
                    .iter()
                    .map(|(split, offset, reason)| amend::UnfilledGap {
                        split: split.clone(),
                        offset: *offset,
                        reason: reason.clone(),
                    })
                    .collect();
                if !batch.is_empty() {
                    let name = amendment_name(manifest.amendments.len());
                    let (bytes, fills) = build(&column.flight, &batch);
                    write_file_durably(dir, &name, &bytes)?;
                    manifest.amendments.push(AmendmentEntry {
                        file: name.clone(),
                        sha256: hex(&Sha256::digest(&bytes)),
                        source: sd_log.clone(),
                        fills,
                    });
                    report.amendments.push(name);
                    batch.clear();
                }
                write_manifest(dir, &manifest)?;
            }
        }
    }
    files.close().await?;
    report.fetched_bytes = files.stats().bytes_received - fetched_before;
    Ok(report)
}

/// Records in the session's manifest how its fill ended (`done`, `failed: WHY`): the uploader
/// sends a flight to Flight Review once its fill is over.
pub fn mark(dir: &Path, outcome: &str) -> std::io::Result<()> {
    let mut manifest = read_manifest(dir)?;
    manifest.fill = Some(outcome.to_string());
    write_manifest(dir, &manifest)
}

/// An SD log open for reading: its size and its header's start time (log time, µs).
struct SdLog {
    len: u64,
    start_us: u64,
}

/// The flight's SD log, found: its path, what it is, the probe's outcome there and the
/// bytes read of it.
struct Found {
    path: String,
    log: SdLog,
    outcome: Outcome,
    cache: BlockCache,
}

/// The SD log of the flight (newest first): the first where the dropout `probe` is found
/// again, its records around it the stream's. Several logs of one boot (one per arming), an
/// SD log that began after the stream, samples older than a header: the records decide.
async fn find_sd_log(
    files: &mut VehicleFiles,
    column: &ColumnScan,
    probe: &DropoutSite,
) -> Result<Found, FillError> {
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
        let header = files.read(0, FILE_HEADER_LEN as u64).await?;
        if !header.starts_with(&FILE_MAGIC) || header.len() < FILE_HEADER_LEN {
            tracing::debug!(log = log.path, "not a ULog file");
            continue;
        }
        let start_us = u64::from_le_bytes(header[8..16].try_into().expect("8 bytes"));
        let sd = SdLog { len, start_us };
        let mut cache = BlockCache::new(len, CACHE_BYTES);
        let outcome = locate(files, column, probe, &sd, &mut 0, None, &mut cache)
            .await?
            .outcome;
        if let Outcome::Unfilled(why) = outcome {
            tracing::debug!(log = log.path, "not this flight's SD log: {why}");
            continue;
        }
        tracing::info!(log = log.path, len, "the flight's SD log");
        return Ok(Found {
            path: log.path.clone(),
            log: sd,
            outcome,
            cache,
        });
    }
    Err(FillError::NoSdLog { checked })
}

/// What one locator came to.
struct Located {
    outcome: Outcome,
    /// Where the dropout's first anchor after it was found (the next one's hint).
    landmark: Option<Landmark>,
    /// The dropout was where the hint said.
    hint_held: bool,
}

/// Runs one locator over the open SD log, from `from` on (which it moves to where its
/// scan began, for the next dropout), starting at `hint` if one is given.
async fn locate(
    files: &mut VehicleFiles,
    column: &ColumnScan,
    site: &DropoutSite,
    sd: &SdLog,
    from: &mut u64,
    hint: Option<u64>,
    cache: &mut BlockCache,
) -> Result<Located, FillError> {
    let mut locator = Locator::new(&column.flight, site, sd.len, *from)
        .with_sd_start(sd.start_us)
        .with_filter(column.filter.clone())
        .with_stream_end(&column.stream_end);
    if let Some(hint) = hint {
        locator = locator.with_hint(hint);
    }
    while let Some((offset, len)) = locator.next_read() {
        while let Some((at, n)) = cache.missing(offset, len) {
            let fetched = files.read(at, n).await?;
            let short = (fetched.len() as u64) < n;
            cache.insert(at, &fetched);
            if short {
                // The file ends sooner than listed.
                break;
            }
        }
        let data = cache.get(offset, len).unwrap_or_default();
        locator.handle_read(offset, &data);
    }
    if let Some(start) = locator.scan_start() {
        *from = start;
    }
    if hint.is_some() && !locator.hint_held() {
        tracing::debug!(split = site.split, offset = site.offset, "the hint missed");
    }
    let landmark = locator.landmark();
    let outcome = locator
        .outcome()
        .cloned()
        .unwrap_or(Outcome::Unfilled(Unfilled::NoRecordAfter));
    Ok(Located {
        outcome,
        landmark,
        hint_held: locator.hint_held(),
    })
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
    /// Starts the thread; its FTP operations go to `requests` (the loop's
    /// [`crate::shell::receiver::ReceiverOptions::ftp`]). The closed sessions in `log_dir`
    /// whose fill never ran (the daemon stopped first) are filled first.
    pub fn start(
        requests: tokio::sync::mpsc::UnboundedSender<crate::shell::vehicle_files::FtpRequest>,
        log_dir: &Path,
    ) -> std::io::Result<Self> {
        let (sessions, rx) = std::sync::mpsc::channel::<std::path::PathBuf>();
        for dir in crate::store::files::list_sessions(log_dir).unwrap_or_default() {
            if read_manifest(&dir).is_ok_and(|m| m.closed && m.fill.is_none()) {
                let _ = sessions.send(dir);
            }
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
                let mut files = VehicleFiles::shared(requests);
                while let Ok(dir) = rx.recv() {
                    // Only on the ground: the link is the stream's in flight.
                    while armed_seen.load(std::sync::atomic::Ordering::Relaxed) {
                        std::thread::sleep(std::time::Duration::from_millis(500));
                    }
                    let result = loop {
                        match runtime.block_on(fill_session(&dir, &mut files)) {
                            // No vehicle heard yet: its heartbeat will come.
                            Err(FillError::Files(FilesError::Ftp(FtpError::NoVehicle))) => {
                                std::thread::sleep(std::time::Duration::from_secs(2))
                            }
                            other => break other,
                        }
                    };
                    match result {
                        Ok(r) if r.dropouts == 0 => {}
                        Ok(r) => tracing::info!(
                            session = %dir.display(),
                            filled = r.filled,
                            not_filled = r.unfilled.len(),
                            records = r.records,
                            fetched = r.fetched_bytes,
                            "filled from the vehicle's SD log"
                        ),
                        Err(FillError::Files(FilesError::Stopped)) => break,
                        Err(e) => {
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

    /// Ends the thread (a fill under way stops at its next FTP operation: the loop is gone).
    pub fn stop(self) {
        drop(self.sessions);
        self.armed
            .store(false, std::sync::atomic::Ordering::Relaxed);
        let _ = self.thread.join();
    }
}
