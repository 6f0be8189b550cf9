//! Power cuts in the simulation: a model of what the disk keeps, built from the receiver's
//! own syncs ([`ulog_recv::store::fsync`]'s watch), and the cut that puts the log folder
//! back to it.
//!
//! The model keeps, for each file, its bytes as they were when it was last synced, and for
//! each folder its names (which file or folder each named) as they were when it was last
//! synced; both by inode, so that a file renamed or replaced since keeps its own. A cut
//! rebuilds the folder from it, as POSIX allows a disk to be found after power comes back:
//!
//! - a name created, replaced or removed since its folder's last sync is found either way,
//!   each on its own (a name replaced by a rename is found old or new, never missing);
//! - a file's bytes past its last sync are lost, or the page cache had written some of them
//!   back: a part kept, in order, its last page sometimes zeros (a torn write: the size
//!   reached the disk, that page's data did not).
//!
//! The cut is adversarial where POSIX leaves room (ext4 orders more), so that a sync the
//! receiver skips, or a name it relies on before syncing it, shows.
//!
//! The model can also fail the receiver's syncs ([`PowerModel::fail_syncs`]), as a disk's
//! I/O error does, with what Linux then does: a file's bytes written since its last good sync
//! may never reach the disk (their pages are marked clean, and no later sync writes them):
//! from then on they are zeros in what the disk keeps, whatever syncs follow, until the file
//! is cut shorter than them. What the kernel really
//! does is LazyFS's to test (the guide's faults chapter).

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use ulog_recv::store::fsync::{self, Synced, Watching};

type Ino = u64;

/// Linux's `EIO`: the error a disk's failed write-back gives a sync.
const EIO: i32 = 5;

/// The page cache's unit of writing back.
const PAGE: usize = 4096;

/// A name in a folder: the file or folder it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    ino: Ino,
    dir: bool,
}

/// What the disk holds for certain: as each file and folder was last synced.
#[derive(Debug, Default)]
struct Durable {
    /// Each folder's names, by the folder's inode.
    names: HashMap<Ino, BTreeMap<OsString, Entry>>,
    /// Each file's bytes and mode, by its inode.
    files: HashMap<Ino, (Vec<u8>, u32)>,
    /// Bytes of a file a failed sync lost for good (`from..to`), by its inode.
    poisoned: HashMap<Ino, (usize, usize)>,
}

impl Durable {
    /// Zeros where `ino`'s bytes were lost for good.
    fn poison(&self, ino: Ino, bytes: &mut [u8]) {
        if let Some(&(from, to)) = self.poisoned.get(&ino)
            && from < bytes.len()
        {
            let to = to.min(bytes.len());
            bytes[from..to].fill(0);
        }
    }
}

/// What a cut did.
#[derive(Debug, Default, Clone, Copy)]
pub struct Cut {
    /// Names found as they were before their folder's last sync.
    pub names_reverted: usize,
    /// Bytes written but never synced, lost.
    pub bytes_lost: u64,
    /// Files whose kept, unsynced end is torn (zeros).
    pub torn: usize,
}

/// The model of one log folder's disk, watching the receiver's syncs in it.
pub struct PowerModel {
    root: PathBuf,
    root_ino: Ino,
    durable: Arc<Mutex<Durable>>,
    watching: Option<Watching>,
    /// While set, every sync under the folder fails (an I/O error).
    failing: Arc<AtomicBool>,
    failer: Option<Watching>,
}

impl PowerModel {
    /// Watches `root` (a folder that exists) from now: what is in it now counts as durable.
    pub fn watch(root: &Path) -> Self {
        let root_ino = ino_of(root).expect("the log folder exists");
        let mut model = Self {
            root: root.to_path_buf(),
            root_ino,
            durable: Arc::default(),
            watching: None,
            failing: Arc::default(),
            failer: None,
        };
        model.all_durable();
        model.resume();
        model
    }

    /// Takes what is there now as durable (after power came back, everything on disk is).
    fn all_durable(&mut self) {
        let mut durable = Durable::default();
        fn walk(dir: &Path, ino: Ino, durable: &mut Durable) {
            let names = listing(dir);
            for (name, e) in &names {
                let path = dir.join(name);
                if e.dir {
                    walk(&path, e.ino, durable);
                } else if let (Ok(bytes), Ok(meta)) =
                    (std::fs::read(&path), std::fs::symlink_metadata(&path))
                {
                    durable.files.insert(e.ino, (bytes, meta.mode()));
                }
            }
            durable.names.insert(ino, names);
        }
        walk(&self.root, self.root_ino, &mut durable);
        *self.durable.lock().unwrap() = durable;
    }

    /// Fails the receiver's syncs under the folder from now (`on`), or no longer.
    pub fn fail_syncs(&self, on: bool) {
        self.failing.store(on, Ordering::Relaxed);
    }

    /// Watches the receiver's syncs under the folder again.
    fn resume(&mut self) {
        let (durable, failing) = (self.durable.clone(), self.failing.clone());
        self.failer = Some(fsync::fail(
            &self.root,
            Arc::new(move |syncing: Synced<'_>| {
                if !failing.load(Ordering::Relaxed) {
                    return None;
                }
                if let Synced::File { file, .. } = syncing
                    && let Ok(meta) = file.metadata()
                {
                    let mut durable = durable.lock().unwrap();
                    let had = durable.files.get(&meta.ino()).map_or(0, |f| f.0.len());
                    let len = meta.len() as usize;
                    if len > had {
                        let lost = durable.poisoned.entry(meta.ino()).or_insert((had, len));
                        *lost = (lost.0.min(had), lost.1.max(len));
                    }
                }
                Some(std::io::Error::from_raw_os_error(EIO))
            }),
        ));
        let durable = self.durable.clone();
        self.watching = Some(fsync::watch(
            &self.root,
            Arc::new(move |synced: Synced<'_>| {
                let mut durable = durable.lock().unwrap();
                match synced {
                    Synced::File { file, path } => file_synced(&mut durable, file, path),
                    Synced::Dir { path } => {
                        if let Ok(ino) = ino_of(path) {
                            durable.names.insert(ino, listing(path));
                        }
                    }
                }
            }),
        ));
    }

    /// Stops watching: what the receiver syncs from now on (its process dying as the power
    /// goes) counts for nothing.
    pub fn freeze(&mut self) {
        self.watching = None;
        self.failer = None;
    }

    /// The power goes and comes back: the folder is rebuilt from the model, with what the
    /// page cache may have written back drawn from `rng`; then watched again, all of it
    /// durable. Call [`freeze`](Self::freeze) first, before the store is dropped.
    pub fn cut(&mut self, rng: &mut fastrand::Rng) -> Cut {
        assert!(self.watching.is_none(), "frozen before the cut");
        let durable = std::mem::take(&mut *self.durable.lock().unwrap());
        let now = Now::of(&self.root, self.root_ino);
        let mut found = Rebuild {
            durable: &durable,
            now: &now,
            rng,
            cut: Cut::default(),
            tree: Vec::new(),
        };
        found.folder(self.root_ino, PathBuf::new(), 0);
        let Rebuild { cut, tree, .. } = found;
        // Down to the bare folder, then up again as found.
        for entry in std::fs::read_dir(&self.root).expect("the log folder lists") {
            let path = entry.expect("an entry").path();
            make_writable(&path);
            let gone = if path.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            gone.expect("the cut clears the folder");
        }
        for (relative, found) in &tree {
            let path = self.root.join(relative);
            match found {
                Found::Dir => std::fs::create_dir(&path).expect("a folder is made again"),
                Found::File(bytes, _) => std::fs::write(&path, bytes).expect("a file again"),
            }
        }
        for (relative, found) in tree.iter().rev() {
            if let Found::File(_, mode) = found {
                let permissions = std::fs::Permissions::from_mode(*mode & 0o7777);
                std::fs::set_permissions(self.root.join(relative), permissions).unwrap();
            }
        }
        self.all_durable();
        self.resume();
        cut
    }
}

/// The folder as it is when the power goes: each folder's names, and where each inode is.
struct Now {
    names: HashMap<Ino, BTreeMap<OsString, Entry>>,
    paths: HashMap<Ino, PathBuf>,
}

impl Now {
    fn of(root: &Path, root_ino: Ino) -> Self {
        let mut now = Now {
            names: HashMap::new(),
            paths: HashMap::new(),
        };
        now.walk(root, root_ino);
        now
    }

    fn walk(&mut self, dir: &Path, ino: Ino) {
        let listed = listing(dir);
        for (name, e) in &listed {
            let path = dir.join(name);
            if e.dir {
                self.walk(&path, e.ino);
            }
            self.paths.insert(e.ino, path);
        }
        self.names.insert(ino, listed);
    }
}

/// The folder as a cut finds it, drawn name by name and file by file.
struct Rebuild<'a> {
    durable: &'a Durable,
    now: &'a Now,
    rng: &'a mut fastrand::Rng,
    cut: Cut,
    /// What is found, by path under the root: folders before what they hold.
    tree: Vec<(PathBuf, Found)>,
}

impl Rebuild<'_> {
    /// Folder `ino`'s entries as the cut finds them, at `relative` under the root.
    fn folder(&mut self, ino: Ino, relative: PathBuf, depth: usize) {
        assert!(depth < 16, "a loop of folders in the model");
        let empty = BTreeMap::new();
        let was = self.durable.names.get(&ino).unwrap_or(&empty);
        let is = self.now.names.get(&ino).unwrap_or(&empty);
        let mut names: Vec<&OsString> = was.keys().chain(is.keys()).collect();
        names.sort();
        names.dedup();
        for name in names {
            let found = match (was.get(name), is.get(name)) {
                (Some(w), Some(i)) if w == i => Some(*w),
                (w, i) => {
                    // Changed since the folder's last sync: either way, on its own.
                    let either = if self.rng.bool() {
                        i.copied()
                    } else {
                        w.copied()
                    };
                    if either != i.copied() {
                        self.cut.names_reverted += 1;
                    }
                    either
                }
            };
            let Some(entry) = found else {
                continue;
            };
            let path = relative.join(name);
            if entry.dir {
                self.tree.push((path.clone(), Found::Dir));
                self.folder(entry.ino, path, depth + 1);
            } else {
                let file = self.file(entry.ino);
                self.tree.push((path, file));
            }
        }
    }

    /// File `ino` as the cut finds it: its bytes as last synced, and of what was written
    /// since, a beginning or nothing, its last page sometimes zeros.
    fn file(&mut self, ino: Ino) -> Found {
        let (mut bytes, mode) = self.durable.files.get(&ino).cloned().unwrap_or_default();
        let now = self.now.paths.get(&ino);
        let meta = now.and_then(|p| std::fs::symlink_metadata(p).ok());
        let mode = meta.as_ref().map_or(mode, |m| m.mode());
        let current = now.and_then(|p| std::fs::read(p).ok()).unwrap_or_default();
        if current.len() > bytes.len() && current.starts_with(&bytes) {
            let unsynced = &current[bytes.len()..];
            let kept = if self.rng.bool() {
                self.rng.usize(..=unsynced.len())
            } else {
                0
            };
            self.cut.bytes_lost += (unsynced.len() - kept) as u64;
            let durable_end = bytes.len();
            bytes.extend_from_slice(&unsynced[..kept]);
            // Torn: the size reached the disk, its last page's data did not.
            let end = bytes.len();
            let page_start = (end - end % PAGE).max(durable_end);
            if page_start < end && self.rng.u8(..4) == 0 {
                bytes[page_start..].fill(0);
                self.cut.torn += 1;
            }
        } else if current != bytes && now.is_some() {
            self.cut.bytes_lost += current.len().saturating_sub(bytes.len()) as u64;
        }
        // What a failed sync lost never reached the disk.
        self.durable.poison(ino, &mut bytes);
        Found::File(bytes, if mode == 0 { 0o644 } else { mode })
    }
}

/// A name the cut finds.
enum Found {
    Dir,
    File(Vec<u8>, u32),
}

/// A file was synced: its bytes now are durable. A file grows by appending, mostly: when
/// the end of what was durable is still there, only what follows it is read.
fn file_synced(durable: &mut Durable, file: &std::fs::File, path: &Path) {
    use std::os::unix::fs::FileExt;
    let Ok(meta) = file.metadata() else {
        return;
    };
    // Read by its name (the receiver may hold it write-only): a file since unlinked, or a
    // name now another file's, is read no more.
    let Ok(reading) = std::fs::File::open(path) else {
        return;
    };
    if reading.metadata().map(|m| m.ino()).ok() != Some(meta.ino()) {
        return;
    }
    let len = meta.len() as usize;
    // Cut shorter than what a failed sync lost: none of it is left to lose.
    if durable
        .poisoned
        .get(&meta.ino())
        .is_some_and(|&(from, _)| len <= from)
    {
        durable.poisoned.remove(&meta.ino());
    }
    let poisoned = durable.poisoned.get(&meta.ino()).copied();
    let (bytes, mode) = durable.files.entry(meta.ino()).or_default();
    *mode = meta.mode();
    let had = bytes.len();
    let overlap = had.min(256);
    let mut end = vec![0; overlap];
    let appended = had <= len
        && reading
            .read_exact_at(&mut end, (had - overlap) as u64)
            .is_ok()
        && end == bytes[had - overlap..];
    let read = appended && {
        bytes.resize(len, 0);
        reading.read_exact_at(&mut bytes[had..], had as u64).is_ok()
    };
    if !read {
        *bytes = std::fs::read(path).unwrap_or_default();
    }
    // What a failed sync lost stays lost, whatever syncs follow.
    if let Some((from, to)) = poisoned.filter(|&(from, _)| from < bytes.len()) {
        let to = to.min(bytes.len());
        bytes[from..to].fill(0);
    }
}

fn ino_of(path: &Path) -> std::io::Result<Ino> {
    Ok(std::fs::symlink_metadata(path)?.ino())
}

/// A folder's names now.
fn listing(dir: &Path) -> BTreeMap<OsString, Entry> {
    let entries = std::fs::read_dir(dir).into_iter().flatten().flatten();
    entries
        .filter_map(|e| {
            let meta = e.metadata().ok()?;
            let entry = Entry {
                ino: meta.ino(),
                dir: meta.is_dir(),
            };
            Some((e.file_name(), entry))
        })
        .collect()
}

/// Makes `path` and all under it removable by its owner (closed splits are read-only).
fn make_writable(path: &Path) {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        let mut permissions = meta.permissions();
        permissions.set_mode(meta.mode() | 0o700);
        let _ = std::fs::set_permissions(path, permissions);
        if meta.is_dir() {
            for e in std::fs::read_dir(path).into_iter().flatten().flatten() {
                make_writable(&e.path());
            }
        }
    }
}
