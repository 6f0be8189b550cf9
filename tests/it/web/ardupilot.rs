//! An ArduPilot flight (DataFlash splits) on the page's API: listed as a PX4 flight is, with
//! its format; its view without the ULog report; what reads ULog (signals, the `.ulg` and
//! `.mcap` downloads) answered 422 with why, not a failure; its splits served as written.

use super::{daemon, free_http_port, get};
use crate::common::ardupilot::write_bin_session;
use crate::common::procs::{files_with_extension, fresh_dir};

#[test]
fn an_ardupilot_flight_is_listed_and_served_and_what_reads_ulog_says_it_does_not_apply() {
    let dir = fresh_dir("web-ardupilot");
    let logs = dir.join("logs");
    let Some(session) = write_bin_session(&logs) else {
        return;
    };
    let id = session.file_name().unwrap().to_string_lossy().into_owned();
    let (mut d, _udp, addr) = daemon(&logs, &free_http_port(), &[]);
    let flights = get(&addr, "/api/flights", &[]).json();
    let row = flights
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == id.as_str())
        .unwrap_or_else(|| panic!("{id} not listed: {flights}"))
        .clone();
    assert_eq!(row["log_format"], "dataflash");
    assert!(row["closed"].as_bool().unwrap());
    let splits = files_with_extension(&session, "bin");
    assert!(splits.len() >= 3, "{splits:?}");
    assert_eq!(row["splits"].as_array().unwrap().len(), splits.len());
    assert!(row["duration_s"].as_f64().unwrap() > 60.0, "{row}");

    let view = get(&addr, &format!("/api/flights/{id}"), &[]);
    assert_eq!(view.status, 200, "{}", view.text());
    let view = view.json();
    assert!(view["report"].is_null(), "{view}");
    assert_eq!(view["flight"]["id"], id.as_str());

    for path in [
        format!("/api/flights/{id}/signals"),
        format!("/api/flights/{id}/download?format=ulg"),
        format!("/api/flights/{id}/download?format=mcap"),
    ] {
        let reply = get(&addr, &path, &[]);
        assert_eq!(reply.status, 422, "{path}: {}", reply.text());
        assert!(
            reply.text().contains("not for an ArduPilot flight"),
            "{path}: {}",
            reply.text()
        );
    }
    let first = get(
        &addr,
        &format!("/api/flights/{id}/files/split_0000.bin"),
        &[],
    );
    assert_eq!(first.status, 200);
    assert!(
        first.body == std::fs::read(&splits[0]).unwrap(),
        "the split as written"
    );
    assert!(d.terminate().success());
}
