//! MAVLink 2 signing, checked against pymavlink (an independent implementation) both ways, and
//! end to end: the daemon and `ulog-recv sim` as processes over loopback UDP, with the same
//! key (the file must be whole), without ours (one clear error, in the log, the systemd status
//! and the live socket's `stats`), and with a wrong one (nothing taken); a simulated ArduPilot
//! that signs streams to the daemon whole through reordering (late frames are taken once),
//! its log held against ArduPilot's own by pymavlink's DFReader.

use crate::common;

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixDatagram, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use common::procs::{Proc, free_udp_port, fresh_dir, ulg_files, wait_for_line};
use mavlink::MavHeader;
use mavlink::dialects::ardupilotmega::{
    COMMAND_LONG_DATA, HEARTBEAT_DATA, LOGGING_ACK_DATA, MavAutopilot, MavCmd, MavMessage, MavType,
};
use ulog_recv::link::frames::FrameDecoder;
use ulog_recv::link::log_block::{LOG_COMPONENT, LogBlock};
use ulog_recv::link::signing::{Check, Signer, SigningKey, timestamp_at};
use ulog_recv::link::{Session, SessionConfig, SigningSetup};
use ulog_recv::sim::chunk_log;

/// Runs `tests/pymavlink_signing.py ARGS` with `stdin`; `None` (a loud skip) without the venv.
fn pymavlink(args: &[&str], stdin: &str) -> Option<String> {
    let py = common::venv_python()?;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/pymavlink_signing.py");
    let mut child = Command::new(py)
        .arg(script)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "pymavlink_signing.py {args:?} failed");
    Some(String::from_utf8(out.stdout).unwrap())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

const PASSPHRASE: &str = "px4 log streaming";

#[test]
fn frames_signed_by_pymavlink_verify_in_ours() {
    // The key as QGroundControl derives it from a passphrase, by both.
    let key = SigningKey::from_file_text(PASSPHRASE.as_bytes()).unwrap();
    let Some(derived) = pymavlink(&["derive", PASSPHRASE], "") else {
        return;
    };
    assert_eq!(derived.trim(), hex(key.as_bytes()));
    let now = timestamp_at(SystemTime::now());
    let signed = pymavlink(&["sign", &hex(key.as_bytes()), "2", &now.to_string()], "").unwrap();
    let frames: Vec<Vec<u8>> = signed.lines().map(unhex).collect();
    assert_eq!(frames.len(), 4);
    let t = Instant::now();
    let check_all = |signer: &mut Signer, frames: &[Vec<u8>]| -> Vec<(Check, String)> {
        let mut out = Vec::new();
        for f in frames {
            FrameDecoder::new().datagram(f, |frame| {
                let check = signer.check(frame.raw_v2().unwrap(), t);
                out.push((check, format!("{:?}", frame.message.mav().unwrap())));
            });
        }
        out
    };
    let mut ours = Signer::new(key.clone(), 0, now, t);
    let got = check_all(&mut ours, &frames);
    assert!(got.iter().all(|(c, _)| *c == Check::Valid), "{got:?}");
    assert!(got[0].1.starts_with("HEARTBEAT"));
    assert!(got[2].1.contains("LOGGING_DATA_ACKED") && got[2].1.contains("sequence: 7"));
    // The same frames again are replays; a flipped signature byte or another key fails.
    assert!(
        check_all(&mut ours, &frames)
            .iter()
            .all(|(c, _)| *c == Check::Replayed)
    );
    let mut tampered = frames[3].clone();
    *tampered.last_mut().unwrap() ^= 1;
    let mut fresh = Signer::new(key, 0, now, t);
    assert_eq!(check_all(&mut fresh, &[tampered])[0].0, Check::BadSignature);
    let mut other = Signer::new(SigningKey::from_bytes([1; 32]), 0, now, t);
    assert!(
        check_all(&mut other, &frames)
            .iter()
            .all(|(c, _)| *c == Check::BadSignature)
    );
}

#[test]
fn frames_the_session_signs_verify_in_pymavlink() {
    let key = SigningKey::from_file_text(PASSPHRASE.as_bytes()).unwrap();
    let t = Instant::now();
    let setup = SigningSetup {
        key: key.clone(),
        link_id: 0,
        timestamp: timestamp_at(SystemTime::now()),
    };
    let mut session = Session::new(
        SessionConfig {
            signing: Some(setup.clone()),
            ..SessionConfig::default()
        },
        t,
    );
    // What a receiver sends: its heartbeat, then (the vehicle found) LOGGING_STOP.
    session.handle_timeout(t);
    let mut vehicle = Signer::new(key.clone(), 0, setup.timestamp, t);
    let mut hb = Vec::new();
    vehicle.sign(
        MavHeader {
            system_id: 1,
            component_id: 1,
            sequence: 0,
        },
        &MavMessage::HEARTBEAT(HEARTBEAT_DATA {
            autopilot: MavAutopilot::MAV_AUTOPILOT_PX4,
            mavtype: MavType::MAV_TYPE_QUADROTOR,
            ..Default::default()
        }),
        t,
        &mut hb,
    );
    assert!(
        session.handle_datagram(&hb, t),
        "a signed heartbeat of the vehicle"
    );
    let mut frames: Vec<Vec<u8>> = std::iter::from_fn(|| session.poll_transmit()).collect();
    // And an ack, signed by the same signer type directly.
    let mut ours = Signer::new(key, 0, setup.timestamp + 10, t);
    for message in [
        MavMessage::LOGGING_ACK(LOGGING_ACK_DATA {
            sequence: 42,
            target_system: 1,
            target_component: 1,
        }),
        MavMessage::COMMAND_LONG(COMMAND_LONG_DATA {
            command: MavCmd::MAV_CMD_LOGGING_START,
            target_system: 1,
            target_component: 1,
            ..Default::default()
        }),
    ] {
        let mut f = Vec::new();
        ours.sign(
            MavHeader {
                system_id: 1,
                component_id: 154,
                sequence: 1,
            },
            &message,
            t,
            &mut f,
        );
        frames.push(f);
    }
    let input: String = frames.iter().map(|f| hex(f) + "\n").collect();
    let key_hex = hex(SigningKey::from_file_text(PASSPHRASE.as_bytes())
        .unwrap()
        .as_bytes());
    let Some(out) = pymavlink(&["verify", &key_hex], &input) else {
        return;
    };
    let got: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let names: Vec<&str> = got
        .iter()
        .map(|v| v["name"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(
        names,
        ["HEARTBEAT", "COMMAND_LONG", "LOGGING_ACK", "COMMAND_LONG"],
        "{got:?}"
    );
    assert_eq!(
        got[1]["fields"]["command"], 2511,
        "LOGGING_STOP first: {got:?}"
    );
    assert_eq!(got[2]["fields"]["sequence"], 42);
    assert_eq!(got[3]["fields"]["command"], 2510);
    // Another key: pymavlink refuses every frame.
    let out = pymavlink(&["verify", &"11".repeat(32)], &input).unwrap();
    assert!(
        out.lines().all(|l| l.contains("Invalid signature")),
        "{out}"
    );
}

#[test]
fn a_log_block_our_simulated_ardupilot_signs_verifies_in_pymavlink() {
    let key = SigningKey::from_file_text(PASSPHRASE.as_bytes()).unwrap();
    let t = Instant::now();
    let mut block = LogBlock {
        target_system: 255,
        target_component: 190,
        seqno: 70_000,
        ..LogBlock::default()
    };
    block.data[..5].copy_from_slice(&[0xA3, 0x95, 128, 0, 9]);
    let mut vehicle = Signer::new(key.clone(), 2, timestamp_at(SystemTime::now()), t);
    let header = MavHeader {
        system_id: 1,
        component_id: LOG_COMPONENT,
        sequence: 5,
    };
    let mut frame = Vec::new();
    vehicle.sign_data(header, &block, t, &mut frame);
    let Some(out) = pymavlink(&["verify", &hex(key.as_bytes())], &(hex(&frame) + "\n")) else {
        return;
    };
    let got: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(got["name"], "REMOTE_LOG_DATA_BLOCK", "{got}");
    assert_eq!(got["fields"]["seqno"], 70_000, "{got}");
    let data: Vec<u64> = (got["fields"]["data"].as_array().unwrap().iter())
        .map(|v| v.as_u64().unwrap())
        .collect();
    let sent: Vec<u64> = block.data.iter().map(|&b| u64::from(b)).collect();
    assert_eq!(data, sent, "the block's 200 bytes, trailing zeros restored");
    let other = pymavlink(&["verify", &"11".repeat(32)], &(hex(&frame) + "\n")).unwrap();
    assert!(other.contains("Invalid signature"), "{other}");
}

/// A key file (mode 0600) holding `text`.
fn key_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

/// The daemon on a UDP port with `extra` arguments, and a fake systemd listening for its
/// notifications.
fn daemon(dir: &Path, port: u16, extra: &[String]) -> (Proc, std::sync::mpsc::Receiver<String>) {
    let mut args = vec![
        "--udp".to_string(),
        port.to_string(),
        "--log-dir".into(),
        dir.join("logs").display().to_string(),
        "--socket".into(),
        dir.join("live.sock").display().to_string(),
    ];
    args.extend(extra.iter().cloned());
    Proc::spawn_watched("the daemon", &args)
}

fn sim(port: u16, extra: &[String]) -> (Proc, std::sync::mpsc::Receiver<String>) {
    let mut args = vec![
        "sim".to_string(),
        "--synthetic".into(),
        "--duration".into(),
        "20".into(),
        "--once".into(),
        "--link-rate".into(),
        "1000000".into(),
        "--udp-connect".into(),
        format!("127.0.0.1:{port}"),
    ];
    args.extend(extra.iter().cloned());
    Proc::spawn_watched("the simulator", &args)
}

#[test]
fn a_signed_link_delivers_the_log_byte_for_byte_and_keeps_the_timestamp_ahead_on_disk() {
    let dir = fresh_dir("signed");
    let key = key_file(&dir, "key", &format!("{}\n", "5a".repeat(32)));
    let port = free_udp_port();
    let key_arg = vec!["--signing-key".to_string(), key.display().to_string()];
    let (mut d, _) = daemon(&dir, port, &key_arg);
    let (mut s, lines) = sim(port, &key_arg);
    wait_for_line(&lines, "the whole log was sent", Duration::from_secs(60));
    std::thread::sleep(Duration::from_millis(300));
    assert!(d.terminate().success());
    assert!(s.wait(Duration::from_secs(10)).success());
    let v: serde_json::Value = serde_json::from_str(s.stdout_text().trim()).unwrap();
    assert_eq!(
        v["refused_frames"], 0,
        "the vehicle took every frame of ours: {v}"
    );
    assert_eq!(v["stops_completed"], 1, "{v}");
    let summary = d.stdout_text();
    assert!(
        summary.contains(" 0 frames refused by signing"),
        "{summary}"
    );
    let files = ulg_files(&dir.join("logs"));
    assert_eq!(files.len(), 1);
    let file = ulog_recv::sim::synth::generate(ulog_recv::sim::synth::SynthOptions {
        duration_s: 20,
        seed: 1,
        appended_data: false,
    });
    let chunked = chunk_log(&file, 0).unwrap();
    assert!(
        std::fs::read(&files[0]).unwrap() == [chunked.stream, chunked.postflight].concat(),
        "the file is the signed stream, byte for byte"
    );
    common::check_with_pyulog(&files[0]);
    // The signing clock's reservation: beside the logs, private, ahead of the clock.
    let reservation = dir
        .join("logs")
        .join(ulog_recv::shell::keyfile::RESERVATION_FILE);
    let mode = std::fs::metadata(&reservation)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let reserved: u64 = std::fs::read_to_string(&reservation)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(reserved > timestamp_at(SystemTime::now()));
}

#[test]
fn a_signing_ardupilot_streams_to_the_daemon_with_its_key_whole_through_reordering() {
    let Some(logs) = common::ardupilot::ardupilot_logs() else {
        return;
    };
    let Some(py) = common::venv_python() else {
        return;
    };
    let log = logs
        .iter()
        .min_by_key(|p| std::fs::metadata(p).unwrap().len())
        .unwrap();
    let dir = fresh_dir("signed-ardupilot");
    let key = key_file(&dir, "key", "ardupilot passphrase\n");
    let key = key.display().to_string();
    let sim_args = [
        "--signing-key",
        &key,
        "--reorder",
        "0.03",
        "--duplicate",
        "0.01",
    ];
    let daemon_args = ["--signing-key", key.as_str()];
    let (splits, counters, _) =
        common::ardupilot::replay_with(log, "signed-ardupilot", &sim_args, &daemon_args);
    assert_eq!(
        counters["refused_frames"], 0,
        "the vehicle took every frame of ours: {counters}"
    );
    assert!(
        counters["blocks_sent"].as_u64().unwrap() > 100,
        "{counters}"
    );
    let report = common::ardupilot::compare(&py, log, &splits);
    assert_eq!(report["unexplained_invented"], 0, "{report}");
    assert_eq!(report["unexplained_missing"], 0, "{report}");
    assert!(
        report["card_in_window"].as_u64().unwrap() > 1_000,
        "{report}"
    );
}

#[test]
fn a_key_file_others_can_read_stops_the_start_with_a_clear_error() {
    let dir = fresh_dir("open-key");
    let key = key_file(&dir, "key", "passphrase\n");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = Command::new(common::procs::BIN)
        .args(["--udp", &free_udp_port().to_string(), "--no-socket"])
        .arg("--signing-key")
        .arg(&key)
        .arg("--log-dir")
        .arg(dir.join("logs"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("can be read by others") && err.contains("chmod 600"),
        "{err}"
    );
}

/// Listens as systemd's notify socket at `path`; returns the STATUS= lines seen.
fn fake_systemd(path: &Path) -> std::sync::mpsc::Receiver<String> {
    let socket = UnixDatagram::bind(path).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 4096];
        while let Ok(n) = socket.recv(&mut buf) {
            for line in String::from_utf8_lossy(&buf[..n]).lines() {
                if let Some(status) = line.strip_prefix("STATUS=")
                    && tx.send(status.to_owned()).is_err()
                {
                    return;
                }
            }
        }
    });
    rx
}

#[test]
fn a_vehicle_that_signs_while_we_have_no_key_gets_one_clear_error_everywhere() {
    let dir = fresh_dir("no-key");
    std::fs::create_dir_all(&dir).unwrap();
    let key = key_file(&dir, "key", "only the vehicle knows\n");
    let port = free_udp_port();
    let notify = dir.join("notify.sock");
    let status = fake_systemd(&notify);
    let mut args = vec![
        "--udp".to_string(),
        port.to_string(),
        "--log-dir".into(),
        dir.join("logs").display().to_string(),
        "--socket".into(),
        dir.join("live.sock").display().to_string(),
    ];
    args.extend(["--log-level".into(), "info".into()]);
    let runtime = fresh_dir("no-key-run");
    let d = Command::new(common::procs::BIN)
        .args(&args)
        .env("NOTIFY_SOCKET", &notify)
        .env("RUNTIME_DIRECTORY", &runtime)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (mut s, _) = sim(port, &["--signing-key".into(), key.display().to_string()]);
    let t0 = Instant::now();
    // The status line says it within 10 s.
    let said = loop {
        let line = status
            .recv_timeout(Duration::from_secs(10).saturating_sub(t0.elapsed()))
            .expect("a status line naming the cause within 10 s");
        if line.contains("--signing-key") {
            break line;
        }
    };
    assert!(said.contains("signs its MAVLink frames"), "{said}");
    // So does the live socket's stats line.
    let mut live = UnixStream::connect(dir.join("live.sock")).unwrap();
    live.write_all(b"{\"subscribe\": []}\n").unwrap();
    live.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut reader = std::io::BufReader::new(live);
    let stats = loop {
        let mut line = String::new();
        std::io::BufRead::read_line(&mut reader, &mut line).unwrap();
        if line.contains("\"type\":\"stats\"") {
            break line;
        }
    };
    assert!(stats.contains("--signing-key"), "{stats}");
    // A few more seconds of retries: still one error line in the log.
    std::thread::sleep(Duration::from_secs(4));
    unsafe { libc::kill(d.id() as i32, libc::SIGTERM) };
    let out = d.wait_with_output().unwrap();
    assert!(out.status.success());
    let log = String::from_utf8_lossy(&out.stderr);
    let errors: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("ERROR") && l.contains("--signing-key"))
        .collect();
    assert_eq!(errors.len(), 1, "{log}");
    let _ = s.0.kill();
    assert!(ulg_files(&dir.join("logs")).is_empty());
}

#[test]
fn with_a_wrong_key_nothing_is_accepted_and_the_key_is_named() {
    let dir = fresh_dir("wrong-key");
    let ours = key_file(&dir, "ours", "one passphrase\n");
    let theirs = key_file(&dir, "theirs", "another passphrase\n");
    let port = free_udp_port();
    let (mut d, log) = daemon(
        &dir,
        port,
        &["--signing-key".into(), ours.display().to_string()],
    );
    let (mut s, _) = sim(
        port,
        &["--signing-key".into(), theirs.display().to_string()],
    );
    let line = wait_for_line(&log, "signed with another key", Duration::from_secs(10));
    assert!(line.contains("--signing-key"), "{line}");
    std::thread::sleep(Duration::from_secs(2));
    assert!(d.terminate().success());
    let _ = s.0.kill();
    assert!(ulg_files(&dir.join("logs")).is_empty(), "nothing accepted");
    let summary = d.stdout_text();
    assert!(summary.contains("received 0 logs"), "{summary}");
    let refused: u64 = summary
        .split(" frames refused by signing")
        .next()
        .and_then(|s| s.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    // The vehicle's heartbeats (once a second), all refused, none of them steering a reply.
    assert!(refused >= 2, "{summary}");
    assert!(
        summary.contains(&format!("{refused} foreign datagrams")),
        "{summary}"
    );
}
