//! An ArduPilot flight on the page in a real browser (Debian's chromium over chromedriver),
//! against the real ArduPilot (its SITL): flown and streamed through a link that loses 5 %
//! each way from a vehicle whose stream buffer is small (`LOG_MAV_BUFSIZE` 2: it drops
//! messages at the source every second), received by one daemon, then a daemon with
//! `--fill auto` and its page. The page lists the flight as ArduPilot's, shows it filled from the vehicle's card
//! over MAVLink FTP once it is down, and its view draws each filled gap on the timeline, no
//! dropout left, and plots its signals; the `.bin` downloaded from the page is byte for byte
//! what `export` writes, and holds every message of the card's log in the streamed window
//! (pymavlink on both sides). Screenshots go to `target/artifacts/web/`.
//!
//! Without the SITL, chromium or chromedriver the test says SKIPPED, and fails under CI.

use std::time::{Duration, Instant};

use serde_json::json;

use super::browser::{cell, click, open_page, runtime, screenshot, until};
use super::page_address;
use crate::ardupilot_sitl::{daemon, free_tcp_port, wait_for_blocks};
use crate::common::ardupilot::{ArduPilot, Impairment, Relay, compare_filled};
use crate::common::procs::{fresh_dir, run_ok, session_dirs};

#[test]
fn an_ardupilot_flight_is_filled_from_the_card_drawn_plotted_and_downloaded_on_the_page() {
    let Some(py) = crate::common::venv_python() else {
        return;
    };
    let relay = Relay::start(Impairment {
        loss_down: 0.05,
        loss_up: 0.05,
        reorder: 0.0,
    });
    let Some(sitl) = ArduPilot::start_with("web", 6, relay.listen, &[("LOG_MAV_BUFSIZE", "2")])
    else {
        return;
    };
    let dir = fresh_dir("web-ardupilot-browser");
    let logs = dir.join("logs");
    let downloads = dir.join("downloads");
    std::fs::create_dir_all(&downloads).unwrap();
    // One daemon records the flight; it keeps streaming on the ground (the SITL logs while
    // disarmed), so the flight ends with that daemon, as a companion's power does.
    let (mut first, _lines) = daemon(&logs, relay.daemon_port, 600, free_tcp_port(), &[]);
    wait_for_blocks(&relay, 1);
    let mut flight = sitl.fly(&py, 10, 10);
    flight.stage("landed", Duration::from_secs(240));
    std::thread::sleep(Duration::from_secs(2));
    assert!(first.terminate().success());
    let sessions = session_dirs(&logs);
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    let session = sessions[0].clone();
    let id = session.file_name().unwrap().to_string_lossy().into_owned();
    // The daemon started again, with its page and `--fill auto`: it fills the closed flight
    // from the vehicle's card beside its own stream.
    let http = ["--http".into(), free_tcp_port().to_string()];
    let extra = [http.as_slice(), &["--fill".into(), "auto".into()]].concat();
    let (mut d, lines) = daemon(&logs, relay.daemon_port, 600, free_tcp_port(), &extra);
    let addr = page_address(lines);

    runtime().block_on(async {
        let Some((_driver, client)) = open_page(&downloads, &addr).await else {
            return;
        };
        let row = until(&client, "the ArduPilot flight", &format!("const r = document.querySelector('tr[data-id=\"{id}\"]'); return r && r.querySelector('.vehicle').textContent;")).await;
        assert_eq!(row, json!("sysid 1 · ArduPilot"));
        // The fill, as the row follows it.
        let t0 = Instant::now();
        let filled = loop {
            let fill = client.execute(&cell(&id, "fill"), vec![]).await.unwrap();
            let text = fill.as_str().unwrap_or_default().to_owned();
            if ["filled", "failed", "not needed"].iter().any(|s| text.starts_with(s)) || text.contains("gaps left") {
                break text;
            }
            assert!(t0.elapsed() < Duration::from_secs(300), "not filled in 300 s: {fill}");
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        assert!(filled.starts_with("filled ("), "{filled}");
        // The vehicle's small buffer dropped messages before its stream: the row says so.
        let stream = until(&client, "the stream's cell", &cell(&id, "stream")).await;
        assert!(stream.as_str().unwrap().contains("dropped by the vehicle"), "{stream}");
        screenshot(&client, "07-ardupilot-filled.png").await;

        // Its view: the fill's gaps on the timeline, no dropout left, as `info` says.
        let info: serde_json::Value = serde_json::from_str(&run_ok(&["info", &session.display().to_string(), "--json"])).unwrap();
        let figures = &info["session"];
        let gaps = figures["filled"].as_array().unwrap().len();
        assert!(gaps > 0, "{figures}");
        assert_eq!(figures["dropouts_remaining"], 0, "{figures}");
        click(&client, &format!("tr[data-id=\"{id}\"] td.start")).await;
        let facts = until(&client, "its view", &format!("const f = document.getElementById('flight'); return !f.hidden && f.dataset.id === '{id}' && document.getElementById('flight-facts').textContent.includes('records') && document.getElementById('flight-facts').textContent;")).await;
        let facts = facts.as_str().unwrap();
        assert!(facts.contains(&format!("{} gaps, {} records", figures["gaps_filled"], figures["records_recovered"])), "{facts}");
        assert!(facts.contains("0 dropouts"), "{facts}");
        let marks = until(&client, "the fill on the timeline", "const t = document.getElementById('timeline'); return t.querySelectorAll('.filled').length > 0 && [t.querySelectorAll('.filled').length, t.querySelectorAll('.dropout').length];").await;
        assert_eq!(marks, json!([gaps, 0]), "the timeline's filled gaps and dropouts");
        let plotted = until(&client, "its signals plotted", "const p = [...document.querySelectorAll('#plots .plot')]; return p.length === 3 && p.every(x => x.querySelector('canvas')) && p.map(x => x.dataset.name);").await;
        assert_eq!(plotted, json!(["battery voltage", "height", "attitude error"]));
        screenshot(&client, "08-ardupilot-view.png").await;

        // The whole flight downloaded from the page: export's `.bin`, the fill in place.
        click(&client, &format!("tr[data-id=\"{id}\"] a.dl-bin")).await;
        let downloaded = downloads.join(format!("{id}.bin"));
        let t0 = Instant::now();
        while !downloaded.exists() {
            assert!(t0.elapsed() < Duration::from_secs(60), "no download in {}", downloads.display());
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let exported = dir.join("exported.bin");
        run_ok(&["export", &session.display().to_string(), "-o", &exported.display().to_string()]);
        assert!(std::fs::read(&downloaded).unwrap() == std::fs::read(&exported).unwrap(), "the download is not export's file");
        client.close().await.unwrap();
    });
    assert!(d.terminate().success());
    let downloaded = downloads.join(format!("{id}.bin"));
    if !downloaded.exists() {
        return; // The browser was skipped, and said so.
    }
    let card = sitl.stop();
    let after = compare_filled(&py, &card, &[downloaded]);
    let brief = crate::ardupilot_sitl::brief(&after);
    assert!(after["card_in_window"].as_u64().unwrap() > 5000, "{brief}");
    assert_eq!(
        after["missing"], 0,
        "the page's .bin lacks card messages: {brief}"
    );
    assert_eq!(after["unexplained_invented"], 0, "{brief}");
}
