//! The store in the simulation: the receiver's own [`LogStore`] writes each log as the
//! daemon's store thread does (every write handed to the OS at once, a sync round as the
//! simulated clock reaches it), into a folder of its own on tmpfs. A daemon's restart is a
//! crash: the store is dropped mid-log, and the next one opens the folder and repairs what it
//! finds, as the daemon does at start. [`check`] holds a log's session folder to the log.
//! With a disk budget, each session the store deletes is checked against the budget's
//! order as it goes, and the folder's size once the run is over ([`check_budget`]).
//!
//! The files are real and the kernel's: a crash of the process loses nothing handed to it,
//! and a power cut (what the kernel had not synced) is not simulated here; LazyFS tests
//! that (see the guide's faults chapter).

use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use sha2::{Digest, Sha256};
use ulog_recv::autopilot::LogFormat;
use ulog_recv::diagnose::Selection;
use ulog_recv::store::files::{UPLOADED_MARK, list_sessions};
use ulog_recv::store::manifest::{hex, read_manifest};
use ulog_recv::store::{LogStore, SplitPolicy, StoreOptions};

use super::splits::Splits;

/// A run's log folder and the store writing into it.
pub struct Disk {
    dir: PathBuf,
    options: StoreOptions,
    store: Option<LogStore>,
    /// With a budget: the sessions as last seen, oldest first (the open one not closed).
    seen: Vec<Seen>,
    /// Sessions the budget deleted.
    pub deleted: Vec<PathBuf>,
    /// The first deletion out of the budget's order.
    pub misordered: Option<String>,
}

/// A session folder as last seen: whether it was closed and uploaded then.
#[derive(Debug, Clone)]
struct Seen {
    dir: PathBuf,
    closed: bool,
    uploaded: bool,
}

impl Seen {
    /// The budget's order: uploaded before not, then oldest first.
    fn key(&self) -> (bool, &Path) {
        (!self.uploaded, &self.dir)
    }
}

impl Disk {
    /// A store for seed `seed`'s run in a new, empty folder; `max_total`: its disk budget,
    /// `uploads`: the budget deletes uploaded sessions first.
    pub fn new(seed: u64, policy: SplitPolicy, max_total: Option<u64>, uploads: bool) -> Self {
        let shm = Path::new("/dev/shm");
        let base = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!(
            "ulog-recv-sim-{}-{seed}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let options = StoreOptions {
            policy,
            // The flight diagnostics run in the store thread, on every log: here too.
            diagnostics: Selection::ALL,
            max_total,
            uploads,
            ..StoreOptions::new(dir.clone())
        };
        let mut disk = Self {
            dir,
            options,
            store: None,
            seen: Vec::new(),
            deleted: Vec::new(),
            misordered: None,
        };
        disk.start();
        disk
    }

    /// The log folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Opens the store on what is there, repairing what a crash left, as the daemon's start
    /// does.
    fn start(&mut self) {
        let mut store = LogStore::open(self.options.clone()).expect("the store opens");
        store.recover();
        self.store = Some(store);
    }

    fn store(&mut self) -> &mut LogStore {
        self.store.as_mut().expect("a store while the daemon runs")
    }

    /// A log begins: its session folder.
    pub fn begin(&mut self, vehicle: (u8, u8), started: SystemTime, format: LogFormat) -> PathBuf {
        let dir = (self.store().begin_log(vehicle, started, format)).expect("a session begins");
        self.check_deletions();
        self.look();
        dir
    }

    /// The budget's [`max_total`](StoreOptions::max_total), if any.
    pub fn max_total(&self) -> Option<u64> {
        self.options.max_total
    }

    /// Sees which sessions are there, closed and uploaded (with a budget).
    pub fn look(&mut self) {
        if self.options.max_total.is_none() {
            return;
        }
        let sessions = list_sessions(&self.dir).expect("the log folder lists");
        self.seen = sessions
            .into_iter()
            .map(|dir| Seen {
                closed: read_manifest(&dir).is_ok_and(|m| m.closed),
                uploaded: dir.join(UPLOADED_MARK).exists(),
                dir,
            })
            .collect();
    }

    /// Sessions gone since last seen: each must have been closed, and before every closed
    /// session that stays in the budget's order.
    fn check_deletions(&mut self) {
        if self.options.max_total.is_none() {
            return;
        }
        let now = list_sessions(&self.dir).expect("the log folder lists");
        if now.len() == self.seen.len() {
            return;
        }
        let (gone, stayed): (Vec<&Seen>, Vec<&Seen>) =
            self.seen.iter().partition(|s| !now.contains(&s.dir));
        for g in &gone {
            let wrong = if !g.closed {
                Some("it was open".to_string())
            } else {
                (stayed.iter().find(|s| s.closed && s.key() < g.key()))
                    .map(|s| format!("{} stays, before it in the budget's order", s.dir.display()))
            };
            if let (Some(why), None) = (wrong, &self.misordered) {
                self.misordered = Some(format!("the budget deleted {}: {why}", g.dir.display()));
            }
            self.deleted.push(g.dir.clone());
        }
        self.look();
    }

    /// The session's bytes, handed to the OS at once.
    pub fn write(&mut self, bytes: &[u8]) {
        let store = self.store();
        store.write(bytes).expect("the store writes");
        store.flush().expect("the store hands its writes to the OS");
    }

    pub fn link_dropout(&mut self, chunks: u64, resolved: bool) {
        self.store().link_dropout(chunks, resolved);
    }

    pub fn end(&mut self) {
        self.store().end_log().expect("a session ends");
        self.check_deletions();
        self.look();
    }

    /// The sync round and the budget, at simulated time `now`.
    pub fn tick(&mut self, now: Instant) {
        self.store().tick(now).expect("the store syncs");
        self.check_deletions();
    }

    /// Sync rounds until one is over (and the budget kept), from simulated time `now`.
    pub fn settle(&mut self, now: Instant) {
        let interval = self.options.fsync_interval;
        for i in 1..=20 {
            self.tick(now + interval * i);
        }
    }

    /// The daemon dies mid-log and starts again: the next store repairs what it finds.
    pub fn crash_and_restart(&mut self) {
        drop(self.store.take());
        // The repair at start closes the session the crash left open.
        self.seen.iter_mut().for_each(|s| s.closed = true);
        self.start();
        self.check_deletions();
        self.look();
    }
}

impl Drop for Disk {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The first broken promise of a log's session folder: its manifest lists exactly the split
/// files there, each closed, with its true SHA-256; and the splits, as the manifest
/// describes them, are the log (see [`super::splits::check`]).
pub fn check(format: LogFormat, log: &[u8], session: &Path) -> Result<(), String> {
    let manifest = read_manifest(session).map_err(|e| format!("its manifest: {e}"))?;
    let mut on_disk: Vec<String> = std::fs::read_dir(session)
        .map_err(|e| e.to_string())?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("split_"))
        .collect();
    on_disk.sort();
    let listed: Vec<String> = manifest.splits.iter().map(|s| s.file.clone()).collect();
    if listed != on_disk {
        return Err(format!(
            "the manifest lists {listed:?}, the folder has {on_disk:?}"
        ));
    }
    let mut splits = Splits::default();
    for s in &manifest.splits {
        let bytes = std::fs::read(session.join(&s.file)).map_err(|e| e.to_string())?;
        let sha = hex(&Sha256::digest(&bytes));
        if !s.closed || s.sha256.as_deref() != Some(sha.as_str()) {
            return Err(format!(
                "{}: closed {}, SHA-256 {:?} in the manifest, {sha} on disk",
                s.file, s.closed, s.sha256
            ));
        }
        splits.files.push(bytes);
        splits.summaries.push(s.summary.clone());
    }
    super::splits::check(format, log, &splits)
}

/// The budget's promises, once the run is over: no session deleted out of its order (nor
/// while open), and the log folder, its files' bytes counted here, within the budget.
pub fn check_budget(disk: &Disk) -> Result<(), String> {
    if let Some(wrong) = &disk.misordered {
        return Err(wrong.clone());
    }
    let Some(max_total) = disk.max_total() else {
        return Ok(());
    };
    fn bytes(dir: &Path) -> u64 {
        let entries = std::fs::read_dir(dir).into_iter().flatten().flatten();
        entries
            .map(|e| match e.file_type() {
                Ok(t) if t.is_dir() => bytes(&e.path()),
                _ => e.metadata().map_or(0, |m| m.len()),
            })
            .sum()
    }
    let used = bytes(disk.dir());
    if used > max_total {
        return Err(format!(
            "the log folder holds {used} bytes after the last sync round, over the budget's \
             {max_total}"
        ));
    }
    Ok(())
}
