//! The disk budget: `max-total` for the log directory and `min-free` on its filesystem; the
//! oldest closed sessions are deleted first (those uploaded before the others), crash-safe,
//! and never the open one.

use std::io;
use std::path::{Path, PathBuf};

use super::recovery::{DELETING_SUFFIX, is_set_aside};
use super::{LogStore, UPLOADED_MARK};
use crate::store::fsync;
use crate::store::manifest::{MANIFEST, read_manifest};
use crate::store::reference::materialise_references;

impl LogStore {
    /// Deletes the oldest closed sessions while the budget is exceeded; resumes paused writing
    /// when there is room again. Without a budget no directory is walked.
    pub fn enforce_budget(&mut self) -> io::Result<()> {
        if self.options.max_total.is_some() || self.options.min_free.is_some() {
            self.keep_budget()?;
        }
        self.resume_if_room()?;
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
            if crate::planted::is(crate::planted::Bug::BudgetDeletesNewestFirst) {
                sessions.reverse();
            }
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
}

/// The session directories under `dir` (those set aside or being deleted left out, and a
/// symbolic link, which is no session the daemon wrote), oldest (by name: UTC start) first.
pub fn list_sessions(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut sessions: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.symlink_metadata().is_ok_and(|m| m.is_dir())
                && !is_set_aside(p)
                && !p.to_string_lossy().ends_with(DELETING_SUFFIX)
                && p.join(MANIFEST).exists()
        })
        .collect();
    sessions.sort();
    Ok(sessions)
}

/// Bytes of all files under `dir`.
pub fn dir_size(dir: &Path) -> io::Result<u64> {
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

/// Deletes a session directory, crash-safe: renamed to `NAME.deleting`, then removed.
pub fn delete_session(session: &Path) -> io::Result<()> {
    let parent = session.parent().unwrap_or(Path::new("."));
    let mut doomed = session.as_os_str().to_owned();
    doomed.push(DELETING_SUFFIX);
    let doomed = PathBuf::from(doomed);
    std::fs::rename(session, &doomed)?;
    fsync::dir(parent)?;
    std::fs::remove_dir_all(&doomed)?;
    fsync::dir(parent)
}
