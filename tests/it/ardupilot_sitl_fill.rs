//! The fill of an ArduPilot flight from the vehicle's own card over MAVLink FTP, against the
//! real ArduPilot (its SITL, whose FTP server serves its `logs/` as `/logs`): a flight
//! streamed through a link that loses 5 % each way, from a vehicle whose stream buffer is
//! small (`LOG_MAV_BUFSIZE` 2, a quarter of the default: it drops messages at the source
//! every second), received by one daemon;
//! then a daemon started with `--fill auto` fills the closed flight from the card through
//! the same lossy link beside its own stream. The flight exported as one `.bin` holds every
//! card message of its window, read by pymavlink on both sides, and the fill fetched
//! about what it recovered; side by side, pymavlink downloads the whole card log by the log
//! protocol (`LOG_REQUEST_DATA`), as a ground station would over its own link.
//!
//! Without the SITL the test says SKIPPED, and fails under CI.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use crate::ardupilot_sitl::{brief, daemon, free_tcp_port, scrape, wait_for_blocks};
use common::ardupilot::{ArduPilot, Impairment, Relay, compare, compare_filled};
use common::procs::{run_ok, session_dirs};

/// The vehicle's stream buffer, KB.
const BUFSIZE: &str = "2";

/// A counter's value in a metrics exposition (0 when absent).
fn metric(exposition: &str, name: &str) -> f64 {
    exposition
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

/// The manifest of the session in `dir`.
fn manifest(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap()
}

#[test]
fn a_flight_streamed_at_5_percent_loss_is_completed_from_the_vehicles_card_over_ftp() {
    let Some(py) = common::venv_python() else {
        return;
    };
    let relay = Relay::start(Impairment {
        loss_down: 0.05,
        loss_up: 0.05,
        reorder: 0.0,
    });
    let Some(sitl) =
        ArduPilot::start_with("fill", 4, relay.listen, &[("LOG_MAV_BUFSIZE", BUFSIZE)])
    else {
        return;
    };
    let dir = common::procs::fresh_dir("fill-ftp-ours");
    let (mut first, _lines) = daemon(&dir, relay.daemon_port, 600, free_tcp_port(), &[]);
    wait_for_blocks(&relay, 1);
    let mut flight = sitl.fly(&py, 10, 10);
    flight.stage("landed", Duration::from_secs(240));
    std::thread::sleep(Duration::from_secs(2));
    assert!(first.terminate().success());
    let sessions = session_dirs(&dir);
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    let session = sessions[0].clone();
    assert!(manifest(&session)["fill"].is_null());

    // A daemon started again fills the closed flight the last one left, over FTP, on the
    // ground, beside its own stream.
    let metrics = free_tcp_port();
    let (mut second, _lines) = daemon(
        &dir,
        relay.daemon_port,
        600,
        metrics,
        &["--fill".into(), "auto".into()],
    );
    let t0 = Instant::now();
    while manifest(&session)["fill"].is_null() {
        assert!(
            t0.elapsed() < Duration::from_secs(240),
            "not filled in 240 s"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let fill_s = t0.elapsed().as_secs_f64();
    let exposition = scrape(metrics);
    assert!(second.terminate().success());
    let filled = manifest(&session);
    assert_eq!(filled["fill"], "done", "{}", filled["fill"]);
    assert!(
        filled["unfilled"].as_array().is_none_or(Vec::is_empty),
        "{}",
        filled["unfilled"]
    );
    let amendments = filled["amendments"].as_array().unwrap();
    assert_eq!(amendments.len(), 1, "{amendments:?}");
    assert_eq!(amendments[0]["source"], "/logs/00000001.BIN");
    let fetched = metric(&exposition, "ulog_recv_fill_fetched_bytes_total") as u64;
    let recovered = metric(&exposition, "ulog_recv_fill_recovered_bytes_total") as u64;

    // Side by side: the whole card log by the log protocol, as a ground station downloads
    // it over its own link (a clean one: the 5 % link takes it minutes).
    let whole = relay_dir_file(&dir, "whole.BIN");
    let out = std::process::Command::new(&py)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ardupilot_log_download.py"))
        .arg(sitl.gcs.to_string())
        .arg(&whole)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let download: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();

    let card = sitl.stop();
    let card_bytes = std::fs::read(&card).unwrap();
    let size = download["size"].as_u64().unwrap() as usize;
    assert_eq!(
        std::fs::read(&whole).unwrap(),
        card_bytes[..size],
        "pymavlink's download is the card's log"
    );
    let splits = common::procs::files_with_extension(&session, "bin");
    let streamed = compare(&py, &card, &splits);
    let merged = session.with_extension("bin");
    run_ok(&[
        "export",
        &session.display().to_string(),
        "-o",
        &merged.display().to_string(),
    ]);
    let after = compare_filled(&py, &card, &[merged]);
    eprintln!(
        "streamed: {}\nfilled: {}\nfill: {fetched} bytes fetched for {recovered} recovered \
         in {fill_s:.1} s (of a card log of {} bytes); pymavlink's whole log: {download}",
        brief(&streamed),
        brief(&after),
        card_bytes.len(),
    );
    // The vehicle dropped messages at the source (its small buffer): the stream lacks them.
    assert!(
        streamed["dms_dropped"].as_u64().unwrap() > 0,
        "{}",
        brief(&streamed)
    );
    assert!(after["card_in_window"].as_u64().unwrap() > 5000);
    assert_eq!(after["missing"], 0, "{}", brief(&after));
    assert_eq!(after["unexplained_invented"], 0, "{}", brief(&after));
    assert!(recovered > 0);
    // About what it recovers: 8 KB to find the flight on the card (a bisection on its
    // times, there and where the vehicle's startup records shift it), and a few small reads
    // per gap to find where in its second the vehicle dropped a record (a second of many
    // drops is read whole); less than the whole card log a download brings.
    let gaps = amendments[0]["fills"].as_array().unwrap().len() as u64;
    assert!(
        fetched <= 2 * recovered + (8 << 10) + gaps * (4 << 10),
        "{fetched} fetched for {recovered} recovered in {gaps} gaps"
    );
    assert!(
        fetched < download["received_bytes"].as_u64().unwrap(),
        "{fetched} of the card"
    );
}

/// A file beside the daemon's log directory.
fn relay_dir_file(dir: &Path, name: &str) -> std::path::PathBuf {
    dir.with_file_name(format!(
        "{}-{name}",
        dir.file_name().unwrap().to_string_lossy()
    ))
}
