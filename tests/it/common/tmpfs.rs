//! A real small disk to fill: a tmpfs mounted by the test (it needs root; under CI its
//! absence is a failure, elsewhere the test says loudly that it skipped).

use std::path::PathBuf;

/// A tmpfs mounted at a fresh directory, unmounted on drop.
pub struct Tmpfs(pub PathBuf);

impl Tmpfs {
    /// A tmpfs of `size` (`mount`'s syntax: `1M`) at the calling test's fresh directory
    /// `name` ([`fresh_dir`](super::procs::fresh_dir)), or `None` (said loudly) where it
    /// cannot be mounted outside CI.
    #[track_caller]
    pub fn mount(name: &str, size: &str) -> Option<Self> {
        let dir = super::procs::fresh_dir(name);
        std::fs::create_dir_all(&dir).unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return Some(Self(dir));
        }
        if std::env::var_os("CI").is_some() {
            panic!("cannot mount a tmpfs (not root?): CI must test a full disk");
        }
        eprintln!("\n!!! SKIPPED a full-disk test: cannot mount a tmpfs (run as root) !!!\n");
        None
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
