//! The page in a real browser: Debian's chromium, headless, driven over WebDriver by
//! chromedriver, against the daemon receiving the simulated vehicle's flight with a motor
//! failure through 3 % loss, filling it from the vehicle's SD log and uploading it to a real
//! Garage and a real Flight Review. The page shows the flight appear while it streams, its
//! dropouts, its finding, the fill moving it to whole, the upload and the Flight Review link;
//! the vehicle's SD card lists the log the fill read as that flight's, fetches it whole with
//! its progress shown, and "fill now" is taken;
//! the flight's view draws its fills on the timeline and plots its signals, and a field
//! picked by name; the `.ulg` downloaded from the page is byte for byte what `export` writes;
//! the delete asks first and removes only that flight. A phone's screen shows the page without sideways
//! scrolling. Screenshots of each step go to `target/artifacts/web/`.
//!
//! Without chromium and chromedriver, Garage or Flight Review the test says SKIPPED, and
//! fails under CI.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;

use super::{daemon, free_http_port, stream_again};
use crate::common::flight_review::FlightReviewServer;
use crate::common::garage::{Garage, SECRET_KEY, credentials, free_tcp_port};
use crate::common::procs::{BIN, Proc, fresh_dir};
use crate::common::text_output;
use crate::diagnostics::write_fault_flight;

const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const CHROMIUM: &str = "/usr/bin/chromium";
/// How long a step of the page may take to show.
const STEP: Duration = Duration::from_secs(120);

pub(super) fn skip_or_fail(what: &str) {
    eprintln!("SKIPPED: {what}");
    assert!(
        std::env::var_os("CI").is_none(),
        "CI must run the browser test: {what}"
    );
}

/// Where the screenshots go: CI keeps `target/artifacts/`.
fn artifacts() -> PathBuf {
    let dir = crate::common::project().join("target/artifacts/web");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// chromedriver and the chromium it started, in a process group of their own: dropped (the
/// test over, or failed), the whole group is killed, as killing chromedriver alone would
/// leave its chromium running.
pub(super) struct Driver(Proc);

impl Drop for Driver {
    fn drop(&mut self) {
        if let Some(group) = rustix::process::Pid::from_raw(self.0.0.id() as i32) {
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
        }
    }
}

/// chromedriver on a free port, and a headless chromium session through it that downloads
/// into `downloads`.
pub(super) async fn browser(downloads: &Path) -> Option<(Driver, Client)> {
    if !Path::new(CHROMEDRIVER).exists() || !Path::new(CHROMIUM).exists() {
        skip_or_fail("no chromium and chromium-driver (Debian's packages)");
        return None;
    }
    let port = free_tcp_port();
    let driver = Command::new(CHROMEDRIVER)
        .arg(format!("--port={port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .expect("start chromedriver");
    let driver = Driver(Proc(driver, "chromedriver"));
    let mut capabilities = serde_json::Map::new();
    capabilities.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": CHROMIUM,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", "--window-size=1280,900"],
            "prefs": {
                "download.default_directory": downloads.display().to_string(),
                "download.prompt_for_download": false,
            },
        }),
    );
    let t0 = Instant::now();
    let client = loop {
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        match ClientBuilder::new(connector)
            .capabilities(capabilities.clone())
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
        {
            Ok(c) => break c,
            Err(e) if t0.elapsed() < Duration::from_secs(30) => {
                eprintln!("chromedriver not ready: {e}");
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            Err(e) => panic!("no browser session: {e}"),
        }
    };
    Some((driver, client))
}

/// A runtime for a browser test's steps (the test itself blocks on it).
pub(super) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// [`browser`], on the page at `addr`.
pub(super) async fn open_page(downloads: &Path, addr: &str) -> Option<(Driver, Client)> {
    let (driver, client) = browser(downloads).await?;
    client.goto(&format!("http://{addr}/")).await.unwrap();
    Some((driver, client))
}

/// Runs `script` in the page until it returns something other than `null` or `false`.
pub(super) async fn until(client: &Client, what: &str, script: &str) -> serde_json::Value {
    let t0 = Instant::now();
    loop {
        let v = client.execute(script, vec![]).await.expect(what);
        if !v.is_null() && v != json!(false) {
            return v;
        }
        assert!(t0.elapsed() < STEP, "the page never showed {what}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Clicks the element `css` finds, as the page is at that moment (the rows are drawn again at
/// every event: an element found before might be gone by its click).
pub(super) async fn click(client: &Client, css: &str) {
    let script = format!(
        "const e = document.querySelector({}); if (!e) return false; e.click(); return true;",
        serde_json::to_string(css).unwrap()
    );
    until(client, css, &script).await;
}

pub(super) async fn screenshot(client: &Client, name: &str) {
    let png = client.screenshot().await.expect("screenshot");
    std::fs::write(artifacts().join(name), png).unwrap();
}

/// The text of cell `class` in flight `id`'s row.
pub(super) fn cell(id: &str, class: &str) -> String {
    format!(
        "const r = document.querySelector('tr[data-id=\"{id}\"]'); \
         return r && r.querySelector('.{class}').textContent;"
    )
}

#[test]
fn the_page_follows_a_flight_from_its_stream_to_its_upload_and_its_delete() {
    let garage = match Garage::start(fresh_dir("garage-web")) {
        Ok(g) => g,
        Err(e) => return skip_or_fail(&e),
    };
    let Some(review) = FlightReviewServer::start("web", free_tcp_port()) else {
        return;
    };
    let dir = fresh_dir("web-browser");
    std::fs::create_dir_all(&dir).unwrap();
    let downloads = dir.join("downloads");
    std::fs::create_dir_all(&downloads).unwrap();
    let flight = write_fault_flight(&dir, "motor");
    let logs = dir.join("logs");
    let creds = credentials(&dir, SECRET_KEY);
    let mut extra: Vec<String> = vec!["--fill".into(), "auto".into()];
    extra.extend(garage.upload_args("fleet", &creds));
    extra.extend(["--flight-review".into(), review.url()]);
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let (mut daemon, udp, addr) = daemon(&logs, &free_http_port(), &extra);

    runtime().block_on(async {
        let Some((_driver, client)) = open_page(&downloads, &addr).await else {
            return;
        };
        until(&client, "the live pill", "return document.getElementById('connection').textContent === 'live';").await;
        // The vehicle streams at 40 KB/s (the log takes about 8 s) through 3 % loss, again and
        // again, serving its SD log for the fill in between.
        let (mut sim, _sim_lines) = stream_again(
            &flight,
            udp,
            &["--loss", "0.03", "--seed", "3", "--link-rate", "40000"],
        );
        sim_keeps_streaming(&mut sim);
        let id = until(
            &client,
            "a flight while it streams",
            "const r = document.querySelector('tr[data-closed=\"false\"]'); return r && r.dataset.id;",
        )
        .await;
        let id = id.as_str().unwrap().to_owned();
        until(&client, "its dropouts as they happen", &format!("const t = (function(){{{}}})(); return t && t.includes('dropouts');", cell(&id, "stream"))).await;
        until(&client, "the vehicle in the status bar", "return document.getElementById('vehicle').textContent.startsWith('sysid 1 (PX4)');").await;
        until(&client, "the disk in the status bar", "return document.getElementById('disk').textContent.endsWith('B');").await;
        until(&client, "streaming in the status bar", "return document.getElementById('logging').textContent === 'streaming';").await;
        screenshot(&client, "01-streaming.png").await;
        // Closed, filled, its finding named, uploaded, with its Flight Review link.
        let finding = until(&client, "the motor failure", &format!("const t = (function(){{{}}})(); return t && t.includes('motor_failure') && t;", cell(&id, "findings"))).await;
        assert!(finding.as_str().unwrap().contains('1'), "{finding}");
        until(&client, "the fill", &format!("const t = (function(){{{}}})(); return t && t.startsWith('filled') && t;", cell(&id, "fill"))).await;
        until(&client, "the upload", &format!("const t = (function(){{{}}})(); return t === 'uploaded';", cell(&id, "bucket"))).await;
        let link = until(&client, "the Flight Review link", &format!("const a = document.querySelector('tr[data-id=\"{id}\"] .review a'); return a && a.href;")).await;
        let link = link.as_str().unwrap().to_owned();
        assert!(link.starts_with(&review.url()), "{link}");
        screenshot(&client, "02-filled-and-uploaded.png").await;

        // The vehicle's SD card, read through the daemon's link: the log the fill read is
        // this flight's.
        client.find(Locator::Id("sd-show")).await.unwrap().click().await.unwrap();
        let listed = until(&client, "the SD card's logs", "const rows = [...document.querySelectorAll('#sd-logs tbody tr')]; return rows.length > 0 && rows.map(r => [r.dataset.path, r.cells[2].textContent]);").await;
        let manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(logs.join(&id).join("manifest.json")).unwrap()).unwrap();
        let source = manifest["amendments"][0]["source"].as_str().expect("the fill's SD log").to_owned();
        let rows = listed.as_array().unwrap();
        assert!(rows.iter().any(|r| r[0] == source.as_str() && r[1] == id.as_str()), "{source} as {id} in {listed}");
        // That log fetched whole onto the companion, its progress drawn as it comes, then its
        // link: the file is what the vehicle has (the fetch checked its CRC-32) and pyulog
        // reads it.
        client.execute("window.sawProgress = false; new MutationObserver(() => { if (document.querySelector('#sd-logs progress')) window.sawProgress = true; }).observe(document.body, { subtree: true, childList: true }); return true;", vec![]).await.unwrap();
        let row = format!("#sd-logs tr[data-path={}]", serde_json::to_string(&source).unwrap());
        click(&client, &format!("{row} button")).await;
        let name = until(&client, "the fetched log's link", &format!("const a = document.querySelector({}); return a && a.textContent.replace('download ', '');", serde_json::to_string(&format!("{row} a.fetched")).unwrap())).await;
        let name = name.as_str().unwrap().to_owned();
        assert_eq!(client.execute("return window.sawProgress;", vec![]).await.unwrap(), json!(true), "no progress shown");
        let fetched = logs.join("sd-card").join(&name);
        let size = rows.iter().find(|r| r[0] == source.as_str()).map(|_| std::fs::metadata(&fetched).unwrap().len());
        let reply = super::get(&addr, &format!("/api/vehicle/fetched/{name}"), &[]);
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert!(reply.body == std::fs::read(&fetched).unwrap(), "the download is not the fetched file");
        assert_eq!(Some(reply.body.len() as u64), size);
        crate::common::check_with_pyulog(&fetched);
        // Only a log the vehicle listed is fetched: no other file of the vehicle's.
        let reply = super::post_as_page(&addr, "/api/vehicle/fetch?path=/fs/microsd/etc/extras.txt");
        assert_eq!(reply.status, 409, "{}", reply.text());
        assert!(reply.text().contains("no such log"), "{}", reply.text());
        screenshot(&client, "02b-sd-card-fetched.png").await;
        // Fill now, asked from the flight's view: the daemon takes it.
        click(&client, &format!("tr[data-id=\"{id}\"] td.start")).await;
        until(&client, "the fill button", "return !document.getElementById('flight-fill').hidden;").await;
        client.find(Locator::Id("flight-fill")).await.unwrap().click().await.unwrap();
        let said = until(&client, "the fill asked for", "const t = document.getElementById('flight-said').textContent; return t.length > 0 && t;").await;
        assert!(said.as_str().unwrap().starts_with("fill asked for"), "{said}");
        drop(sim);

        // What the page says is what the CLI says of the session on disk.
        let session = logs.join(&id);
        let info: serde_json::Value = serde_json::from_str(&text_output(Command::new(BIN).arg("info").arg(&session).arg("--json"))).unwrap();
        assert_eq!(info["session"]["dropouts_remaining"], 0, "{}", info["session"]);
        let uploads = text_output(Command::new(BIN).args(["uploads", "--log-dir"]).arg(&logs));
        let line = uploads.lines().find(|l| l.starts_with(&id)).expect("the session in uploads");
        assert!(line.contains("  uploaded  ") && line.contains(&link), "{line}");

        // The flight's own view: its facts, its timeline, its finding.
        click(&client, &format!("tr[data-id=\"{id}\"] td.start")).await;
        let facts = until(&client, "the flight's view", "const f = document.getElementById('flight'); return !f.hidden && document.getElementById('flight-facts').textContent;").await;
        let facts = facts.as_str().unwrap().to_owned();
        let remaining = format!("{} dropouts", info["session"]["dropouts_remaining"]);
        assert!(facts.contains(&remaining), "{facts}");
        let received = format!("{} dropouts", info["session"]["dropouts_received"]);
        assert!(facts.contains(&received), "{facts}");
        let marks = until(&client, "the finding on the timeline", "return document.querySelectorAll('#timeline .finding').length;").await;
        assert_eq!(marks, 1);
        // The finding's time in the list is where the timeline puts it: seconds since the
        // log's start.
        let times = until(&client, "the finding's time", "const li = document.querySelector('#flight-findings li'); const m = li && li.textContent.match(/ (-?[0-9.]+) s  motor_failure/); return m && [parseFloat(m[1]), parseFloat(document.querySelector('#timeline .finding').style.left) * plotSpan / 100, plotSpan];").await;
        let [listed, on_timeline, span] = [0, 1, 2].map(|i| times[i].as_f64().unwrap());
        assert!((listed - on_timeline).abs() <= 0.1 && (0.0..=span).contains(&listed), "{times}");
        let fills = info["session"]["filled"].as_array().unwrap().len();
        assert!(fills > 0, "{}", info["session"]);
        let drawn = client.execute("return document.querySelectorAll('#timeline .filled').length;", vec![]).await.unwrap();
        assert_eq!(drawn, json!(fills), "the filled gaps on the timeline");
        // Its signals plotted: of the first look's, this flight has the battery; then the
        // motor's output, picked from the flight's fields.
        let plotted = until(&client, "the signals plotted", "const p = [...document.querySelectorAll('#plots .plot')]; return p.length > 0 && p.every(x => x.querySelector('canvas')) && p.map(x => x.dataset.name);").await;
        assert_eq!(plotted, json!(["battery voltage"]));
        let field = until(&client, "the flight's fields to pick from", "const o = document.querySelector('#plot-fields option[value=\"actuator_outputs.output[0]\"]'); return o && o.value;").await;
        client.find(Locator::Id("plot-field")).await.unwrap().send_keys(field.as_str().unwrap()).await.unwrap();
        client.find(Locator::Id("plot-add")).await.unwrap().click().await.unwrap();
        until(&client, "the picked field plotted", "const p = document.querySelector('#plots .plot[data-name=\"actuator_outputs.output[0]\"]'); return p && p.querySelector('canvas') && true;").await;
        screenshot(&client, "03-flight.png").await;

        // The download from the page is what export writes.
        click(&client, &format!("tr[data-id=\"{id}\"] a.dl-ulg")).await;
        let downloaded = downloads.join(format!("{id}.ulg"));
        let t0 = Instant::now();
        while !downloaded.exists() {
            assert!(t0.elapsed() < STEP, "no download in {}", downloads.display());
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let exported = dir.join("exported.ulg");
        text_output(Command::new(BIN).arg("export").arg(&session).arg("-o").arg(&exported));
        assert!(std::fs::read(&downloaded).unwrap() == std::fs::read(&exported).unwrap(), "the download is not export's file");

        // The delete asks first: dismissed, nothing goes; accepted, that flight only.
        let others: Vec<PathBuf> = crate::common::procs::session_dirs(&logs).into_iter().filter(|d| *d != session && d.join("manifest.json").exists()).collect();
        client.find(Locator::Id("flight-delete")).await.unwrap().click().await.unwrap();
        let asked = client.get_alert_text().await.expect("a confirmation");
        assert!(asked.contains("Delete") && asked.contains(&id), "{asked}");
        client.dismiss_alert().await.unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(session.exists(), "deleted without a yes");
        client.find(Locator::Id("flight-delete")).await.unwrap().click().await.unwrap();
        client.accept_alert().await.unwrap();
        until(&client, "the row gone", &format!("return !document.querySelector('tr[data-id=\"{id}\"]');")).await;
        assert!(!session.exists(), "the flight's directory is still there");
        for other in &others {
            assert!(other.join("manifest.json").exists(), "{} went too", other.display());
        }
        screenshot(&client, "04-deleted.png").await;

        // On a phone's screen: no sideways scrolling of the page itself.
        client.set_window_size(390, 844).await.unwrap();
        client.refresh().await.unwrap();
        until(&client, "the page on a phone", "return document.querySelectorAll('#flights tbody tr').length > 0;").await;
        let wide = client.execute("return document.documentElement.scrollWidth <= window.innerWidth + 1;", vec![]).await.unwrap();
        assert_eq!(wide, json!(true), "the page scrolls sideways on a phone");
        screenshot(&client, "05-phone.png").await;

        // The page's icon, where the page names it and where browsers look unasked.
        for path in ["assets/icon.svg", "favicon.ico"] {
            let got = client.execute_async(&format!("const done = arguments[0]; fetch('{path}').then(r => done([r.status, r.headers.get('content-type')]));"), vec![]).await.unwrap();
            assert_eq!(got, json!([200, "image/svg+xml"]), "{path}");
        }
        let icon = client.execute("const l = document.querySelector('link[rel=icon]'); return l && l.getAttribute('href');", vec![]).await.unwrap();
        assert_eq!(icon, json!("assets/icon.svg"));

        // A daemon that uploads nothing: a flight it records is not "pending" for a bucket.
        // And an ArduPilot flight beside the PX4 ones.
        assert!(daemon.terminate().success());
        let ardupilot = crate::common::ardupilot::write_bin_session(&logs).map(|s| s.file_name().unwrap().to_string_lossy().into_owned());
        let (again, udp, addr) = super::daemon(&logs, &free_http_port(), &[]);
        daemon = again;
        let (mut sim, _sim_lines) = stream_again(&flight, udp, &["--link-rate", "40000"]);
        sim_keeps_streaming(&mut sim);
        client.goto(&format!("http://{addr}/")).await.unwrap();
        let bucket = until(&client, "a flight recorded without uploads", "const r = document.querySelector('tr[data-closed=\"false\"] td.bucket'); return r && r.textContent;").await;
        assert_eq!(bucket, json!("off"));
        if let Some(id) = ardupilot {
            let row = until(&client, "the ArduPilot flight", &format!("const r = document.querySelector('tr[data-id=\"{id}\"]'); return r && [r.querySelector('.vehicle').textContent, r.querySelector('.review').textContent, !!r.querySelector('a.dl-bin'), !!r.querySelector('a.dl-ulg'), !!r.querySelector('a.dl-mcap')];")).await;
            assert_eq!(row, json!(["sysid 1 · ArduPilot", "not for ArduPilot", true, false, true]));
            click(&client, &format!("tr[data-id=\"{id}\"] td.start")).await;
            let view = until(&client, "its view", &format!("const f = document.getElementById('flight'); return !f.hidden && f.dataset.id === '{id}' && document.getElementById('flight-facts').textContent.includes('ArduPilot') && [document.getElementById('flight-facts').textContent, document.querySelectorAll('#flight-files li').length];")).await;
            assert!(view[0].as_str().unwrap().contains("not for ArduPilot logs"), "{view}");
            assert!(view[1].as_u64().unwrap() >= 3, "{view}");
            // Its first look plotted from its own messages, then a field picked by name.
            let plotted = until(&client, "its signals plotted", "const p = [...document.querySelectorAll('#plots .plot')]; return p.length === 3 && p.every(x => x.querySelector('canvas')) && p.map(x => x.dataset.name);").await;
            assert_eq!(plotted, json!(["battery voltage", "height", "attitude error"]));
            let field = until(&client, "its fields to pick from", "const o = document.querySelector('#plot-fields option[value=\"RCOU.C1\"]'); return o && o.value;").await;
            client.find(Locator::Id("plot-field")).await.unwrap().send_keys(field.as_str().unwrap()).await.unwrap();
            client.find(Locator::Id("plot-add")).await.unwrap().click().await.unwrap();
            until(&client, "the picked field plotted", "const p = document.querySelector('#plots .plot[data-name=\"RCOU.C1\"]'); return p && p.querySelector('canvas') && true;").await;
            screenshot(&client, "06-ardupilot.png").await;
        }
        client.close().await.unwrap();
    });
    assert!(daemon.terminate().success());
}

/// The simulator must still run (serving the SD log) when the page gets to the fill.
fn sim_keeps_streaming(sim: &mut Proc) {
    std::thread::sleep(Duration::from_millis(500));
    assert!(sim.0.try_wait().unwrap().is_none(), "the simulator stopped");
}
