//! The flights' list as the web thread keeps it: each session's line
//! ([`FlightRow`]), read again only when its manifest or upload journal changed (a `stat` of
//! each tells), and the changes to push when a session came, changed or went. Also the one
//! place that turns a flight's id from a request into its directory: only an id the listing
//! holds, naming a real directory (not a link) right under the log directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use crate::report::flights::FlightRow;
use crate::store::files::{UPLOADED_MARK, list_sessions};
use crate::store::manifest::MANIFEST;
use crate::upload::plan::JOURNAL;
use crate::web::live::Change;

/// What says a session changed: its manifest's, journal's and upload mark's times and sizes.
type Stamp = [Option<(SystemTime, u64)>; 3];

/// See the module docs.
pub struct FlightsCache {
    log_dir: PathBuf,
    rows: Mutex<BTreeMap<String, (Stamp, FlightRow)>>,
    /// The log directory was looked at once at least.
    filled: std::sync::atomic::AtomicBool,
}

/// The id a flight is known by, removed.
#[derive(serde::Serialize)]
struct Removed<'a> {
    id: &'a str,
}

impl FlightsCache {
    pub fn new(log_dir: PathBuf) -> Self {
        Self {
            log_dir,
            rows: Mutex::new(BTreeMap::new()),
            filled: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Looks at the log directory again (blocking: call it off the runtime); the changes
    /// to push: `flight` (a session's new line), `flight_removed`.
    pub fn refresh(&self) -> Vec<Change> {
        let Ok(sessions) = list_sessions(&self.log_dir) else {
            return Vec::new();
        };
        let mut seen: BTreeMap<String, Stamp> = BTreeMap::new();
        for dir in &sessions {
            if let Some(id) = plain_id(dir) {
                seen.insert(id, stamp(dir));
            }
        }
        let mut changes = Vec::new();
        let mut rows = self.rows.lock().expect("flights lock");
        rows.retain(|id, _| {
            let kept = seen.contains_key(id);
            if !kept {
                changes.push(Change::new("flight_removed", &Removed { id }));
            }
            kept
        });
        // Read without the lock: a thousand manifests take a while the first time.
        let stale: Vec<(String, Stamp)> = seen
            .into_iter()
            .filter(|(id, stamp)| rows.get(id).is_none_or(|(s, _)| s != stamp))
            .collect();
        drop(rows);
        for (id, stamp) in stale {
            let Ok(row) = FlightRow::read(&self.log_dir.join(&id)) else {
                continue;
            };
            changes.push(Change::new("flight", &row));
            self.rows
                .lock()
                .expect("flights lock")
                .insert(id, (stamp, row));
        }
        self.filled
            .store(true, std::sync::atomic::Ordering::Release);
        changes
    }

    /// Whether the log directory was looked at once at least (before, the list is empty
    /// for want of a look, not of flights).
    pub fn is_filled(&self) -> bool {
        self.filled.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Every flight's line, newest first.
    pub fn rows(&self) -> Vec<FlightRow> {
        let rows = self.rows.lock().expect("flights lock");
        rows.values().rev().map(|(_, row)| row.clone()).collect()
    }

    /// The line of flight `id`, if the listing holds it.
    pub fn row(&self, id: &str) -> Option<FlightRow> {
        let rows = self.rows.lock().expect("flights lock");
        rows.get(id).map(|(_, row)| row.clone())
    }

    /// The directory of flight `id`: only an id the listing holds, whose directory is a
    /// directory right under the log directory and not a symbolic link.
    pub fn dir_of(&self, id: &str) -> Option<PathBuf> {
        if !self.rows.lock().expect("flights lock").contains_key(id) {
            return None;
        }
        let dir = self.log_dir.join(id);
        let meta = std::fs::symlink_metadata(&dir).ok()?;
        (meta.is_dir() && plain_id(&dir).as_deref() == Some(id)).then_some(dir)
    }
}

/// A session directory's name, if it is a plain one (no separator, no leading dot).
fn plain_id(dir: &Path) -> Option<String> {
    let name = dir.file_name()?.to_str()?;
    (!name.starts_with('.') && !name.contains(['/', '\\', '\0'])).then(|| name.to_owned())
}

fn stamp(dir: &Path) -> Stamp {
    let of = |name: &str| {
        let meta = std::fs::metadata(dir.join(name)).ok()?;
        Some((meta.modified().ok()?, meta.len()))
    };
    [of(MANIFEST), of(JOURNAL), of(UPLOADED_MARK)]
}

/// Whether every file flight `dir`'s manifest lists is a regular file reached without a
/// symbolic link: a flight's download reads them all.
pub fn plain_files(dir: &Path) -> bool {
    let Ok(manifest) = crate::store::manifest::read_manifest(dir) else {
        return false;
    };
    let files = (manifest.all_splits().map(|s| s.file.as_str()))
        .chain(manifest.amendments.iter().map(|a| a.file.as_str()));
    files.into_iter().all(|f| listed_file(dir, f).is_some())
}

/// A file of flight `dir` that a download may name: one its manifest lists (a split, an
/// amendment), a regular file, not reached through a symbolic link.
pub fn listed_file(dir: &Path, file: &str) -> Option<PathBuf> {
    let manifest = crate::store::manifest::read_manifest(dir).ok()?;
    let listed = manifest.all_splits().any(|s| s.file == file)
        || manifest.amendments.iter().any(|a| a.file == file);
    if !listed {
        return None;
    }
    let mut path = dir.to_owned();
    for part in file.split('/') {
        if part.is_empty() || part == "." || part == ".." {
            return None;
        }
        path.push(part);
        let meta = std::fs::symlink_metadata(&path).ok()?;
        if meta.file_type().is_symlink() {
            return None;
        }
    }
    std::fs::symlink_metadata(&path)
        .ok()
        .filter(|m| m.is_file())
        .map(|_| path)
}
