//! The uploader: a thread of its own with a small tokio runtime, below the network loop and
//! the store in priority, that walks the log directory's sessions oldest first and takes
//! each one's next step ([`next_step`]) until everything is where it goes.
//!
//! It never costs receiving: it shares nothing with the network loop but a watch of the
//! vehicle's armed state and a nudge when a session closes. A failing step is tried again
//! after a capped, jittered back-off (a server down for hours costs a request a minute);
//! a failure only the user can fix (credentials, bucket) is logged once a minute at most.
//! Every step's result is in the session's journal (`upload.json`, written durably) before
//! the next begins, so that a crash or a restart never uploads a file twice and resumes a
//! multipart upload at its next part.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::autopilot::LogFormat;
use crate::monitor::catalogue;
use crate::store::Manifest;
use crate::store::files::{
    MANIFEST, UPLOADED_MARK, list_sessions, read_manifest, write_file_durably,
};
use crate::upload::flight_review::{
    FlightReview, FlightReviewError, FlightReviewOptions, MAYBE_TWICE,
};
use crate::upload::journal::{load_journal, save_journal};
use crate::upload::pace::{Backoff, Pacer};
use crate::upload::plan::{
    FlightReviewRecord, JOURNAL, Journal, ObjectRecord, Step, TableEntry, TablesRecord, next_step,
};
use crate::upload::s3::{Bucket, S3ConfigError, S3Options, UploadError};
use crate::upload::tables::{TablesError, build_tables};

/// When uploads may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UploadWhen {
    /// Only while the vehicle is disarmed or not heard (as logloader does): a flight's
    /// uplink is for telemetry.
    #[default]
    Disarmed,
    /// Whenever there is something to upload.
    Always,
}

/// What the uploader does.
#[derive(Debug, Clone, Default)]
pub struct UploadConfig {
    pub s3: Option<S3Options>,
    pub flight_review: Option<FlightReviewOptions>,
    /// Bytes per second at most; `None`: as fast as the network goes.
    pub rate: Option<u64>,
    pub when: UploadWhen,
    /// The daemon fills each session from the vehicle's SD log (`--fill auto`): a flight
    /// with dropouts goes to Flight Review once its fill is over (done or failed).
    pub wait_for_fill: bool,
    /// Build each closed (and filled) session's Parquet tables and upload them to the
    /// bucket's dataset, after everything else ([`crate::upload::tables`]).
    pub tables: bool,
}

impl UploadConfig {
    /// Whether anything is to be uploaded at all.
    pub fn is_on(&self) -> bool {
        self.s3.is_some() || self.flight_review.is_some()
    }
}

/// Why the uploader cannot start.
#[derive(Debug, thiserror::Error)]
pub enum UploadStartError {
    #[error(transparent)]
    S3(#[from] S3ConfigError),
    #[error(transparent)]
    FlightReview(#[from] FlightReviewError),
    #[error("cannot start the upload thread: {0}")]
    Thread(std::io::Error),
}

/// What the uploader is doing, for the status line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UploadStatus {
    /// Sessions with something left to upload.
    pub pending_sessions: usize,
    /// Bytes uploaded since the start.
    pub bytes: u64,
    /// Waiting for the vehicle to disarm.
    pub waiting_for_disarm: bool,
    /// The failure in force, if uploads fail.
    pub failing: Option<String>,
}

impl std::fmt::Display for UploadStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(why) = &self.failing {
            return write!(f, "uploads failing: {why}");
        }
        match (self.pending_sessions, self.waiting_for_disarm) {
            (0, _) => write!(f, "uploads done"),
            (n, true) => write!(f, "{n} session(s) to upload once disarmed"),
            (n, false) => write!(f, "uploading, {n} session(s) to go"),
        }
    }
}

/// The daemon's end of the uploader. Dropping it stops the uploader (a request under way is
/// cut; what it had done is in the journals).
#[derive(Debug)]
pub struct UploadHandle {
    armed: watch::Sender<bool>,
    nudge: Arc<tokio::sync::Notify>,
    status: Arc<Mutex<UploadStatus>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl UploadHandle {
    /// The vehicle armed (`true`) or disarmed; a vehicle lost counts as disarmed.
    pub fn set_armed(&self, armed: bool) {
        self.armed
            .send_if_modified(|a| std::mem::replace(a, armed) != armed);
    }

    /// Something may be ready to upload (a split or a session closed).
    pub fn nudge(&self) {
        self.nudge.notify_one();
    }

    /// What [`nudge`](Self::nudge) wakes, for another thread to wake it (the web page's
    /// "upload now").
    pub fn nudger(&self) -> Arc<tokio::sync::Notify> {
        self.nudge.clone()
    }

    pub fn status(&self) -> UploadStatus {
        self.status.lock().expect("status lock").clone()
    }

    /// The state, shared: the receiver publishes it with its counters.
    pub fn shared_status(&self) -> Arc<Mutex<UploadStatus>> {
        self.status.clone()
    }

    /// Stops the uploader and waits for its thread.
    pub fn stop(mut self) {
        self.stop_thread();
    }

    fn stop_thread(&mut self) {
        // Closing the armed channel is the stop signal.
        let (tx, _) = watch::channel(false);
        drop(std::mem::replace(&mut self.armed, tx));
        self.nudge.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for UploadHandle {
    fn drop(&mut self) {
        self.stop_thread();
    }
}

/// The uploader thread's niceness (the store's is 5, the publishing thread's 10).
const UPLOAD_NICENESS: i32 = 15;
/// How often the log directory is looked at without a nudge.
const POLL: Duration = Duration::from_secs(2);
/// A failure only the user can fix is said at most this often.
const CONFIG_ERROR_REPEAT: Duration = Duration::from_secs(60);

/// Starts the uploader over the sessions in `log_dir`.
pub fn start(config: UploadConfig, log_dir: PathBuf) -> Result<UploadHandle, UploadStartError> {
    let (armed_tx, armed_rx) = watch::channel(false);
    let worker = Worker::new(&config, log_dir, config.when, armed_rx)?;
    let (nudge, status) = (worker.nudge.clone(), worker.status.clone());
    let thread = std::thread::Builder::new()
        .name("ulog-recv-upload".into())
        .spawn(move || {
            crate::sys::os::lower_thread_priority(UPLOAD_NICENESS);
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a current-thread runtime");
            rt.block_on(worker.run());
            // A table build under way is not waited for: what it left is built again.
            rt.shutdown_background();
        })
        .map_err(UploadStartError::Thread)?;
    Ok(UploadHandle {
        armed: armed_tx,
        nudge,
        status,
        thread: Some(thread),
    })
}

/// Uploads one session by hand (`ulog-recv upload`), the daemon's way, until everything the
/// session holds is uploaded or a step fails; `progress` hears of each step done.
pub async fn upload_session(
    config: &UploadConfig,
    session: &Path,
    mut progress: impl FnMut(&str),
) -> Result<Journal, UploadRunError> {
    let bucket = (config.s3.as_ref().map(Bucket::new).transpose()).map_err(UploadStartError::S3)?;
    upload_session_with(config, bucket, session, &mut progress).await
}

/// Uploads one session to `bucket` as [`upload_session`] does, its files to a store of
/// one's own ([`Bucket::over`]); `config.s3` is not looked at.
pub async fn upload_session_to(
    config: &UploadConfig,
    bucket: Bucket,
    session: &Path,
    mut progress: impl FnMut(&str),
) -> Result<Journal, UploadRunError> {
    upload_session_with(config, Some(bucket), session, &mut progress).await
}

async fn upload_session_with(
    config: &UploadConfig,
    bucket: Option<Bucket>,
    session: &Path,
    progress: &mut impl FnMut(&str),
) -> Result<Journal, UploadRunError> {
    let log_dir = session.parent().unwrap_or(Path::new(".")).to_owned();
    let armed = watch::channel(false).1;
    let mut worker = Worker::with_bucket(config, bucket, log_dir, UploadWhen::Always, armed)?;
    loop {
        match worker.step(session, true).await? {
            Some(what) => progress(&what),
            None => {
                let journal = load_journal(session).map_err(|source| UploadRunError::Session {
                    path: session.to_owned(),
                    source,
                })?;
                return Ok(journal.unwrap_or_else(|| Journal::new(String::new())));
            }
        }
    }
}

/// Why a step of a session's upload failed.
#[derive(Debug, thiserror::Error)]
pub enum UploadRunError {
    #[error(transparent)]
    Start(#[from] UploadStartError),
    #[error(transparent)]
    Upload(#[from] UploadError),
    #[error(transparent)]
    FlightReview(#[from] FlightReviewError),
    #[error(transparent)]
    Tables(#[from] TablesError),
    #[error("{path}: {source}")]
    Session {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl UploadRunError {
    /// The failure's kind in a word, for the metrics' `reason` label (a fixed set).
    fn reason(&self) -> &'static str {
        match self {
            UploadRunError::Upload(e) => e.reason(),
            UploadRunError::Start(_) => "credentials",
            UploadRunError::FlightReview(_) => "flight_review",
            UploadRunError::Tables(_) => "tables",
            UploadRunError::Session { .. } => "local",
        }
    }

    fn is_config(&self) -> bool {
        matches!(self, UploadRunError::Upload(e) if e.is_config())
    }
}

struct Worker {
    log_dir: PathBuf,
    bucket: Option<Bucket>,
    flight_review: Option<FlightReview>,
    wait_for_fill: bool,
    tables: bool,
    when: UploadWhen,
    pacer: Pacer,
    armed: watch::Receiver<bool>,
    nudge: Arc<tokio::sync::Notify>,
    status: Arc<Mutex<UploadStatus>>,
    /// Sessions with nothing left to do: not looked at again.
    complete: BTreeSet<PathBuf>,
    backoff: Backoff,
    /// The user-fixable failure last said, and when.
    config_error_said: Option<(String, Instant)>,
    /// When the newest wholly uploaded session was marked so (Unix seconds).
    last_complete: f64,
}

impl Worker {
    /// A worker over the sessions in `log_dir`, with the vehicle's armed state from `armed`.
    fn new(
        config: &UploadConfig,
        log_dir: PathBuf,
        when: UploadWhen,
        armed: watch::Receiver<bool>,
    ) -> Result<Self, UploadStartError> {
        let bucket = config.s3.as_ref().map(Bucket::new).transpose()?;
        Self::with_bucket(config, bucket, log_dir, when, armed)
    }

    /// A worker that uploads to `bucket` (`config.s3` is not looked at).
    fn with_bucket(
        config: &UploadConfig,
        bucket: Option<Bucket>,
        log_dir: PathBuf,
        when: UploadWhen,
        armed: watch::Receiver<bool>,
    ) -> Result<Self, UploadStartError> {
        Ok(Worker {
            log_dir,
            tables: config.tables && bucket.is_some(),
            bucket,
            flight_review: config
                .flight_review
                .clone()
                .map(FlightReview::new)
                .transpose()?,
            wait_for_fill: config.wait_for_fill,
            when,
            pacer: Pacer::new(config.rate),
            armed,
            nudge: Arc::new(tokio::sync::Notify::new()),
            status: Arc::new(Mutex::new(UploadStatus::default())),
            complete: BTreeSet::new(),
            backoff: Backoff::new(
                Duration::from_secs(1),
                Duration::from_secs(60),
                std::process::id() as u64,
            ),
            config_error_said: None,
            last_complete: 0.0,
        })
    }

    async fn run(mut self) {
        loop {
            if self.armed.has_changed().is_err() {
                return; // the handle is gone
            }
            let waiting = self.when == UploadWhen::Disarmed && *self.armed.borrow();
            let pending = self.pending_sessions();
            {
                let mut s = self.status.lock().expect("status lock");
                s.pending_sessions = pending.len();
                metrics::gauge!(catalogue::UPLOAD_PENDING_SESSIONS.name).set(pending.len() as f64);
                s.waiting_for_disarm = waiting && !pending.is_empty();
            }
            let mut worked = false;
            // The tables go last: only once no session has anything else to upload.
            let passes = [false, true];
            let steps = passes
                .iter()
                .flat_map(|&tables| (pending.iter()).map(move |session| (session.clone(), tables)));
            if !waiting {
                for (session, tables) in steps {
                    // A stop cuts the request under way: what was done before it is in the
                    // journal, and a multipart upload resumes at that part.
                    let mut stop = self.armed.clone();
                    let stopped = async move { while stop.changed().await.is_ok() {} };
                    let result = tokio::select! {
                        r = self.step(&session, tables) => r,
                        _ = stopped => return,
                    };
                    match result {
                        Ok(Some(_)) => {
                            worked = true;
                            self.backoff.succeeded();
                            self.status.lock().expect("status lock").failing = None;
                            break;
                        }
                        Ok(None) => {}
                        Err(e) => {
                            let wait = self.failed(&session, &e);
                            if !self.sleep(wait).await {
                                return;
                            }
                            worked = true;
                            break;
                        }
                    }
                }
            }
            if !worked && !self.sleep(POLL).await {
                return;
            }
        }
    }

    /// Sleeps `wait`, woken early by a nudge or the armed state changing; false when the
    /// uploader is to stop.
    async fn sleep(&mut self, wait: Duration) -> bool {
        tokio::select! {
            _ = tokio::time::sleep(wait) => true,
            _ = self.nudge.notified() => true,
            changed = self.armed.changed() => changed.is_ok(),
        }
    }

    /// The sessions not known to be complete, oldest first.
    fn pending_sessions(&mut self) -> Vec<PathBuf> {
        let sessions = list_sessions(&self.log_dir).unwrap_or_default();
        self.complete.retain(|c| sessions.contains(c));
        sessions
            .into_iter()
            .filter(|s| !self.complete.contains(s))
            .collect()
    }

    /// A session is wholly uploaded (now or before a restart): when its mark was made moves
    /// the metrics' time of the last complete upload forward (never back).
    fn note_complete(&mut self, session: &Path) {
        let made = std::fs::metadata(session.join(UPLOADED_MARK)).and_then(|m| m.modified());
        if let Ok(at) = made
            && let Ok(since_epoch) = at.duration_since(std::time::UNIX_EPOCH)
            && since_epoch.as_secs_f64() > self.last_complete
        {
            self.last_complete = since_epoch.as_secs_f64();
            metrics::gauge!(catalogue::UPLOAD_LAST_COMPLETE.name).set(self.last_complete);
        }
    }

    /// Notes a failure: in the journal and the log (a user-fixable one once a minute), and
    /// returns how long to wait.
    fn failed(&mut self, session: &Path, e: &UploadRunError) -> Duration {
        let message = e.to_string();
        let now = Instant::now();
        let repeat = self
            .config_error_said
            .as_ref()
            .is_some_and(|(m, at)| *m == message && now.duration_since(*at) < CONFIG_ERROR_REPEAT);
        let wait = if e.is_config() {
            if !repeat {
                tracing::error!(session = %session.display(), "upload failed: {message}; the files stay, tried again every minute");
                self.config_error_said = Some((message.clone(), now));
            }
            CONFIG_ERROR_REPEAT
        } else {
            let wait = self.backoff.failed();
            tracing::warn!(session = %session.display(), retry_in = ?wait, "upload failed: {message}");
            wait
        };
        metrics::counter!(catalogue::UPLOAD_FAILURES.name, "reason" => e.reason()).increment(1);
        self.status.lock().expect("status lock").failing = Some(message.clone());
        if let Ok(Some(mut journal)) = load_journal(session)
            && journal.failing.as_deref() != Some(&message)
        {
            journal.failing = Some(message);
            let _ = save_journal(session, &journal);
        }
        wait
    }

    /// Takes the next step for `session` (its tables' too when `tables_now`); `Some(what was
    /// done)`, or `None` when there is nothing to do now (the session is then marked complete
    /// once it is).
    async fn step(
        &mut self,
        session: &Path,
        tables_now: bool,
    ) -> Result<Option<String>, UploadRunError> {
        let io = |source| UploadRunError::Session {
            path: session.to_owned(),
            source,
        };
        let manifest = read_manifest(session).map_err(io)?;
        let mut journal = match load_journal(session).map_err(io)? {
            Some(j) => j,
            None => {
                // On disk from the start: the prefix stays the same across restarts, and a
                // failure has a place to be told.
                let j = Journal::new(self.prefix_for(session, &manifest));
                save_journal(session, &j).map_err(io)?;
                j
            }
        };
        let storage = self.bucket.is_some();
        let fill_pending = self.wait_for_fill
            && manifest.fill.is_none()
            && manifest.all_splits().any(|s| s.summary.dropouts > 0);
        let flight_review = self.flight_review.is_some() && !fill_pending;
        let tables = self.tables && tables_now && !fill_pending;
        let step = next_step(&manifest, &journal, flight_review, tables)
            .filter(|s| storage || matches!(s, Step::FlightReview));
        let step = match step {
            Some(s) => s,
            // Without storage, only the flight goes.
            None if !storage
                && flight_review
                && manifest.closed
                && !journal.flight_review_settled() =>
            {
                Step::FlightReview
            }
            None => {
                let stored = !storage || journal.storage_complete(&manifest);
                let reviewed = !flight_review || journal.flight_review_settled();
                // A session with no closed split has no flight to make tables of.
                let no_flight = manifest.all_splits().all(|s| !s.closed);
                let tabled = !self.tables || no_flight || journal.tables_complete(&manifest);
                // A fill to come adds amendments: the session is not whole in the bucket
                // before it has run (or said why not).
                if manifest.closed && stored && reviewed && tabled && !fill_pending {
                    if !session.join(UPLOADED_MARK).exists() {
                        write_file_durably(session, UPLOADED_MARK, b"").map_err(io)?;
                        tracing::info!(session = %session.display(), "session uploaded");
                    }
                    self.complete.insert(session.to_owned());
                    self.note_complete(session);
                }
                return Ok(None);
            }
        };
        let pacer = &mut self.pacer;
        let mut pace = |bytes: u64, started: Instant| {
            let wait = pacer.sent(bytes, started, Instant::now());
            tokio::time::sleep(wait)
        };
        let done = match step {
            Step::Split { file, sha256 } => {
                let bucket = self.bucket.as_ref().expect("storage steps need a bucket");
                let key = journal.key(&file);
                let object = TableEntry { file, key, sha256 };
                upload_object(bucket, &self.status, session, &mut journal, &object, pace).await?
            }
            Step::Manifest {
                closed_splits,
                last,
                amendments,
            } => {
                let bucket = self.bucket.as_ref().expect("storage steps need a bucket");
                let key = journal.key(MANIFEST);
                let bytes = std::fs::read(session.join(MANIFEST)).map_err(io)?;
                // What was read may be newer than what the step was planned on: it is only
                // final if the file says the session is closed.
                let final_one =
                    serde_json::from_slice::<Manifest>(&bytes).is_ok_and(|m| m.closed) && last;
                let len = bytes.len() as u64;
                bucket.put_bytes(&key, bytes, pace).await?;
                metrics::counter!(catalogue::UPLOAD_OBJECTS.name).increment(1);
                metrics::counter!(catalogue::UPLOAD_BYTES.name).increment(len);
                journal.manifest_splits = closed_splits;
                journal.manifest_final = final_one;
                journal.manifest_amendments = amendments;
                tracing::info!(key, last = final_one, "uploaded");
                format!("{MANIFEST} → {key}")
            }
            Step::FlightReview if manifest.log_format == LogFormat::DataFlash => {
                tracing::info!(session = %session.display(), "an ArduPilot flight: not for Flight Review, which reads ULog only");
                journal.flight_review = Some(FlightReviewRecord::NotULog);
                "Flight Review: not for an ArduPilot flight (ULog only)".to_owned()
            }
            Step::FlightReview => {
                let server = self
                    .flight_review
                    .as_ref()
                    .expect("a Flight Review step needs a server");
                let flight = crate::export::flight::load(session, &Default::default())
                    .map_err(|e| io(std::io::Error::other(e.to_string())))?;
                let name = session
                    .file_name()
                    .map_or("flight".into(), |n| n.to_string_lossy().into_owned());
                let description = description(&manifest, &journal, &name);
                // Written down before it goes: an answer lost with the daemon is known of.
                let before = journal.flight_review.replace(FlightReviewRecord::Sending);
                let resent = before == Some(FlightReviewRecord::Sending);
                save_journal(session, &journal).map_err(io)?;
                let (len, started) = (flight.len() as u64, Instant::now());
                let result = server
                    .upload(flight, &format!("{name}.ulg"), &description)
                    .await;
                match result {
                    Ok(url) => {
                        metrics::counter!(catalogue::FLIGHT_REVIEW_UPLOADS.name).increment(1);
                        if resent {
                            tracing::warn!(session = %session.display(), url, "flight uploaded to Flight Review, {MAYBE_TWICE}");
                        } else {
                            tracing::info!(session = %session.display(), url, "flight uploaded to Flight Review");
                        }
                        journal.flight_review = Some(FlightReviewRecord::Done {
                            url: url.clone(),
                            maybe_twice: resent,
                        });
                        save_journal(session, &journal).map_err(io)?;
                        pace(len, started).await;
                        format!("Flight Review: {url}")
                    }
                    Err(FlightReviewError::Refused { status, message }) => {
                        tracing::error!(session = %session.display(), status, "Flight Review refused the flight, not sent again: {message}");
                        journal.flight_review = Some(FlightReviewRecord::Refused {
                            status,
                            message: message.clone(),
                        });
                        format!("Flight Review refused it (HTTP {status}): {message}")
                    }
                    Err(e @ FlightReviewError::NotReached(_)) => {
                        journal.flight_review = before;
                        save_journal(session, &journal).map_err(io)?;
                        return Err(e.into());
                    }
                    // `Sending` stays: the server may hold the flight.
                    Err(e) => return Err(e.into()),
                }
            }
            Step::BuildTables => {
                let bucket = self.bucket.as_ref().expect("tables need a bucket");
                let (dir, prefix) = (session.to_owned(), bucket.prefix().to_owned());
                let so_far = journal.clone();
                let built =
                    tokio::task::spawn_blocking(move || build_tables(&dir, &prefix, &so_far))
                        .await
                        .map_err(|e| io(std::io::Error::other(e)))?;
                let record = match built {
                    Ok(record) => record,
                    Err(e) if e.is_transient() => return Err(e.into()),
                    Err(e) => {
                        tracing::error!(session = %session.display(), "{e}; the tables are not built again");
                        TablesRecord {
                            amendments: manifest.amendments.len(),
                            failed: Some(e.to_string()),
                            ..TablesRecord::default()
                        }
                    }
                };
                let what = match &record.failed {
                    None => format!("{} table(s) built", record.files.len()),
                    Some(why) => format!("no tables: {why}"),
                };
                journal.tables = Some(record);
                what
            }
            Step::Table(entry) => {
                let bucket = self.bucket.as_ref().expect("tables need a bucket");
                upload_object(bucket, &self.status, session, &mut journal, &entry, pace).await?
            }
            Step::ListTables => {
                let tables = journal.tables.as_mut().expect("listed tables were built");
                let keys = tables.files.iter().map(|f| f.key.clone()).collect();
                let manifest = crate::store::files::update_manifest(session, |m| m.tables = keys)
                    .map_err(io)?;
                tables.listed = true;
                // The manifest that lists them goes up next.
                journal.manifest_final = false;
                format!("{} table(s) listed in {MANIFEST}", manifest.tables.len())
            }
        };
        journal.failing = None;
        save_journal(session, &journal).map_err(io)?;
        Ok(Some(done))
    }

    /// `PREFIX/VEHICLE/SESSION`: the vehicle is the autopilot's hardware id when its log
    /// says it (`sys_uuid`), else `sysN`.
    fn prefix_for(&self, session: &Path, manifest: &Manifest) -> String {
        let vehicle = manifest
            .splits
            .first()
            .and_then(|s| hardware_id(&session.join(&s.file)))
            .unwrap_or_else(|| format!("sys{}", manifest.system_id));
        let name = session
            .file_name()
            .map_or(String::new(), |n| n.to_string_lossy().into_owned());
        let prefix = self.bucket.as_ref().map_or("", |b| b.prefix());
        [prefix, &vehicle, &name]
            .iter()
            .filter(|p| !p.is_empty())
            .cloned()
            .collect::<Vec<_>>()
            .join("/")
    }
}

/// Uploads `object.file` of `session` to `object.key` (its content hashing to
/// `object.sha256`), resuming what `journal` records of it and saving the journal after each
/// part; returns what was done, for the progress line.
async fn upload_object<P, F>(
    bucket: &Bucket,
    status: &Mutex<UploadStatus>,
    session: &Path,
    journal: &mut Journal,
    object: &TableEntry,
    pace: P,
) -> Result<String, UploadError>
where
    P: FnMut(u64, Instant) -> F,
    F: std::future::Future<Output = ()>,
{
    let TableEntry { file, key, sha256 } = object;
    let record = journal.objects.get(file).cloned();
    let mut checkpoint_journal = journal.clone();
    if crate::planted::is(crate::planted::Bug::JournalAheadOfUpload) {
        let size = std::fs::metadata(session.join(file)).map_or(0, |m| m.len());
        let done = ObjectRecord::Done {
            key: key.clone(),
            sha256: sha256.clone(),
            size,
        };
        checkpoint_journal.objects.insert(file.clone(), done);
        let _ = save_journal(session, &checkpoint_journal);
    }
    let record = bucket
        .upload_file(&session.join(file), key, sha256, record, pace, |r| {
            checkpoint_journal.objects.insert(file.clone(), r.clone());
            save_journal(session, &checkpoint_journal).map_err(|source| UploadError::Local {
                path: session.join(JOURNAL),
                source,
            })
        })
        .await?;
    let size = record.size();
    status.lock().expect("status lock").bytes += size;
    metrics::counter!(catalogue::UPLOAD_OBJECTS.name).increment(1);
    metrics::counter!(catalogue::UPLOAD_BYTES.name).increment(size);
    journal.objects.insert(file.clone(), record);
    tracing::info!(key, bytes = size, "uploaded");
    Ok(format!("{file} → {key}"))
}

/// Flight Review's description of a session's flight.
fn description(manifest: &Manifest, journal: &Journal, name: &str) -> String {
    let vehicle = journal.prefix.rsplit('/').nth(1).unwrap_or("");
    format!(
        "ulog-recv: vehicle {vehicle} (system {}), session {name}, started {} UTC, {} split(s)",
        manifest.system_id,
        manifest.started_utc,
        manifest.all_splits().count()
    )
}

/// The `sys_uuid` info of the log at `split` (read from its first 1 MB), if it has one and
/// it is usable in a key ([`crate::export::dataset::hardware_id`]).
pub fn hardware_id(split: &Path) -> Option<String> {
    use std::io::Read;
    let mut head = Vec::new();
    std::fs::File::open(split)
        .ok()?
        .take(1 << 20)
        .read_to_end(&mut head)
        .ok()?;
    crate::export::dataset::hardware_id(&head)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hardware_id_is_read_from_a_real_log_and_absent_from_a_sitl_one() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/testdata/ulog");
        if !dir.exists() {
            eprintln!("SKIPPED: ../shared/testdata/ulog is missing");
            assert!(std::env::var_os("CI").is_none(), "CI needs ../shared");
            return;
        }
        assert_eq!(
            hardware_id(&dir.join("sample_appended_multiple.ulg")).as_deref(),
            Some("0035002B3434511732343031")
        );
        assert_eq!(hardware_id(&dir.join("sample_px4_events.ulg")), None);
    }

    #[test]
    fn the_status_line_says_what_waits_and_what_fails() {
        let mut s = UploadStatus {
            pending_sessions: 2,
            waiting_for_disarm: true,
            ..Default::default()
        };
        assert_eq!(s.to_string(), "2 session(s) to upload once disarmed");
        s.waiting_for_disarm = false;
        assert_eq!(s.to_string(), "uploading, 2 session(s) to go");
        s.failing = Some("bucket gone".into());
        assert_eq!(s.to_string(), "uploads failing: bucket gone");
    }
}
