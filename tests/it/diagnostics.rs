//! Flight diagnostics held against Flight Review v2's own analyzers (its converter,
//! `ulog-convert batch --diagnostics`, built in `../shared/vendor/flight-review-rs`): on every
//! real log and on flights our writer makes with each fault in them, armed and on the
//! ground, `ulog-recv info --diagnostics --json` finds the same things, no more, no fewer.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value as Json;
use ulog_recv::sim::faults::{FAULT_AFTER_US, Fault, FaultFlight, START_US, fault_flight};

use crate::common::procs::{
    BIN, Proc, finish_recording, free_udp_port, fresh_dir, stream, wait_for_line,
};
use crate::common::{json_output, router, shared_logs, text_output};

/// Flight Review v2's converter. Without it a test says so loudly and returns `None`; under
/// CI its absence is a failure.
pub fn flight_review_converter() -> Option<PathBuf> {
    let bin = crate::common::project().join("../shared/vendor/flight-review-rs/bin/ulog-convert");
    if bin.is_file() {
        return Some(bin);
    }
    if std::env::var_os("CI").is_some() {
        panic!(
            "{} is missing: CI must hold diagnostics to it",
            bin.display()
        );
    }
    eprintln!(
        "\n!!! SKIPPED: no Flight Review v2 converter at {} (put ../shared beside the project) !!!\n",
        bin.display()
    );
    None
}

/// What Flight Review v2 finds in every `.ulg` under `dir`, by file name.
fn flight_review_findings(converter: &Path, dir: &Path) -> BTreeMap<String, Vec<Json>> {
    let out = text_output(
        Command::new(converter)
            .args(["batch", "--diagnostics", "--format", "json", "-j", "1"])
            .arg(dir),
    );
    let mut by_file = BTreeMap::new();
    for line in out.lines() {
        let Ok(report) = serde_json::from_str::<Json>(line) else {
            continue;
        };
        assert!(
            report.get("error").is_none(),
            "Flight Review cannot read: {report}"
        );
        let name = Path::new(report["file"].as_str().unwrap())
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let found = report["diagnostics"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        by_file.insert(name, found);
    }
    by_file
}

/// What `ulog-recv info --diagnostics --json` finds in `log`.
pub(crate) fn our_findings(log: &Path) -> Vec<Json> {
    let report = json_output(
        Command::new(env!("CARGO_BIN_EXE_ulog-recv"))
            .args(["info", "--diagnostics", "--json"])
            .arg(log),
    );
    report["diagnostics"].as_array().cloned().unwrap()
}

/// A finding without its wording, for comparing: id, severity, start, end, evidence.
fn comparable(findings: &[Json]) -> Vec<String> {
    let mut v: Vec<String> = findings
        .iter()
        .map(|f| {
            let mut f = f.clone();
            f.as_object_mut().unwrap().remove("summary");
            f.to_string()
        })
        .collect();
    v.sort();
    v
}

fn assert_same(what: &str, ours: &[Json], theirs: &[Json]) {
    assert_eq!(
        comparable(ours),
        comparable(theirs),
        "{what}: ours (left) and Flight Review v2's (right) differ"
    );
}

#[test]
fn findings_on_real_logs_are_flight_review_v2s() {
    let (Some(converter), Some(logs)) = (flight_review_converter(), shared_logs()) else {
        return;
    };
    let dir = logs[0].parent().unwrap();
    let theirs = flight_review_findings(&converter, dir);
    assert_eq!(theirs.len(), logs.len(), "{theirs:?}");
    let mut found = 0;
    for log in &logs {
        let name = log.file_name().unwrap().to_string_lossy();
        let ours = our_findings(log);
        assert_same(&name, &ours, &theirs[name.as_ref()]);
        found += ours.len();
    }
    // The real logs hold findings (GPS, motors): the comparison is not of empty lists.
    assert!(found >= 3, "{found} findings in the real logs");
}

#[test]
fn findings_on_fault_flights_are_flight_review_v2s() {
    let Some(converter) = flight_review_converter() else {
        return;
    };
    let dir = fresh_dir("fault_flights");
    std::fs::create_dir_all(&dir).unwrap();
    let mut flights = Vec::new();
    for fault in Fault::ALL {
        for armed in [true, false] {
            for rc_lost_as_uint8 in [false, true] {
                if rc_lost_as_uint8 && !matches!(fault, Fault::RcLoss { .. }) {
                    continue;
                }
                let name = format!(
                    "{}{}{}.ulg",
                    fault.to_string().replace(':', "_"),
                    if armed { "" } else { "_on_the_ground" },
                    if rc_lost_as_uint8 {
                        "_rc_lost_uint8"
                    } else {
                        ""
                    }
                );
                let flight = FaultFlight {
                    fault,
                    armed,
                    seed: 3,
                    rc_lost_as_uint8,
                };
                std::fs::write(dir.join(&name), fault_flight(flight)).unwrap();
                flights.push((name, flight));
            }
        }
    }
    let theirs = flight_review_findings(&converter, &dir);
    let fault_us = START_US + FAULT_AFTER_US;
    for (name, flight) in &flights {
        let ours = our_findings(&dir.join(name));
        assert_same(name, &ours, &theirs[name]);
        // And what each flight must give, so that agreeing on nothing cannot pass.
        let ids: Vec<(&str, &str, u64)> = ours
            .iter()
            .map(|f| {
                (
                    f["id"].as_str().unwrap(),
                    f["severity"].as_str().unwrap(),
                    f["timestamp_us"].as_u64().unwrap(),
                )
            })
            .collect();
        let expected: Vec<(&str, &str, u64)> = match (flight.fault, flight.armed) {
            (Fault::None, _) => vec![],
            // Flight Review v2 reads EKF and GPS armed or not.
            (Fault::Innovation { ms: 2000 }, _) => vec![("ekf_failure", "warning", fault_us)],
            (Fault::Innovation { .. }, _) => vec![
                ("ekf_failure", "warning", fault_us),
                ("ekf_failure", "critical", fault_us),
            ],
            (Fault::GpsJam, _) => vec![(
                "gps_interference",
                ours[0]["severity"].as_str().unwrap_or("-"),
                fault_us,
            )],
            (_, false) => vec![],
            (Fault::BatterySag, true) => vec![("battery_brownout", "critical", fault_us)],
            (Fault::MotorDrop, true) => vec![("motor_failure", "critical", fault_us)],
            (Fault::MotorSaturated, true) => vec![("motor_failure", "warning", fault_us)],
            // PX4 logs `rc_lost` as a bool, which Flight Review v2 does not read.
            (Fault::RcLoss { .. }, true) if !flight.rc_lost_as_uint8 => vec![],
            (Fault::RcLoss { ms: 600 }, true) => vec![("rc_loss", "warning", fault_us)],
            (Fault::RcLoss { .. }, true) => vec![("rc_loss", "critical", fault_us)],
        };
        assert_eq!(ids, expected, "{name}");
    }
}

/// `ulog-recv sim --synthetic --fault FAULT --write DIR/FAULT.ulg` (`:` as `_`): the flight's
/// path.
pub(crate) fn write_fault_flight(dir: &Path, fault: &str) -> PathBuf {
    let original = dir.join(format!("{}.ulg", fault.replace(':', "_")));
    text_output(
        Command::new(BIN)
            .args(["sim", "--synthetic", "--fault", fault, "--write"])
            .arg(&original),
    );
    original
}

/// A finding as the manifest lists it (the event's), comparable with [`comparable`].
fn manifest_findings(session: &Path) -> Vec<Json> {
    let manifest: Json =
        serde_json::from_slice(&std::fs::read(session.join("manifest.json")).unwrap()).unwrap();
    let events = manifest["events"].as_array().cloned().unwrap_or_default();
    events
        .iter()
        .filter(|e| e["source"] == "diagnostic")
        .map(|e| {
            assert_eq!(e["name"], e["finding"]["id"], "{e}");
            // An event is at the moment its finding was made: its end, for a window.
            let made = match e["finding"]["end_timestamp_us"].as_u64() {
                Some(end) => end,
                None => e["finding"]["timestamp_us"].as_u64().unwrap(),
            };
            assert_eq!(e["at_us"], made, "{e}");
            e["finding"].clone()
        })
        .collect()
}

/// Streams `flight` (written to `original`) from the simulator with `impairment` to a daemon
/// started with `daemon_args`; the session it records.
fn receive(dir: &Path, original: &Path, impairment: &[&str], daemon_args: &[&str]) -> PathBuf {
    let port = free_udp_port();
    let logs = dir.join("logs");
    let mut args: Vec<String> = vec![
        "--udp".into(),
        format!("127.0.0.1:{port}"),
        "--log-dir".into(),
        logs.to_string_lossy().into_owned(),
        "--no-socket".into(),
    ];
    args.extend(daemon_args.iter().map(|a| a.to_string()));
    let (mut daemon, daemon_log) = Proc::spawn_watched("the daemon", &args);
    wait_for_line(&daemon_log, "logs into", Duration::from_secs(20));
    let (mut sim, sim_log) = stream(original, port, impairment);
    finish_recording(&mut daemon, &mut sim, &sim_log, &logs)
}

#[test]
fn live_findings_through_reordering_and_lost_acks_are_the_files_and_a_motor_failure_keeps_its_buffer()
 {
    let dir = fresh_dir("live");
    std::fs::create_dir_all(&dir).unwrap();
    for (k, fault) in ["motor", "ekf:5000", "gps", "battery"]
        .into_iter()
        .enumerate()
    {
        let flight_dir = dir.join(fault.replace(':', "_"));
        std::fs::create_dir_all(&flight_dir).unwrap();
        let original = write_fault_flight(&flight_dir, fault);
        let from_file = our_findings(&original);
        assert!(!from_file.is_empty(), "{fault}: the file has findings");
        let session = receive(
            &flight_dir,
            &original,
            &[
                "--reorder=0.05",
                "--uplink-loss=0.05",
                &format!("--seed={}", k + 1),
            ],
            &[
                "--event-buffer=motors=actuator_outputs",
                "--event-before=2",
                "--event-after=1",
            ],
        );
        let live = manifest_findings(&session);
        assert_same(&format!("{fault}, live"), &live, &from_file);
        // The session read back finds the same.
        assert_same(
            &format!("{fault}, session"),
            &our_findings(&session),
            &from_file,
        );
        // Each finding opened the buffer's window: around the motor's drop, every sample of
        // the outputs from 2 s before to 1 s after is in the session, none outside.
        let Some(py) = crate::common::venv_python() else {
            continue;
        };
        let stored = flight_dir.join("stored.ulg");
        text_output(
            Command::new(BIN)
                .arg("export")
                .arg(&session)
                .arg("-o")
                .arg(&stored),
        );
        let counts = json_output(
            Command::new(py)
                .arg(crate::common::project().join("tests/event_windows.py"))
                .args([&original, &stored, &session.join("manifest.json")])
                .arg("motors"),
        );
        // 3 s of outputs at 50 Hz per finding (windows may merge).
        let kept = counts["gated_kept"].as_u64().unwrap();
        assert!(kept >= 150, "{fault}: {counts}");
        assert!(kept < counts["gated_total"].as_u64().unwrap(), "{counts}");
    }
}

#[test]
fn through_loss_and_an_outage_the_fill_makes_the_findings_the_files() {
    let dir = fresh_dir("filled");
    std::fs::create_dir_all(&dir).unwrap();
    for (k, fault) in ["ekf:5000", "motor"].into_iter().enumerate() {
        let flight_dir = dir.join(fault.replace(':', "_"));
        std::fs::create_dir_all(&flight_dir).unwrap();
        let original = write_fault_flight(&flight_dir, fault);
        let from_file = our_findings(&original);
        // 2 % of the vehicle's frames lost, and the link down for 1 s about halfway (the
        // flight streams for about 11 s at 70 % of 30 KB/s).
        let port = free_udp_port();
        let logs = flight_dir.join("logs");
        let (mut sim, sim_log) = Proc::spawn_watched(
            "the simulator",
            &[
                "sim".into(),
                original.to_string_lossy().into_owned(),
                "--udp-connect".into(),
                format!("127.0.0.1:{port}"),
                "--link-rate=30000".into(),
                "--loss=0.02".into(),
                "--outage-every-ms=6000".into(),
                "--outage-ms=1000".into(),
                format!("--seed={}", k + 5),
            ],
        );
        let mut daemon = Proc::spawn(
            "the daemon",
            &[
                "--udp".into(),
                format!("127.0.0.1:{port}"),
                "--log-dir".into(),
                logs.to_string_lossy().into_owned(),
                "--no-socket".into(),
            ],
        );
        wait_for_line(&sim_log, "whole log was sent", Duration::from_secs(120));
        std::thread::sleep(Duration::from_millis(500));
        assert!(daemon.terminate().success());
        let session = crate::common::procs::session_dirs(&logs).remove(0);
        let manifest: Json =
            serde_json::from_slice(&std::fs::read(session.join("manifest.json")).unwrap()).unwrap();
        let blind = manifest["diagnostics"]["blind"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(
            !blind.is_empty(),
            "{fault}: the stream had gaps: {manifest}"
        );
        let live = manifest_findings(&session);

        text_output(Command::new(BIN).arg("fill").arg(&session).args([
            "--json",
            "--udp",
            &port.to_string(),
        ]));
        let _ = sim.terminate();
        let manifest: Json =
            serde_json::from_slice(&std::fs::read(session.join("manifest.json")).unwrap()).unwrap();
        assert_eq!(manifest["diagnostics"]["after_fill"], true, "{manifest}");
        assert_eq!(
            manifest["diagnostics"]["blind"],
            Json::Null,
            "{fault}: all filled"
        );
        let filled = manifest_findings(&session);
        assert_same(&format!("{fault}, after the fill"), &filled, &from_file);
        assert_same(
            &format!("{fault}, info"),
            &our_findings(&session),
            &from_file,
        );
        // What the live stream found, it saw: each live finding is one of the file's, or
        // the same thing seen from the first sample after a gap that hid its start.
        for f in &live {
            let seen = from_file.iter().any(|g| {
                g["id"] == f["id"]
                    && g["evidence"]["type"] == f["evidence"]["type"]
                    && g["evidence"]["innovation"] == f["evidence"]["innovation"]
                    && g["evidence"]["motor_index"] == f["evidence"]["motor_index"]
                    && g["timestamp_us"].as_u64() <= f["timestamp_us"].as_u64()
            });
            assert!(
                seen,
                "{fault}: live {f} is none of the file's: {from_file:?}"
            );
        }
        eprintln!(
            "{fault}: {} blind span(s), {} of {} findings live",
            blind.len(),
            live.len(),
            from_file.len()
        );
    }
}

#[test]
fn a_motor_failure_reaches_the_ground_station_through_mavlink_router_as_a_statustext() {
    let Some(py) = crate::common::venv_python() else {
        return;
    };
    let dir = fresh_dir("statustext");
    std::fs::create_dir_all(&dir).unwrap();
    let original = write_fault_flight(&dir, "motor");
    // The vehicle's link (the simulator sends there), the ground station's endpoint and ours,
    // as on a companion computer.
    let (autopilot, gcs_port, ours) = (free_udp_port(), free_udp_port(), free_udp_port());
    let Some(_router) = router::start(autopilot, &[gcs_port, ours]) else {
        return;
    };
    let (gcs, heard) = router::ground_station(&py, gcs_port);
    wait_for_line(&heard, "ready", Duration::from_secs(20));
    let logs = dir.join("logs");
    let (mut daemon, daemon_log) = Proc::spawn_watched(
        "the daemon",
        &[
            "--udp".into(),
            format!("127.0.0.1:{ours}"),
            "--log-dir".into(),
            logs.to_string_lossy().into_owned(),
            "--no-socket".into(),
            "--diagnostics-statustext".into(),
            "critical".into(),
        ],
    );
    wait_for_line(&daemon_log, "logs into", Duration::from_secs(20));
    let (mut sim, sim_log) = stream(&original, autopilot, &[]);
    let session = finish_recording(&mut daemon, &mut sim, &sim_log, &logs);
    drop(gcs);
    let texts: Vec<Json> = heard
        .try_iter()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(&l).unwrap())
        .collect();
    // The flight's one finding, once, from our component under the vehicle's system id, as
    // MAVLink's CRITICAL; nothing else of ours.
    let found = manifest_findings(&session);
    assert_eq!(found.len(), 1, "{found:?}");
    let ours: Vec<&Json> = texts.iter().filter(|t| t["component"] == 155).collect();
    assert_eq!(
        ours,
        [&serde_json::json!({
            "system": 1,
            "component": 155,
            "severity": 2,
            "text": "ulog-recv: motor 2 output dropped to 0",
        })],
        "{texts:?}"
    );
}
