//! The API against the CLI on the same session: `GET /api/flights/{id}` holds what `info
//! --json` prints and what `uploads --json` prints of it, the flights' list agrees with the
//! manifest, the downloads are byte for byte what `export` writes and the split on disk, and
//! the delete asks for the CSRF token and takes only that flight; the flight view's signals
//! are what pyulog reads of a real log; a fetch from the SD card and the fill take turns on
//! the vehicle's files.

use std::process::Command;
use std::time::Duration;

use super::{closed_flights, daemon, free_http_port, get, post_as_page, request, session, stream};
use crate::common::procs::{BIN, fresh_dir, wait_for_line};
use crate::common::{json_output, text_output};
use crate::diagnostics::write_fault_flight;

#[test]
fn the_api_says_what_info_and_uploads_say_and_downloads_what_export_writes() {
    let dir = fresh_dir("web-api");
    std::fs::create_dir_all(&dir).unwrap();
    let flight = write_fault_flight(&dir, "motor");
    let logs = dir.join("logs");
    let (mut daemon, port, addr) = daemon(&logs, &free_http_port(), &[]);
    assert!(
        addr.starts_with("127.0.0.1:"),
        "a port alone binds loopback: {addr}"
    );
    // Two flights: one whole, one through 4 % loss (dropouts to count).
    for impairment in [&[][..], &["--loss", "0.04", "--seed", "11"][..]] {
        let (mut sim, sim_lines) = stream(&flight, port, impairment);
        wait_for_line(
            &sim_lines,
            "the whole log was sent",
            Duration::from_secs(120),
        );
        assert!(sim.wait(Duration::from_secs(30)).success());
    }
    let flights = closed_flights(&addr, &[], 2);
    // Newest first.
    assert!(
        flights[0]["id"].as_str() > flights[1]["id"].as_str(),
        "{flights:?}"
    );
    let uploads: Vec<serde_json::Value> = text_output(
        Command::new(BIN)
            .args(["uploads", "--json", "--log-dir"])
            .arg(&logs),
    )
    .lines()
    .map(|l| serde_json::from_str(l).unwrap())
    .collect();
    for row in &flights {
        let id = row["id"].as_str().unwrap();
        let dir = session(&logs, id);
        let reply = get(&addr, &format!("/api/flights/{id}"), &[]);
        assert_eq!(reply.status, 200, "{}", reply.text());
        let api = reply.json();
        let info = json_output(Command::new(BIN).arg("info").arg(&dir).arg("--json"));
        assert_eq!(api["report"], info, "{id}: the API's report is info's");
        let theirs = uploads
            .iter()
            .find(|u| u["session"] == id)
            .expect("in uploads");
        assert_eq!(&api["flight"]["uploads"], theirs, "{id}: uploads");
        assert_eq!(api["flight"], *row, "{id}: the line is the list's");
        // The line's figures, from what info read of the flight.
        let session = &info["session"];
        assert_eq!(row["dropouts_received"], session["dropouts_received"]);
        assert_eq!(
            row["splits"].as_array().unwrap().len(),
            session["splits"].as_u64().unwrap() as usize
        );
        let findings: Vec<&str> = row["findings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["analyzer"].as_str().unwrap())
            .collect();
        assert_eq!(findings, ["motor_failure"], "{id}");
        assert_eq!(row["worst_severity"], "critical");
        // Downloads: the flight as export writes it, and the split as it is on disk.
        for format in ["ulg", "mcap"] {
            let out = dir.with_extension(format);
            text_output(
                Command::new(BIN)
                    .arg("export")
                    .arg(&dir)
                    .arg("-o")
                    .arg(&out),
            );
            let reply = get(
                &addr,
                &format!("/api/flights/{id}/download?format={format}"),
                &[],
            );
            assert_eq!(reply.status, 200, "{format}: {}", reply.text());
            let disposition = reply.header("content-disposition").unwrap_or_default();
            assert!(
                disposition.contains(&format!("{id}.{format}")),
                "{disposition}"
            );
            assert!(
                reply.body == std::fs::read(&out).unwrap(),
                "{id}: the {format} download is not what export writes ({} bytes against {})",
                reply.body.len(),
                std::fs::metadata(&out).unwrap().len()
            );
        }
        let reply = get(
            &addr,
            &format!("/api/flights/{id}/files/split_0000.ulg"),
            &[],
        );
        assert_eq!(reply.status, 200);
        assert!(reply.body == std::fs::read(dir.join("split_0000.ulg")).unwrap());
    }
    let whole = flights
        .iter()
        .find(|f| f["dropouts_received"] == 0)
        .expect("a whole flight");
    let lossy = flights
        .iter()
        .find(|f| f["dropouts_received"] != 0)
        .expect("a lossy flight");
    assert_eq!(whole["fill"]["state"], "whole");
    assert_eq!(lossy["fill"]["state"], "not_filled");
    assert!(
        lossy["dropout_ms_received"].as_u64().unwrap() > 0,
        "{lossy}"
    );

    // The lossy flight's plot has holes where the stream lost data, the whole one none.
    for (flight, lossy) in [(whole, false), (lossy, true)] {
        let id = flight["id"].as_str().unwrap();
        let signals = get(&addr, &format!("/api/flights/{id}/signals"), &[]).json();
        let voltage = signals["series"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == "battery voltage")
            .unwrap_or_else(|| panic!("{id}: no battery voltage in {signals}"));
        let holes = voltage["values"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|v| v.is_null())
            .count() as u64;
        let dropouts = flight["dropouts_received"].as_u64().unwrap();
        assert_eq!(holes > 0, lossy, "{id}: {holes} holes");
        assert!(
            holes <= dropouts,
            "{id}: {holes} holes, {dropouts} dropouts"
        );
    }

    // The delete: refused without the token, then the lossy flight only.
    let id = lossy["id"].as_str().unwrap();
    let path = format!("/api/flights/{id}/delete");
    let refused = request(&addr, "POST", &path, &[], b"");
    assert_eq!(refused.status, 403, "{}", refused.text());
    assert!(session(&logs, id).exists());
    let token = get(&addr, "/api/session", &[]).json()["csrf_token"]
        .as_str()
        .unwrap()
        .to_owned();
    // What this daemon does not do, said: it neither fills (no --fill auto) nor uploads, and
    // the vehicle is gone.
    let csrf = [format!("X-CSRF-Token: {token}")];
    for (action, why) in [("fill", "--fill auto"), ("upload", "uploads nowhere")] {
        let reply = request(
            &addr,
            "POST",
            &format!("/api/flights/{id}/{action}"),
            &csrf,
            b"",
        );
        assert_eq!(reply.status, 409, "{action}: {}", reply.text());
        assert!(
            reply.json()["error"].as_str().unwrap().contains(why),
            "{}",
            reply.text()
        );
    }
    let offered = get(&addr, "/api/status", &[]).json()["actions"].clone();
    assert_eq!(
        offered,
        serde_json::json!({"fill": false, "upload": false, "vehicle_logs": true})
    );
    let reply = get(&addr, "/api/vehicle/logs", &[]);
    assert_eq!(reply.status, 503, "{}", reply.text());
    let done = request(&addr, "POST", &path, &csrf, b"");
    assert_eq!(done.status, 200, "{}", done.text());
    assert!(!session(&logs, id).exists());
    let kept = whole["id"].as_str().unwrap();
    assert!(session(&logs, kept).join("split_0000.ulg").exists());
    let left = get(&addr, "/api/flights", &[]).json();
    assert_eq!(left.as_array().unwrap().len(), 1, "{left}");
    assert_eq!(left[0]["id"], kept);
    assert!(daemon.terminate().success());
}

/// The flight view's signals of a real PX4 log streamed whole: each series is what pyulog
/// reads of the original file (the attitude error made from its quaternions alike), sample
/// for sample; one field asked for by name is too; a name that is no field's is refused.
#[test]
fn the_signals_are_what_pyulog_reads_of_the_real_log() {
    let Some(py) = crate::common::venv_python() else {
        return;
    };
    let Some(logs_beside) = crate::common::shared_logs() else {
        return;
    };
    let original = logs_beside
        .into_iter()
        .find(|p| p.ends_with("sample_px4_events.ulg"))
        .expect("sample_px4_events.ulg beside the project");
    let dir = fresh_dir("web-signals");
    let logs = dir.join("logs");
    let (mut daemon, port, addr) = daemon(&logs, &free_http_port(), &[]);
    let (mut sim, sim_lines) = stream(&original, port, &["--link-rate", "1000000"]);
    wait_for_line(
        &sim_lines,
        "the whole log was sent",
        Duration::from_secs(120),
    );
    assert!(sim.wait(Duration::from_secs(30)).success());
    let id = closed_flights(&addr, &[], 1)[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let script = crate::common::project().join("tests/signals_pyulog.py");
    let theirs = json_output(Command::new(&py).arg(&script).arg(&original));

    let reply = get(&addr, &format!("/api/flights/{id}/signals"), &[]);
    assert_eq!(reply.status, 200, "{}", reply.text());
    let ours = reply.json();
    let names: Vec<&str> = ours["series"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["battery voltage", "height", "attitude error"]);
    for series in ours["series"].as_array().unwrap() {
        let name = series["name"].as_str().unwrap();
        same_series(series, &theirs[name], name);
    }
    let fields: Vec<&str> = ours["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert!(fields.contains(&"battery_status.voltage_v"), "{fields:?}");
    assert!(fields.contains(&"vehicle_attitude.q[3]"), "{fields:?}");
    assert!(
        !fields.iter().any(|f| f
            .split_once('.')
            .is_some_and(|(_, field)| field == "timestamp")),
        "{fields:?}"
    );

    // One field by name.
    let field = "vehicle_local_position.vx";
    let ours = get(
        &addr,
        &format!("/api/flights/{id}/signals?field={field}"),
        &[],
    )
    .json();
    assert_eq!(ours["series"].as_array().unwrap().len(), 1, "{ours}");
    let theirs = json_output(Command::new(&py).arg(&script).arg(&original).arg(field));
    same_series(&ours["series"][0], &theirs[field], field);
    for bad in ["nothing", "no_topic.x", "..%2F..%2Fetc.passwd"] {
        let reply = get(
            &addr,
            &format!("/api/flights/{id}/signals?field={bad}"),
            &[],
        );
        match reply.status {
            400 => assert!(reply.text().contains("TOPIC.FIELD"), "{}", reply.text()),
            // A well-formed name of no field: no series.
            200 => assert_eq!(reply.json()["series"], serde_json::json!([]), "{bad}"),
            other => panic!("{bad}: {other} {}", reply.text()),
        }
    }
    assert!(daemon.terminate().success());
}

/// `ours` (a series of the API, not thinned) holds `theirs`' times and values.
fn same_series(ours: &serde_json::Value, theirs: &serde_json::Value, name: &str) {
    assert_eq!(ours["t_us"], theirs["t_us"], "{name}: the times");
    let (a, b) = (
        ours["values"].as_array().unwrap(),
        theirs["values"].as_array().unwrap(),
    );
    assert_eq!(a.len(), b.len(), "{name}");
    assert_eq!(ours["samples"].as_u64(), Some(b.len() as u64), "{name}");
    for (k, (x, y)) in a.iter().zip(b).enumerate() {
        match (x.as_f64(), y.as_f64()) {
            (Some(x), Some(y)) => assert!(
                (x - y).abs() <= 1e-9 * y.abs().max(1.0),
                "{name}[{k}]: {x} against {y}"
            ),
            _ => assert_eq!(x, y, "{name}[{k}]"),
        }
    }
}

/// A fetch from the page asked for while the fill reads the same vehicle's SD log over the
/// same session: the two take turns with the session's one open file, so the fill makes the
/// flight whole and the fetch's copy passes the vehicle's CRC-32 (neither reads the other's
/// file); the fetch's progress was shown on the way.
#[test]
fn a_fetch_from_the_page_and_the_fill_take_turns_on_the_vehicles_files() {
    let dir = fresh_dir("web-fetch-and-fill");
    std::fs::create_dir_all(&dir).unwrap();
    let flight = write_fault_flight(&dir, "motor");
    let logs = dir.join("logs");
    let (mut daemon, port, addr) = daemon(&logs, &free_http_port(), &["--fill", "auto"]);
    // Streamed through loss at 40 KB/s again and again: the vehicle serves its SD log in
    // between.
    let (_sim, _sim_lines) = super::stream_again(
        &flight,
        port,
        &["--loss", "0.03", "--seed", "5", "--link-rate", "40000"],
    );
    let t0 = std::time::Instant::now();
    let id = loop {
        let rows = get(&addr, "/api/flights", &[]).json();
        if let Some(row) = rows
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["closed"] == true)
        {
            break row["id"].as_str().unwrap().to_owned();
        }
        assert!(t0.elapsed() < Duration::from_secs(120), "no closed flight");
        std::thread::sleep(Duration::from_millis(100));
    };
    // At once, while the fill starts on it.
    let listed = get(&addr, "/api/vehicle/logs", &[]);
    assert_eq!(listed.status, 200, "{}", listed.text());
    let path = listed.json()[0]["path"].as_str().unwrap().to_owned();
    let asked = post_as_page(&addr, &format!("/api/vehicle/fetch?path={path}"));
    assert_eq!(asked.status, 202, "{}", asked.text());
    let mut states = Vec::new();
    let fetch = loop {
        let now = get(&addr, "/api/vehicle/fetch", &[]).json();
        let state = now["state"].as_str().unwrap().to_owned();
        if states.last() != Some(&state) {
            states.push(state.clone());
        }
        if state == "done" || state == "failed" {
            break now;
        }
        assert!(t0.elapsed() < Duration::from_secs(240), "the fetch: {now}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(fetch["state"], "done", "{fetch}");
    assert!(states.contains(&"fetching".to_owned()), "{states:?}");
    let copy = logs.join("sd-card").join(fetch["file"].as_str().unwrap());
    assert_eq!(
        std::fs::metadata(&copy).unwrap().len(),
        fetch["size_bytes"].as_u64().unwrap()
    );
    // The fill, over the same session meanwhile: the flight whole.
    loop {
        let row = get(&addr, "/api/flights", &[])
            .json()
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == id.as_str())
            .cloned()
            .expect("the flight");
        match row["fill"]["state"].as_str().unwrap() {
            "filled" => break,
            "not_filled" => {}
            other => panic!("the fill: {other}: {row}"),
        }
        assert!(t0.elapsed() < Duration::from_secs(240), "the fill: {row}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let info = json_output(
        Command::new(BIN)
            .arg("info")
            .arg(session(&logs, &id))
            .arg("--json"),
    );
    assert_eq!(
        info["session"]["dropouts_remaining"], 0,
        "{}",
        info["session"]
    );
    assert!(daemon.terminate().success());
}

/// A fetch from the page stops while the vehicle is armed (its link is the stream's then) and
/// goes on from where it stopped once it is disarmed; meanwhile the SD card is not listed.
#[test]
fn a_fetch_from_the_page_waits_while_the_vehicle_is_armed() {
    let Some(real) = crate::common::shared_logs() else {
        return;
    };
    let log = real
        .into_iter()
        .find(|p| p.ends_with("sample_log_small.ulg"))
        .expect("sample_log_small.ulg beside the project");
    let dir = fresh_dir("web-fetch-armed");
    let logs = dir.join("logs");
    let (mut daemon, port, addr) = daemon(&logs, &free_http_port(), &[]);
    // Armed from 5 s to 10 s after its start.
    let (_sim, _sim_lines) = super::stream_again(
        &log,
        port,
        &[
            "--link-rate",
            "60000",
            "--arm-after",
            "5",
            "--disarm-after",
            "10",
        ],
    );
    let t0 = std::time::Instant::now();
    let listed = loop {
        let reply = get(&addr, "/api/vehicle/logs", &[]);
        if reply.status == 200 {
            break reply.json();
        }
        assert!(t0.elapsed() < Duration::from_secs(4), "{}", reply.text());
        std::thread::sleep(Duration::from_millis(100));
    };
    let path = listed[0]["path"].as_str().unwrap().to_owned();
    let asked = post_as_page(&addr, &format!("/api/vehicle/fetch?path={path}"));
    assert_eq!(asked.status, 202, "{}", asked.text());
    let state = || get(&addr, "/api/vehicle/fetch", &[]).json();
    // Paused once the vehicle arms, and nothing fetched meanwhile.
    let paused = loop {
        let now = state();
        if now["state"] == "paused" {
            break now;
        }
        assert_ne!(now["state"], "done", "done before the vehicle armed: {now}");
        assert!(t0.elapsed() < Duration::from_secs(9), "not paused: {now}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let partial = logs
        .join("sd-card")
        .join(format!("{}.part", paused["file"].as_str().unwrap()));
    let have = std::fs::metadata(&partial).unwrap().len();
    assert!(have > 0, "nothing fetched before the vehicle armed");
    let refused = get(&addr, "/api/vehicle/logs", &[]);
    assert_eq!(refused.status, 409, "{}", refused.text());
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(state()["state"], "paused");
    assert_eq!(
        std::fs::metadata(&partial).unwrap().len(),
        have,
        "fetched while armed"
    );
    // Disarmed: it goes on and ends whole.
    let done = loop {
        let now = state();
        if now["state"] == "done" || now["state"] == "failed" {
            break now;
        }
        assert!(t0.elapsed() < Duration::from_secs(120), "{now}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(done["state"], "done", "{done}");
    // Whole (the fetch checked it against the vehicle's CRC-32), and pyulog reads it.
    let copy = logs.join("sd-card").join(done["file"].as_str().unwrap());
    assert_eq!(
        std::fs::metadata(&copy).unwrap().len(),
        listed[0]["size_bytes"].as_u64().unwrap()
    );
    assert!(!partial.exists(), "the .part is left");
    crate::common::check_with_pyulog(&copy);
    assert!(daemon.terminate().success());
}
