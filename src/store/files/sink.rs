//! Where a column's splitter puts its output: one file per split, created new, hashed as it
//! is written, written out, synced and made read-only when it ends; what ended and what
//! failed kept for the manifest and the sync rounds.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::autopilot::LogFormat;
use crate::monitor::catalogue::{SPLITS_CLOSED, STORE_WRITTEN_BYTES};
use crate::planted::{self, Bug};
use crate::store::fsync;
use crate::store::manifest::hex;
use crate::store::splitter::{SplitSink, SplitSummary};

/// Receives the splitter's output and puts it in files.
pub(super) struct FileSink {
    /// The column's directory (the session's for the main column).
    pub(super) dir: PathBuf,
    /// What the manifest puts before a split's name (`imu/`; empty for the main column).
    pub(super) prefix: String,
    /// The splits' format, which names their files.
    pub(super) format: LogFormat,
    /// The split being written: its index, file and running hash.
    pub(super) file: Option<(u32, BufWriter<File>, Sha256)>,
    /// The split a write failure hit (its file may end in a torn message).
    pub(super) failed: Option<u32>,
    /// The summary of a split whose close failed: what only the writer knows of it (its
    /// preamble's extent) for the repair that closes it.
    pub(super) failed_summary: Option<SplitSummary>,
    /// Summaries of splits that ended, for the manifest.
    pub(super) ended: Vec<(SplitSummary, String)>,
    pub(super) begun: Vec<u32>,
    pub(super) error: Option<io::Error>,
    /// Writing failed (a full disk): everything is dropped until [`LogStore`] resumes.
    pub(super) paused: bool,
    /// A split closed early by a write failure: its later `end` is not news.
    pub(super) abandoned: Option<u32>,
    /// Bytes written to the open split, how many of them a sync made durable, and whether a
    /// sync of it failed.
    written_len: u64,
    pub(super) synced_len: u64,
    pub(super) open_sync_failed: bool,
    /// A split closed since the folder's last sync here: its name may not be durable yet.
    name_unsynced: bool,
    /// Splits a failure cut, to be closed ([`super::disk_failures::repair_torn`]).
    pub(super) torn: Vec<Torn>,
    /// Bytes written since the metrics were last told ([`FileSink::report_written`]: a
    /// message is too small a thing to count in a shared counter each).
    unreported_bytes: u64,
    written_bytes: metrics::Counter,
    splits_closed: metrics::Counter,
}

impl FileSink {
    pub(super) fn new(dir: PathBuf, prefix: String, format: LogFormat) -> Self {
        Self {
            dir,
            prefix,
            format,
            file: None,
            ended: Vec::new(),
            begun: Vec::new(),
            error: None,
            failed: None,
            failed_summary: None,
            paused: false,
            abandoned: None,
            written_len: 0,
            synced_len: 0,
            open_sync_failed: false,
            name_unsynced: false,
            torn: Vec::new(),
            unreported_bytes: 0,
            written_bytes: metrics::counter!(STORE_WRITTEN_BYTES.name),
            splits_closed: metrics::counter!(SPLITS_CLOSED.name),
        }
    }

    /// Tells the metrics the bytes written since the last call.
    pub(super) fn report_written(&mut self) {
        self.written_bytes
            .increment(std::mem::take(&mut self.unreported_bytes));
    }

    fn split_path(&self, index: u32) -> PathBuf {
        self.dir.join(split_name(index, self.format))
    }

    /// The split's name in the manifest (relative to the session).
    pub(super) fn entry_name(&self, index: u32) -> String {
        format!("{}{}", self.prefix, split_name(index, self.format))
    }

    /// Makes the open split's bytes durable (written out, then `fdatasync`); a failed sync
    /// is remembered for the repair ([`open_sync_failed`](Self::open_sync_failed)).
    pub(super) fn sync_open_split(&mut self) -> io::Result<()> {
        let Some((_, w, _)) = &mut self.file else {
            return Ok(());
        };
        w.flush()?;
        let synced = match planted::is(Bug::SplitSyncSkipped) {
            true => Ok(()),
            false => fsync::file_data(w.get_ref()),
        };
        match synced {
            Ok(()) => self.synced_len = self.written_len,
            Err(_) => self.open_sync_failed = true,
        }
        synced
    }

    fn fail(&mut self, e: io::Error) {
        if self.error.is_none() {
            self.error = Some(e);
        }
    }
}

/// A split a failure cut, to be closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Torn {
    pub(super) index: u32,
    /// How many of its bytes a sync made durable.
    pub(super) durable: u64,
    /// A sync of it failed: after a disk's I/O error the kernel may never write the rest
    /// (their pages marked clean, and the next sync succeeds without them), so it keeps no
    /// more than `durable` bytes.
    pub(super) sync_failed: bool,
}

/// The file name of split `index` of a log in `format` (`split_0007.ulg`).
pub(super) fn split_name(index: u32, format: LogFormat) -> String {
    format!("split_{index:04}.{}", format.extension())
}

impl SplitSink for FileSink {
    fn begin(&mut self, index: u32) {
        if self.paused {
            return;
        }
        // The split before it closed: its name durable before this one exists (a name
        // created after another may reach the disk first unless the folder is synced in
        // between, and a power cut would keep this split and lose that one).
        if self.name_unsynced {
            if let Err(e) = fsync::dir(&self.dir) {
                self.failed = Some(index);
                self.fail(e);
                self.begun.push(index);
                return;
            }
            self.name_unsynced = false;
        }
        let path = self.split_path(index);
        match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(f) => {
                // (Its directory entry is synced with the next sync round.)
                self.file = Some((index, BufWriter::with_capacity(1 << 16, f), Sha256::new()));
                self.written_len = 0;
                self.synced_len = 0;
                self.open_sync_failed = false;
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
            match w.write_all(bytes) {
                Ok(()) => {
                    self.unreported_bytes += bytes.len() as u64;
                    self.written_len += bytes.len() as u64;
                }
                Err(e) => {
                    self.failed = Some(*index);
                    self.fail(e);
                }
            }
        }
    }

    fn end(&mut self, summary: &SplitSummary) {
        self.report_written();
        if self.paused || self.abandoned == Some(summary.index) {
            return;
        }
        let path = self.split_path(summary.index);
        if let Some((_, w, hash)) = self.file.take() {
            let sha = hex(&hash.finalize());
            // Written out and synced now: before the manifest says it is closed, and before
            // the next split gets a byte, so that a power cut takes only the log's end, never
            // a stretch of its middle that no dropout marks (its name too, before the next
            // split exists: see `begin`).
            let written = w.into_inner().map_err(|e| e.into_error());
            let mut sync_failed = self.open_sync_failed;
            let synced = written.and_then(|f| match planted::is(Bug::SplitClosedUnsynced) {
                true => Ok(()),
                false => fsync::file(&f).inspect_err(|_| sync_failed = true),
            });
            if synced.is_ok() {
                self.synced_len = self.written_len;
                self.name_unsynced = true;
            }
            if synced.is_err() {
                self.torn.push(Torn {
                    index: summary.index,
                    durable: self.synced_len,
                    sync_failed,
                });
            }
            match synced {
                Ok(()) => {
                    self.splits_closed.increment(1);
                    if let Err(e) = make_closed(&path) {
                        self.fail(e);
                    }
                }
                Err(e) => {
                    self.failed = Some(summary.index);
                    self.failed_summary = Some(summary.clone());
                    self.fail(e);
                    return;
                }
            }
            self.ended.push((summary.clone(), sha));
        }
    }
}

/// A closed split: its write bits go, the rest of its mode (the umask's group bits) stays.
pub(super) fn make_closed(path: &Path) -> io::Result<()> {
    let mode = std::fs::metadata(path)?.permissions().mode();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & !0o222))
}
