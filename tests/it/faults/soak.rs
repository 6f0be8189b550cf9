//! A soak: a dozen flights into one log directory on a small tmpfs, reached through LazyFS,
//! uploads on to a real Garage and a real Flight Review, and during each flight a fault
//! drawn from a printed seed: the daemon killed (SIGKILL), the power cut, Garage killed and
//! started again, the link gone (the vehicle vanishes mid-flight), the disk full for a
//! while (on the tmpfs itself: LazyFS hides a full disk, see [`Daemon::switch`]). Then
//! the faults stop and the daemon catches up. Afterwards every session is closed and
//! uploaded; every split of every session is in the bucket once, byte for byte, with the
//! session's final manifest, and nothing else is; each flight is on Flight Review once, or
//! at most twice when the daemon lost Flight Review's answer and says so.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value as Json;

use crate::common::flight_review::FlightReviewServer;
use crate::common::garage::{Garage, SECRET_KEY, credentials, free_tcp_port};
use crate::common::lazyfs::{LazyFs, fault_seed};
use crate::common::procs::{Proc, free_udp_port, run_ok, session_dirs, wait_for_line};
use crate::common::{sha256_file, venv_python};

const FLIGHTS: usize = 12;

/// The daemon of the soak, started again after each kill; its log directory reached
/// through LazyFS, or (for a full disk) directly.
struct Daemon {
    args: Vec<String>,
    through_lazyfs: PathBuf,
    direct: PathBuf,
    on_lazyfs: bool,
    proc: Option<Proc>,
    /// Its stderr's lines (kept, so that they are still shown).
    lines: Option<std::sync::mpsc::Receiver<String>>,
}

impl Daemon {
    fn start(&mut self) {
        let mut args = self.args.clone();
        let dir = if self.on_lazyfs {
            &self.through_lazyfs
        } else {
            &self.direct
        };
        args.extend(["--log-dir".into(), dir.display().to_string()]);
        let (proc, lines) = Proc::spawn_watched("the daemon", &args);
        // Its signals are handled from this line on: a SIGTERM before it would kill it.
        wait_for_line(&lines, "logs into", Duration::from_secs(20));
        self.proc = Some(proc);
        self.lines = Some(lines);
    }

    /// Stopped cleanly (SIGTERM: everything synced) and started again on the log directory
    /// through LazyFS or not. LazyFS accepts every write into its cache whatever the disk's
    /// room and drops silently what it cannot write at a sync, so a full disk is tried on
    /// the disk itself; a power cut needs LazyFS.
    fn switch(&mut self, fs: &mut LazyFs, on_lazyfs: bool) {
        if self.on_lazyfs == on_lazyfs {
            return;
        }
        let mut p = self.proc.take().expect("running");
        assert!(p.terminate().success(), "the daemon stops cleanly");
        if on_lazyfs {
            fs.remount(&[]);
        } else {
            fs.checkpoint();
            fs.unmount();
        }
        self.on_lazyfs = on_lazyfs;
        self.start();
    }

    fn kill(&mut self) {
        if let Some(mut p) = self.proc.take() {
            let _ = p.0.kill();
            let _ = p.0.wait();
        }
    }

    fn pid(&self) -> i32 {
        self.proc.as_ref().expect("running").0.id() as i32
    }
}

/// Fills the tmpfs under `root` up to all but a few KB (the daemon writing meanwhile, a
/// little less each try until it fits); the ballast's path.
fn fill_disk(root: &Path) -> PathBuf {
    let ballast = root.join("ballast");
    let path = std::ffi::CString::new(root.as_os_str().as_encoded_bytes()).unwrap();
    for margin in [16u64 << 10, 256 << 10, 1 << 20, 4 << 20] {
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::statvfs(path.as_ptr(), &mut st) }, 0);
        let free = st.f_bavail as u64 * st.f_frsize as u64;
        let ok = Command::new("fallocate")
            .args(["-l", &free.saturating_sub(margin).max(1).to_string()])
            .arg(&ballast)
            .status()
            .unwrap()
            .success();
        if ok {
            return ballast;
        }
        let _ = std::fs::remove_file(&ballast);
    }
    panic!("cannot fill {}", root.display());
}

#[test]
fn a_dozen_flights_through_kills_power_cuts_a_lost_server_link_and_disk_reach_the_bucket_once() {
    let seed = fault_seed("soak");
    let mut rng = fastrand::Rng::with_seed(seed);
    let Some(py) = venv_python() else {
        return;
    };
    let mut garage = match Garage::start(crate::common::procs::fresh_dir("soak-garage")) {
        Ok(g) => g,
        Err(e) => {
            assert!(std::env::var_os("CI").is_none(), "CI must run: {e}");
            eprintln!("\n!!! SKIPPED: {e} !!!\n");
            return;
        }
    };
    let Some(review) = FlightReviewServer::start("soak", free_tcp_port()) else {
        return;
    };
    let Some(mut fs) = LazyFs::mount_on_tmpfs("soak", "64M") else {
        return;
    };
    let creds = credentials(fs.mount.parent().unwrap(), SECRET_KEY);
    let logs = fs.mount.join("logs");
    let port = free_udp_port();
    let mut args: Vec<String> = vec![
        "--udp".into(),
        format!("127.0.0.1:{port}"),
        "--no-socket".into(),
        "--split-size".into(),
        "1M".into(),
        "--upload-when".into(),
        "always".into(),
        "--flight-review".into(),
        review.url(),
    ];
    args.extend(garage.upload_args("soak", &creds));
    let mut daemon = Daemon {
        args,
        through_lazyfs: logs.clone(),
        direct: fs.root.join("logs"),
        on_lazyfs: true,
        proc: None,
        lines: None,
    };
    daemon.start();
    let mut faults = BTreeMap::<&str, usize>::new();
    // Each kind of fault twice, in an order of the seed's.
    let mut schedule: Vec<u32> = (0..FLIGHTS as u32).map(|k| k % 6).collect();
    rng.shuffle(&mut schedule);
    for (flight, fault) in schedule.into_iter().enumerate() {
        let mut vehicle = Proc::spawn(
            "the simulator",
            &[
                "sim".into(),
                "--synthetic".into(),
                "--duration".into(),
                "90".into(),
                "--once".into(),
                "--link-rate".into(),
                "400000".into(),
                "--loss".into(),
                "0.02".into(),
                "--seed".into(),
                (seed.wrapping_add(flight as u64)).to_string(),
                "--udp-connect".into(),
                format!("127.0.0.1:{port}"),
            ],
        );
        daemon.switch(&mut fs, fault != 5);
        std::thread::sleep(Duration::from_millis(rng.u64(300..2500)));
        let fault = match fault {
            0 => "none",
            1 => {
                daemon.kill();
                std::thread::sleep(Duration::from_millis(rng.u64(100..800)));
                daemon.start();
                "kill -9"
            }
            2 => {
                let pid = daemon.pid();
                unsafe { libc::kill(pid, libc::SIGSTOP) };
                fs.power_cut();
                daemon.kill();
                daemon.start();
                "power cut"
            }
            3 => {
                garage.stop();
                std::thread::sleep(Duration::from_millis(rng.u64(1000..4000)));
                garage.run();
                "server gone"
            }
            4 => {
                let _ = vehicle.0.kill();
                "link gone"
            }
            _ => {
                let ballast = fill_disk(&fs.root);
                std::thread::sleep(Duration::from_millis(rng.u64(1000..3000)));
                std::fs::remove_file(ballast).unwrap();
                "disk full"
            }
        };
        *faults.entry(fault).or_default() += 1;
        eprintln!("soak: flight {flight}: {fault}");
        let _ = vehicle.wait(Duration::from_secs(60));
    }
    // No more faults: the daemon catches up, every session closed and uploaded.
    daemon.switch(&mut fs, true);
    let t0 = Instant::now();
    let pending = || {
        session_dirs(&logs)
            .into_iter()
            .filter(|s| !s.join("uploaded").exists())
            .collect::<Vec<_>>()
    };
    while !pending().is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(240),
            "seed {seed}: not uploaded 240 s after the last flight: {:?}",
            pending()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let pid = daemon.pid();
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let mut p = daemon.proc.take().unwrap();
    assert!(p.wait(Duration::from_secs(20)).success(), "seed {seed}");
    eprintln!("soak: seed {seed}, faults {faults:?}");

    let sessions = session_dirs(&logs);
    assert!(sessions.len() >= FLIGHTS / 2, "{sessions:?}");
    let found = garage.objects(&py, "soak/");
    let objects = found["objects"].as_object().unwrap();
    assert!(
        found["open_multipart"].as_array().unwrap().is_empty(),
        "{found}"
    );
    let descriptions = review.descriptions();
    let mut expected = 0;
    let mut reviewed = 0;
    for session in &sessions {
        let name = session.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            !name.ends_with(".unrecoverable"),
            "seed {seed}: {name} set aside"
        );
        let manifest = ulog_recv::store::files::read_manifest(session).unwrap();
        assert!(manifest.closed, "seed {seed}: {name} not closed");
        run_ok(&["info", &session.display().to_string(), "--json"]);
        let key = |file: &str| format!("soak/sys1/{name}/{file}");
        for split in manifest.all_splits() {
            let sha = sha256_file(&session.join(&split.file));
            assert_eq!(split.sha256.as_deref(), Some(sha.as_str()), "{name}");
            let object = &objects
                .get(&key(&split.file))
                .unwrap_or_else(|| panic!("seed {seed}: {name}/{} not in the bucket", split.file));
            assert_eq!(object["sha256"], Json::from(sha), "seed {seed}: {name}");
            expected += 1;
        }
        let local = sha256_file(&session.join("manifest.json"));
        assert_eq!(
            objects
                .get(&key("manifest.json"))
                .map(|o| o["sha256"].clone()),
            Some(Json::from(local)),
            "seed {seed}: {name}: the final manifest in the bucket"
        );
        expected += 1;
        // On Flight Review once, if its journal says it went there.
        let journal: Json =
            serde_json::from_slice(&std::fs::read(session.join("upload.json")).unwrap()).unwrap();
        let on_review = descriptions
            .iter()
            .filter(|d| d.contains(&format!("session {name},")))
            .count();
        let sent = journal["flight_review"]["url"].is_string();
        // Flight Review cannot be asked whether it holds a flight: one sent again after an
        // upload whose answer the daemon lost says it may be there twice.
        let maybe_twice = journal["flight_review"]["maybe_twice"] == Json::Bool(true);
        if maybe_twice {
            eprintln!("soak: {name} was sent again; on Flight Review {on_review} time(s)");
            assert!(
                (1..=2).contains(&on_review),
                "seed {seed}: {name} on Flight Review ({journal})"
            );
        } else {
            assert_eq!(
                on_review,
                usize::from(sent),
                "seed {seed}: {name} on Flight Review ({journal})"
            );
        }
        reviewed += on_review;
    }
    assert_eq!(
        objects.len(),
        expected,
        "seed {seed}: the bucket holds the sessions' files and nothing else: {found}"
    );
    assert_eq!(
        descriptions.len(),
        reviewed,
        "seed {seed}: Flight Review holds only these flights, each once: {descriptions:?}"
    );
    assert!(reviewed > 0, "seed {seed}: no flight went to Flight Review");
    eprintln!(
        "soak: {} sessions, {expected} objects in the bucket, {reviewed} on Flight Review",
        sessions.len()
    );
}
