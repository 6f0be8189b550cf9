//! A file a command writes (an export, a snippet): written under a temporary name beside
//! its final one, synced, then renamed over it, so that neither a reader nor a power cut
//! ever finds part of it under the final name. Dropped before [`OutputFile::commit`], the
//! temporary file is removed.
//!
//! [`Filer`] does the same for a set of files committed together, on a thread of its own:
//! making folders, creating, filling and syncing files are waits on the filesystem that the
//! caller's encoding of the next file need not take. The folders it makes ([`NewFolders`])
//! are made durable with the files: the folder each was made in is synced at the commit, as
//! a new file's directory is (a folder's entry, like a file's, reaches the disk only with its
//! parent's sync).

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::store::fsync;

/// An output file being written. Write through [`OutputFile::file`] (`&File` is a writer).
#[derive(Debug)]
pub struct OutputFile {
    path: PathBuf,
    temporary: PathBuf,
    file: Option<File>,
}

impl OutputFile {
    /// Creates `.NAME.partial` beside `path` (replacing a stale one).
    pub fn create(path: &Path) -> io::Result<Self> {
        let name = path
            .file_name()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
        let temporary = path.with_file_name(format!(".{}.partial", name.to_string_lossy()));
        let file = File::create(&temporary)?;
        Ok(Self {
            path: path.to_owned(),
            temporary,
            file: Some(file),
        })
    }

    /// The temporary file, to write to.
    pub fn file(&self) -> &File {
        self.file
            .as_ref()
            .expect("an output file not yet committed")
    }

    /// The file whole: synced, renamed to its final name, its directory synced.
    pub fn commit(mut self) -> io::Result<()> {
        let file = self.file.take().expect("committed once");
        fsync::file(&file)?;
        drop(file);
        std::fs::rename(&self.temporary, &self.path)?;
        fsync::dir(&parent_of(&self.path))
    }

    /// Commits `outputs` together: each file synced, then all renamed to their final names,
    /// then each of their directories synced once: none appears before all are whole. Syncs
    /// are per file, never of the whole filesystem: another writer's data on the same card (a
    /// camera's video) is not waited for.
    pub fn commit_all(outputs: Vec<OutputFile>) -> io::Result<()> {
        for out in &outputs {
            fsync::file(out.file())?;
        }
        Self::rename_synced(outputs, BTreeSet::new(), 1)
    }

    /// Renames `outputs`, each already synced, to their final names, then syncs each of
    /// their directories, and the folders in `dirs` (the parents of folders made for them),
    /// once, `threads` at a time.
    fn rename_synced(
        outputs: Vec<OutputFile>,
        mut dirs: BTreeSet<PathBuf>,
        threads: usize,
    ) -> io::Result<()> {
        for mut out in outputs {
            drop(out.file.take());
            std::fs::rename(&out.temporary, &out.path)?;
            dirs.insert(parent_of(&out.path));
        }
        let dirs: Vec<_> = dirs.into_iter().collect();
        each_at_once(&dirs, threads, |dir| fsync::dir(dir))
    }
}

/// A writer to a new file, written from its start (an [`OutputFile`]'s), that starts the
/// disk's writeback of every [`WriteAhead::STEP`] bytes once written: the commit's fsync
/// then waits for the last of them only, where it would wait for the whole file (a 2 MB MCAP
/// export: 4 ms of its 22, on ext4 over virtio). A seek back to patch what was written is
/// fine: those bytes are left to the fsync. See [`crate::sys::os::start_writeback`].
#[derive(Debug)]
pub struct WriteAhead<'a> {
    file: &'a File,
    position: u64,
    /// The end of what has been written.
    written: u64,
    /// Bytes from the start whose writeback has been started.
    started: u64,
}

impl<'a> WriteAhead<'a> {
    /// Bytes written between two starts of writeback.
    pub const STEP: u64 = 512 << 10;

    /// Writes to `file` from its start.
    pub fn new(file: &'a File) -> Self {
        Self {
            file,
            position: 0,
            written: 0,
            started: 0,
        }
    }
}

impl Write for WriteAhead<'_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let n = self.file.write(bytes)?;
        self.position += n as u64;
        self.written = self.written.max(self.position);
        if self.written - self.started >= Self::STEP {
            crate::sys::os::start_writeback(self.file, self.started, self.written - self.started);
            self.started = self.written;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

impl io::Seek for WriteAhead<'_> {
    fn seek(&mut self, to: io::SeekFrom) -> io::Result<u64> {
        self.position = self.file.seek(to)?;
        Ok(self.position)
    }
}

/// The folders made for a set of output files, from any thread ([`NewFolders::make`]): each
/// new folder's parent is kept, to be synced with the files' own directories when they are
/// committed ([`Filer::commit`]), so that a power cut after the commit finds the whole path
/// to every file. Clones share one set.
#[derive(Debug, Clone, Default)]
pub struct NewFolders {
    parents: Arc<Mutex<BTreeSet<PathBuf>>>,
}

impl NewFolders {
    /// Makes `dir` and its missing parents (made already, by this thread or another, is
    /// made); keeps the folder each new one was made in.
    pub fn make(&self, dir: &Path) -> io::Result<()> {
        if dir.as_os_str().is_empty() || dir.is_dir() {
            return Ok(());
        }
        if let Some(parent) = dir.parent() {
            self.make(parent)?;
        }
        match std::fs::create_dir(dir) {
            Ok(()) => {
                lock(&self.parents).insert(parent_of(dir));
                Ok(())
            }
            // Made meanwhile by another thread, which keeps its parent.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The folders that gained a folder, forgotten here.
    fn take(&self) -> BTreeSet<PathBuf> {
        std::mem::take(&mut *lock(&self.parents))
    }
}

/// Makes `dir` and its missing parents, each synced into the folder it was made in before
/// this returns: a file written durably into `dir` then keeps its whole path through a power
/// cut.
pub fn make_folders_durably(dir: &Path) -> io::Result<()> {
    let folders = NewFolders::default();
    folders.make(dir)?;
    folders
        .take()
        .iter()
        .try_for_each(|parent| fsync::dir(parent))
}

/// The directory `path` is in (`.` for a bare name).
fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    }
}

/// Output files made, filled and synced off the caller's thread, then committed together (as
/// [`OutputFile::commit_all`] does) by [`Filer::commit`]. A thread makes folders and writes
/// files; [`Filer::SYNCERS`] threads sync them, so that the syncs of many small files wait
/// for the storage together rather than one after the other (70 files of 20 KB: 14 ms
/// synced one by one, 8 ms four at a time, on ext4 over virtio). The caller hands work over and goes on; at most [`Filer::QUEUE`] handovers
/// wait, so that the bytes waiting stay bounded. The first error stops the work and is
/// returned by the next call. Dropped uncommitted (or failed), no file appears under its
/// final name and the temporaries are removed.
#[derive(Debug)]
pub struct Filer {
    jobs: Option<SyncSender<FilerJob>>,
    writer: Option<JoinHandle<io::Result<()>>>,
    syncers: Vec<JoinHandle<io::Result<()>>>,
    synced: Arc<Mutex<Vec<OutputFile>>>,
    folders: NewFolders,
}

/// Hands a [`Filer`] files, from any thread ([`Filer::handle`]). When the filer has stopped at
/// an error, a handover fails with [`FilerStopped`]; [`Filer::stopped`] says why.
#[derive(Debug, Clone)]
pub struct FilerHandle {
    jobs: Option<SyncSender<FilerJob>>,
}

/// What a handover to a [`Filer`] that has stopped fails with (inside an [`io::Error`]).
#[derive(Debug, thiserror::Error)]
#[error("the filer has stopped")]
pub struct FilerStopped;

impl FilerStopped {
    /// Whether `error` is a handover's to a stopped filer.
    pub fn is(error: &io::Error) -> bool {
        error
            .get_ref()
            .is_some_and(|inner| inner.is::<FilerStopped>())
    }
}

impl FilerHandle {
    /// Writes `bytes` as the output file `path` (its folders made if need be) and syncs it.
    pub fn write(&self, path: PathBuf, bytes: Vec<u8>) -> io::Result<()> {
        self.hand_over(FilerJob::Bytes(path, bytes))
    }

    /// Syncs `out`, written by the caller, to be committed with the rest.
    pub fn sync(&self, out: OutputFile) -> io::Result<()> {
        self.hand_over(FilerJob::Sync(out))
    }

    fn hand_over(&self, job: FilerJob) -> io::Result<()> {
        match &self.jobs {
            Some(jobs) if jobs.send(job).is_ok() => Ok(()),
            _ => Err(io::Error::other(FilerStopped)),
        }
    }
}

/// A handover to the [`Filer`]'s thread.
#[derive(Debug)]
enum FilerJob {
    Folder(PathBuf),
    Bytes(PathBuf, Vec<u8>),
    Sync(OutputFile),
}

impl Filer {
    /// Handovers that may wait for the thread before the caller waits too.
    pub const QUEUE: usize = 4;

    /// Threads syncing files (and, at the commit, folders) at once.
    pub const SYNCERS: usize = 4;

    /// Starts the threads.
    pub fn spawn() -> io::Result<Self> {
        let (jobs, queue) = sync_channel(Self::QUEUE);
        let (to_sync, unsynced) = sync_channel::<OutputFile>(Self::SYNCERS);
        let unsynced = Arc::new(Mutex::new(unsynced));
        let synced = Arc::new(Mutex::new(Vec::new()));
        let folders = NewFolders::default();
        let mut filer = Self {
            jobs: Some(jobs),
            writer: None,
            syncers: Vec::new(),
            synced: synced.clone(),
            folders: folders.clone(),
        };
        for k in 0..Self::SYNCERS {
            let (unsynced, synced) = (unsynced.clone(), synced.clone());
            let syncer = std::thread::Builder::new()
                .name(format!("filer-sync-{k}"))
                .spawn(move || Self::sync_each(&unsynced, &synced))?;
            filer.syncers.push(syncer);
        }
        let writer = std::thread::Builder::new()
            .name("filer".into())
            .spawn(move || Self::write_each(queue, to_sync, &folders))?;
        filer.writer = Some(writer);
        Ok(filer)
    }

    /// Makes `dir` and its parents (soon: a later [`FilerHandle::write`] under it finds it made).
    pub fn make_folder(&mut self, dir: PathBuf) -> io::Result<()> {
        self.hand_over(FilerJob::Folder(dir))
    }

    /// A handle that hands this filer files, from this thread or another (an encoder's,
    /// which need not wait for the owner's thread to be scheduled). Every handle must be
    /// dropped before [`Filer::commit`], which waits for the end of the queue.
    pub fn handle(&self) -> FilerHandle {
        FilerHandle {
            jobs: self.jobs.clone(),
        }
    }

    /// The folders made for the filer's files, for another thread that makes a folder for
    /// one of them (which the filer may be making too): the commit syncs what it made in.
    pub fn folders(&self) -> &NewFolders {
        &self.folders
    }

    /// The error the filer stopped at, once a [`FilerHandle`] found it stopped: waits for its
    /// threads.
    pub fn stopped(&mut self) -> io::Error {
        match self.join() {
            Err(cause) => cause,
            Ok(()) => io::Error::other(FilerStopped),
        }
    }

    /// Waits for every handover, then renames all the files to their final names and syncs
    /// their folders, and those the folders made for them were made in: none appears before
    /// all are whole, and all are durable when it returns.
    pub fn commit(mut self) -> io::Result<()> {
        self.join()?;
        let outputs = std::mem::take(&mut *lock(&self.synced));
        OutputFile::rename_synced(outputs, self.folders.take(), Self::SYNCERS)
    }

    fn hand_over(&mut self, job: FilerJob) -> io::Result<()> {
        let sent = match &self.jobs {
            Some(jobs) => jobs.send(job).is_ok(),
            None => false,
        };
        match sent {
            true => Ok(()),
            // The threads stopped at an error: that error.
            false => Err(self.stopped()),
        }
    }

    /// Ends the queue and waits for the threads: the first error of any.
    fn join(&mut self) -> io::Result<()> {
        drop(self.jobs.take());
        let Some(writer) = self.writer.take() else {
            return Err(io::Error::other(FilerStopped));
        };
        // The writer first: its end ends the syncers' queue.
        let mut result = joined(writer);
        for syncer in self.syncers.drain(..) {
            result = result.and(joined(syncer));
        }
        if result.is_err() {
            // Failed: what was synced is not committed, its temporaries go now.
            lock(&self.synced).clear();
        }
        result
    }

    fn write_each(
        queue: Receiver<FilerJob>,
        to_sync: SyncSender<OutputFile>,
        folders: &NewFolders,
    ) -> io::Result<()> {
        for job in queue {
            let out = match job {
                FilerJob::Folder(dir) => {
                    folders.make(&dir)?;
                    continue;
                }
                FilerJob::Bytes(path, bytes) => {
                    if let Some(dir) = path.parent() {
                        folders.make(dir)?;
                    }
                    let out = OutputFile::create(&path)?;
                    out.file().write_all(&bytes)?;
                    out
                }
                FilerJob::Sync(out) => out,
            };
            if to_sync.send(out).is_err() {
                // A syncer failed; the commit says why.
                break;
            }
        }
        Ok(())
    }

    fn sync_each(
        unsynced: &Mutex<Receiver<OutputFile>>,
        synced: &Mutex<Vec<OutputFile>>,
    ) -> io::Result<()> {
        loop {
            let next = lock(unsynced).recv();
            let Ok(out) = next else {
                return Ok(());
            };
            fsync::file(out.file())?;
            lock(synced).push(out);
        }
    }
}

/// `mutex` locked, even if a thread panicked holding it (what it guards stays consistent:
/// a list pushed to, a queue taken from).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What `thread` returned; its panic goes on in the caller.
fn joined(thread: JoinHandle<io::Result<()>>) -> io::Result<()> {
    thread
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// `f` of each of `items`, on up to `threads` threads at once; the first error.
fn each_at_once<T: Sync>(
    items: &[T],
    threads: usize,
    f: impl Fn(&T) -> io::Result<()> + Sync,
) -> io::Result<()> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let work = || -> io::Result<()> {
        loop {
            let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some(item) = items.get(k) else {
                return Ok(());
            };
            f(item)?;
        }
    };
    std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..threads.min(items.len()))
            .map(|_| scope.spawn(work))
            .collect();
        let mut result = work();
        for helper in helpers {
            result = result.and(
                helper
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            );
        }
        result
    })
}

impl Drop for Filer {
    fn drop(&mut self) {
        // The threads' files, dropped uncommitted, remove their temporaries.
        let _ = self.join();
    }
}

impl Drop for OutputFile {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            let _ = std::fs::remove_file(&self.temporary);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn written_ahead_a_file_holds_what_was_written_and_patched_in_place() {
        use std::io::SeekFrom;
        let dir = std::env::temp_dir().join(format!("ulog-recv-ahead-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("flight.bag");
        let out = OutputFile::create(&path).unwrap();
        let mut expected = std::io::Cursor::new(Vec::new());
        let mut ahead = WriteAhead::new(out.file());
        let piece: Vec<u8> = (0..=250u8).cycle().take(100_003).collect();
        // Past several steps in uneven writes, a header patched, then on at the end.
        for _ in 0..(3 * WriteAhead::STEP as usize / piece.len() + 1) {
            ahead.write_all(&piece).unwrap();
            expected.write_all(&piece).unwrap();
        }
        for w in [&mut ahead as &mut dyn SeekWrite, &mut expected] {
            assert_eq!(w.seek(SeekFrom::Start(13)).unwrap(), 13);
            w.write_all(b"patched").unwrap();
            w.seek(SeekFrom::End(0)).unwrap();
            w.write_all(b"the end").unwrap();
        }
        ahead.flush().unwrap();
        out.commit().unwrap();
        assert!(std::fs::read(&path).unwrap() == expected.into_inner());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    trait SeekWrite: std::io::Write + std::io::Seek {}
    impl<T: std::io::Write + std::io::Seek> SeekWrite for T {}

    #[test]
    fn the_final_name_appears_only_once_the_file_is_whole() {
        let dir = std::env::temp_dir().join(format!("ulog-recv-output-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("flight.mcap");
        let out = OutputFile::create(&path).unwrap();
        out.file().write_all(b"half").unwrap();
        assert!(!path.exists());
        assert!(dir.join(".flight.mcap.partial").exists());
        drop(out);
        assert!(!dir.join(".flight.mcap.partial").exists());
        assert!(!path.exists());
        let out = OutputFile::create(&path).unwrap();
        out.file().write_all(b"whole").unwrap();
        out.commit().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"whole");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        // Several at once: each under its name once all are committed.
        let outs: Vec<_> = (0..3)
            .map(|k| {
                let out = OutputFile::create(&dir.join(format!("t{k}.parquet"))).unwrap();
                out.file().write_all(&[k]).unwrap();
                out
            })
            .collect();
        assert!(!dir.join("t0.parquet").exists());
        OutputFile::commit_all(outs).unwrap();
        for k in 0..3u8 {
            assert_eq!(
                std::fs::read(dir.join(format!("t{k}.parquet"))).unwrap(),
                [k]
            );
        }
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 4);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_filer_commits_all_its_files_or_none() {
        let dir = std::env::temp_dir().join(format!("ulog-recv-filer-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut filer = Filer::spawn().unwrap();
        let handle = filer.handle();
        filer.make_folder(dir.join("a/b")).unwrap();
        handle.write(dir.join("a/b/one"), b"one".to_vec()).unwrap();
        // Its folder made by the write itself.
        handle.write(dir.join("c/two"), b"two".to_vec()).unwrap();
        std::fs::create_dir_all(&dir).unwrap();
        let three = OutputFile::create(&dir.join("three")).unwrap();
        three.file().write_all(b"three").unwrap();
        handle.sync(three).unwrap();
        drop(handle);
        filer.commit().unwrap();
        assert_eq!(std::fs::read(dir.join("a/b/one")).unwrap(), b"one");
        assert_eq!(std::fs::read(dir.join("c/two")).unwrap(), b"two");
        assert_eq!(std::fs::read(dir.join("three")).unwrap(), b"three");
        assert_eq!(files_under(&dir), ["a/b/one", "c/two", "three"]);

        // Dropped uncommitted: nothing under a final name, no temporary left.
        let filer = Filer::spawn().unwrap();
        filer
            .handle()
            .write(dir.join("four"), b"four".to_vec())
            .unwrap();
        drop(filer);
        assert_eq!(files_under(&dir), ["a/b/one", "c/two", "three"]);

        // A failure (a folder where a file must go) stops the filer, and what was written
        // before it is not committed.
        let mut filer = Filer::spawn().unwrap();
        let handle = filer.handle();
        handle.write(dir.join("five"), b"five".to_vec()).unwrap();
        handle
            .write(dir.join("three/six"), b"six".to_vec())
            .unwrap();
        let stopped = (0..2 * Filer::QUEUE)
            .find_map(|k| handle.write(dir.join(format!("more{k}")), Vec::new()).err());
        drop(handle);
        let why = match stopped {
            Some(_) => filer.stopped(),
            None => filer
                .commit()
                .expect_err("a file cannot be made under a file"),
        };
        assert!(!FilerStopped::is(&why), "the cause: {why}");
        assert_eq!(files_under(&dir), ["a/b/one", "c/two", "three"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_handle_finds_a_stopped_filer_and_the_filer_says_why() {
        let dir = std::env::temp_dir().join(format!("ulog-recv-handle-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("file"), b"").unwrap();
        let mut filer = Filer::spawn().unwrap();
        let handle = filer.handle();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                handle.write(dir.join("one"), b"one".to_vec()).unwrap();
                // A folder where a file is: the filer stops; a later handover finds it so.
                handle.write(dir.join("file/two"), b"two".to_vec()).unwrap();
                let stopped = (0..4 * Filer::QUEUE)
                    .find_map(|k| handle.write(dir.join(format!("more{k}")), Vec::new()).err())
                    .expect("a stopped filer takes no more");
                assert!(FilerStopped::is(&stopped), "{stopped}");
            });
        });
        drop(handle);
        let why = filer.stopped();
        assert!(!FilerStopped::is(&why), "the cause, not the stop: {why}");
        // Its folder cannot be made: a file has the name.
        assert_eq!(why.kind(), io::ErrorKind::AlreadyExists, "{why}");
        drop(filer);
        assert_eq!(files_under(&dir), ["file"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn new_folders_keep_the_folder_each_was_made_in_once_whichever_thread_made_it() {
        let dir = std::env::temp_dir().join(format!("ulog-recv-folders-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let folders = NewFolders::default();
        let deep = dir.join("a/b/c");
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| folders.make(&deep).unwrap());
            }
        });
        assert!(deep.is_dir());
        let expected: BTreeSet<PathBuf> = [dir.clone(), dir.join("a"), dir.join("a/b")].into();
        assert_eq!(folders.take(), expected);
        // Made already: nothing new to sync; a sibling: only its parent.
        folders.make(&deep).unwrap();
        folders.make(&dir.join("a/d")).unwrap();
        assert_eq!(folders.take(), [dir.join("a")].into());
        // A file in the way is an error, as create_dir_all's.
        std::fs::write(dir.join("file"), b"").unwrap();
        assert!(folders.make(&dir.join("file/x")).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The files under `dir`, relative, sorted.
    fn files_under(dir: &Path) -> Vec<String> {
        let mut files = Vec::new();
        let mut dirs = vec![dir.to_owned()];
        while let Some(d) = dirs.pop() {
            for entry in std::fs::read_dir(&d).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else {
                    let rel = path.strip_prefix(dir).unwrap();
                    files.push(rel.to_string_lossy().into_owned());
                }
            }
        }
        files.sort();
        files
    }
}
