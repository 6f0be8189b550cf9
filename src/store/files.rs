//! Log files on disk (blocking std I/O): one directory per log session, its splits, and
//! `manifest.json`; power-safe writing and recovery after a crash.
//!
//! Layout under the log directory:
//!
//! ```text
//! 2026-11-22T12-00-00Z_sys1/        one log session, named by its UTC start and the vehicle
//!   manifest.json                   replaced atomically (write, fsync, rename, fsync dir)
//!   split_0000.ulg                  closed splits are read-only (0444)
//!   split_0001.ulg                  the open split: synced every `fsync_interval`
//!   imu/split_0000.ulg              a column's splits (`--column imu=sensor_*`), see
//!                                   [`crate::store::columns`]
//! ```
//!
//! Power safety: the open split and the manifest are synced every `fsync_interval` and on
//! close; directories are synced when a file appears in them. [`LogStore::open`] repairs what
//! a crash left: a split still open is cut back to its last complete message, summarised,
//! closed and entered in its manifest.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::ops::ControlFlow;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use sha2::{Digest, Sha256};

use bytes::BytesMut;

use crate::store::columns::{ColumnRouter, ColumnSpec};
use crate::store::events::{
    BufferWindow, EventBufferSpec, EventGate, EventRecord, EventRefused, EventSource,
    MAX_LISTED_EVENTS, Trigger, TriggerWatch,
};
pub use crate::store::manifest::{
    BufferEntry, ColumnEntry, MANIFEST, MANIFEST_FORMAT, Manifest, SplitEntry, hex, read_manifest,
    update_manifest, write_file_durably, write_manifest,
};
use crate::store::manifest::{replace_manifest, sync_dir};
use crate::store::reference::materialise_references;
use crate::store::splitter::{SplitPolicy, SplitSink, SplitSummary, Splitter};
use crate::ulog::framer::{Framer, Unit};
use crate::ulog::gaps::GapMarker;
use crate::ulog::message::{FILE_HEADER_LEN, FILE_MAGIC, MSG_HEADER_LEN, plausible_header};

/// A file in a session directory that says the session is kept elsewhere too (the uploader
/// puts it there once everything is uploaded): the disk budget deletes such sessions first.
pub const UPLOADED_MARK: &str = "uploaded";

/// Messages held after dropped samples while waiting for the next sample's time.
const MAX_HELD_AFTER_DROP: usize = 1 << 20;

/// Free bytes needed (beyond `min_free`) before paused writing resumes.
pub const RESUME_ROOM: u64 = 256 << 10;

/// How logs are stored.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    pub dir: PathBuf,
    pub policy: SplitPolicy,
    pub fsync_interval: Duration,
    /// Most bytes all sessions may take; the oldest closed sessions go first.
    pub max_total: Option<u64>,
    /// Least free bytes to leave on the filesystem; the oldest closed sessions go first.
    pub min_free: Option<u64>,
    /// Sessions are uploaded: the budget deletes those marked [`UPLOADED_MARK`] first, and
    /// warns when it must delete one that is not.
    pub uploads: bool,
    /// Columns besides the main one (checked with [`crate::store::columns::check_columns`]).
    pub columns: Vec<ColumnSpec>,
    /// Event buffers: columns written only around events (after the columns; checked with
    /// [`crate::store::events::check_buffers`]).
    pub event_buffers: Vec<EventBufferSpec>,
    /// What makes an event besides a request ([`LogStore::request_event`]).
    pub triggers: Vec<Trigger>,
}

impl StoreOptions {
    /// No splitting, no budget, a sync every second.
    pub fn new(dir: PathBuf) -> Self {
        Self {
            dir,
            policy: SplitPolicy::unlimited(),
            fsync_interval: Duration::from_secs(1),
            max_total: None,
            min_free: None,
            uploads: false,
            columns: Vec::new(),
            event_buffers: Vec::new(),
            triggers: Vec::new(),
        }
    }
}

/// The open log session.
struct OpenSession {
    dir: PathBuf,
    manifest: Manifest,
    /// Cuts the bytes written, in any pieces, into whole messages.
    framer: Framer,
    /// Marks samples dropped before the store (its queue was full) with a dropout.
    gaps: GapMarker,
    /// Cuts the log into a stream per column; `None` without columns.
    router: Option<ColumnRouter>,
    /// The main column first, then one per column (event buffers last).
    columns: Vec<ColumnWriter>,
    /// Per column: its gate when it is an event buffer.
    gates: Vec<Option<EventGate>>,
    /// Follows the log for events; `None` without event buffers and triggers.
    watch: Option<TriggerWatch>,
    /// Events entered in the manifest, not yet handed out.
    recorded: Vec<EventRecord>,
}

/// One column's splitter and files.
struct ColumnWriter {
    splitter: Splitter,
    sink: FileSink,
}

/// Receives the splitter's output and puts it in files.
struct FileSink {
    /// The column's directory (the session's for the main column).
    dir: PathBuf,
    /// What the manifest puts before a split's name (`imu/`; empty for the main column).
    prefix: String,
    /// The split being written: its index, file and running hash.
    file: Option<(u32, BufWriter<File>, Sha256)>,
    /// The split a write failure hit (its file may end in a torn message).
    failed: Option<u32>,
    /// Summaries of splits that ended, for the manifest.
    ended: Vec<(SplitSummary, String)>,
    begun: Vec<u32>,
    /// Splits closed (written out) but not synced yet.
    closed: Vec<File>,
    error: Option<io::Error>,
    /// Writing failed (a full disk): everything is dropped until [`LogStore`] resumes.
    paused: bool,
    /// A split closed early by a write failure: its later `end` is not news.
    abandoned: Option<u32>,
}

impl FileSink {
    fn new(dir: PathBuf, prefix: String) -> Self {
        Self {
            dir,
            prefix,
            file: None,
            ended: Vec::new(),
            begun: Vec::new(),
            closed: Vec::new(),
            error: None,
            failed: None,
            paused: false,
            abandoned: None,
        }
    }

    fn split_path(&self, index: u32) -> PathBuf {
        self.dir.join(split_name(index))
    }

    /// The split's name in the manifest (relative to the session).
    fn entry_name(&self, index: u32) -> String {
        format!("{}{}", self.prefix, split_name(index))
    }

    fn fail(&mut self, e: io::Error) {
        if self.error.is_none() {
            self.error = Some(e);
        }
    }
}

fn split_name(index: u32) -> String {
    format!("split_{index:04}.ulg")
}

impl SplitSink for FileSink {
    fn begin(&mut self, index: u32) {
        if self.paused {
            return;
        }
        let path = self.split_path(index);
        match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(f) => {
                // (Its directory entry is synced with the next sync round.)
                self.file = Some((index, BufWriter::with_capacity(1 << 16, f), Sha256::new()));
            }
            Err(e) => {
                self.failed = Some(index);
                self.fail(e);
            }
        }
        self.begun.push(index);
    }

    fn write(&mut self, bytes: &[u8]) {
        if let Some((index, w, hash)) = &mut self.file {
            hash.update(bytes);
            if let Err(e) = w.write_all(bytes) {
                self.failed = Some(*index);
                self.fail(e);
            }
        }
    }

    fn end(&mut self, summary: &SplitSummary) {
        if self.paused || self.abandoned == Some(summary.index) {
            return;
        }
        let path = self.split_path(summary.index);
        if let Some((_, w, hash)) = self.file.take() {
            let sha = hex(&hash.finalize());
            // Written out now, synced before the manifest says it is closed.
            match w.into_inner().map_err(|e| e.into_error()) {
                Ok(f) => {
                    self.closed.push(f);
                    if let Err(e) = make_closed(&path) {
                        self.fail(e);
                    }
                }
                Err(e) => {
                    self.failed = Some(summary.index);
                    self.fail(e);
                    return;
                }
            }
            self.ended.push((summary.clone(), sha));
        }
    }
}

/// What has not reached the disk yet. The store syncs it one fsync at a time
/// ([`LogStore::tick`]), in an order that keeps the disk consistent at every step: new
/// directory entries, then closed splits, then the open split's data, then the manifest
/// (which may only claim what is durable), then the session directory that holds it.
#[derive(Debug, Default)]
struct Unsynced {
    /// Directories whose new entries (a session, a split, a manifest) are not durable yet.
    dirs: Vec<PathBuf>,
    /// Closed splits whose data is not durable yet.
    closed: Vec<File>,
    /// The open split holds data not synced yet.
    data: bool,
    /// This round has synced the open split's data: what is written meanwhile waits for the
    /// next round, so that a steady stream cannot hold the manifest back round after round.
    data_done: bool,
    /// The column whose open split this round syncs next.
    data_next: usize,
    /// The manifest on disk is older than the one in memory.
    manifest: bool,
    /// A sync round is under way.
    round: bool,
}

/// See the module docs.
pub struct LogStore {
    options: StoreOptions,
    session: Option<OpenSession>,
    unsynced: Unsynced,
    last_sync: Instant,
    last_manifest: Instant,
    /// Over the budget with nothing left to delete: said once until it changes.
    budget_blocked: bool,
    /// Events of sessions that ended, not yet handed out.
    events: Vec<EventRecord>,
}

/// Longest time the manifest goes without the open split's latest summary.
pub const MANIFEST_REFRESH: Duration = Duration::from_secs(10);

/// Why the log directory cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("cannot use the log directory {dir}: {source}")]
pub struct StoreError {
    pub dir: PathBuf,
    pub source: io::Error,
}

impl LogStore {
    /// Opens the log directory (created if missing; it must be writable). What a crash left
    /// in it is repaired by [`recover`](Self::recover).
    pub fn open(options: StoreOptions) -> Result<Self, StoreError> {
        let err = |source| StoreError {
            dir: options.dir.clone(),
            source,
        };
        std::fs::create_dir_all(&options.dir).map_err(err)?;
        let probe = options.dir.join(".ulog-recv-write-test");
        File::create(&probe).map_err(err)?;
        let _ = std::fs::remove_file(&probe);
        Ok(Self {
            options,
            session: None,
            unsynced: Unsynced::default(),
            last_sync: Instant::now(),
            last_manifest: Instant::now(),
            budget_blocked: false,
            events: Vec::new(),
        })
    }

    /// Repairs what a crash left in the log directory (see [`recover`]); never fails: a
    /// session it cannot repair is set aside and reported.
    pub fn recover(&mut self) {
        recover(&self.options.dir);
    }

    /// The open session's directory.
    pub fn session_dir(&self) -> Option<&Path> {
        self.session.as_ref().map(|s| s.dir.as_path())
    }

    /// Starts a new log session for the vehicle `(system_id, component_id)`; returns its
    /// directory.
    pub fn begin_log(&mut self, vehicle: (u8, u8), started: SystemTime) -> io::Result<PathBuf> {
        self.end_log()?;
        let stamp = humantime::format_rfc3339_seconds(started).to_string();
        let base = format!("{}_sys{}", stamp.replace(':', "-"), vehicle.0);
        let mut dir = self.options.dir.join(&base);
        let mut k = 1;
        while dir.exists() {
            dir = self.options.dir.join(format!("{base}-{k}"));
            k += 1;
        }
        std::fs::create_dir(&dir)?;
        let mut writers = vec![ColumnWriter {
            splitter: Splitter::new(self.options.policy.clone()),
            sink: FileSink::new(dir.clone(), String::new()),
        }];
        let buffers = self.options.event_buffers.iter();
        let all_columns: Vec<ColumnSpec> = (self.options.columns.iter().cloned())
            .chain(buffers.clone().map(|b| b.column.clone()))
            .collect();
        for column in &all_columns {
            let column_dir = dir.join(&column.name);
            std::fs::create_dir(&column_dir)?;
            self.unsynced.dirs.push(column_dir.clone());
            writers.push(ColumnWriter {
                splitter: Splitter::new(self.options.policy.clone()),
                sink: FileSink::new(column_dir, format!("{}/", column.name)),
            });
        }
        let manifest = Manifest {
            format: MANIFEST_FORMAT.into(),
            system_id: vehicle.0,
            component_id: vehicle.1,
            started_utc: stamp,
            columns: (self.options.columns.iter())
                .map(|c| (c, None))
                .chain(buffers.clone().map(|b| {
                    let entry = BufferEntry {
                        before_us: b.before_us,
                        after_us: b.after_us,
                        ..BufferEntry::default()
                    };
                    (&b.column, Some(entry))
                }))
                .map(|(c, event_buffer)| ColumnEntry {
                    name: c.name.clone(),
                    patterns: c.patterns.clone(),
                    splits: Vec::new(),
                    event_buffer,
                })
                .collect(),
            ..Manifest::default()
        };
        // On disk at once, whole (recovery finds the session by it); its directory entries
        // are made durable by the next sync round.
        replace_manifest(&dir, &manifest)?;
        self.unsynced.dirs.push(self.options.dir.clone());
        self.unsynced.dirs.push(dir.clone());
        let gates = std::iter::repeat_with(|| None)
            .take(self.options.columns.len() + 1)
            .chain(buffers.map(|b| Some(EventGate::new(b.clone()))))
            .collect();
        let watch = (!self.options.triggers.is_empty() || !self.options.event_buffers.is_empty())
            .then(|| TriggerWatch::new(self.options.triggers.clone()));
        let router = (!all_columns.is_empty()).then(|| ColumnRouter::new(all_columns));
        self.session = Some(OpenSession {
            gates,
            watch,
            recorded: Vec::new(),
            framer: Framer::file(),
            gaps: GapMarker::new(MAX_HELD_AFTER_DROP),
            router,
            columns: writers,
            dir: dir.clone(),
            manifest,
        });
        Ok(dir)
    }

    /// The log's next bytes (the file header first, then messages, in pieces of any size).
    pub fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        let Some(s) = &mut self.session else {
            return Err(io::Error::other("no log session open"));
        };
        let mut out = BytesMut::with_capacity(bytes.len() + 16);
        let (gaps, manifest) = (&mut s.gaps, &mut s.manifest);
        let _ = s.framer.push(bytes, |unit| {
            match unit {
                Unit::Header(header) => {
                    gaps.header(header);
                    manifest.log_start_us = Some(u64::from_le_bytes(
                        header[8..16].try_into().expect("8 bytes"),
                    ));
                    out.extend_from_slice(header);
                }
                Unit::Message(message) => {
                    gaps.message(message, &mut out);
                }
            }
            ControlFlow::Continue(())
        });
        s.split(&out);
        self.unsynced.data |= !out.is_empty();
        self.unsynced.manifest |= !s.recorded.is_empty();
        self.absorb()
    }

    /// An event asked for from outside (`ulog-recv event`): at the log time reached, its
    /// windows opened in every event buffer (`after_us` instead of their own when given).
    /// Entered in the manifest at the next sync; handed out by
    /// [`take_events`](Self::take_events). Refused when no log is open, or when the log
    /// lists [`MAX_LISTED_EVENTS`] events already.
    pub fn request_event(
        &mut self,
        name: &str,
        after_us: Option<u64>,
    ) -> Result<EventRecord, EventRefused> {
        let s = self.session.as_mut().ok_or(EventRefused::NoLog)?;
        if s.manifest.events.len() >= MAX_LISTED_EVENTS {
            return Err(EventRefused::TooMany);
        }
        let record = s.request_event(name, after_us);
        self.unsynced.manifest = true;
        self.unsynced.data = true;
        Ok(record)
    }

    /// The events entered in the manifest since the last call, in order.
    pub fn take_events(&mut self) -> Vec<EventRecord> {
        let mut events = std::mem::take(&mut self.events);
        if let Some(s) = &mut self.session {
            events.append(&mut s.recorded);
        }
        events
    }

    /// Takes new options (a config reload): the split policy from the next message on, the
    /// sync interval and the budget at once. The directory cannot change while running; a new
    /// one is ignored (the caller says so).
    pub fn reconfigure(&mut self, options: StoreOptions) {
        if let Some(s) = &mut self.session {
            for c in &mut s.columns {
                c.splitter.set_policy(options.policy.clone());
            }
        }
        self.options = StoreOptions {
            dir: self.options.dir.clone(),
            ..options
        };
    }

    /// Rolls to a new split before the next sample (SIGHUP).
    pub fn roll(&mut self) {
        if let Some(s) = &mut self.session {
            s.columns.iter_mut().for_each(|c| c.splitter.request_roll());
        }
    }

    /// Group commit: every `fsync_interval` a sync round makes what was written durable, one
    /// fsync per call (see `Unsynced`), so that a caller calling between writes never waits
    /// for more than one fsync; when the round is over, the disk budget is kept.
    pub fn tick(&mut self, now: Instant) -> io::Result<()> {
        if !self.unsynced.round {
            if now.duration_since(self.last_sync) < self.options.fsync_interval {
                return Ok(());
            }
            self.unsynced.round = true;
            self.unsynced.data_done = false;
            self.last_sync = now;
            // The open split's growing summary goes in at most every MANIFEST_REFRESH
            // (recovery redoes it from the file anyway).
            if self.last_manifest.elapsed() >= MANIFEST_REFRESH && self.session.is_some() {
                self.unsynced.manifest = true;
            }
        }
        if self.is_paused() {
            self.unsynced.round = false;
            return self.enforce_budget();
        }
        match self.sync_step() {
            Ok(true) => Ok(()),
            Ok(false) => {
                self.unsynced.round = false;
                self.enforce_budget()
            }
            Err(e) => {
                self.unsynced.round = false;
                self.pause_writing();
                Err(e)
            }
        }
    }

    /// One fsync of what is pending, in order; false when nothing was left.
    fn sync_step(&mut self) -> io::Result<bool> {
        let session_dir = self.session.as_ref().map(|s| s.dir.clone());
        let u = &mut self.unsynced;
        // Directories first, but the session's own after its manifest (one sync for both).
        let other_dir = u.dirs.iter().position(|d| Some(d) != session_dir.as_ref());
        if let Some(i) = other_dir {
            sync_dir(&u.dirs[i])?;
            u.dirs.remove(i);
            return Ok(true);
        }
        if let Some(f) = u.closed.pop() {
            f.sync_all()?;
            return Ok(true);
        }
        if u.data && !u.data_done {
            // One column's open split per step, the main column's first.
            let open = self.session.as_mut().into_iter().flat_map(|s| {
                s.columns
                    .iter_mut()
                    .enumerate()
                    .filter_map(|(k, c)| c.sink.file.as_mut().map(|(_, w, _)| (k, w)))
            });
            if let Some((k, w)) = open.into_iter().find(|(k, _)| *k >= u.data_next) {
                u.data_next = k + 1;
                w.flush()?;
                w.get_ref().sync_data()?;
                return Ok(true);
            }
            u.data = false;
            u.data_done = true;
            u.data_next = 0;
        }
        if u.manifest {
            u.manifest = false;
            self.save_manifest()?;
            return Ok(true);
        }
        if let Some(dir) = self.unsynced.dirs.pop() {
            sync_dir(&dir)?;
            return Ok(true);
        }
        Ok(false)
    }

    /// Hands what is buffered to the OS, without a sync: a crash of the process then loses
    /// nothing written (a power cut, at most what the next sync would have made durable).
    pub fn flush(&mut self) -> io::Result<()> {
        let result = match &mut self.session {
            Some(s) => s
                .columns
                .iter_mut()
                .filter_map(|c| c.sink.file.as_mut())
                .try_for_each(|(_, w, _)| w.flush()),
            None => Ok(()),
        };
        if result.is_err() {
            self.pause_writing();
        }
        result
    }

    /// Makes everything written so far durable now.
    pub fn sync(&mut self) -> io::Result<()> {
        self.unsynced.data = true;
        self.unsynced.data_done = false;
        self.unsynced.manifest |= self.session.is_some();
        while self.sync_step()? {}
        Ok(())
    }

    /// `samples` were dropped before the store (its queue was full): a dropout goes where
    /// they were, as long as the samples around the gap tell.
    pub fn lost(&mut self, samples: u64) {
        if let Some(s) = &mut self.session {
            s.gaps.gap(samples);
        }
    }

    /// Ends the open log session: its last split is closed, the manifest says so.
    pub fn end_log(&mut self) -> io::Result<Option<PathBuf>> {
        let Some(s) = &mut self.session else {
            return Ok(None);
        };
        let mut out = BytesMut::new();
        s.gaps.finish(&mut out);
        s.split(&out);
        for c in &mut s.columns {
            c.splitter.finish(&mut c.sink);
        }
        self.absorb()?;
        let Some(s) = &mut self.session else {
            return Ok(None);
        };
        s.manifest.closed = true;
        self.events.append(&mut s.recorded);
        // Everything durable: the last split, then the manifest that says the session is
        // over, then its directory.
        self.unsynced.manifest = true;
        self.unsynced.data_done = false;
        while self.sync_step()? {}
        self.unsynced.round = false;
        Ok(self.session.take().map(|s| s.dir))
    }

    /// Moves what the sink did into the manifest; hands out its first error.
    fn absorb(&mut self) -> io::Result<()> {
        let Some(s) = &mut self.session else {
            return Ok(());
        };
        let mut error = None;
        for (k, c) in s.columns.iter_mut().enumerate() {
            let sink = &mut c.sink;
            if !sink.begun.is_empty() || !sink.ended.is_empty() {
                // New split files in the directory, splits that ended: for the next round.
                if !sink.begun.is_empty() && !self.unsynced.dirs.contains(&sink.dir) {
                    self.unsynced.dirs.push(sink.dir.clone());
                }
                self.unsynced.manifest = true;
            }
            self.unsynced.closed.append(&mut sink.closed);
            let Some(splits) = s.manifest.column_splits_mut(k) else {
                continue;
            };
            for index in std::mem::take(&mut sink.begun) {
                splits.push(SplitEntry {
                    file: sink.entry_name(index),
                    summary: SplitSummary {
                        index,
                        ..SplitSummary::default()
                    },
                    ..SplitEntry::default()
                });
            }
            for (summary, sha) in sink.ended.drain(..) {
                if let Some(e) = splits.iter_mut().find(|e| e.summary.index == summary.index) {
                    e.summary = summary;
                    e.closed = true;
                    e.sha256 = Some(sha);
                }
            }
            if let Some(e) = sink.error.take() {
                error.get_or_insert(e);
            }
        }
        if let Some(e) = error {
            self.pause_writing();
            return Err(e);
        }
        Ok(())
    }

    /// A write failed (most likely a full disk): the open split is cut back to its last whole
    /// message and closed; nothing more is written until [`tick`](Self::tick) finds space.
    fn pause_writing(&mut self) {
        let Some(s) = &mut self.session else { return };
        if s.columns[0].sink.paused {
            return;
        }
        for (k, c) in s.columns.iter_mut().enumerate() {
            let sink = &mut c.sink;
            sink.paused = true;
            // The split the failure hit, and the one open now (if another): cut back and
            // closed.
            let mut torn: Vec<u32> = sink.failed.take().into_iter().collect();
            if let Some((index, w, _)) = sink.file.take() {
                let (file, _unwritten) = w.into_parts();
                drop(file);
                torn.push(index);
            }
            torn.dedup();
            sink.abandoned = c.splitter.current().map(|c| c.index);
            let Some(splits) = s.manifest.column_splits_mut(k) else {
                continue;
            };
            for index in torn {
                let name = sink.entry_name(index);
                let path = s.dir.join(&name);
                match repair_split(&path, splits, &name) {
                    Ok(Some(entry)) => match splits.iter_mut().find(|e| e.file == name) {
                        Some(e) => *e = entry,
                        None => splits.push(entry),
                    },
                    Ok(None) => {
                        let _ = std::fs::remove_file(&path);
                        splits.retain(|e| e.file != name);
                    }
                    Err(e) => tracing::error!(error = %e, "cannot close {}", path.display()),
                }
            }
        }
        let _ = write_manifest(&s.dir, &s.manifest);
        tracing::error!(
            dir = %s.dir.display(),
            "cannot write the log (disk full?): logging paused, receiving goes on; it resumes \
             in a new split when space comes back"
        );
    }

    /// True while writing is paused by a failure.
    pub fn is_paused(&self) -> bool {
        self.session
            .as_ref()
            .is_some_and(|s| s.columns[0].sink.paused)
    }

    /// Deletes the oldest closed sessions while the budget is exceeded; resumes paused writing
    /// when there is room again. Without a budget no directory is walked.
    pub fn enforce_budget(&mut self) -> io::Result<()> {
        if self.options.max_total.is_some() || self.options.min_free.is_some() {
            self.keep_budget()?;
        }
        if self.is_paused() {
            let free = crate::sys::os::free_bytes(&self.options.dir)?;
            // Room for a preamble and some data, beyond the free space the budget keeps.
            let room = self.options.min_free.unwrap_or(0) + RESUME_ROOM;
            if free >= room
                && let Some(s) = &mut self.session
            {
                tracing::info!(free, "space again: logging resumes in a new split");
                for c in &mut s.columns {
                    c.sink.paused = false;
                    c.splitter.request_roll();
                }
            }
        }
        Ok(())
    }

    fn keep_budget(&mut self) -> io::Result<()> {
        let open = self.session.as_ref().map(|s| s.dir.clone());
        // Sessions a snippet references and that it could not be given its own copy of.
        let mut held: Vec<PathBuf> = Vec::new();
        loop {
            let used = dir_size(&self.options.dir)?;
            let free = crate::sys::os::free_bytes(&self.options.dir)?;
            let over_total = self.options.max_total.filter(|&m| used > m);
            let under_free = self.options.min_free.filter(|&m| free < m);
            if over_total.is_none() && under_free.is_none() {
                self.budget_blocked = false;
                return Ok(());
            }
            // Closed sessions, and those recovery set aside, oldest (by name: UTC) first; the
            // uploaded ones before any other.
            let mut sessions: Vec<PathBuf> = std::fs::read_dir(&self.options.dir)?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_dir() && Some(p) != open.as_ref() && !held.contains(p))
                .filter(|p| is_set_aside(p) || read_manifest(p).is_ok_and(|m| m.closed))
                .collect();
            sessions.sort_by_key(|p| (!p.join(UPLOADED_MARK).exists(), p.clone()));
            let Some(oldest) = sessions.first() else {
                if !self.budget_blocked {
                    tracing::warn!(
                        used,
                        free,
                        held = held.len(),
                        "over the disk budget, and only the open session is left (and those \
                         held for snippets)"
                    );
                    self.budget_blocked = true;
                }
                return Ok(());
            };
            let why = match (over_total, under_free) {
                (Some(max), _) => format!("the sessions take {used} bytes, over max-total {max}"),
                (None, Some(min)) => format!("{free} bytes free, under min-free {min}"),
                (None, None) => unreachable!("checked above"),
            };
            let size = dir_size(oldest).unwrap_or(0);
            if self.options.uploads && !oldest.join(UPLOADED_MARK).exists() {
                tracing::warn!(session = %oldest.display(), bytes = size,
                    "deleting a session that is NOT uploaded (nothing uploaded is left to \
                     delete): it is lost; {why}");
            } else {
                tracing::warn!(session = %oldest.display(), bytes = size, "deleting the oldest session: {why}");
            }
            // A snippet that references the session gets its own copy first.
            match materialise_references(oldest) {
                Ok(_) => delete_session(oldest)?,
                Err(e) => {
                    tracing::error!(session = %oldest.display(), error = %e,
                        "a snippet references this session and cannot be given its own copy: \
                         the session stays");
                    held.push(oldest.clone());
                }
            }
        }
    }

    fn save_manifest(&mut self) -> io::Result<()> {
        let Some(s) = &mut self.session else {
            return Ok(());
        };
        // The open splits as far as they are known now.
        for (k, c) in s.columns.iter().enumerate() {
            if let Some(current) = c.splitter.current()
                && let Some(splits) = s.manifest.column_splits_mut(k)
                && let Some(e) = splits.iter_mut().find(|e| e.summary.index == current.index)
                && !e.closed
            {
                e.summary = current.clone();
            }
        }
        self.last_manifest = Instant::now();
        replace_manifest(&s.dir, &s.manifest)?;
        // Its new entry: with the directory's sync.
        if !self.unsynced.dirs.contains(&s.dir) {
            self.unsynced.dirs.push(s.dir.clone());
        }
        Ok(())
    }
}

/// Opens `event`'s window in `gate`, noting it in the event; the held samples it takes go to
/// `out`.
fn open_window(gate: &mut EventGate, event: &mut EventRecord, out: &mut BytesMut) {
    let [from_us, to_us] = gate.open(event.at_us, event.after_us, out);
    event.windows.push(BufferWindow {
        buffer: gate.spec().column.name.clone(),
        from_us,
        to_us,
    });
}

impl OpenSession {
    /// Whole units of the log to the columns' splitters (through the router when there are
    /// columns, and each event buffer's through its gate); the events they make are
    /// recorded.
    fn split(&mut self, bytes: &[u8]) {
        let mut events = Vec::new();
        if let Some(watch) = &mut self.watch {
            watch.push(bytes, &mut events);
        }
        match &mut self.router {
            None => {
                let c = &mut self.columns[0];
                c.splitter.push(bytes, &mut c.sink);
            }
            Some(router) => {
                let mut outs: Vec<BytesMut> =
                    (0..router.outputs()).map(|_| BytesMut::new()).collect();
                router.push(bytes, &mut outs);
                for ((c, gate), out) in self.columns.iter_mut().zip(&mut self.gates).zip(&outs) {
                    let gated;
                    let out = match gate {
                        Some(gate) => {
                            let mut held_back = BytesMut::new();
                            gate.push(out, &mut held_back);
                            for e in &mut events {
                                open_window(gate, e, &mut held_back);
                            }
                            gated = held_back;
                            &gated
                        }
                        None => out,
                    };
                    if !out.is_empty() {
                        c.splitter.push(out, &mut c.sink);
                    }
                }
            }
        }
        for e in events {
            self.record(e);
        }
    }

    fn request_event(&mut self, name: &str, after_us: Option<u64>) -> EventRecord {
        let at_us = match &self.watch {
            Some(w) => w.log_time(),
            None => self.columns[0].splitter.log_time(),
        };
        let mut event = EventRecord {
            name: name.to_owned(),
            source: EventSource::Request,
            at_us,
            detail: String::new(),
            after_us,
            windows: Vec::new(),
        };
        for (c, gate) in self.columns.iter_mut().zip(&mut self.gates) {
            if let Some(gate) = gate {
                let mut gated = BytesMut::new();
                open_window(gate, &mut event, &mut gated);
                c.splitter.push(&gated, &mut c.sink);
            }
        }
        self.record(event.clone());
        event
    }

    /// Enters an event in the manifest, with the buffers' windows as they are now.
    /// Past [`MAX_LISTED_EVENTS`] only the windows are: the event is counted.
    fn record(&mut self, event: EventRecord) {
        for (entry, gate) in self.manifest.columns.iter_mut().zip(&self.gates[1..]) {
            if let (Some(b), Some(gate)) = (&mut entry.event_buffer, gate) {
                b.windows = gate.windows().to_vec();
                b.dropped_for_memory = gate.dropped_for_memory;
            }
        }
        if self.manifest.events.len() >= MAX_LISTED_EVENTS {
            if self.manifest.events_unlisted == 0 {
                tracing::warn!(
                    "{MAX_LISTED_EVENTS} events in this log: further ones still write their \
                     windows but are not listed (a trigger that fires too often?)"
                );
            }
            self.manifest.events_unlisted += 1;
            return;
        }
        tracing::info!(
            name = %event.name,
            source = ?event.source,
            at_s = event.at_us as f64 / 1e6,
            detail = %event.detail,
            "event"
        );
        self.manifest.events.push(event.clone());
        self.recorded.push(event);
    }
}

/// The session directories under `dir` (those set aside or being deleted left out), oldest
/// (by name: UTC start) first.
pub fn list_sessions(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut sessions: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_dir()
                && !is_set_aside(p)
                && !p.to_string_lossy().ends_with(DELETING_SUFFIX)
                && p.join(MANIFEST).exists()
        })
        .collect();
    sessions.sort();
    Ok(sessions)
}

/// Bytes of all files under `dir`.
fn dir_size(dir: &Path) -> io::Result<u64> {
    let mut total = 0;
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let meta = e.metadata()?;
        total += if meta.is_dir() {
            dir_size(&e.path())?
        } else {
            meta.len()
        };
    }
    Ok(total)
}

/// A closed split: its write bits go, the rest of its mode (the umask's group bits) stays.
fn make_closed(path: &Path) -> io::Result<()> {
    let mode = std::fs::metadata(path)?.permissions().mode();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & !0o222))
}

/// Finds where the whole, plausible messages of a split end, fed in blocks (a crash can
/// leave a torn message, zeros or garbage where data was not yet written).
#[derive(Debug)]
struct PrefixScan {
    framer: Framer,
    /// Bytes of the file header and whole plausible messages so far.
    good: u64,
    messages: u64,
    /// The file does not start with the ULog magic.
    no_magic: bool,
    stopped: bool,
}

impl Default for PrefixScan {
    fn default() -> Self {
        Self {
            framer: Framer::file(),
            good: 0,
            messages: 0,
            no_magic: false,
            stopped: false,
        }
    }
}

impl PrefixScan {
    /// Takes the next block; false once the end of the good part was found.
    fn push(&mut self, block: &[u8]) -> bool {
        let (good, messages, no_magic) = (&mut self.good, &mut self.messages, &mut self.no_magic);
        let flow = self.framer.push(block, |unit| match unit {
            Unit::Header(h) if h[..FILE_MAGIC.len()] != FILE_MAGIC => {
                *no_magic = true;
                ControlFlow::Break(())
            }
            Unit::Header(_) => {
                *good += FILE_HEADER_LEN as u64;
                ControlFlow::Continue(())
            }
            Unit::Message(m) => {
                let size = m.len() - MSG_HEADER_LEN;
                if !plausible_header(m[2], size, *messages == 0) {
                    return ControlFlow::Break(());
                }
                *messages += 1;
                *good += m.len() as u64;
                ControlFlow::Continue(())
            }
        });
        self.stopped |= flow.is_break();
        !self.stopped
    }

    /// Where the file must end: 0 without a file header.
    fn complete_prefix(&self) -> u64 {
        if self.no_magic { 0 } else { self.good }
    }
}

/// Length of the longest prefix of `bytes` that is a file header and whole, plausible
/// messages: where a file cut by a crash must end.
pub fn complete_prefix(bytes: &[u8]) -> usize {
    let mut scan = PrefixScan::default();
    scan.push(bytes);
    scan.complete_prefix() as usize
}

/// Suffix of a session recovery could not repair, renamed aside so that it is looked at by a
/// person and not again at every start.
pub const SET_ASIDE_SUFFIX: &str = ".unrecoverable";

/// Suffix of a session being deleted: renamed first, so that a power cut in the middle of a
/// deletion leaves a name that says so (the next start finishes the deletion), never half a
/// session counted as whole.
pub const DELETING_SUFFIX: &str = ".deleting";

fn is_set_aside(dir: &Path) -> bool {
    dir.file_name()
        .is_some_and(|n| n.to_string_lossy().ends_with(SET_ASIDE_SUFFIX))
}

/// Deletes a session directory, crash-safe: renamed to `NAME.deleting`, then removed.
fn delete_session(session: &Path) -> io::Result<()> {
    let parent = session.parent().unwrap_or(Path::new("."));
    let mut doomed = session.as_os_str().to_owned();
    doomed.push(DELETING_SUFFIX);
    let doomed = PathBuf::from(doomed);
    std::fs::rename(session, &doomed)?;
    sync_dir(parent)?;
    std::fs::remove_dir_all(&doomed)?;
    sync_dir(parent)
}

/// What recovery did with one session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recovered {
    /// Its open splits were cut back to whole messages and closed; the manifest says so.
    Repaired(PathBuf),
    /// It held no data: removed.
    Removed(PathBuf),
    /// It could not be repaired: renamed to `to`.
    SetAside {
        from: PathBuf,
        to: PathBuf,
        cause: String,
    },
    /// A deletion a power cut interrupted was finished.
    DeletionFinished(PathBuf),
}

/// Repairs every session under `dir` that a crash left open, and finishes deletions a power
/// cut interrupted. It never stops at a session it cannot repair (an I/O error, a split that
/// is not a regular file or cannot be read, a manifest it cannot read): that one is renamed to
/// `NAME.unrecoverable`, reported once with its path and the cause, and skipped. Memory stays
/// bounded whatever the size of the splits. Returns what it did.
pub fn recover(dir: &Path) -> Vec<Recovered> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => {
            tracing::error!(dir = %dir.display(), error = %e, "cannot look for sessions to repair");
            return Vec::new();
        }
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    let mut done = Vec::new();
    for path in paths {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if name.ends_with(DELETING_SUFFIX) {
            match std::fs::remove_dir_all(&path).and_then(|()| sync_dir(dir)) {
                Ok(()) => {
                    tracing::info!(dir = %path.display(), "finished a deletion a power cut interrupted");
                    done.push(Recovered::DeletionFinished(path));
                }
                Err(e) => {
                    tracing::error!(dir = %path.display(), error = %e, "cannot finish deleting")
                }
            }
            continue;
        }
        if name.ends_with(SET_ASIDE_SUFFIX) || !path.join(MANIFEST).exists() {
            continue;
        }
        match recover_session(dir, &path) {
            Ok(Some(r)) => done.push(r),
            Ok(None) => {}
            Err(cause) => {
                let cause = cause.to_string();
                let mut to = path.as_os_str().to_owned();
                to.push(SET_ASIDE_SUFFIX);
                let to = PathBuf::from(to);
                match std::fs::rename(&path, &to).and_then(|()| sync_dir(dir)) {
                    Ok(()) => {
                        tracing::error!(
                            session = %path.display(),
                            set_aside = %to.display(),
                            "cannot repair a session a crash left: {cause}; set aside, logging goes on"
                        );
                        done.push(Recovered::SetAside {
                            from: path,
                            to,
                            cause,
                        });
                    }
                    Err(e) => tracing::error!(
                        session = %path.display(),
                        "cannot repair a session a crash left ({cause}), nor set it aside ({e}); \
                         logging goes on"
                    ),
                }
            }
        }
    }
    done
}

/// Repairs one session if it was left open; `Ok(None)` when it was closed.
fn recover_session(dir: &Path, session: &Path) -> io::Result<Option<Recovered>> {
    let mut manifest = read_manifest(session)
        .map_err(|e| io::Error::new(e.kind(), format!("its manifest cannot be read: {e}")))?;
    if manifest.closed {
        return Ok(None);
    }
    for k in 0..=manifest.columns.len() {
        let prefix = match k {
            0 => String::new(),
            k => {
                let name = &manifest.columns[k - 1].name;
                crate::store::columns::check_name(name)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                format!("{name}/")
            }
        };
        let splits = manifest.column_splits_mut(k).expect("k counts the columns");
        recover_column(session, &prefix, splits)?;
    }
    manifest.closed = true;
    if manifest.all_splits().next().is_none() {
        tracing::warn!(session = %session.display(), "a session with no data; removed");
        std::fs::remove_dir_all(session)?;
        sync_dir(dir)?;
        return Ok(Some(Recovered::Removed(session.to_owned())));
    }
    write_manifest(session, &manifest)?;
    tracing::warn!(session = %session.display(), "repaired a session left open by a crash");
    Ok(Some(Recovered::Repaired(session.to_owned())))
}

/// Repairs the splits of one column of a session (`prefix`: `NAME/`, or empty for the main
/// column) that the manifest does not know as closed; `splits` is the column's entry.
fn recover_column(session: &Path, prefix: &str, splits: &mut Vec<SplitEntry>) -> io::Result<()> {
    let dir = session.join(prefix);
    if !dir.is_dir() {
        splits.clear();
        return Ok(());
    }
    // Splits on disk that the manifest does not know as closed.
    let mut files: Vec<String> = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("split_") && n.ends_with(".ulg"))
        .map(|n| format!("{prefix}{n}"))
        .collect();
    files.sort();
    for name in files {
        let known_closed = splits.iter().any(|e| e.file == name && e.closed);
        if known_closed {
            continue;
        }
        let path = session.join(&name);
        let entry = repair_split(&path, splits, &name)
            .map_err(|e| io::Error::new(e.kind(), format!("{name}: {e}")))?;
        match entry {
            Some(entry) => match splits.iter_mut().find(|e| e.file == name) {
                Some(e) => *e = entry,
                None => splits.push(entry),
            },
            None => {
                // Nothing of it reached the disk: no empty files.
                std::fs::remove_file(&path)?;
                splits.retain(|e| e.file != name);
            }
        }
    }
    splits.retain(|e| session.join(&e.file).exists());
    splits.sort_by_key(|e| e.summary.index);
    Ok(())
}

/// Blocks read at a time when a split is repaired.
const REPAIR_BLOCK: usize = 64 << 10;

/// Cuts a split back to its last complete message, closes it, and summarises it; `None` when
/// not even one message after the header survived. Reads the file in blocks, twice: once to
/// find where the whole messages end, once to summarise and hash what stays.
fn repair_split(path: &Path, known: &[SplitEntry], name: &str) -> io::Result<Option<SplitEntry>> {
    use std::io::Read;
    let meta = std::fs::symlink_metadata(path)?;
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not a regular file",
        ));
    }
    let mut file = File::open(path)?;
    let mut block = vec![0u8; REPAIR_BLOCK];
    let mut scan = PrefixScan::default();
    loop {
        let n = file.read(&mut block)?;
        if n == 0 || !scan.push(&block[..n]) {
            break;
        }
    }
    let keep = scan.complete_prefix();
    if keep <= FILE_HEADER_LEN as u64 {
        return Ok(None);
    }
    if keep < meta.len() {
        tracing::warn!(file = %path.display(), cut = meta.len() - keep, "cutting a torn end");
        let f = OpenOptions::new().write(true).open(path)?;
        f.set_len(keep)?;
        f.sync_all()?;
    }
    // The summary and the hash of what stays.
    struct Last(Option<SplitSummary>);
    impl SplitSink for Last {
        fn begin(&mut self, _: u32) {}
        fn write(&mut self, _: &[u8]) {}
        fn end(&mut self, s: &SplitSummary) {
            self.0 = Some(s.clone());
        }
    }
    let mut splitter = Splitter::new(SplitPolicy::unlimited());
    let mut last = Last(None);
    let mut hash = Sha256::new();
    let mut file = File::open(path)?.take(keep);
    loop {
        let n = file.read(&mut block)?;
        if n == 0 {
            break;
        }
        hash.update(&block[..n]);
        splitter.push(&block[..n], &mut last);
    }
    splitter.finish(&mut last);
    let index: u32 = name
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .trim_start_matches("split_")
        .trim_end_matches(".ulg")
        .parse()
        .unwrap_or(0);
    let mut summary = last.0.unwrap_or_default();
    summary.index = index;
    // What only the writer knew (the preamble's extent) comes from the manifest's last word.
    if let Some(k) = known.iter().find(|e| e.file == name) {
        summary.preamble_bytes = k.summary.preamble_bytes.min(keep);
        summary.latched_samples = k.summary.latched_samples;
    }
    make_closed(path)?;
    Ok(Some(SplitEntry {
        file: name.to_owned(),
        closed: true,
        sha256: Some(hex(&hash.finalize())),
        summary,
    }))
}

/// The summary of a split file, recomputed from its bytes (its preamble not told apart).
pub fn summarize_split(bytes: &[u8], index: u32) -> SplitSummary {
    struct Last(Option<SplitSummary>);
    impl SplitSink for Last {
        fn begin(&mut self, _: u32) {}
        fn write(&mut self, _: &[u8]) {}
        fn end(&mut self, s: &SplitSummary) {
            self.0 = Some(s.clone());
        }
    }
    let mut splitter = Splitter::new(SplitPolicy::unlimited());
    let mut last = Last(None);
    splitter.push(bytes, &mut last);
    splitter.finish(&mut last);
    let mut s = last.0.unwrap_or_default();
    s.index = index;
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_with(messages: &[&[u8]]) -> Vec<u8> {
        let mut b = FILE_MAGIC.to_vec();
        b.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0, 0]);
        for m in messages {
            b.extend_from_slice(m);
        }
        b
    }

    #[test]
    fn a_torn_or_zero_filled_end_is_cut_at_the_last_whole_message() {
        let dropout: &[u8] = &[2, 0, b'O', 5, 0];
        let unknown: &[u8] = &[1, 0, b'Z', 9];
        let whole = log_with(&[dropout, unknown, dropout]);
        assert_eq!(complete_prefix(&whole), whole.len());
        // Torn inside the last message.
        assert_eq!(complete_prefix(&whole[..whole.len() - 2]), whole.len() - 5);
        // Zeros where a crash left unwritten blocks.
        let mut zeros = whole.clone();
        zeros.extend_from_slice(&[0; 600]);
        assert_eq!(complete_prefix(&zeros), whole.len());
        // No header: nothing.
        assert_eq!(complete_prefix(&whole[..10]), 0);
    }
}
