//! The daemon against packets that are not the vehicle's, end to end over loopback UDP: while
//! `ulog-recv sim` streams a flight, a second socket floods the daemon's port with junk, with
//! CRC-valid heartbeats that claim to be the vehicle, and with a forged chunk far ahead of the
//! stream. The file must be what the vehicle sent, byte for byte; nothing may be sent to the
//! second socket; the log must stay a handful of lines.
//!
//! And a daemon killed and restarted while the vehicle streams: the new one ends the old
//! stream with the STOP handshake (every post-flight chunk acked) and records a new log from
//! its header.

use crate::common;

use std::net::UdpSocket;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use common::procs::{Proc, free_udp_port, fresh_dir, ulg_files, wait_for_line};
use mavlink::MavHeader;
use mavlink::dialects::ardupilotmega::{
    HEARTBEAT_DATA, LOGGING_DATA_DATA, MavAutopilot, MavMessage, MavType,
};
use ulog_recv::link::frames::encode;
use ulog_recv::sim::chunk_log;

/// A frame as if from the vehicle (system 1, component 1).
fn as_vehicle(message: MavMessage) -> Vec<u8> {
    let mut frame = Vec::new();
    let header = MavHeader {
        system_id: 1,
        component_id: 1,
        sequence: 9,
    };
    encode(header, &message, &mut frame);
    frame
}

#[test]
fn junk_spoofed_heartbeats_and_a_forged_chunk_from_another_host_change_nothing() {
    let dir = fresh_dir("hostile");
    let port = free_udp_port();
    let (mut daemon, daemon_log) = Proc::spawn_watched(
        "the daemon",
        &[
            "--udp".into(),
            port.to_string(),
            "--log-dir".into(),
            dir.display().to_string(),
        ],
    );
    // A flight of about 5 s at 98 KB/s.
    let (mut sim, sim_log) = Proc::spawn_watched(
        "the simulator",
        &[
            "sim".into(),
            "--synthetic".into(),
            "--duration".into(),
            "60".into(),
            "--once".into(),
            "--link-rate".into(),
            "140000".into(),
            "--udp-connect".into(),
            format!("127.0.0.1:{port}"),
        ],
    );
    wait_for_line(&daemon_log, "log opened", Duration::from_secs(10));
    // The other host: floods until the vehicle has sent everything, and counts what the
    // daemon sends it (nothing, ever).
    let stop = Arc::new(AtomicBool::new(false));
    let received = Arc::new(AtomicU64::new(0));
    let sent = Arc::new(AtomicU64::new(0));
    let flood = {
        let (stop, received, sent) = (stop.clone(), received.clone(), sent.clone());
        std::thread::spawn(move || {
            let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
            socket.connect(("127.0.0.1", port)).unwrap();
            socket.set_nonblocking(true).unwrap();
            let heartbeat = as_vehicle(MavMessage::HEARTBEAT(HEARTBEAT_DATA {
                autopilot: MavAutopilot::MAV_AUTOPILOT_PX4,
                mavtype: MavType::MAV_TYPE_QUADROTOR,
                ..Default::default()
            }));
            let mut forged = LOGGING_DATA_DATA {
                sequence: 30_000,
                target_system: 1,
                target_component: 155,
                length: 249,
                first_message_offset: 0,
                ..Default::default()
            };
            forged
                .data
                .iter_mut()
                .enumerate()
                .for_each(|(i, b)| *b = i as u8);
            let forged = as_vehicle(MavMessage::LOGGING_DATA(forged));
            let mut junk = [0u8; 300];
            let mut i = 0u64;
            let mut buf = [0u8; 2048];
            while !stop.load(Ordering::Relaxed) {
                let datagram: &[u8] = match i % 4 {
                    0 => &[0xfd],
                    1 => {
                        junk.iter_mut().for_each(|b| *b = fastrand::u8(..));
                        &junk
                    }
                    2 => &heartbeat,
                    _ if i == 1003 => &forged,
                    _ => &junk[..17],
                };
                if socket.send(datagram).is_ok() {
                    sent.fetch_add(1, Ordering::Relaxed);
                }
                while socket.recv(&mut buf).is_ok() {
                    received.fetch_add(1, Ordering::Relaxed);
                }
                i += 1;
                std::thread::sleep(Duration::from_micros(500));
            }
        })
    };
    wait_for_line(&sim_log, "the whole log was sent", Duration::from_secs(60));
    stop.store(true, Ordering::Relaxed);
    flood.join().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(daemon.terminate().success());
    assert!(sim.wait(Duration::from_secs(10)).success());
    let v: serde_json::Value = serde_json::from_str(sim.stdout_text().trim()).unwrap();
    let summary = daemon.stdout_text();
    let log_lines: Vec<String> = daemon_log.try_iter().collect();

    let sent = sent.load(Ordering::Relaxed);
    assert!(sent > 2000, "the flood sent {sent} datagrams");
    assert_eq!(
        received.load(Ordering::Relaxed),
        0,
        "a reply went to the other host"
    );
    // The vehicle: every acked chunk acked, the STOP handshake done.
    assert_eq!(
        (v["ack_timeouts"].as_u64(), v["stops_completed"].as_u64()),
        (Some(0), Some(1)),
        "{v}"
    );
    // The file: what the vehicle sent, byte for byte (the forged chunk cost nothing).
    let files = ulg_files(&dir);
    assert_eq!(files.len(), 1);
    let flight = ulog_recv::sim::synth::generate(ulog_recv::sim::synth::SynthOptions {
        duration_s: 60,
        seed: 1,
        appended_data: false,
    });
    let chunked = chunk_log(&flight, 0).unwrap();
    assert!(
        std::fs::read(&files[0]).unwrap() == [chunked.stream, chunked.postflight].concat(),
        "{summary}"
    );
    assert!(
        summary.contains(" 1 implausible chunks dropped"),
        "{summary}"
    );
    // Every flood datagram counted, not one of them logged.
    let foreign: u64 = summary
        .split(" foreign datagrams")
        .next()
        .and_then(|s| s.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(foreign >= sent * 9 / 10, "{foreign} of {sent}: {summary}");
    assert!(
        log_lines.len() < 20,
        "{} log lines: {log_lines:#?}",
        log_lines.len()
    );
    assert!(!log_lines.iter().any(|l| l.contains("another address")));
}

#[test]
fn a_daemon_killed_and_restarted_while_the_vehicle_streams_ends_the_old_stream_cleanly() {
    let dir = fresh_dir("restart");
    let port = free_udp_port();
    let args = vec![
        "--udp".to_string(),
        port.to_string(),
        "--log-dir".into(),
        dir.display().to_string(),
    ];
    let (mut sim, _) = Proc::spawn_watched(
        "the simulator",
        &[
            "sim".into(),
            "--synthetic".into(),
            "--duration".into(),
            "600".into(),
            "--link-rate".into(),
            "140000".into(),
            "--udp-connect".into(),
            format!("127.0.0.1:{port}"),
        ],
    );
    let (mut first, log) = Proc::spawn_watched("the first daemon", &args);
    wait_for_line(&log, "log opened", Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(1500));
    first.0.kill().unwrap(); // no STOP: the vehicle streams on into the void
    first.0.wait().unwrap();
    let (mut second, log) = Proc::spawn_watched("the second daemon", &args);
    wait_for_line(&log, "log opened", Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(1500));
    assert!(second.terminate().success());
    unsafe { libc::kill(sim.0.id() as i32, libc::SIGTERM) };
    assert!(sim.wait(Duration::from_secs(10)).success());
    let v: serde_json::Value = serde_json::from_str(sim.stdout_text().trim()).unwrap();
    // Two streams, each ended by a STOP whose post-flight data was all acked: the vehicle's
    // logger never waited in vain.
    assert_eq!(v["starts"], 2, "{v}");
    assert_eq!(v["stops_completed"], 2, "{v}");
    assert_eq!(v["ack_timeouts"], 0, "{v}");
    assert_eq!(v["postflight_acked"], v["postflight_chunks"], "{v}");
    assert!(v["longest_ack_wait_ms"].as_u64().unwrap() < 500, "{v}");
    // The second session's file opens with its own header and reads in pyulog.
    let files = ulg_files(&dir);
    let newest = files
        .iter()
        .max_by_key(|f| f.parent().unwrap().to_owned())
        .unwrap();
    let bytes = std::fs::read(newest).unwrap();
    assert_eq!(bytes[..7], ulog_recv::ulog::message::FILE_MAGIC);
    common::check_with_pyulog(newest);
}
