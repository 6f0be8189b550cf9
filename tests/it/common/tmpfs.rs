//! A real small disk to fill: a tmpfs mounted by the test (it needs root; under CI its
//! absence is a failure, elsewhere the test says loudly that it skipped), and another
//! program's file that takes its room.

use std::path::{Path, PathBuf};

/// A tmpfs mounted at a fresh directory, unmounted on drop.
pub struct Tmpfs(pub PathBuf);

impl Tmpfs {
    /// A tmpfs of `size` (`mount`'s syntax: `1M`) at the calling test's fresh directory
    /// `name` ([`fresh_dir`](super::procs::fresh_dir)), or `None` (said loudly) where it
    /// cannot be mounted outside CI.
    #[track_caller]
    pub fn mount(name: &str, size: &str) -> Option<Self> {
        Self::mount_at(&super::procs::fresh_dir(name), size)
    }

    /// The same at `dir` (made if missing).
    #[track_caller]
    pub fn mount_at(dir: &Path, size: &str) -> Option<Self> {
        std::fs::create_dir_all(dir).unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return Some(Self(dir.to_path_buf()));
        }
        if std::env::var_os("CI").is_some() {
            panic!("cannot mount a tmpfs (not root?): CI must test a full disk");
        }
        eprintln!("\n!!! SKIPPED a full-disk test: cannot mount a tmpfs (run as root) !!!\n");
        None
    }

    /// Another program's file, `name` in the tmpfs, takes all its room but `leave` bytes
    /// (allocated, not written); removing it gives the room back.
    ///
    /// Another program allocates it (util-linux's `fallocate`), so that the test process
    /// never holds it open: a child another test spawns meanwhile gets a copy of every open
    /// file until it `exec`s, and on a loaded machine that can take seconds, during which
    /// a file removed would keep its room.
    pub fn take_room(&self, name: &str, leave: u64) -> PathBuf {
        let path = self.0.join(name);
        let free = ulog_recv::sys::os::free_bytes(&self.0).expect("the tmpfs's free space");
        let len = free.saturating_sub(leave);
        if len > 0 {
            let at = std::fs::metadata(&path).map_or(0, |m| m.len());
            let status = std::process::Command::new("fallocate")
                .args(["--offset", &at.to_string(), "--length", &len.to_string()])
                .arg(&path)
                .status()
                .expect("util-linux's fallocate runs");
            assert!(status.success(), "the tmpfs takes the other program's file");
        } else {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .expect("the other program's file");
        }
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let umount = |lazy: bool| {
            let mut command = std::process::Command::new("umount");
            if lazy {
                // Something still holds a file in it (a child another test spawned, that
                // has not yet `exec`ed): detached now, gone once that file is closed.
                command.arg("--lazy");
            }
            command
                .arg(&self.0)
                .stderr(std::process::Stdio::null())
                .status()
        };
        if !umount(false).is_ok_and(|s| s.success()) {
            let _ = umount(true);
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
