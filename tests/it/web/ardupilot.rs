//! An ArduPilot flight (DataFlash splits) on the page's API: listed as a PX4 flight is, with
//! its format; its view with its own report (`info --json`'s); its signals read from its own messages, as
//! pymavlink reads them; its MCAP download the CLI's export; the `.ulg` download answered
//! 422 with why, not a failure; its splits served as written.

use super::{daemon, free_http_port, get};
use crate::common::ardupilot::{signals_said, write_bin_session};
use crate::common::procs::{files_with_extension, fresh_dir};

#[test]
fn an_ardupilot_flight_is_listed_plotted_and_served_and_a_ulg_download_says_it_does_not_apply() {
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
    // Its report is what `info --json` says of the session: ArduPilot's own, its timeline's
    // times and dropouts in it.
    let info = crate::common::json_output(
        std::process::Command::new(crate::common::procs::BIN)
            .arg("info")
            .arg(&session)
            .arg("--json"),
    );
    assert_eq!(view["report"], info, "the API's report is info's");
    assert_eq!(view["report"]["session"]["autopilot"], "ardupilot");
    assert!(
        view["report"]["flight"]["first_us"].as_u64().is_some(),
        "{info}"
    );
    assert_eq!(view["report"]["session"]["dropouts_remaining"], 0);
    // What the vehicle dropped before its stream, by its own DMS records, in its line.
    assert_eq!(
        row["dropped_at_source"],
        info["flight"]["dropped_at_source"]
    );
    assert_eq!(view["flight"]["id"], id.as_str());

    // The first look: each signal as many samples as pymavlink reads, its extremes kept.
    let signals = get(&addr, &format!("/api/flights/{id}/signals"), &[]);
    assert_eq!(signals.status, 200, "{}", signals.text());
    let signals = signals.json();
    if let Some(py) = crate::common::venv_python() {
        let said = signals_said(&py, &splits);
        let series = signals["series"].as_array().unwrap();
        let names: Vec<&str> = series.iter().map(|s| s["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["battery voltage", "height", "attitude error"]);
        for s in series {
            let name = s["name"].as_str().unwrap();
            let values: Vec<f64> = (s["values"].as_array().unwrap().iter())
                .filter_map(|v| v.as_f64())
                .collect();
            let (min, max) = values
                .iter()
                .fold((f64::MAX, f64::MIN), |(a, b), &v| (a.min(v), b.max(v)));
            assert_eq!(s["samples"], said[name]["samples"], "{name}: {said}");
            let close = |a: f64, b: &serde_json::Value| (a - b.as_f64().unwrap()).abs() < 1e-3;
            assert!(close(min, &said[name]["min"]), "{name}: {min} {said}");
            assert!(close(max, &said[name]["max"]), "{name}: {max} {said}");
        }
        assert!(said["height"]["max"].as_f64().unwrap() > 5.0, "{said}");
    }
    let fields = signals["fields"].as_array().unwrap();
    assert!(fields.iter().any(|f| f == "BAT.Curr"), "{signals}");
    let one = get(
        &addr,
        &format!("/api/flights/{id}/signals?field=BAT.Curr"),
        &[],
    )
    .json();
    assert_eq!(one["series"][0]["name"], "BAT.Curr", "{one}");
    assert_eq!(
        one["series"][0]["samples"], signals["series"][0]["samples"],
        "a sample of the current in each BAT of the first battery"
    );
    // The MCAP download, and the whole flight as one .bin, are the CLI's exports of it.
    for format in ["mcap", "bin"] {
        let download = get(
            &addr,
            &format!("/api/flights/{id}/download?format={format}"),
            &[],
        );
        assert_eq!(download.status, 200, "{format}: {}", download.text());
        let exported = dir.join(format!("exported.{format}"));
        crate::common::procs::run_ok(&[
            "export",
            session.to_str().unwrap(),
            "-o",
            exported.to_str().unwrap(),
        ]);
        assert!(
            download.body == std::fs::read(&exported).unwrap(),
            "the .{format} as exported"
        );
    }
    let ulg = get(
        &addr,
        &format!("/api/flights/{id}/download?format=ulg"),
        &[],
    );
    assert_eq!(ulg.status, 422, "{}", ulg.text());
    assert!(
        ulg.text().contains("not for an ArduPilot flight"),
        "{}",
        ulg.text()
    );
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
