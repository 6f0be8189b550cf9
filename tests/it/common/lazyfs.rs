//! LazyFS (`../shared/vendor/lazyfs`), the FUSE file system Jepsen cuts the power with: it
//! keeps every write in a page cache of its own until the writer syncs it, and on command
//! drops what is not synced, as a power cut drops the kernel's page cache. Mounted by a test
//! (it needs `/dev/fuse` and root, Debian's `fuse3` and `libspdlog1.10`, which `.ci/run`
//! installs); under CI its absence is a failure, elsewhere the test says loudly that it
//! skipped.
//!
//! Three faults:
//! - [`LazyFs::power_cut`]: what is not synced is gone (`lazyfs::clear-cache`); the file
//!   system stays mounted, as the next boot finds the disk;
//! - [`LazyFs::crash_at`]: LazyFS drops what is not synced and dies at the next matching call
//!   (`fsync` of a split, `rename` of a manifest ...), a power cut at an exact step; the
//!   mount is dead until [`LazyFs::remount`];
//! - a torn write ([`Injection`]: `torn-op`, some parts of one write on disk; `torn-seq`, some
//!   writes of a sequence without a sync), set when mounting, then the same death.
//!
//! Seen here: the answer pipe must be open before a command is sent (or the answer is lost);
//! two commands in one read of the pipe are one unknown command (each waits for the last to
//! take effect); a crash at a `rename` needs the target's pattern too, or any rename fires it; directory entries are not cached (a rename or a create is on disk at
//! once, whatever is synced); the kernel hands LazyFS writes cut at page boundaries.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The vendored LazyFS binary.
pub fn binary() -> PathBuf {
    super::project().join("../shared/vendor/lazyfs/bin/lazyfs")
}

/// A torn write, set in LazyFS's config when mounting: on the `occurrence`-th matching write
/// of `file` (a path under [`LazyFs::root`]), only some of it reaches the disk, then LazyFS
/// dies as in a power cut.
#[derive(Debug, Clone)]
pub enum Injection {
    /// One write cut in `parts` equal parts, of which those numbered in `persist` (from 1)
    /// are on disk.
    TornOp {
        file: PathBuf,
        occurrence: u32,
        parts: u32,
        persist: Vec<u32>,
    },
    /// Of the writes from the `occurrence`-th on until the next sync, those numbered in
    /// `persist` (from 1) are on disk.
    TornSeq {
        file: PathBuf,
        occurrence: u32,
        persist: Vec<u32>,
    },
}

impl Injection {
    fn toml(&self) -> String {
        let list = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
        match self {
            Injection::TornOp {
                file,
                occurrence,
                parts,
                persist,
            } => format!(
                "[[injection]]\ntype=\"torn-op\"\nfile=\"{}\"\noccurrence={occurrence}\n\
                 parts={parts}\npersist=[{}]\n",
                file.display(),
                list(persist)
            ),
            Injection::TornSeq {
                file,
                occurrence,
                persist,
            } => format!(
                "[[injection]]\ntype=\"torn-seq\"\nop=\"write\"\nfile=\"{}\"\n\
                 occurrence={occurrence}\npersist=[{}]\n",
                file.display(),
                list(persist)
            ),
        }
    }
}

/// A LazyFS mount at `mount`, its data in `root`; unmounted on drop.
pub struct LazyFs {
    /// Where programs read and write.
    pub mount: PathBuf,
    /// What is on the disk: what was synced (and directory entries, which LazyFS does not
    /// cache).
    pub root: PathBuf,
    dir: PathBuf,
    process: Option<Child>,
    /// LazyFS's answers (opened before any command, kept open).
    answers: Option<BufReader<File>>,
    mounts: u32,
    /// [`root`](Self::root) is a tmpfs of the test's.
    tmpfs: bool,
}

impl LazyFs {
    /// Mounts LazyFS at the calling test's fresh directory `name`
    /// ([`fresh_dir`](super::procs::fresh_dir)), with `injections` armed; `None` (said
    /// loudly) where it cannot run outside CI.
    #[track_caller]
    pub fn mount(name: &str, injections: &[Injection]) -> Option<Self> {
        Self::mount_with(name, injections, None)
    }

    /// Like [`mount`](Self::mount), its data on a tmpfs of `size` (`mount`'s syntax: `64M`),
    /// a disk that can be filled.
    #[track_caller]
    pub fn mount_on_tmpfs(name: &str, size: &str) -> Option<Self> {
        Self::mount_with(name, &[], Some(size))
    }

    #[track_caller]
    fn mount_with(name: &str, injections: &[Injection], tmpfs: Option<&str>) -> Option<Self> {
        let dir = super::procs::fresh_dir(name);
        let _ = Command::new("umount")
            .arg(dir.join("root"))
            .stderr(Stdio::null())
            .status();
        // A mount an earlier run left (it died with its test) goes first.
        let _ = Command::new("fusermount3")
            .args(["-u", "-z"])
            .arg(dir.join("mnt"))
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&dir);
        let reason = if !binary().exists() {
            Some(format!("no LazyFS at {}", binary().display()))
        } else if !Path::new("/dev/fuse").exists() {
            Some("no /dev/fuse".into())
        } else if Command::new("fusermount3").arg("-V").output().is_err() {
            Some("no fusermount3 (Debian's fuse3)".into())
        } else {
            None
        };
        if let Some(reason) = reason {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must cut the power for real: {reason} (`.ci/run` installs fuse3 and libspdlog1.10)"
            );
            eprintln!("\n!!! SKIPPED a power-cut test: {reason} !!!\n");
            return None;
        }
        let mut fs = Self {
            mount: dir.join("mnt"),
            root: dir.join("root"),
            dir,
            process: None,
            answers: None,
            mounts: 0,
            tmpfs: false,
        };
        std::fs::create_dir_all(&fs.mount).unwrap();
        std::fs::create_dir_all(&fs.root).unwrap();
        if let Some(size) = tmpfs {
            let ok = Command::new("mount")
                .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
                .arg(&fs.root)
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "cannot mount a tmpfs under LazyFS (root is needed)");
            fs.tmpfs = true;
        }
        fs.start(injections);
        Some(fs)
    }

    fn fifo(&self) -> PathBuf {
        self.dir.join("faults.fifo")
    }

    fn answer_fifo(&self) -> PathBuf {
        self.dir.join("done.fifo")
    }

    fn start(&mut self, injections: &[Injection]) {
        let config = self.dir.join("lazyfs.toml");
        let mut text = format!(
            "[faults]\nfifo_path=\"{}\"\nfifo_path_completed=\"{}\"\n\
             [cache]\napply_eviction=false\n[cache.simple]\ncustom_size=\"256mb\"\n\
             blocks_per_page=1\n[filesystem]\nlog_all_operations=false\nlogfile=\"\"\n",
            self.fifo().display(),
            self.answer_fifo().display()
        );
        injections.iter().for_each(|i| text.push_str(&i.toml()));
        std::fs::write(&config, text).unwrap();
        self.mounts += 1;
        let log = File::create(self.dir.join(format!("lazyfs{}.log", self.mounts))).unwrap();
        let child = Command::new(binary())
            .arg(&self.mount)
            .arg("--config-path")
            .arg(&config)
            .args(["-o", "allow_other", "-o", "modules=subdir", "-o"])
            .arg(format!("subdir={}", self.root.display()))
            .arg("-f")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start LazyFS: {e}"));
        self.process = Some(child);
        let t0 = Instant::now();
        while !self.is_mounted() {
            if let Some(status) = self.process.as_mut().unwrap().try_wait().unwrap() {
                panic!(
                    "LazyFS exited ({status}) before mounting: see {}",
                    self.dir.display()
                );
            }
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "LazyFS did not mount within 20 s: see {}",
                self.dir.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        if self.answers.is_none() {
            // Read and write: the open never waits for a writer, and LazyFS's write never
            // finds no reader.
            let answers = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(self.answer_fifo())
                .unwrap();
            self.answers = Some(BufReader::new(answers));
        }
    }

    fn log_says(&self, what: &str) -> bool {
        std::fs::read_to_string(self.dir.join(format!("lazyfs{}.log", self.mounts)))
            .is_ok_and(|t| t.contains(what))
    }

    fn is_mounted(&self) -> bool {
        Command::new("mountpoint")
            .arg("-q")
            .arg(&self.mount)
            .status()
            .is_ok_and(|s| s.success())
    }

    fn send(&self, command: &str) {
        let mut fifo = std::fs::OpenOptions::new()
            .write(true)
            .open(self.fifo())
            .unwrap();
        fifo.write_all(format!("{command}\n").as_bytes()).unwrap();
    }

    /// The power cut: every write not synced is gone from the files, at once.
    pub fn power_cut(&mut self) {
        self.send("lazyfs::clear-cache");
        let mut answer = String::new();
        let answers = self.answers.as_mut().expect("mounted");
        answers.read_line(&mut answer).unwrap();
        assert_eq!(
            answer.trim(),
            "finished::clear-cache",
            "LazyFS answered {answer:?}"
        );
    }

    /// Arms a power cut at an exact step: LazyFS dies, dropping what is not synced, at the
    /// next `op` (`fsync`, `write`, `rename`, `create`, `unlink`, `truncate`) on a path (under
    /// [`root`](Self::root)) that `regex` matches, `before` or after it is done. For a
    /// `rename`, `regex` names a temporary file (`NAME\.tmp`) and the fault waits for its
    /// rename to NAME: LazyFS fires a rename's fault at any rename unless it is given the
    /// target's pattern too.
    pub fn crash_at(&mut self, before: bool, op: &str, regex: &str) {
        if op == "rename" {
            let to = regex
                .strip_suffix(r"\.tmp")
                .unwrap_or_else(|| panic!("a rename's fault names a NAME\\.tmp: {regex}"));
            return self.crash_at_rename(before, regex, to);
        }
        let timing = if before { "before" } else { "after" };
        self.send(&format!(
            "lazyfs::crash::timing={timing}::op={op}::from_rgx={regex}"
        ));
        self.wait_armed(regex);
    }

    /// [`crash_at`](Self::crash_at) a rename of a path `from` matches to one `to` matches.
    pub fn crash_at_rename(&mut self, before: bool, from: &str, to: &str) {
        let timing = if before { "before" } else { "after" };
        self.send(&format!(
            "lazyfs::crash::timing={timing}::op=rename::from_rgx={from}::to_rgx={to}"
        ));
        self.wait_armed(from);
    }

    fn wait_armed(&self, regex: &str) {
        // Armed once LazyFS has read it (it says so in its log).
        let t0 = Instant::now();
        while !self.log_says(&format!("from regex path = {regex}")) {
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "LazyFS did not take the fault"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Writes everything in LazyFS's cache to the disk (`lazyfs::cache-checkpoint`), as a
    /// clean shutdown would, and waits until it has.
    pub fn checkpoint(&mut self) {
        let done = |fs: &Self| {
            std::fs::read_to_string(fs.dir.join(format!("lazyfs{}.log", fs.mounts)))
                .map_or(0, |t| t.matches("checkpoint is done").count())
        };
        let before = done(self);
        self.send("lazyfs::cache-checkpoint");
        let t0 = Instant::now();
        while done(self) == before {
            assert!(t0.elapsed() < Duration::from_secs(10), "no checkpoint");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Unmounts LazyFS, leaving [`root`](Self::root) as the disk holds it; [`remount`]
    /// (Self::remount) mounts it again.
    pub fn unmount(&mut self) {
        self.stop();
    }

    /// Waits up to `limit` for LazyFS to die of an armed fault; true if it did.
    pub fn wait_crashed(&mut self, limit: Duration) -> bool {
        let t0 = Instant::now();
        loop {
            if self.process.as_mut().unwrap().try_wait().unwrap().is_some() {
                return true;
            }
            if t0.elapsed() >= limit {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Mounts again on what is on the disk (after [`crash_at`](Self::crash_at) fired, or to
    /// drop the injections): what was synced, and nothing else.
    pub fn remount(&mut self, injections: &[Injection]) {
        self.stop();
        self.start(injections);
    }

    fn stop(&mut self) {
        // A lazy unmount: a dead mount (LazyFS crashed) cannot be unmounted otherwise.
        let _ = Command::new("fusermount3")
            .args(["-u", "-z"])
            .arg(&self.mount)
            .stderr(Stdio::null())
            .status();
        if let Some(mut p) = self.process.take() {
            let _ = p.kill();
            let _ = p.wait();
        }
    }
}

impl Drop for LazyFs {
    fn drop(&mut self) {
        self.stop();
        if self.tmpfs {
            let _ = Command::new("umount").arg(&self.root).status();
        }
    }
}

/// Debian's libfaketime, which the torn-write tests preload into the daemon to freeze its
/// wall clock: its session is then named before it exists, and LazyFS can be told which
/// file to tear. Under CI its absence is a failure (`.ci/run` installs `faketime`); elsewhere
/// `None`, said loudly.
pub fn frozen_clock_env(utc: &str) -> Option<Vec<(&'static str, String)>> {
    let lib = ["x86_64-linux-gnu", "aarch64-linux-gnu"]
        .iter()
        .map(|arch| PathBuf::from(format!("/usr/lib/{arch}/faketime/libfaketime.so.1")))
        .find(|p| p.exists());
    let Some(lib) = lib else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must tear the open split's writes: install faketime (`.ci/run` does)"
        );
        eprintln!("\n!!! SKIPPED a torn-write test: no libfaketime (Debian's faketime) !!!\n");
        return None;
    };
    Some(vec![
        ("LD_PRELOAD", lib.display().to_string()),
        // Frozen at this instant; the monotonic clock (timers, timeouts) runs as ever.
        ("FAKETIME", utc.to_string()),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_string()),
    ])
}

/// The seed of a test's random faults: `POWER_CUT_SEED` if set (a failure's replay), else a
/// new one; said on stderr, so that a failure shows it.
pub fn fault_seed(what: &str) -> u64 {
    let seed = std::env::var("POWER_CUT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    eprintln!("{what}: seed {seed} (POWER_CUT_SEED={seed} replays its schedule)");
    seed
}

/// Copies the directory `from` to `to` as it is (`cp -a`): a session kept aside, put back
/// before each cut.
pub fn copy_dir(from: &Path, to: &Path) {
    let ok = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap()
        .success();
    assert!(ok, "cp -a {} {}", from.display(), to.display());
}
