//! Every fsync the receiver makes of what it keeps (splits, manifests, journals, outputs, the
//! files a fill brings from the vehicle), in one place: [`file()`], [`file_data`] and [`dir`].
//!
//! Each also tells the watchers of the folder it is in, if a test registered any
//! ([`watch`]): the whole-receiver simulation models a power cut from them (what a file held
//! when it was last synced, which names a folder held when it was last synced), so that a
//! write the receiver never synced is lost there as a real power cut would lose it. A test can
//! also make the syncs under a folder fail ([`fail`]), as a disk's I/O error does. Without a
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

/// Asked before every sync under its folder: an error to fail it with (the sync is not
/// made), or `None` to let it be made.
pub type Failer = Arc<dyn Fn(Synced<'_>) -> Option<io::Error> + Send + Sync>;

/// What a watch does.
#[derive(Clone)]
enum Hook {
    Told(Watcher),
    Fails(Failer),
}

struct Watch {
    id: u64,
    /// The folder as named, and as the kernel names it (symbolic links resolved).
    roots: [PathBuf; 2],
    hook: Hook,
}

static WATCHES: Mutex<Vec<Watch>> = Mutex::new(Vec::new());
static WATCHING: AtomicUsize = AtomicUsize::new(0);

/// `fsync`: the file's data and metadata.
pub fn file(file: &File) -> io::Result<()> {
    synced_file(file, File::sync_all)
}

/// `fdatasync`: the file's data and size.
pub fn file_data(file: &File) -> io::Result<()> {
    synced_file(file, File::sync_data)
}

/// The folder's entries: names created, renamed or removed in it are durable.
pub fn dir(path: &Path) -> io::Result<()> {
    let folder = File::open(path)?;
    let hooks = hooks_of(path);
    if let Some(e) = failed(&hooks, || Synced::Dir { path }) {
        return Err(e);
    }
    folder.sync_all()?;
    told(&hooks, || Synced::Dir { path });
    Ok(())
}

fn synced_file(file: &File, sync: fn(&File) -> io::Result<()>) -> io::Result<()> {
    let path = if WATCHING.load(Ordering::Acquire) == 0 {
        None
    } else {
        use std::os::fd::AsRawFd;
        std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()
    };
    let hooks = path.as_deref().map(hooks_of).unwrap_or_default();
    if let Some(path) = &path
        && let Some(e) = failed(&hooks, || Synced::File { file, path })
    {
        return Err(e);
    }
    sync(file)?;
    if let Some(path) = &path {
        told(&hooks, || Synced::File { file, path });
    }
    Ok(())
}

/// The first error a failer under the folder fails the sync with.
fn failed<'a>(hooks: &[Hook], synced: impl Fn() -> Synced<'a>) -> Option<io::Error> {
    hooks.iter().find_map(|h| match h {
        Hook::Fails(f) => f(synced()),
        Hook::Told(_) => None,
    })
}

fn told<'a>(hooks: &[Hook], synced: impl Fn() -> Synced<'a>) {
    for h in hooks {
        if let Hook::Told(w) = h {
            w(synced());
        }
    }
}

/// The hooks of the watches `path` is under (none, at the cost of one atomic load, while
/// nothing watches).
fn hooks_of(path: &Path) -> Vec<Hook> {
    if WATCHING.load(Ordering::Acquire) == 0 {
        return Vec::new();
    }
    let watches = WATCHES.lock().unwrap_or_else(|e| e.into_inner());
    (watches.iter())
        .filter(|w| w.roots.iter().any(|root| path.starts_with(root)))
        .map(|w| w.hook.clone())
        .collect()
}

/// Tells `watcher` of every sync of a file or folder under `root` (itself included), on any
/// thread, until the guard is dropped.
#[must_use = "the watch ends when the guard is dropped"]
pub fn watch(root: &Path, watcher: Watcher) -> Watching {
    hook(root, Hook::Told(watcher))
}

/// Asks `failer` before every sync of a file or folder under `root` (itself included), on
/// any thread, until the guard is dropped: a sync it fails is not made, and its caller gets
/// the error (a test's I/O error).
#[must_use = "the syncs fail no more when the guard is dropped"]
pub fn fail(root: &Path, failer: Failer) -> Watching {
    hook(root, Hook::Fails(failer))
}

fn hook(root: &Path, hook: Hook) -> Watching {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let id = NEXT.fetch_add(1, Ordering::Relaxed) as u64;
    let mut watches = WATCHES.lock().unwrap_or_else(|e| e.into_inner());
    let resolved = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    watches.push(Watch {
        id,
        roots: [root.to_path_buf(), resolved],
        hook,
    });
    WATCHING.fetch_add(1, Ordering::Release);
    Watching { id }
}

/// A watch (or a failer); dropping it ends it (no call of its hook begins after).
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

    #[test]
    fn a_failer_fails_the_syncs_under_its_folder_and_a_failed_sync_is_told_to_no_watcher() {
        let base =
            std::env::temp_dir().join(format!("ulog-recv-fsync-fail-{}", std::process::id()));
        let (inside, outside) = (base.join("inside"), base.join("outside"));
        std::fs::create_dir_all(&inside).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        let told = Arc::new(AtomicUsize::new(0));
        let _watch = watch(&base, {
            let told = told.clone();
            Arc::new(move |_: Synced<'_>| {
                told.fetch_add(1, Ordering::Relaxed);
            })
        });
        let failing = fail(
            &inside,
            Arc::new(|_: Synced<'_>| Some(io::Error::from_raw_os_error(5))),
        );
        let f = File::create(inside.join("a")).unwrap();
        let e = file_data(&f).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(5));
        assert_eq!(dir(&inside).unwrap_err().raw_os_error(), Some(5));
        assert_eq!(
            told.load(Ordering::Relaxed),
            0,
            "a failed sync made nothing durable"
        );
        file(&File::create(outside.join("b")).unwrap()).unwrap();
        assert_eq!(told.load(Ordering::Relaxed), 1);
        drop(failing);
        file(&f).unwrap();
        assert_eq!(told.load(Ordering::Relaxed), 2);
        std::fs::remove_dir_all(&base).unwrap();
    }
}
