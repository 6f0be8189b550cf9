//! Every fsync the receiver makes of what it keeps (splits, manifests, journals, outputs, the
//! files a fill brings from the vehicle), in one place: [`file()`], [`file_data`] and [`dir`].
//!
//! Each also tells the watchers of the folder it is in, if a test registered any
//! ([`watch`]): the whole-receiver simulation models a power cut from them (what a file held
//! when it was last synced, which names a folder held when it was last synced), so that a
//! write the receiver never synced is lost there as a real power cut would lose it. Without a
//! watcher, as in the daemon, each costs one atomic load beyond its system call.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// What a sync made durable.
#[derive(Debug)]
pub enum Synced<'a> {
    /// A file's data and size (and, for [`file()`], its metadata), at its `path` (as the
    /// kernel names the open file; a file since unlinked ends in ` (deleted)`).
    File { file: &'a File, path: &'a Path },
    /// A folder's names: each entry in it now, as it is now.
    Dir { path: &'a Path },
}

/// Told of every sync under its folder, after the sync returned.
pub type Watcher = Arc<dyn Fn(Synced<'_>) + Send + Sync>;

struct Watch {
    id: u64,
    /// The folder as named, and as the kernel names it (symbolic links resolved).
    roots: [PathBuf; 2],
    watcher: Watcher,
}

static WATCHES: Mutex<Vec<Watch>> = Mutex::new(Vec::new());
static WATCHING: AtomicUsize = AtomicUsize::new(0);

/// `fsync`: the file's data and metadata.
pub fn file(file: &File) -> io::Result<()> {
    file.sync_all()?;
    told_of_file(file);
    Ok(())
}

/// `fdatasync`: the file's data and size.
pub fn file_data(file: &File) -> io::Result<()> {
    file.sync_data()?;
    told_of_file(file);
    Ok(())
}

/// The folder's entries: names created, renamed or removed in it are durable.
pub fn dir(path: &Path) -> io::Result<()> {
    File::open(path)?.sync_all()?;
    if WATCHING.load(Ordering::Acquire) > 0 {
        for w in watchers_of(path) {
            w(Synced::Dir { path });
        }
    }
    Ok(())
}

fn told_of_file(file: &File) {
    if WATCHING.load(Ordering::Acquire) == 0 {
        return;
    }
    use std::os::fd::AsRawFd;
    let Ok(path) = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())) else {
        return;
    };
    for w in watchers_of(&path) {
        w(Synced::File { file, path: &path });
    }
}

fn watchers_of(path: &Path) -> Vec<Watcher> {
    let watches = WATCHES.lock().unwrap_or_else(|e| e.into_inner());
    (watches.iter())
        .filter(|w| w.roots.iter().any(|root| path.starts_with(root)))
        .map(|w| w.watcher.clone())
        .collect()
}

/// Tells `watcher` of every sync of a file or folder under `root` (itself included), on any
/// thread, until the guard is dropped.
#[must_use = "the watch ends when the guard is dropped"]
pub fn watch(root: &Path, watcher: Watcher) -> Watching {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let id = NEXT.fetch_add(1, Ordering::Relaxed) as u64;
    let mut watches = WATCHES.lock().unwrap_or_else(|e| e.into_inner());
    let resolved = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    watches.push(Watch {
        id,
        roots: [root.to_path_buf(), resolved],
        watcher,
    });
    WATCHING.fetch_add(1, Ordering::Release);
    Watching { id }
}

/// A watch; dropping it ends it (no call of its watcher begins after).
#[derive(Debug)]
pub struct Watching {
    id: u64,
}

impl Drop for Watching {
    fn drop(&mut self) {
        let mut watches = WATCHES.lock().unwrap_or_else(|e| e.into_inner());
        watches.retain(|w| w.id != self.id);
        WATCHING.fetch_sub(1, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_watcher_is_told_of_syncs_under_its_folder_only_and_only_while_it_watches() {
        let base = std::env::temp_dir().join(format!("ulog-recv-fsync-{}", std::process::id()));
        let (inside, outside) = (base.join("inside"), base.join("outside"));
        std::fs::create_dir_all(&inside).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        let told = Arc::new(Mutex::new(Vec::<String>::new()));
        let guard = watch(&inside, {
            let told = told.clone();
            Arc::new(move |s: Synced<'_>| {
                let line = match s {
                    Synced::File { path, .. } => format!("file {}", path.display()),
                    Synced::Dir { path } => format!("dir {}", path.display()),
                };
                told.lock().unwrap().push(line);
            })
        });
        let mut f = File::create(inside.join("a")).unwrap();
        f.write_all(b"x").unwrap();
        file_data(&f).unwrap();
        dir(&inside).unwrap();
        let g = File::create(outside.join("b")).unwrap();
        file(&g).unwrap();
        dir(&outside).unwrap();
        drop(guard);
        file(&f).unwrap();
        let told = told.lock().unwrap().clone();
        std::fs::remove_dir_all(&base).unwrap();
        assert_eq!(told.len(), 2, "{told:?}");
        assert!(
            told[0].starts_with("file ") && told[0].ends_with("/inside/a"),
            "{told:?}"
        );
        assert!(
            told[1].starts_with("dir ") && told[1].contains("inside"),
            "{told:?}"
        );
        assert!(!told.iter().any(|l| l.contains("outside")), "{told:?}");
    }
}
