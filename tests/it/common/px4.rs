//! PX4 itself, for the tests and benchmarks that run against it: its SITL build
//! (`../shared/vendor/px4-sitl`) started in a root directory of its own, and a UDP relay
//! between it and the daemon that can lose datagrams both ways and records what PX4 sent.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A PX4 SITL instance in a root directory of its own (it writes its parameters and logs
/// there); stopped with SIGTERM on drop.
///
/// The test runs alone while its PX4 runs ([`alone`](super::machine::alone)): PX4's SD log is
/// what the tests hold the daemon's log against, and a PX4 starved of the CPU drops from its
/// file and its stream at moments of its own (its file logger's buffer overflows, its
/// stream's rate limiter leaves samples out without a sign), so that the two no longer tell
/// the same flight. Beside three other PX4s and the rest of the suite on two cores, that
/// happened.
pub struct Px4 {
    rootfs: PathBuf,
    child: Child,
    /// Dropped after the child is stopped.
    _alone: super::machine::Alone,
    /// It sends to UDP 14550 on its own: no test listens there while it runs. Dropped after
    /// the child is stopped.
    _sending_to_14550: Option<std::sync::RwLockReadGuard<'static, ()>>,
}

impl Px4 {
    /// Starts instance `instance` (its MAVLink ports shifted by it) and waits until it is
    /// ready for takeoff.
    #[track_caller]
    pub fn start(name: &str, instance: u16) -> Option<Self> {
        let sitl = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/vendor/px4-sitl");
        if !sitl.join("bin/px4").is_file() {
            eprintln!("SKIPPED: no PX4 SITL at {}", sitl.display());
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must run the PX4 SITL tests"
            );
            return None;
        }
        let sitl = sitl.canonicalize().unwrap();
        let sending_to_14550 = super::machine::sending_to_14550();
        // The port first, then the machine (the order `machine` sets).
        let alone = super::machine::alone();
        let rootfs = super::procs::fresh_dir(&format!("px4-{name}"));
        let bin = rootfs.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        // PX4's command links (`px4-param` ...) are kept as files naming `px4`; they are
        // links to the binary again here.
        for entry in std::fs::read_dir(sitl.join("bin")).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_owned();
            let target = bin.join(&name);
            if std::fs::read(&path).is_ok_and(|b| b == b"px4") || name == "px4" {
                std::os::unix::fs::symlink(sitl.join("bin/px4"), &target).unwrap();
            } else {
                std::fs::copy(&path, &target).unwrap();
            }
        }
        std::os::unix::fs::symlink(sitl.join("etc"), rootfs.join("etc")).unwrap();
        let log = std::fs::File::create(rootfs.join("px4.log")).unwrap();
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let child = Command::new(bin.join("px4"))
            .args([
                "-i",
                &instance.to_string(),
                "-d",
                "-s",
                "etc/init.d-posix/rcS",
            ])
            .arg(&rootfs)
            .current_dir(&rootfs)
            .env("PATH", path)
            .env("PX4_SIM_MODEL", "sihsim_quadx")
            .env("PX4_SIMULATOR", "sihsim")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("PX4 starts");
        let px4 = Px4 {
            rootfs,
            child,
            _alone: alone,
            _sending_to_14550: sending_to_14550,
        };
        let t0 = Instant::now();
        while !std::fs::read_to_string(px4.rootfs.join("px4.log"))
            .unwrap_or_default()
            .contains("Ready for takeoff")
        {
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "PX4 not ready in 60 s: see {}",
                px4.rootfs.join("px4.log").display()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Some(px4)
    }

    /// The port PX4's onboard link sends to (the daemon listens there).
    pub fn onboard_port(instance: u16) -> u16 {
        14540 + instance
    }

    /// Stops PX4 and returns its file logs (`log/DATE/TIME.ulg`), in order.
    pub fn stop(mut self) -> Vec<PathBuf> {
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let t0 = Instant::now();
        while self.child.try_wait().unwrap().is_none() && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let mut logs = super::procs::ulg_files(&self.rootfs.join("log"));
        logs.sort();
        logs
    }
}

impl Drop for Px4 {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Which ways a [`relay`] has cut (nothing passes), as bits.
pub const CUT_DOWN: u8 = 1;
pub const CUT_UP: u8 = 2;

/// Relays UDP between PX4 (sending to `listen`) and the daemon (at `daemon`), losing `loss`
/// of the datagrams either way and all of them the ways `cut` says ([`CUT_DOWN`]: PX4 to the
/// daemon, [`CUT_UP`]: back), and writes every datagram PX4 sent to `capture` (each behind
/// its length, 4 bytes little-endian); until `stop`. Returns the datagrams it lost.
pub fn relay(
    listen: u16,
    daemon: u16,
    loss: f64,
    capture: PathBuf,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    cut: std::sync::Arc<std::sync::atomic::AtomicU8>,
) -> std::thread::JoinHandle<u64> {
    use std::io::Write;
    let outer = std::net::UdpSocket::bind(("127.0.0.1", listen)).unwrap();
    let inner = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    inner.connect(("127.0.0.1", daemon)).unwrap();
    outer.set_nonblocking(true).unwrap();
    inner.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let mut file = std::io::BufWriter::new(std::fs::File::create(capture).unwrap());
        let mut rng = fastrand::Rng::with_seed(5);
        let mut px4 = None;
        let mut dropped = 0u64;
        let mut buf = vec![0u8; 65536];
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let mut idle = true;
            while let Ok((n, from)) = outer.recv_from(&mut buf) {
                idle = false;
                px4 = Some(from);
                file.write_all(&(n as u32).to_le_bytes()).unwrap();
                file.write_all(&buf[..n]).unwrap();
                let down = cut.load(std::sync::atomic::Ordering::Relaxed) & CUT_DOWN == 0;
                if rng.f64() < loss || !down {
                    dropped += 1;
                } else {
                    let _ = inner.send(&buf[..n]);
                }
            }
            while let Ok(n) = inner.recv(&mut buf) {
                idle = false;
                let up = cut.load(std::sync::atomic::Ordering::Relaxed) & CUT_UP == 0;
                if let Some(to) = px4
                    && rng.f64() >= loss
                    && up
                {
                    let _ = outer.send_to(&buf[..n], to);
                }
            }
            if idle {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        file.flush().unwrap();
        dropped
    })
}

/// A relay between PX4 instance `instance` and a daemon on a free port: the daemon's port, the
/// capture's path, the stop flag and the relay.
pub struct Relay {
    pub daemon_port: u16,
    capture: PathBuf,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    cut: std::sync::Arc<std::sync::atomic::AtomicU8>,
    thread: std::thread::JoinHandle<u64>,
}

impl Relay {
    pub fn start(instance: u16, loss: f64, dir: &Path) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        let daemon_port = super::procs::free_udp_port();
        let capture = dir.join("px4.capture");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let cut = std::sync::Arc::new(std::sync::atomic::AtomicU8::new(0));
        let thread = relay(
            Px4::onboard_port(instance),
            daemon_port,
            loss,
            capture.clone(),
            stop.clone(),
            cut.clone(),
        );
        Relay {
            daemon_port,
            capture,
            stop,
            cut,
            thread,
        }
    }

    /// Cuts the ways `ways` says ([`CUT_DOWN`], [`CUT_UP`]), and restores the others.
    pub fn cut(&self, ways: u8) {
        self.cut.store(ways, std::sync::atomic::Ordering::Relaxed);
    }

    /// Stops relaying; the datagrams lost, and the capture of what PX4 sent.
    pub fn halt(self) -> (u64, PathBuf) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        (self.thread.join().unwrap(), self.capture)
    }

    /// Stops relaying; the datagrams lost, and the stream PX4 sent as a .ulg (rebuilt by
    /// pymavlink from the capture).
    pub fn finish(self, py: &Path) -> (u64, PathBuf) {
        let (dropped, capture) = self.halt();
        let sent = capture.with_extension("sent.ulg");
        let out = Command::new(py)
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/px4_sent.py"))
            .arg(&capture)
            .arg(&sent)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "px4_sent.py: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!("PX4 sent: {}", String::from_utf8_lossy(&out.stdout).trim());
        (dropped, sent)
    }
}
