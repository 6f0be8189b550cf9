//! ArduPilot itself, for the tests that run against it: its SITL build
//! (`../shared/vendor/ardupilot-sitl`, ArduCopter with its own `AP_Logger`: the card's
//! `.BIN` and the MAVLink stream side by side) started in a directory of its own, and a UDP
//! relay between it and the daemon that loses, reorders and cuts datagrams and counts the
//! log blocks the vehicle sends.

use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// An ArduCopter SITL in a directory of its own (it writes `eeprom.bin` and `logs/` there),
/// streaming its log to UDP `stream_port` (its SERIAL1, MAVLink 2); stopped with SIGTERM on
/// drop. The test runs alone while it runs (as a PX4's does: a vehicle starved of the CPU
/// drops at moments of its own).
pub struct ArduPilot {
    /// The UDP port its SERIAL0 (a ground station's) sends to.
    pub gcs: u16,
    dir: PathBuf,
    child: Child,
    _alone: super::machine::Alone,
}

impl ArduPilot {
    /// Starts instance `instance` (its own ports shifted by 10 per instance), its ground
    /// station port on a port nobody listens on, its SERIAL1 sending to `stream_port`.
    #[track_caller]
    pub fn start(name: &str, instance: u16, stream_port: u16) -> Option<Self> {
        Self::start_with(name, instance, stream_port, &[])
    }

    /// [`start`](Self::start) with `params` (name, value) over the defaults (each read at
    /// boot: `LOG_MAV_BUFSIZE` among them).
    #[track_caller]
    pub fn start_with(
        name: &str,
        instance: u16,
        stream_port: u16,
        params: &[(&str, &str)],
    ) -> Option<Self> {
        let sitl = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/vendor/ardupilot-sitl");
        if !sitl.join("bin/arducopter").is_file() {
            eprintln!("SKIPPED: no ArduPilot SITL at {}", sitl.display());
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must run the ArduPilot SITL tests"
            );
            return None;
        }
        let sitl = sitl.canonicalize().unwrap();
        let alone = super::machine::alone();
        let dir = super::procs::fresh_dir(&format!("ardupilot-{name}"));
        std::fs::create_dir_all(&dir).unwrap();
        let log = std::fs::File::create(dir.join("sitl.log")).unwrap();
        let gcs = super::procs::free_udp_port();
        let mut defaults = format!(
            "{0}/params/copter.parm,{0}/params/log-stream.parm",
            sitl.display()
        );
        if !params.is_empty() {
            let own = dir.join("test.parm");
            let lines: String = params.iter().map(|(k, v)| format!("{k} {v}\n")).collect();
            std::fs::write(&own, lines).unwrap();
            defaults.push_str(&format!(",{}", own.display()));
        }
        let child = Command::new(sitl.join("bin/arducopter"))
            .args([
                "--model",
                "+",
                "--speedup",
                "1",
                "-I",
                &instance.to_string(),
            ])
            .args(["--defaults", &defaults])
            .args(["--serial0", &format!("udpclient:127.0.0.1:{gcs}")])
            .args(["--serial1", &format!("udpclient:127.0.0.1:{stream_port}")])
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("the ArduPilot SITL starts");
        Some(ArduPilot {
            gcs,
            dir,
            child,
            _alone: alone,
        })
    }

    /// Flies it from its ground station port (`tests/ardupilot_fly.py`): ready, GUIDED,
    /// armed, up to `alt_m`, `hover_s` of hover, LAND, disarmed. The flight's stages come as
    /// lines (`armed`, `airborne`, `hovering`, `landing`, `landed`) from [`Flight::stage`].
    pub fn fly(&self, py: &Path, alt_m: u32, hover_s: u32) -> Flight {
        self.fly_into(py, alt_m, hover_s, None)
    }

    /// [`fly`](Self::fly), the hover ending in `fault` (`rc`: the radio fails, and the
    /// vehicle's failsafe brings it down) instead of a LAND.
    pub fn fly_into(&self, py: &Path, alt_m: u32, hover_s: u32, fault: Option<&str>) -> Flight {
        let mut child = Command::new(py)
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ardupilot_fly.py"))
            .args([self.gcs.to_string(), alt_m.to_string(), hover_s.to_string()])
            .args(fault)
            .stdout(Stdio::piped())
            .spawn()
            .expect("the flight script starts");
        let stages = super::procs::watch_lines(child.stdout.take().unwrap(), "flight: ");
        Flight {
            script: super::procs::Proc(child, "the flight"),
            stages,
        }
    }

    /// Its card's log directory (`logs/`, what its FTP server lists as `/logs`).
    pub fn card_dir(&self) -> PathBuf {
        self.dir.join("logs")
    }

    /// Stops the SITL and returns its card log (`logs/00000001.BIN`).
    pub fn stop(mut self) -> PathBuf {
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let t0 = Instant::now();
        while self.child.try_wait().unwrap().is_none() && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let card = self.dir.join("logs/00000001.BIN");
        assert!(card.is_file(), "no card log in {}", self.dir.display());
        card
    }
}

impl Drop for ArduPilot {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A flight under way (see [`ArduPilot::fly`]).
pub struct Flight {
    script: super::procs::Proc,
    stages: std::sync::mpsc::Receiver<String>,
}

impl Flight {
    /// Waits until the flight reaches `stage` (within `limit`); fails if the script fails.
    #[track_caller]
    pub fn stage(&mut self, stage: &str, limit: Duration) {
        let t0 = Instant::now();
        loop {
            match self.stages.recv_timeout(Duration::from_millis(200)) {
                Ok(line) if line == stage => return,
                Ok(_) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    let status = self.script.wait(Duration::from_secs(5));
                    panic!("the flight ended ({status}) before {stage:?}")
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            }
            assert!(t0.elapsed() < limit, "no {stage:?} within {limit:?}");
        }
    }
}

/// How a [`Relay`] treats datagrams.
#[derive(Debug, Clone, Copy, Default)]
pub struct Impairment {
    /// Share lost from the vehicle to the daemon.
    pub loss_down: f64,
    /// Share lost from the daemon to the vehicle (its acks, NACKs, heartbeats).
    pub loss_up: f64,
    /// Share of the vehicle's datagrams held back and sent after the next one.
    pub reorder: f64,
}

/// What passes the relay, counted.
#[derive(Debug, Default)]
pub struct Counts {
    /// Log blocks (REMOTE_LOG_DATA_BLOCK) the vehicle sent.
    pub blocks: AtomicU64,
    /// One past the highest seqno sent: of one stream, the blocks sent once.
    pub top_seqno: AtomicU64,
    pub dropped: AtomicU64,
    pub reordered: AtomicU64,
}

/// Relays UDP between the vehicle (sending to `listen`) and the daemon (on `daemon_port`).
pub struct Relay {
    pub listen: u16,
    pub daemon_port: u16,
    pub counts: Arc<Counts>,
    cut: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// The seqnos of the log blocks (REMOTE_LOG_DATA_BLOCK) in a datagram, read by the
/// project's own MAVLink framer.
fn block_seqnos(datagram: &[u8]) -> Vec<u32> {
    use ulog_recv::link::frames::{FrameDecoder, Received};
    let mut frames = FrameDecoder::new();
    frames.push(datagram);
    std::iter::from_fn(|| frames.next_frame())
        .filter_map(|f| match f.message {
            Received::LogBlock(b) => Some(b.seqno),
            Received::Mav(_) => None,
        })
        .collect()
}

impl Relay {
    pub fn start(impairment: Impairment) -> Self {
        let outer = UdpSocket::bind("127.0.0.1:0").unwrap();
        let listen = outer.local_addr().unwrap().port();
        let daemon_port = super::procs::free_udp_port();
        let inner = UdpSocket::bind("127.0.0.1:0").unwrap();
        inner.connect(("127.0.0.1", daemon_port)).unwrap();
        outer.set_nonblocking(true).unwrap();
        inner.set_nonblocking(true).unwrap();
        let counts = Arc::new(Counts::default());
        let cut = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let (c, cut2, stop2) = (counts.clone(), cut.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut rng = fastrand::Rng::with_seed(77);
            let mut vehicle = None;
            let mut held: Option<Vec<u8>> = None;
            let mut buf = vec![0u8; 65536];
            while !stop2.load(Ordering::Relaxed) {
                let mut idle = true;
                while let Ok((n, from)) = outer.recv_from(&mut buf) {
                    idle = false;
                    vehicle = Some(from);
                    let d = &buf[..n];
                    let seqnos = block_seqnos(d);
                    c.blocks.fetch_add(seqnos.len() as u64, Ordering::Relaxed);
                    if let Some(&top) = seqnos.iter().max() {
                        c.top_seqno.fetch_max(u64::from(top) + 1, Ordering::Relaxed);
                    }
                    if cut2.load(Ordering::Relaxed) || rng.f64() < impairment.loss_down {
                        c.dropped.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    if held.is_none() && rng.f64() < impairment.reorder {
                        c.reordered.fetch_add(1, Ordering::Relaxed);
                        held = Some(d.to_vec());
                        continue;
                    }
                    let _ = inner.send(d);
                    if let Some(h) = held.take() {
                        let _ = inner.send(&h);
                    }
                }
                while let Ok(n) = inner.recv(&mut buf) {
                    idle = false;
                    if cut2.load(Ordering::Relaxed) || rng.f64() < impairment.loss_up {
                        continue;
                    }
                    if let Some(to) = vehicle {
                        let _ = outer.send_to(&buf[..n], to);
                    }
                }
                if idle {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        });
        Relay {
            listen,
            daemon_port,
            counts,
            cut,
            stop,
            thread: Some(thread),
        }
    }

    /// Cuts the link both ways (`true`: nothing passes) or restores it.
    pub fn cut(&self, cut: bool) {
        self.cut.store(cut, Ordering::Relaxed);
    }

    /// Log blocks the vehicle sent so far.
    pub fn blocks(&self) -> u64 {
        self.counts.blocks.load(Ordering::Relaxed)
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// ArduPilot's own logs (`../shared/testdata/bin/*.bin`, written by ArduCopter's logger),
/// or None (said loudly; CI fails).
pub fn ardupilot_logs() -> Option<Vec<PathBuf>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/testdata/bin");
    let logs = super::procs::files_with_extension(&dir, "bin");
    if logs.is_empty() {
        assert!(
            std::env::var_os("CI").is_none(),
            "{} holds no .bin: CI must run the ArduPilot log tests",
            dir.display()
        );
        eprintln!(
            "\n!!! SKIPPED: no ArduPilot logs at {} !!!\n",
            dir.display()
        );
        return None;
    }
    Some(logs)
}

/// `tests/dataflash_compare.py` on the card log and the received splits: its report.
pub fn compare(py: &Path, card: &Path, splits: &[PathBuf]) -> serde_json::Value {
    report_of(py, "dataflash_compare.py", card, splits)
}

/// [`compare`] with one window over the whole flight (`--filled`): what a flight filled from
/// the card is held to.
pub fn compare_filled(py: &Path, card: &Path, splits: &[PathBuf]) -> serde_json::Value {
    let mut args = splits.to_vec();
    args.push(PathBuf::from("--filled"));
    report_of(py, "dataflash_compare.py", card, &args)
}

/// `tests/dataflash_live.py` on the live socket's lines (`tail --json`) and the received
/// splits: its report.
pub fn compare_live(py: &Path, lines: &Path, splits: &[PathBuf]) -> serde_json::Value {
    report_of(py, "dataflash_live.py", lines, splits)
}

/// `tests/dataflash_vehicle_said.py` on one flight's files: what pymavlink reads of the
/// vehicle's own records, arming and RC failsafe.
pub fn vehicle_said(py: &Path, files: &[PathBuf]) -> serde_json::Value {
    report_of(py, "dataflash_vehicle_said.py", &files[0], &files[1..])
}

/// What the web page's first look of `files` should plot, as pymavlink reads them
/// (`tests/dataflash_signals.py`): each signal's samples, smallest and largest value.
pub fn signals_said(py: &Path, files: &[PathBuf]) -> serde_json::Value {
    report_of(py, "dataflash_signals.py", &files[0], &files[1..])
}

/// `ulog-recv sim LOG` (4 times faster than flown, through `impairments`) into a daemon
/// until the simulator has sent the whole log; the daemon's splits, and the simulator's
/// counters.
pub fn replay(log: &Path, name: &str, impairments: &[&str]) -> (Vec<PathBuf>, serde_json::Value) {
    let (splits, counters, _) = replay_with(log, name, impairments, &[]);
    (splits, counters)
}

/// [`replay`] into a daemon given `daemon_extra` too; with what it logged (its stderr's
/// lines).
pub fn replay_with(
    log: &Path,
    name: &str,
    impairments: &[&str],
    daemon_extra: &[&str],
) -> (Vec<PathBuf>, serde_json::Value, Vec<String>) {
    let dir = super::procs::fresh_dir(name);
    let port = super::procs::free_udp_port();
    let mut args = vec![
        "--udp".into(),
        format!("127.0.0.1:{port}"),
        "--log-dir".into(),
        dir.display().to_string(),
        "--split-duration".into(),
        "20".into(),
        "--no-socket".into(),
    ];
    args.extend(daemon_extra.iter().map(|a| a.to_string()));
    let (mut daemon, lines) = super::procs::Proc::spawn_watched("the daemon", &args);
    let mut sim = std::process::Command::new(super::procs::BIN);
    sim.arg("sim")
        .arg(log)
        .args(["--udp-connect", &format!("127.0.0.1:{port}")])
        .args(["--speed", "4", "--link-rate", "400000", "--once"])
        .args(impairments);
    let counters = super::json_output(&mut sim);
    assert!(daemon.terminate().success());
    let sessions = super::procs::session_dirs(&dir);
    assert_eq!(sessions.len(), 1, "one flight: {sessions:?}");
    (
        super::procs::files_with_extension(&sessions[0], "bin"),
        counters,
        lines.try_iter().collect(),
    )
}

/// `tests/SCRIPT FIRST SPLITS...`: the JSON object it prints.
fn report_of(py: &Path, script: &str, first: &Path, splits: &[PathBuf]) -> serde_json::Value {
    let out = Command::new(py)
        .arg(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests")
                .join(script),
        )
        .arg(first)
        .args(splits)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// An ArduPilot session in `logs`, closed: ArduPilot's own hover log
/// (`../shared/testdata/bin/sitl_copter_hover.bin`) written through the store in 20 s splits,
/// as the daemon writes a stream. `None` (said loudly; CI fails) without the log.
pub fn write_bin_session(logs: &Path) -> Option<PathBuf> {
    use ulog_recv::store::{LogStore, SplitPolicy, StoreOptions};
    let log = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/testdata/bin/sitl_copter_hover.bin");
    let Ok(bytes) = std::fs::read(&log) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "{} missing: CI must run the ArduPilot session checks",
            log.display()
        );
        eprintln!("\n!!! SKIPPED: no {} !!!\n", log.display());
        return None;
    };
    let mut options = StoreOptions::new(logs.to_path_buf());
    options.policy = SplitPolicy {
        max_duration_us: Some(20_000_000),
        ..SplitPolicy::unlimited()
    };
    let mut store = LogStore::open(options).unwrap();
    let started = std::time::SystemTime::now() - Duration::from_secs(3600);
    store
        .begin_log((1, 1), started, ulog_recv::autopilot::LogFormat::DataFlash)
        .unwrap();
    for piece in bytes.chunks(4000) {
        store.write(piece).unwrap();
    }
    Some(store.end_log().unwrap().expect("a session"))
}
