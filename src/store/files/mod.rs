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
//! close; a split is synced as it closes, before the next one gets a byte (a power cut then
//! takes only the end of the log, never a stretch of its middle); directories are synced
//! when a file appears in them. [`LogStore::open`] repairs what a crash left: a split still
//! open is cut back to its last complete message, summarised, closed and entered in its
//! manifest.
//!
//! This file holds the store's surface ([`LogStore`]: sessions begun, written, synced, ended)
//! and its sync rounds; `open_session` the session being written (columns, event buffers),
//! `sink` a column's split files, `budget` the disk budget, `recovery` the repair after a
//! crash.

mod budget;
mod disk_failures;
mod open_session;
mod recovery;
mod sink;

pub use self::budget::{delete_session, dir_size, list_sessions};
use self::open_session::{BinGaps, ColumnWriter, LogSplitter, OpenSession};
pub use self::recovery::{
    DELETING_SUFFIX, Recovered, SET_ASIDE_SUFFIX, complete_prefix, recover, summarize_split,
    this_boot,
};
use self::sink::FileSink;

use std::fs::File;
use std::io::{self, Write};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use bytes::BytesMut;

use crate::autopilot::LogFormat;
use crate::diagnose::{FindingFilter, Selection, Severity};
use crate::planted::{self, Bug};
use crate::store::columns::{ColumnRouter, ColumnSpec};
use crate::store::events::{
    EventBufferSpec, EventGate, EventRecord, EventRefused, MAX_LISTED_EVENTS, Trigger, TriggerWatch,
};
use crate::store::fsync;
pub use crate::store::manifest::{
    BufferEntry, ColumnEntry, MANIFEST, MANIFEST_FORMAT, Manifest, SplitEntry, hex, read_manifest,
    update_manifest, write_file_durably, write_manifest,
};
use crate::store::manifest::{DiagnosticsEntry, replace_manifest};
use crate::store::splitter::{SplitPolicy, SplitSummary};
use crate::ulog::framer::{Framer, Unit};
use crate::ulog::gaps::GapMarker;

/// A file in a session directory that says the session is kept elsewhere too (the uploader
/// puts it there once everything is uploaded): the disk budget deletes such sessions first.
pub const UPLOADED_MARK: &str = "uploaded";

/// Free bytes needed before paused writing resumes (whatever `min_free` says).
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
    /// The flight diagnostics run on each log: every finding is an event.
    pub diagnostics: Selection,
    /// The findings that open the event buffers' windows (the others are listed only).
    pub event_on_diagnostic: FindingFilter,
    /// This boot of the machine ([`this_boot`], read by [`new`](Self::new)): written into
    /// each manifest, and what the repair tells a crash from a power cut by.
    pub boot_id: Option<String>,
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
            diagnostics: Selection::ALL,
            event_on_diagnostic: FindingFilter::AtLeast(Severity::Warning),
            boot_id: this_boot(),
        }
    }
}

/// What has not reached the disk yet. The store syncs it one fsync at a time
/// ([`LogStore::tick`]), in an order that keeps the disk consistent at every step: new
/// directory entries, then the open split's data (closed ones were synced as they closed),
/// then the manifest (which may only claim what is durable), then the session directory
/// that holds it.
#[derive(Debug, Default)]
struct Unsynced {
    /// Directories whose new entries (a session, a split, a manifest) are not durable yet.
    dirs: Vec<PathBuf>,
    /// The open split holds data not synced yet.
    data: bool,
    /// This round has synced the open split's data: what is written meanwhile waits for the
    /// next round, so that a steady stream cannot hold the manifest back round after round.
    data_done: bool,
    /// The column whose open split this round syncs next.
    data_next: usize,
    /// The manifest on disk is older than the one in memory.
    manifest: bool,
    /// This round has saved the manifest: a change meanwhile (a dropout, an event) waits for
    /// the next round, so that a lossy link cannot keep a round going and hold the next
    /// round's sync of the open split back.
    manifest_done: bool,
    /// A sync round is under way.
    round: bool,
    /// Sync rounds completed.
    completed: u64,
}

/// See the module docs.
pub struct LogStore {
    options: StoreOptions,
    session: Option<OpenSession>,
    unsynced: Unsynced,
    /// The store's clock is its caller's: the `now` of the last [`tick`](Self::tick), and
    /// when the last round began and the manifest was last saved by it (the first tick
    /// starts both).
    last_tick: Option<Instant>,
    last_sync: Option<Instant>,
    last_manifest: Option<Instant>,
    /// Over the budget with nothing left to delete: said once until it changes.
    budget_blocked: bool,
    /// Events of sessions that ended, not yet handed out.
    events: Vec<EventRecord>,
    /// Sessions that could not be completed as they ended (a full disk), each with its
    /// manifest as the writer last knew it (the one on disk may be older): the repair
    /// completes them once there is room.
    unfinished: Vec<(PathBuf, Manifest)>,
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

/// Makes a folder's entries durable; one gone since (a session the repair removed, nothing
/// of it written) has nothing left to sync: its removal is its parent's to make durable.
fn sync_dir(dir: &Path) -> io::Result<()> {
    match fsync::dir(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        done => done,
    }
}

/// A DataFlash log's next bytes as whole messages, with the marks of the store's own drops.
fn bin_messages(bin: &mut BinGaps, bytes: &[u8]) -> Vec<u8> {
    let mut messages = Vec::new();
    bin.framer.push(bytes, |m, _| messages.extend_from_slice(m));
    bin_marked(bin, &messages)
}

/// Whole DataFlash messages through the store's gap marks.
fn bin_marked(bin: &mut BinGaps, messages: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(messages.len());
    let mut rest = messages;
    while rest.len() >= 3 {
        let Some(format) = bin.framer.format(rest[2]) else {
            break;
        };
        let (m, tail) = rest.split_at((format.length as usize).min(rest.len()));
        rest = tail;
        bin.gaps.message(m, format, &bin.framer, &mut out);
    }
    out
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
            last_tick: None,
            last_sync: None,
            last_manifest: None,
            budget_blocked: false,
            events: Vec::new(),
            unfinished: Vec::new(),
        })
    }
    /// Repairs what a crash left in the log directory (see [`recover`]); never fails: a
    /// session it cannot repair is set aside and reported.
    pub fn recover(&mut self) {
        let repaired = recover(&self.options.dir, self.options.boot_id.as_deref())
            .iter()
            .filter(|r| matches!(r, Recovered::Repaired(_)))
            .count();
        metrics::counter!(crate::monitor::catalogue::SESSIONS_REPAIRED.name)
            .increment(repaired as u64);
    }
    /// The open session's directory.
    pub fn session_dir(&self) -> Option<&Path> {
        self.session.as_ref().map(|s| s.dir.as_path())
    }
    /// Starts a new log session for the vehicle `(system_id, component_id)` whose log is in
    /// `format`; returns its directory. A DataFlash log (ArduPilot's) is written to the main
    /// column only, and watched by the diagnostics alone: columns, event buffers and
    /// triggers read ULog.
    pub fn begin_log(
        &mut self,
        vehicle: (u8, u8),
        started: SystemTime,
        format: LogFormat,
    ) -> io::Result<PathBuf> {
        if let Err(e) = self.end_log()
            && let Some(s) = self.session.take()
        {
            tracing::error!(
                error = %e,
                dir = %s.dir.display(),
                "cannot complete the log session (disk full?): it is completed when space \
                 comes back"
            );
            self.unfinished.push((s.dir, s.manifest));
        }
        let stamp = humantime::format_rfc3339_seconds(started).to_string();
        let base = format!("{}_sys{}", stamp.replace(':', "-"), vehicle.0);
        let mut dir = self.options.dir.join(&base);
        let mut k = 1;
        while dir.exists() {
            dir = self.options.dir.join(format!("{base}-{k}"));
            k += 1;
        }
        let mut writers = vec![ColumnWriter {
            splitter: LogSplitter::new(format, self.options.policy.clone()),
            sink: FileSink::new(dir.clone(), String::new(), format),
        }];
        let ulog = format == LogFormat::ULog;
        let (columns, event_buffers, triggers, diagnostics) = if ulog {
            (
                &self.options.columns[..],
                &self.options.event_buffers[..],
                self.options.triggers.clone(),
                self.options.diagnostics,
            )
        } else {
            (&[][..], &[][..], Vec::new(), self.options.diagnostics)
        };
        let buffers = event_buffers.iter();
        let all_columns: Vec<ColumnSpec> = (columns.iter().cloned())
            .chain(buffers.clone().map(|b| b.column.clone()))
            .collect();
        for column in &all_columns {
            let column_dir = dir.join(&column.name);
            writers.push(ColumnWriter {
                splitter: LogSplitter::new(format, self.options.policy.clone()),
                sink: FileSink::new(column_dir, format!("{}/", column.name), format),
            });
        }
        let manifest = Manifest {
            format: MANIFEST_FORMAT.into(),
            system_id: vehicle.0,
            component_id: vehicle.1,
            started_utc: stamp,
            log_format: format,
            boot_id: self.options.boot_id.clone(),
            columns: (columns.iter())
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
            diagnostics: (!diagnostics.is_empty()).then(|| DiagnosticsEntry {
                analyzers: diagnostics.to_string(),
                ..DiagnosticsEntry::default()
            }),
            ..Manifest::default()
        };
        let gates = std::iter::repeat_with(|| None)
            .take(columns.len() + 1)
            .chain(buffers.map(|b| Some(EventGate::new(b.clone()))))
            .collect();
        let watch = match ulog {
            true => (!triggers.is_empty() || !event_buffers.is_empty() || !diagnostics.is_empty())
                .then(|| TriggerWatch::new(triggers, diagnostics, !event_buffers.is_empty())),
            false => (!diagnostics.is_empty()).then(|| TriggerWatch::dataflash(diagnostics)),
        };
        let router = (!all_columns.is_empty()).then(|| ColumnRouter::new(all_columns));
        self.session = Some(OpenSession {
            gates,
            watch,
            recorded: Vec::new(),
            event_on_diagnostic: self.options.event_on_diagnostic,
            framer: Framer::file(),
            bin: (!ulog).then(|| BinGaps {
                framer: crate::dataflash::Framer::new(),
                gaps: crate::dataflash::GapMarker::writing_through(),
            }),
            gaps: match planted::is(Bug::StoreHoldsAfterOwnGap) {
                true => GapMarker::new(1 << 20),
                false => GapMarker::writing_through(),
            },
            dropped_own: false,
            router,
            columns: writers,
            dir: dir.clone(),
            manifest,
            folder_made: false,
            lost_to_pause: false,
            announce_split: false,
        });
        if let Err(e) = self.make_session_folder() {
            tracing::error!(
                error = %e,
                dir = %dir.display(),
                "cannot begin the log session's folder (disk full?): logging paused, receiving \
                 goes on; the session begins when space comes back"
            );
            self.pause_writing();
        }
        Ok(dir)
    }

    /// The log's next bytes (the file header first, then messages, in pieces of any size).
    pub fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        let Some(s) = &mut self.session else {
            return Err(io::Error::other("no log session open"));
        };
        s.lost_to_pause |= s.columns[0].sink.paused && !bytes.is_empty();
        if let Some(bin) = &mut s.bin {
            let out = bin_messages(bin, bytes);
            s.split(&out);
            self.unsynced.data |= !out.is_empty();
            return self.absorb();
        }
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
        self.last_tick = Some(now);
        let last_manifest = *self.last_manifest.get_or_insert(now);
        if !self.unsynced.round {
            let last_sync = *self.last_sync.get_or_insert(now);
            if now.duration_since(last_sync) < self.options.fsync_interval {
                return Ok(());
            }
            self.unsynced.round = true;
            self.unsynced.data_done = false;
            self.unsynced.manifest_done = false;
            self.last_sync = Some(now);
            // The open split's growing summary goes in at most every MANIFEST_REFRESH
            // (recovery redoes it from the file anyway).
            let refresh = now.duration_since(last_manifest) >= MANIFEST_REFRESH;
            if refresh && self.session.is_some() {
                self.unsynced.manifest = true;
            }
        }
        if self.is_paused() {
            self.unsynced.round = false;
            return self.enforce_budget();
        }
        let began = Instant::now();
        match self.sync_step() {
            Ok(true) => {
                metrics::histogram!(crate::monitor::catalogue::FSYNC.name).record(began.elapsed());
                Ok(())
            }
            Ok(false) => {
                self.unsynced.round = false;
                self.unsynced.completed += 1;
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
        if (u.data || u.data_next > 0) && !u.data_done {
            if u.data_next == 0 {
                // What is written from now on, between this round's steps, is the next
                // round's to sync: were it cleared as the last column is synced, a write
                // between two steps would pass for synced, and stay unsynced for as long as
                // nothing more is written (a vehicle that went quiet).
                u.data = false;
            }
            // One column's open split per step, the main column's first.
            let open = self.session.as_mut().into_iter().flat_map(|s| {
                (s.columns.iter_mut().enumerate()).filter(|(_, c)| c.sink.file.is_some())
            });
            if let Some((k, c)) = open.into_iter().find(|(k, _)| *k >= u.data_next) {
                u.data_next = k + 1;
                c.sink.sync_open_split()?;
                return Ok(true);
            }
            u.data_done = true;
            u.data_next = 0;
        }
        if u.manifest && !u.manifest_done {
            u.manifest = false;
            u.manifest_done = true;
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
            Some(s) => {
                s.columns.iter_mut().for_each(|c| c.sink.report_written());
                s.columns
                    .iter_mut()
                    .filter_map(|c| c.sink.file.as_mut())
                    .try_for_each(|(_, w, _)| w.flush())
            }
            None => Ok(()),
        };
        if result.is_err() {
            self.pause_writing();
        }
        result
    }

    /// Bytes of whole messages the store was handed and keeps in memory, unwritten (behind a
    /// dropout of its own, waiting for the sample after it): none, as the store writes
    /// through; a sync round that left any would not make them durable.
    pub fn held_bytes(&self) -> usize {
        self.session.as_ref().map_or(0, |s| {
            s.gaps.held_bytes() + s.bin.as_ref().map_or(0, |b| b.gaps.held_bytes())
        })
    }

    /// A sync round is under way ([`tick`](Self::tick) goes on with it).
    pub fn syncing(&self) -> bool {
        self.unsynced.round
    }
    /// Sync rounds completed since the store opened: when one completes, everything written
    /// before it began is durable (the simulation holds the store to that).
    pub fn sync_rounds(&self) -> u64 {
        self.unsynced.completed
    }
    /// Makes everything written so far durable now.
    pub fn sync(&mut self) -> io::Result<()> {
        self.unsynced.data = true;
        self.unsynced.data_done = false;
        // Every column's open split again, the first included.
        self.unsynced.data_next = 0;
        self.unsynced.manifest_done = false;
        self.unsynced.manifest |= self.session.is_some();
        while self.sync_step()? {}
        Ok(())
    }
    /// `samples` were dropped before the store (its queue was full): a dropout goes where
    /// they were, as long as the samples around the gap tell.
    pub fn lost(&mut self, samples: u64) {
        self.own_gap(samples, true);
    }

    /// The store lost part of the log itself: the next message goes out after a dropout
    /// mark. `timed`: the mark's duration runs from the last sample this store handled
    /// (else it is unknown: some of those were lost too).
    pub(super) fn own_gap(&mut self, samples: u64, timed: bool) {
        if let Some(s) = &mut self.session {
            match (&mut s.bin, timed) {
                (Some(bin), true) => bin.gaps.gap(0),
                (Some(bin), false) => bin.gaps.gap_since_unknown(0),
                (None, true) => s.gaps.gap(samples),
                (None, false) => s.gaps.gap_since_unknown(samples),
            }
            // A dropout of the store's own may end the log: what the link lost there is
            // no longer all the end lost.
            s.dropped_own = true;
            s.manifest.end_lost_chunks = None;
            self.unsynced.manifest = true;
        }
    }

    /// The link marked a dropout that lost `chunks`; `resolved`: a sample came after it.
    /// The manifest keeps the count of the last one that no sample followed (the stream's
    /// end lost), for the fill ([`Manifest::end_lost_chunks`]).
    pub fn link_dropout(&mut self, chunks: u64, resolved: bool) {
        if let Some(s) = &mut self.session
            && !s.dropped_own
        {
            s.manifest.end_lost_chunks = (!resolved).then_some(chunks);
            self.unsynced.manifest = true;
        }
    }
    /// Ends the open log session: its last split is closed, the manifest says so.
    pub fn end_log(&mut self) -> io::Result<Option<PathBuf>> {
        let Some(s) = &mut self.session else {
            return Ok(None);
        };
        if !s.folder_made {
            tracing::error!(
                dir = %s.dir.display(),
                "the log session ends with nothing of it written: the disk was full throughout"
            );
            self.session = None;
            return Ok(None);
        }
        let mut out = BytesMut::new();
        match &mut s.bin {
            Some(bin) => {
                let mut tail = Vec::new();
                bin.framer.finish(|m, _| tail.extend_from_slice(m));
                let mut marked = bin_marked(bin, &tail);
                bin.gaps.finish(&bin.framer, &mut marked);
                out.extend_from_slice(&marked);
            }
            None => {
                s.gaps.finish(&mut out);
            }
        }
        s.split(&out);
        for c in &mut s.columns {
            c.splitter.finish(&mut c.sink);
        }
        self.absorb()?;
        let Some(s) = &mut self.session else {
            return Ok(None);
        };
        // A split a failure cut is closed first (the disk failing still, the session is
        // completed later).
        disk_failures::repair_torn(s)?;
        s.manifest.closed = true;
        self.events.append(&mut s.recorded);
        // Everything durable: the last split, then the manifest that says the session is
        // over, then its directory.
        self.unsynced.manifest = true;
        self.unsynced.data_done = false;
        self.unsynced.manifest_done = false;
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
        let mut begun = false;
        for (k, c) in s.columns.iter_mut().enumerate() {
            let sink = &mut c.sink;
            begun |= !sink.begun.is_empty();
            if !sink.begun.is_empty() || !sink.ended.is_empty() {
                // New split files in the directory, splits that ended: for the next round.
                if !sink.begun.is_empty() && !self.unsynced.dirs.contains(&sink.dir) {
                    self.unsynced.dirs.push(sink.dir.clone());
                }
                self.unsynced.manifest = true;
            }
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
        if begun && std::mem::take(&mut s.announce_split) {
            // The split writing resumed in: its preamble's extent durable in the manifest
            // at once (the split before it may be short of what the preamble replays, or
            // missing, and the repair could not tell it there).
            let dir = s.dir.clone();
            if let Err(e) = self.save_manifest().and_then(|()| fsync::dir(&dir)) {
                self.pause_writing();
                return Err(e);
            }
        }
        Ok(())
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
        if self.last_tick.is_some() {
            self.last_manifest = self.last_tick;
        }
        replace_manifest(&s.dir, &s.manifest)?;
        // Its new entry: with the directory's sync.
        if !self.unsynced.dirs.contains(&s.dir) {
            self.unsynced.dirs.push(s.dir.clone());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
