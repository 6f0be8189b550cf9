//! The MAVLink FTP client against the simulated vehicle's server, frame by frame in memory on
//! a fake clock: listing, whole-file burst reads and small reads byte for byte, the checksum,
//! lost frames both ways, a session left open, a missing file, a vehicle without an SD card.
//! (pymavlink's own client against the simulator, over UDP, is in `tests/ftp_pymavlink.rs`.)

use crate::common;

use std::time::{Duration, Instant};

use ulog_recv::link::ftp::wire::crc32_part;
use ulog_recv::link::ftp::{FtpConfig, FtpError, FtpOp, FtpReply, Nak};
use ulog_recv::link::{Event, Session, SessionConfig};
use ulog_recv::sim::{Impairment, SimVehicle, VehicleConfig, chunk_log};

struct Harness {
    vehicle: SimVehicle,
    session: Session,
    now: Instant,
    t0: Instant,
}

impl Harness {
    fn new(vehicle: VehicleConfig) -> Self {
        let file = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/testdata/synthetic.ulg"
        ))
        .unwrap();
        let now = Instant::now();
        let session = SessionConfig {
            stream: false,
            ..SessionConfig::default()
        };
        let mut h = Self {
            vehicle: SimVehicle::new(
                chunk_log(&file, 0).unwrap(),
                vehicle,
                now,
                std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_000_000),
            ),
            session: Session::new(session, now),
            now,
            t0: now,
        };
        h.until(|h| h.session.vehicle().is_some());
        h
    }

    fn step(&mut self) -> Option<Result<FtpReply, FtpError>> {
        loop {
            let mut moved = false;
            while let Some(f) = self.vehicle.poll_transmit() {
                self.session.handle_bytes(&f, self.now);
                moved = true;
            }
            while let Some(f) = self.session.poll_transmit() {
                self.vehicle.handle_bytes(&f, self.now);
                moved = true;
            }
            while let Some(e) = self.session.poll_event() {
                if let Event::Ftp(result) = e {
                    return Some(result);
                }
            }
            if !moved {
                break;
            }
        }
        let next = [self.vehicle.poll_timeout(), self.session.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
            .unwrap();
        self.now = self.now.max(next);
        self.vehicle.handle_timeout(self.now);
        self.session.handle_timeout(self.now);
        None
    }

    fn until(&mut self, done: impl Fn(&Self) -> bool) {
        while !done(self) {
            assert!(self.now - self.t0 < Duration::from_secs(600), "no progress");
            self.step();
        }
    }

    fn run(&mut self, op: FtpOp) -> Result<FtpReply, FtpError> {
        self.session.ftp_start(op, self.now).unwrap();
        loop {
            assert!(self.now - self.t0 < Duration::from_secs(3600), "no result");
            if let Some(r) = self.step() {
                return r;
            }
        }
    }

    fn sd(&self) -> (String, Vec<u8>) {
        let (path, bytes) = self.vehicle.sd_log().unwrap();
        (path.to_string(), bytes.to_vec())
    }
}

fn lossy(loss: f64, seed: u64) -> VehicleConfig {
    VehicleConfig {
        link_rate: Some(90_000),
        impairment: Impairment {
            loss,
            uplink_loss: loss,
            ..Impairment::NONE
        },
        seed,
        ..VehicleConfig::default()
    }
}

#[test]
fn the_sd_log_is_listed_read_whole_and_in_pieces_through_ten_percent_loss() {
    for seed in 1..=3 {
        let mut h = Harness::new(lossy(0.10, seed));
        let (path, sd) = h.sd();
        // The log directory under PX4's virtual name, then the day's directory.
        let Ok(FtpReply::Listed(days)) = h.run(FtpOp::List {
            path: "@MAV_LOG".into(),
        }) else {
            panic!("listing @MAV_LOG")
        };
        let day = path.rsplit('/').nth(1).unwrap();
        assert_eq!(days.len(), 1);
        assert_eq!(days[0].name, day);
        assert_eq!(days[0].size, None);
        let Ok(FtpReply::Listed(files)) = h.run(FtpOp::List {
            path: format!("@MAV_LOG/{day}"),
        }) else {
            panic!("listing the day")
        };
        assert_eq!(files.len(), 1);
        assert_eq!(files[0].size, Some(sd.len() as u64));
        assert_eq!(
            h.run(FtpOp::Open { path: path.clone() }),
            Ok(FtpReply::Opened {
                size: sd.len() as u64
            })
        );
        // Whole (bursts of ~35 KB, asked again from where each stopped), then a few ranges
        // (single reads and bursts), the last one past the end of the file.
        let whole = h.run(FtpOp::Read {
            offset: 0,
            len: u64::MAX / 2,
        });
        assert_eq!(
            whole,
            Ok(FtpReply::Read {
                offset: 0,
                data: sd.clone()
            }),
            "seed {seed}"
        );
        let n = sd.len() as u64;
        for (offset, len) in [(0, 16), (1000, 300), (5000, 60_000), (n - 100, 1000)] {
            let Ok(FtpReply::Read { data, .. }) = h.run(FtpOp::Read { offset, len }) else {
                panic!("read at {offset}")
            };
            let end = (offset + len).min(n) as usize;
            assert!(
                data == sd[offset as usize..end],
                "{offset}+{len}, seed {seed}"
            );
        }
        assert_eq!(
            h.run(FtpOp::Crc32 { path: path.clone() }),
            Ok(FtpReply::Crc32(crc32_part(0, &sd)))
        );
        assert_eq!(h.run(FtpOp::Close), Ok(FtpReply::Closed));
        let stats = h.session.ftp_stats();
        assert!(stats.resends > 0, "10 % loss and no resend: {stats:?}");
    }
}

#[test]
fn a_session_left_open_is_reset_and_a_missing_file_is_a_clear_error() {
    let mut h = Harness::new(lossy(0.0, 1));
    let (path, sd) = h.sd();
    assert!(matches!(
        h.run(FtpOp::Open { path: path.clone() }),
        Ok(FtpReply::Opened { .. })
    ));
    // A second client (ours after a crash) finds the one session taken: reset, then open.
    let mut h2 = Harness {
        session: Session::new(
            SessionConfig {
                stream: false,
                ..SessionConfig::default()
            },
            h.now,
        ),
        ..h
    };
    h2.until(|h| h.session.vehicle().is_some());
    assert_eq!(
        h2.run(FtpOp::Open { path: path.clone() }),
        Ok(FtpReply::Opened {
            size: sd.len() as u64
        })
    );
    // Another file while one is open: ours is closed first (never a reset of our own).
    assert_eq!(
        h2.run(FtpOp::Open {
            path: "/fs/microsd/log/none.ulg".into()
        }),
        Err(FtpError::Refused {
            request: "OpenFileRO",
            nak: Nak::FileNotFound
        })
    );
    assert_eq!(
        h2.session
            .ftp_start(FtpOp::Read { offset: 0, len: 10 }, h2.now),
        Err(FtpError::NotOpen)
    );
}

#[test]
fn a_vehicle_without_an_sd_card_says_so_and_a_silent_one_times_out() {
    let mut h = Harness::new(VehicleConfig {
        sd_log: false,
        ..lossy(0.0, 1)
    });
    assert_eq!(
        h.run(FtpOp::List {
            path: "@MAV_LOG".into()
        }),
        Err(FtpError::Refused {
            request: "ListDirectory",
            nak: Nak::FileNotFound
        })
    );
    let mut h = Harness::new(lossy(0.0, 1));
    let (path, _) = h.sd();
    h.vehicle = SimVehicle::new(
        chunk_log(&h.sd().1, 0).unwrap(),
        VehicleConfig {
            impairment: Impairment {
                uplink_loss: 1.0,
                ..Impairment::NONE
            },
            ..lossy(0.0, 1)
        },
        h.now,
        std::time::SystemTime::now(),
    );
    assert_eq!(
        h.run(FtpOp::Crc32 { path }),
        Err(FtpError::Timeout {
            request: "CalcFileCRC32",
            tries: FtpConfig::default().max_tries
        })
    );
}

/// Runs `ulog-recv fetch ARGS --udp PORT`; its stdout.
fn fetch(port: u16, args: &[&str]) -> String {
    let out = std::process::Command::new(common::procs::BIN)
        .arg("fetch")
        .args(args)
        .args(["--udp", &port.to_string()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "fetch {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn pymavlink_reads_the_simulators_log_as_our_fetch_does_and_a_cut_download_resumes() {
    let Some(py) = common::venv_python() else {
        return;
    };
    let dir = common::procs::fresh_dir("ftp-pymavlink");
    std::fs::create_dir_all(&dir).unwrap();
    let port = common::procs::free_udp_port();
    let sim = |loss: &str| {
        common::procs::Proc::spawn(
            "the simulator",
            &[
                "sim".into(),
                concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/synthetic.ulg").into(),
                "--udp-connect".into(),
                format!("127.0.0.1:{port}"),
                "--loss".into(),
                loss.into(),
                "--uplink-loss".into(),
                loss.into(),
            ],
        )
    };
    // pymavlink's client neither resends a lost request nor asks again for a lost listing
    // reply: a clean link for it.
    let mut clean = sim("0");
    // pymavlink's own client: list, download, checksum.
    let theirs = dir.join("pymavlink.ulg");
    let out = std::process::Command::new(&py)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/ftp_pymavlink.py"
        ))
        .arg(port.to_string())
        .arg(&theirs)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ftp_pymavlink.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let theirs = std::fs::read(&theirs).unwrap();
    assert_eq!(report["size"], theirs.len() as u64);
    assert_eq!(report["crc32"], crc32_part(0, &theirs) as u64);
    // Ours, through 10 % loss both ways: the same listing, the same bytes; a download cut
    // short goes on from its part.
    clean.terminate();
    let _lossy = sim("0.1");
    let listing = fetch(port, &["--list"]);
    let (path, size) = listing.trim().split_once('\t').unwrap();
    // (The second simulator's card has its log under its own start time.)
    assert!(
        path.starts_with("@MAV_LOG/") && path.ends_with(".ulg"),
        "{path}"
    );
    assert_eq!(size, theirs.len().to_string());
    let ours = dir.join("ours.ulg");
    std::fs::write(dir.join("ours.ulg.part"), &theirs[..10_000]).unwrap();
    let said = fetch(port, &[path, "-o", ours.to_str().unwrap()]);
    assert!(
        said.contains(&format!("{} bytes fetched", theirs.len() - 10_000)),
        "{said}"
    );
    assert!(std::fs::read(&ours).unwrap() == theirs, "the bytes differ");
    assert!(!dir.join("ours.ulg.part").exists());
    common::check_with_pyulog(&ours);
}

#[test]
fn with_a_signing_key_fetch_signs_its_requests_and_without_one_the_vehicle_ignores_them() {
    use std::os::unix::fs::PermissionsExt;
    let dir = common::procs::fresh_dir("ftp-signed");
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("key");
    std::fs::write(
        &key,
        "9e33c5e7d9b6c3a1f0e2d4c6b8a0f1e3d5c7b9a1f3e5d7c9b1a3f5e7d9c1b3a5\n",
    )
    .unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let port = common::procs::free_udp_port();
    let _sim = common::procs::Proc::spawn(
        "the simulator",
        &[
            "sim".into(),
            concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/synthetic.ulg").into(),
            "--udp-connect".into(),
            format!("127.0.0.1:{port}"),
            "--signing-key".into(),
            key.display().to_string(),
        ],
    );
    let listing = fetch(port, &["--list", "--signing-key", key.to_str().unwrap()]);
    assert!(listing.starts_with("@MAV_LOG/"), "{listing}");
    // Unsigned: the vehicle's heartbeats arrive, our requests are dropped.
    let out = std::process::Command::new(common::procs::BIN)
        .args(["fetch", "--list", "--udp", &port.to_string()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let error = String::from_utf8_lossy(&out.stderr);
    assert!(error.contains("no answer from the vehicle"), "{error}");
}
