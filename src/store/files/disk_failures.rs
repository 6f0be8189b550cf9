//! What the store does when its disk fails it: a failed write (a full disk) or sync (an I/O
//! error) pauses writing (the open split cut back to its last whole message, or after a
//! failed sync to what was durable before it, and closed), and writing resumes in a new split
//! once there is room and the disk syncs again, after a dropout mark where the log lost what
//! came meanwhile. A session that begins on a full disk begins in memory and gets its folder
//! once there is room; one that cannot be completed as it ends is completed then, as the
//! repair after a crash does.

use std::io;
use std::path::PathBuf;

use super::open_session::OpenSession;
use super::recovery::{recover_session, repair_split};
use super::sink::Torn;
use super::{LogStore, RESUME_ROOM};
use crate::planted::{self, Bug};
use crate::store::fsync;
use crate::store::manifest::write_manifest;

impl LogStore {
    /// The open session's folder, its columns' folders and its first manifest, made durable
    /// before any split is in the folder (recovery finds the session by its manifest); the
    /// session's entry in the log folder is made durable by the next sync round. On failure
    /// (a full disk) nothing of it is left, to be made again later.
    pub(super) fn make_session_folder(&mut self) -> io::Result<()> {
        let Some(s) = self.session.as_mut().filter(|s| !s.folder_made) else {
            return Ok(());
        };
        let columns: Vec<PathBuf> = (s.manifest.columns.iter())
            .map(|c| s.dir.join(&c.name))
            .collect();
        let made = std::fs::create_dir(&s.dir).and_then(|()| {
            for c in &columns {
                std::fs::create_dir(c)?;
            }
            write_manifest(&s.dir, &s.manifest)
        });
        if let Err(e) = made {
            let _ = std::fs::remove_dir_all(&s.dir);
            return Err(e);
        }
        s.folder_made = true;
        self.unsynced.dirs.extend(columns);
        self.unsynced.dirs.push(self.options.dir.clone());
        Ok(())
    }

    /// A write or a sync failed (a full disk, an I/O error): the open split is cut back to
    /// its last whole message (after a failed sync, to what was durable before it) and
    /// closed; nothing more is written until [`tick`](Self::tick) finds space and a disk that
    /// syncs.
    pub(super) fn pause_writing(&mut self) {
        let Some(s) = &mut self.session else { return };
        if s.columns[0].sink.paused {
            return;
        }
        for (k, c) in s.columns.iter_mut().enumerate() {
            let sink = &mut c.sink;
            sink.paused = true;
            // The split the failure hit, and the one open now (if another): cut back and
            // closed.
            if let Some((index, w, _)) = sink.file.take() {
                let (file, _unwritten) = w.into_parts();
                drop(file);
                sink.torn.push(Torn {
                    index,
                    durable: sink.synced_len,
                    sync_failed: sink.open_sync_failed,
                });
            }
            if let Some(index) = sink.failed.take()
                && !sink.torn.iter().any(|t| t.index == index)
            {
                // (A split whose file could not be made.)
                sink.torn.push(Torn {
                    index,
                    durable: 0,
                    sync_failed: false,
                });
            }
            sink.abandoned = c.splitter.current().map(|c| c.index);
            let Some(splits) = s.manifest.column_splits_mut(k) else {
                continue;
            };
            // What only the writer knows of the torn splits (their preambles' extent), for
            // the repair: the manifest's entries may not have it yet.
            let known =
                (c.splitter.current().cloned().into_iter()).chain(sink.failed_summary.take());
            for summary in known {
                if let Some(e) =
                    (splits.iter_mut()).find(|e| e.summary.index == summary.index && !e.closed)
                {
                    e.summary = summary;
                }
            }
        }
        let _ = repair_torn(s);
        if s.folder_made {
            let _ = write_manifest(&s.dir, &s.manifest);
        }
        // What the failure cut (a session that had its folder had written something).
        s.lost_to_pause |= s.folder_made;
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

    /// The free bytes when there is room again: for a preamble and some data; `None` while
    /// there is not. The budget's `min-free` is no bar: the budget has deleted what it may
    /// by then, and the open session writes below `min-free` as it would had the disk never
    /// filled (waiting for it would lose the rest of the flight with room on the disk).
    fn room(&self) -> io::Result<Option<u64>> {
        let free = crate::sys::os::free_bytes(&self.options.dir)?;
        let mut room = RESUME_ROOM;
        if planted::is(Bug::ResumeWaitsForMinFree) {
            room += self.options.min_free.unwrap_or(0);
        }
        Ok((free >= room).then_some(free))
    }

    /// With writing paused: resumes it once there is room ([`Self::room`]); then completes
    /// the sessions a full disk kept from completing.
    pub(super) fn resume_if_room(&mut self) -> io::Result<()> {
        if self.is_paused()
            && let Some(free) = self.room()?
            && fsync::dir(&self.options.dir).is_ok()
            && self.make_session_folder().is_ok()
            && let Some(s) = &mut self.session
            && repair_torn(s).is_ok()
        {
            tracing::info!(free, "space again: logging resumes in a new split");
            for c in &mut s.columns {
                c.sink.paused = false;
                c.splitter.force_roll();
            }
            s.announce_split = true;
            // What the pause lost is marked where the log goes on.
            if std::mem::take(&mut s.lost_to_pause) {
                self.own_gap(0, false);
            }
        }
        if !self.unfinished.is_empty() {
            self.finish_unfinished()?;
        }
        Ok(())
    }

    /// Completes, as the repair after a crash does, the sessions a full disk kept from
    /// completing as they ended, once there is room: each manifest as its writer knew it
    /// first (what only the writer knew, the preambles' extent, is in it), then the repair.
    fn finish_unfinished(&mut self) -> io::Result<()> {
        if self.room()?.is_none() {
            return Ok(());
        }
        let boot = self.options.boot_id.clone();
        let dir = self.options.dir.clone();
        self.unfinished.retain_mut(|(session, manifest)| {
            if !session.is_dir() {
                // Gone meanwhile (the budget deleted it): nothing to complete.
                return false;
            }
            manifest.closed = false;
            let done = write_manifest(session, manifest)
                .and_then(|()| recover_session(&dir, session, boot.as_deref()));
            match done {
                Ok(_) => false,
                Err(e) => {
                    tracing::error!(error = %e, session = %session.display(), "cannot complete a session");
                    true
                }
            }
        });
        Ok(())
    }
}

/// Closes the splits a failure cut ([`Torn`]), each cut back to its last whole message, or
/// after a failed sync to what was durable before it, and enters each in the manifest; those
/// whose repair fails (the disk fails still) stay, for the next call, taken from then on as
/// splits whose sync failed (the repair's own sync may be what failed). The first error, if
/// any.
pub(super) fn repair_torn(s: &mut OpenSession) -> io::Result<()> {
    let mut first_error = None;
    for (k, c) in s.columns.iter_mut().enumerate() {
        let sink = &mut c.sink;
        let Some(splits) = s.manifest.column_splits_mut(k) else {
            sink.torn.clear();
            continue;
        };
        for torn in std::mem::take(&mut sink.torn) {
            let name = sink.entry_name(torn.index);
            let path = s.dir.join(&name);
            let keep_whole = planted::is(Bug::FailedSyncKeptWhole);
            let cut = match torn.sync_failed && !keep_whole {
                true => cut_back(&path, torn.durable),
                false => Ok(()),
            };
            // In this boot, with the writer's own bytes in the page cache: no tear.
            let repaired = cut.and_then(|()| repair_split(&path, splits, &name, false));
            // (A split whose file was never made has nothing to close.)
            let repaired = match repaired {
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
                other => other,
            };
            match repaired {
                Ok(Some(entry)) => match splits.iter_mut().find(|e| e.file == name) {
                    Some(e) => *e = entry,
                    None => splits.push(entry),
                },
                Ok(None) => {
                    let _ = std::fs::remove_file(&path);
                    splits.retain(|e| e.file != name);
                }
                Err(e) => {
                    tracing::error!(error = %e, "cannot close {}", path.display());
                    sink.torn.push(Torn {
                        sync_failed: true,
                        ..torn
                    });
                    first_error.get_or_insert(e);
                }
            }
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Split `path` no longer than `durable` bytes (none if it is gone).
fn cut_back(path: &std::path::Path, durable: u64) -> io::Result<()> {
    let file = match std::fs::OpenOptions::new().write(true).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if file.metadata()?.len() > durable {
        tracing::warn!(
            durable,
            "a sync of {} failed: it keeps only what was durable before",
            path.display()
        );
        file.set_len(durable)?;
    }
    Ok(())
}
