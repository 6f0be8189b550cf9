//! The flight diagnostics on ArduPilot's own logs (`../shared/testdata/bin/`), held against
//! what pymavlink's DFReader reads of them (`tests/dataflash_vehicle_said.py`): the
//! vehicle's `ERR` and `EV` records listed as it logged them, the radio failsafe it flew
//! through found as an RC loss over the span its `RCI2` flags say, beside its own
//! `ERR`, and a clean flight found clean. From the file (`info --diagnostics`) and live:
//! the log streamed by the simulated ArduPilot into the daemon, whose diagnostics make the
//! same finding as the log comes, an event in the session's manifest.

use crate::common;

use serde_json::Value as Json;

use common::ardupilot::{ardupilot_logs, replay_with, vehicle_said};

/// `ulog-recv info --diagnostics --json PATH`.
pub fn diagnostics_of(path: &std::path::Path) -> Json {
    let out = common::procs::run_ok(&["info", "--diagnostics", "--json", path.to_str().unwrap()]);
    serde_json::from_str(&out).unwrap()
}

/// The vehicle's records as ours list them, in the fields pymavlink's are in.
fn records_as_said(ours: &Json) -> Vec<Json> {
    ours["vehicle_records"]
        .as_array()
        .expect("an ArduPilot log's diagnostics list the vehicle's records")
        .iter()
        .map(|r| {
            let mut r = r.clone();
            let r = r.as_object_mut().unwrap();
            assert!(!r["text"].as_str().unwrap().is_empty(), "{r:?}");
            r.remove("text");
            Json::Object(r.clone())
        })
        .collect()
}

/// The one event the daemon's diagnostics made in `session` (as `info --json` lists it),
/// which must carry `finding`: its detail, and the session's report.
pub fn the_live_finding(session: &std::path::Path, finding: &Json) -> (String, Json) {
    let info: Json = serde_json::from_str(&common::procs::run_ok(&[
        "info",
        "--json",
        session.to_str().unwrap(),
    ]))
    .unwrap();
    let events = info["session"]["events"].as_array().unwrap();
    let [event] = &events[..] else {
        panic!("{events:?}")
    };
    assert_eq!(event["source"], "diagnostic", "{event}");
    assert_eq!(event["finding"], *finding, "{event}");
    (event["detail"].as_str().unwrap().to_owned(), info)
}

/// An ArduPilot flight's findings (`ours`: `info --diagnostics --json`) against what
/// pymavlink reads of it (`said`): the vehicle's records all listed; with `rc_failsafe`, one
/// RC loss (from the `RCI2` failsafe flag to the disarm) beside the vehicle's `ERR` for it,
/// else nothing found at all.
pub fn check_against_the_vehicle(name: &str, ours: &Json, said: &Json, rc_failsafe: bool) {
    assert_eq!(
        records_as_said(ours),
        said["records"].as_array().unwrap().to_vec(),
        "{name}"
    );
    let findings = ours["diagnostics"].as_array().unwrap();
    let rc = said["rc_failsafe"].as_array().unwrap();
    if !rc_failsafe {
        assert!(findings.is_empty(), "{name}: {findings:?}");
        assert!(rc.is_empty(), "{name}: {rc:?}");
        return;
    }
    assert_eq!(rc.len(), 1, "{name}: {said}");
    let [f] = &findings[..] else {
        panic!("{name}: {findings:?}")
    };
    assert_eq!(f["id"], "rc_loss", "{f}");
    assert_eq!(f["severity"], "critical", "{f}");
    assert_eq!(f["timestamp_us"], rc[0][0], "{f}");
    assert_eq!(f["end_timestamp_us"], rc[0][1], "{f}");
    // Beside it: the vehicle's own radio failsafe (ERR subsystem 5, code 1: occurred).
    let records = ours["vehicle_records"].as_array().unwrap();
    let beside: Vec<&Json> = ours["beside"][0]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| &records[k.as_u64().unwrap() as usize])
        .collect();
    assert!(
        beside.iter().any(|r| r["subsystem"] == 5
            && r["code"] == 1
            && r["text"] == "radio failsafe: occurred"),
        "{beside:?}"
    );
}

#[test]
fn ardupilots_logs_are_diagnosed_beside_what_the_vehicle_logged() {
    let Some(logs) = ardupilot_logs() else { return };
    let Some(py) = common::venv_python() else {
        return;
    };
    for log in &logs {
        let name = log.file_stem().unwrap().to_str().unwrap();
        let said = vehicle_said(&py, std::slice::from_ref(log));
        let rc_failsafe = name != "sitl_copter_hover";
        check_against_the_vehicle(name, &diagnostics_of(log), &said, rc_failsafe);
        // In words too: each finding with the vehicle's records of its moment under it.
        let text = common::procs::run_ok(&["info", "--diagnostics", log.to_str().unwrap()]);
        let listed = format!(
            "The vehicle's own records: {} (ERR, EV)",
            said["records"].as_array().unwrap().len()
        );
        assert!(text.contains(&listed), "{text}");
        if name != "sitl_copter_hover" {
            assert!(
                text.contains("rc_loss")
                    && text.contains("the vehicle: 57.035 s  ERR  radio failsafe: occurred"),
                "{text}"
            );
        }
    }
}

#[test]
fn the_daemon_diagnoses_an_ardupilot_stream_as_it_comes() {
    let Some(logs) = ardupilot_logs() else { return };
    let Some(py) = common::venv_python() else {
        return;
    };
    let log = logs
        .iter()
        .find(|l| l.ends_with("sitl_copter_rc_failsafe.bin"))
        .expect("ArduPilot's RC failsafe log");
    let from_file = diagnostics_of(log);
    let statustext = ["--diagnostics-statustext", "critical"];
    let (splits, counters, lines) = replay_with(log, "diagnosed_live", &[], &statustext);
    let session = splits[0].parent().unwrap();
    // The received flight, its splits read in order, is diagnosed against what pymavlink
    // reads of the same splits; the vehicle may have dropped a message at the source, so
    // the finding is the card log's within a tenth of a second.
    let received = diagnostics_of(session);
    let said = vehicle_said(&py, &splits);
    check_against_the_vehicle("received", &received, &said, true);
    let (a, b) = (&received["diagnostics"][0], &from_file["diagnostics"][0]);
    for key in ["timestamp_us", "end_timestamp_us"] {
        let (a, b) = (a[key].as_i64().unwrap(), b[key].as_i64().unwrap());
        assert!((a - b).abs() < 100_000, "{key}: {a} vs {b}; {counters}");
    }
    // Live: the daemon made the finding as the log came, an event of the session.
    let (detail, info) = the_live_finding(session, &received["diagnostics"][0]);
    assert!(
        detail.contains("the vehicle: ERR radio failsafe: occurred at 57.035 s"),
        "{detail}"
    );
    assert_eq!(info["session"]["diagnostics"]["analyzers"], "all", "{info}");
    // And told the ground station, as for a PX4.
    let told: Vec<&String> = (lines.iter())
        .filter(|l| l.contains("STATUSTEXT for the ground station"))
        .collect();
    let [told] = &told[..] else {
        panic!("{lines:#?}")
    };
    assert!(
        told.contains("text=ulog-recv: RC lost for 28.9 s"),
        "{told}"
    );
}
