//! The daemon as a systemd service: its units pass `systemd-analyze verify`; it tells a
//! (fake) systemd READY, STATUS and WATCHDOG in order, stops the pings when its main loop is
//! stuck, and says STOPPING; SIGTERM during a stream sends STOP to the vehicle and leaves whole
//! files within 2 s; the config file sets every option, the command line wins, and errors
//! name the key.

use crate::common;
use crate::common::project;

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::procs::{BIN, free_udp_port, fresh_dir, ulg_files};

/// `ulog-recv sim` streaming a synthetic flight of `seconds` at `rate` B/s to our UDP `port`;
/// its counters come as JSON on `stdout` when it exits.
fn synthetic_sim(port: u16, seconds: u32, rate: u32, extra: &[&str], stdout: Stdio) -> Child {
    Command::new(BIN)
        .args(["sim", "--synthetic", "--duration", &seconds.to_string()])
        // The log streams at 70 % of the link's rate.
        .args(["--link-rate", &(rate * 10 / 7).to_string()])
        .args(["--udp-connect", &format!("127.0.0.1:{port}")])
        .args(extra)
        .stdout(stdout)
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
fn units_pass_systemd_analyze_verify() {
    let Some(analyze) = common::units::systemd_analyze() else {
        return;
    };
    let dir = fresh_dir("units");
    std::fs::create_dir_all(&dir).unwrap();
    for (unit, name) in [
        ("ulog-recv.service", "ulog-recv.service"),
        ("ulog-recv@.service", "ulog-recv@.service"),
        ("ulog-recv@.service", "ulog-recv@drone1.service"),
    ] {
        let text = std::fs::read_to_string(project().join("systemd").join(unit)).unwrap();
        common::units::check_unit(
            &analyze,
            &dir,
            name,
            &text,
            "/usr/bin/ulog-recv",
            Path::new(BIN),
        );
    }
    // The example config is a valid config.
    let out = Command::new(BIN)
        .args(["--check-config", "--config"])
        .arg(project().join("systemd/ulog-recv.toml"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("udp = \"14550\""));
}

/// A fake systemd: the datagrams the daemon sends to `NOTIFY_SOCKET`, with their arrival.
struct FakeSystemd {
    socket: UnixDatagram,
    messages: Vec<(Instant, String)>,
}

impl FakeSystemd {
    fn new(path: &Path) -> Self {
        let _ = std::fs::remove_file(path);
        let socket = UnixDatagram::bind(path).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        Self {
            socket,
            messages: Vec::new(),
        }
    }

    /// Collects what arrives for `d`.
    fn listen(&mut self, d: Duration) {
        let t0 = Instant::now();
        let mut buf = [0u8; 4096];
        while t0.elapsed() < d {
            if let Ok(n) = self.socket.recv(&mut buf) {
                self.messages.push((
                    Instant::now(),
                    String::from_utf8_lossy(&buf[..n]).into_owned(),
                ));
            }
        }
    }

    fn count(&self, what: &str, after: Instant) -> usize {
        self.messages
            .iter()
            .filter(|(t, m)| *t >= after && m.lines().any(|l| l == what))
            .count()
    }
}

fn daemon_with_notify(dir: &Path, notify: &Path, port: u16, extra: &[&str]) -> std::process::Child {
    Command::new(BIN)
        .args(["--udp", &port.to_string(), "--no-socket", "--log-dir"])
        .arg(dir.join("logs"))
        .args(extra)
        .env("NOTIFY_SOCKET", notify)
        .env("WATCHDOG_USEC", "300000")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn systemd_hears_ready_status_watchdog_and_stopping_and_no_pings_from_a_stuck_loop() {
    let dir = fresh_dir("notify");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("notify.sock");
    let mut systemd = FakeSystemd::new(&path);
    let port = free_udp_port();
    let mut daemon = daemon_with_notify(&dir, &path, port, &[]);
    let t0 = Instant::now();
    systemd.listen(Duration::from_millis(1000));
    // A vehicle streams: the status says so.
    let mut sim = synthetic_sim(port, 600, 50000, &[], Stdio::null());
    systemd.listen(Duration::from_millis(1500));
    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    systemd.listen(Duration::from_millis(1000));
    assert!(daemon.wait().unwrap().success());
    let _ = sim.kill();
    let _ = sim.wait();
    let m = &systemd.messages;
    let streaming = m.iter().find_map(|(_, x)| {
        x.lines()
            .find(|l| l.starts_with("STATUS=streaming from sysid 1 (PX4): "))
    });
    let streaming = streaming.unwrap_or_else(|| panic!("no streaming status: {m:?}"));
    assert!(
        streaming.contains(" KB/s, ") && streaming.contains(" % lost"),
        "{streaming}"
    );
    assert!(!m.is_empty(), "nothing arrived");
    // READY first, with a status a person can read.
    assert!(m[0].1.lines().any(|l| l == "READY=1"), "{m:?}");
    assert!(
        m[0].1
            .lines()
            .any(|l| l.starts_with("STATUS=waiting for a vehicle on udp")),
        "{m:?}"
    );
    // Then pings with a status, every third of the 300 ms timeout: ~25 in 2.5 s.
    let pings = systemd.count("WATCHDOG=1", t0);
    assert!(pings >= 10, "{pings} pings in 2.5 s: {m:?}");
    assert!(m[1..].iter().all(|(_, x)| !x.contains("READY=1")));
    let last = &m.last().unwrap().1;
    assert!(last.lines().any(|l| l == "STOPPING=1"), "{m:?}");

    // A main loop stuck after 1 s: the pings stop (and systemd would restart it).
    let path = dir.join("notify2.sock");
    let mut systemd = FakeSystemd::new(&path);
    let mut daemon =
        daemon_with_notify(&dir, &path, free_udp_port(), &["--debug-stall-after", "1"]);
    let t0 = Instant::now();
    systemd.listen(Duration::from_millis(3000));
    let _ = daemon.kill();
    let _ = daemon.wait();
    let before = systemd
        .messages
        .iter()
        .filter(|(t, m)| *t < t0 + Duration::from_millis(900) && m.contains("WATCHDOG=1"))
        .count();
    let after = systemd.count("WATCHDOG=1", t0 + Duration::from_millis(1600));
    assert!(before >= 2, "pings while healthy: {before}");
    assert_eq!(after, 0, "pings from a stuck loop: {:?}", systemd.messages);
}

#[test]
fn sigterm_while_streaming_runs_the_stop_handshake_and_leaves_whole_files_within_2_s() {
    let dir = fresh_dir("sigterm");
    let port = free_udp_port();
    let mut daemon = Command::new(BIN)
        .args(["--udp", &port.to_string(), "--no-socket", "--log-dir"])
        .arg(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut sim = synthetic_sim(port, 120, 200000, &[], Stdio::piped());
    std::thread::sleep(Duration::from_millis(2000));
    let t0 = Instant::now();
    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    let status = daemon.wait().unwrap();
    let took = t0.elapsed();
    assert!(status.success(), "{status:?}");
    assert!(took < Duration::from_secs(2), "took {took:?}");
    // The vehicle heard STOP, and every chunk of its post-flight data was acked before it
    // said ACCEPTED (its counters, printed when it exits).
    std::thread::sleep(Duration::from_millis(300));
    unsafe { libc::kill(sim.id() as i32, libc::SIGTERM) };
    let mut out = String::new();
    sim.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    sim.wait().unwrap();
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        (v["stops"].as_u64(), v["stops_completed"].as_u64()),
        (Some(1), Some(1)),
        "{v}"
    );
    assert!(v["postflight_chunks"].as_u64().unwrap() > 1, "{v}");
    assert_eq!(v["postflight_acked"], v["postflight_chunks"], "{v}");
    assert_eq!(v["ack_timeouts"], 0, "{v}");
    let files = ulg_files(&dir);
    assert!(!files.is_empty());
    for f in &files {
        common::check_with_pyulog(f);
    }
    // The post-flight perf counters are in the last file, whole.
    let last = std::fs::read(files.last().unwrap()).unwrap();
    let summary = ulog_recv::ulog::summary::summarize(&last).unwrap();
    let postflight = &summary.info_multiple["perf_counter_postflight"];
    assert_eq!(postflight.len(), 1, "one value");
    assert_eq!(postflight[0].len(), 30, "every line of it");
    let session = files[0].parent().unwrap();
    let manifest = ulog_recv::store::files::read_manifest(session).unwrap();
    assert!(manifest.closed, "the manifest says the session was closed");
}

/// A valid value for every option a config file may set. When an option is added, this list
/// must say what it takes (the test fails until it does).
fn sample_value(key: &str) -> &'static str {
    match key {
        "udp" => "14550",
        "udp-connect" => "\"127.0.0.1:14550\"",
        "tcp" => "\"127.0.0.1:5760\"",
        "serial" => "\"/dev/ttyS0\"",
        "baud" => "57600",
        "log-dir" => "\"/tmp/ulog-recv-config-test\"",
        "log-level" => "\"debug\"",
        "sysid" => "2",
        "compid" => "191",
        "target-system" => "3",
        "autopilot" => "\"ardupilot\"",
        "split-size" => "\"8M\"",
        "split-duration" => "60",
        "latched" => "[\"vehicle_status\", \"battery_status\"]",
        "fsync-interval" => "0.5",
        "max-total" => "\"1G\"",
        "min-free" => "\"100M\"",
        "socket" => "\"/tmp/ulog-recv-config-test.sock\"",
        "no-socket" => "true",
        "publish-tcp" => "\"127.0.0.1:14600\"",
        "client-queue" => "\"1M\"",
        "foxglove" => "8765",
        "store-queue" => "\"16M\"",
        "column" => "{ imu = [\"sensor_*\", \"vehicle_imu*\"], esc = \"esc_status\" }",
        "event-buffer" => "{ burst = [\"sensor_gyro*\"] }",
        "event-before" => "8",
        "event-after" => "3",
        "event-buffer-size" => "\"8M\"",
        "event-on-log" => "[\"(?i)failsafe|crash\", \"Landing, detected\"]",
        "event-when" => "[\"vehicle_status.failsafe == 1\"]",
        "diagnostics" => "\"motor_failure,rc_loss\"",
        "event-on-diagnostic" => "\"critical\"",
        "diagnostics-statustext" => "\"critical\"",
        "signing-key" => "\"/etc/ulog-recv/signing.key\"",
        "upload-to" => "\"s3://flight-logs/fleet\"",
        "upload-endpoint" => "\"http://127.0.0.1:3900\"",
        "upload-region" => "\"garage\"",
        "upload-path-style" => "true",
        "upload-virtual-hosted" => "true",
        "upload-credentials" => "\"/etc/ulog-recv/upload-credentials\"",
        "upload-part-size" => "\"16M\"",
        "upload-parts-in-flight" => "2",
        "upload-stall-timeout" => "120",
        "upload-rate" => "\"1M\"",
        "upload-when" => "\"always\"",
        "upload-tables" => "true",
        "fill" => "\"auto\"",
        "ftp-rate" => "\"20K\"",
        "metrics" => "\"127.0.0.1:9477\"",
        "http" => "\"127.0.0.1:9478\"",
        "http-password-file" => "\"/etc/ulog-recv/http-password\"",
        "flight-review" => "\"https://logs.px4.io\"",
        "flight-review-public" => "true",
        "flight-review-email" => "\"ops@example.com\"",
        "flight-review-key" => "\"/etc/ulog-recv/flight-review.key\"",
        other => panic!("no sample value for option '{other}': add one here"),
    }
}

/// The daemon's long options, from its --help.
fn daemon_options() -> Vec<String> {
    let out = Command::new(BIN).arg("--help").output().unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    let mut names: Vec<String> = help
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("--"))
        .map(|w| {
            w.trim_end_matches(|c: char| !c.is_ascii_alphanumeric())
                .to_owned()
        })
        .filter(|w| !w.is_empty())
        .collect();
    names.sort();
    names.dedup();
    names.retain(|n| !matches!(n.as_str(), "help" | "version" | "config" | "check-config"));
    names
}

/// Runs `--check-config` with `config` and `args`; the options in force, or the error.
fn check(dir: &Path, config: &str, args: &[&str]) -> Result<BTreeMap<String, String>, String> {
    let path = dir.join("ulog-recv.toml");
    std::fs::write(&path, config).unwrap();
    let out = Command::new(BIN)
        .args(["--check-config", "--config"])
        .arg(&path)
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once(" = "))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect())
}

#[test]
fn the_config_file_sets_every_option_the_command_line_wins_and_errors_name_the_key() {
    let dir = fresh_dir("config");
    std::fs::create_dir_all(&dir).unwrap();
    let options = daemon_options();
    assert!(options.len() >= 20, "{options:?}");
    // Exclusive options go one at a time.
    let exclusive = [
        "udp-connect",
        "tcp",
        "serial",
        "no-socket",
        "upload-virtual-hosted",
    ];
    let mut base = String::new();
    for key in options.iter().filter(|k| !exclusive.contains(&k.as_str())) {
        base.push_str(&format!("{key} = {}\n", sample_value(key)));
    }
    let set = check(&dir, &base, &[]).unwrap();
    for key in options.iter().filter(|k| !exclusive.contains(&k.as_str())) {
        assert!(
            set.contains_key(key),
            "'{key}' not set by the file: {set:?}"
        );
    }
    assert_eq!(set["latched"], "[\"vehicle_status\", \"battery_status\"]");
    assert_eq!(set["split-size"], "\"8M\"");
    assert_eq!(
        set["column"],
        "{ \"esc\" = [\"esc_status\"], \"imu\" = [\"sensor_*\", \"vehicle_imu*\"] }"
    );
    // A pattern's comma is part of the pattern, not a separator.
    assert_eq!(
        set["event-on-log"],
        "[\"(?i)failsafe|crash\", \"Landing, detected\"]"
    );
    for key in exclusive {
        let group_free: String = base
            .lines()
            .filter(|l| {
                !l.starts_with("udp ")
                    && !l.starts_with("socket ")
                    && !l.starts_with("upload-path-style ")
            })
            .map(|l| format!("{l}\n"))
            .collect();
        let text = format!("{group_free}{key} = {}\n", sample_value(key));
        let set = check(&dir, &text, &[]).unwrap();
        assert!(
            set.contains_key(key),
            "'{key}' not set by the file: {set:?}"
        );
    }

    // The command line wins, option by option and for the link as a whole.
    let set = check(
        &dir,
        "udp = 14550\nsplit-size = \"2M\"\nsocket = \"/tmp/a.sock\"\n",
        &[
            "--split-size",
            "3M",
            "--tcp",
            "127.0.0.1:5760",
            "--no-socket",
        ],
    )
    .unwrap();
    assert_eq!(set["split-size"], "\"3M\"");
    assert_eq!(set["tcp"], "\"127.0.0.1:5760\"");
    assert!(
        !set.contains_key("udp") && !set.contains_key("socket"),
        "{set:?}"
    );
    assert_eq!(set["no-socket"], "true");

    // Errors name the key.
    for (text, key, says) in [
        ("udp = 1\nsplitsize = \"1M\"\n", "splitsize", "unknown key"),
        (
            "udp = 1\nsplit-size = \"big\"\n",
            "split-size",
            "not a size",
        ),
        (
            "udp = 1\nno-socket = \"yes\"\n",
            "no-socket",
            "true or false",
        ),
        ("udp = 1\nbaud = [1]\n", "baud", "a string or a number"),
        ("udp = 99999\n", "udp", "invalid value"),
        ("udp = 1\nlog-level = \"=+!\"\n", "log-level", "log-level"),
        (
            "udp = 1\nevent-when = [\"vehicle_status.failsafe\"]\n",
            "event-when",
            "TOPIC.FIELD OP NUMBER",
        ),
        (
            "udp = 1\nevent-on-log = [\"(unclosed\"]\n",
            "event-on-log",
            "not a regular expression",
        ),
    ] {
        let e = check(&dir, text, &[]).unwrap_err();
        assert!(e.contains(&format!("'{key}'")), "{text}: {e}");
        assert!(e.contains(says), "{text}: {e}");
    }
    let e = check(&dir, "udp = \n", &[]).unwrap_err();
    assert!(e.contains("TOML"), "{e}");
}

#[test]
fn sighup_rereads_the_config_and_applies_the_storage_options_at_once() {
    let dir = fresh_dir("reload");
    std::fs::create_dir_all(&dir).unwrap();
    let port = free_udp_port();
    let config = dir.join("ulog-recv.toml");
    let logs = dir.join("logs");
    let base = format!(
        "udp = {port}\nno-socket = true\nlog-dir = \"{}\"\n",
        logs.display()
    );
    std::fs::write(&config, &base).unwrap();
    let daemon = Command::new(BIN)
        .arg("--config")
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut sim = synthetic_sim(port, 60, 150000, &["--once"], Stdio::piped());
    std::thread::sleep(Duration::from_millis(800));
    // A split every 5 s of log time from now on; an event buffer only at a restart.
    std::fs::write(
        &config,
        format!("{base}split-duration = 5\n[event-buffer]\naccel = \"sensor_accel\"\n"),
    )
    .unwrap();
    unsafe { libc::kill(daemon.id() as i32, libc::SIGHUP) };
    // The whole log was sent (3 s at 150 KB/s): stop the daemon while the vehicle streams.
    std::thread::sleep(Duration::from_millis(3500));
    let err = stop_and_read_stderr(daemon);
    assert!(sim.wait().unwrap().success());
    assert!(err.contains("config reloaded from"), "{err}");
    assert!(
        err.contains("event buffers or event triggers changed, which takes a restart"),
        "{err}"
    );
    for session in common::procs::session_dirs(&logs) {
        let manifest = ulog_recv::store::files::read_manifest(&session).unwrap();
        assert!(manifest.columns.is_empty(), "{manifest:?}");
    }
    // The SIGHUP itself makes a second split; the new size makes several more.
    let files = ulg_files(&logs);
    assert!(files.len() >= 4, "{} splits: {files:?}", files.len());
    for f in &files {
        common::check_with_pyulog(f);
    }
}

/// Runs the daemon for a moment with `env` and `args`; its stderr.
fn daemon_stderr(env: &[(&str, &str)], args: &[&str]) -> String {
    let dir = fresh_dir("logging");
    let daemon = Command::new(BIN)
        .args([
            "--udp",
            &free_udp_port().to_string(),
            "--no-socket",
            "--log-dir",
        ])
        .arg(&dir)
        .args(args)
        .envs(env.iter().copied())
        .env_remove("RUST_BACKTRACE")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    stop_and_read_stderr(daemon)
}

/// Stops the daemon with SIGTERM; asserts it exits 0; what it wrote on stderr.
fn stop_and_read_stderr(mut daemon: Child) -> String {
    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    let mut err = String::new();
    daemon
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(daemon.wait().unwrap().success());
    err
}

#[test]
fn logs_suit_the_journal_and_the_level_comes_from_the_flag_then_rust_log() {
    // Under journald: no colour, no timestamp (the journal has its own); the flag beats RUST_LOG.
    let err = daemon_stderr(
        &[("JOURNAL_STREAM", "8:12345"), ("RUST_LOG", "error")],
        &["--log-level", "debug"],
    );
    let logged: Vec<&str> = err.lines().filter(|l| l.contains("ulog_recv")).collect();
    assert!(logged.iter().any(|l| l.contains("DEBUG")), "{err}");
    assert!(!err.contains('\x1b'), "no colour codes: {err:?}");
    for l in &logged {
        assert!(
            !l.starts_with(|c: char| c.is_ascii_digit()),
            "no timestamp: {l}"
        );
    }
    // Without the flag, RUST_LOG decides; without either, info.
    let err = daemon_stderr(&[("RUST_LOG", "error")], &[]);
    assert!(!err.contains(" INFO "), "{err}");
    let err = daemon_stderr(&[], &[]);
    assert!(err.contains(" INFO "), "{err}");
    assert!(!err.contains(" DEBUG "), "{err}");
}
