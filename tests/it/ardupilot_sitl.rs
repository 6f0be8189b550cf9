//! Against the real ArduPilot: its SITL build (`../shared/vendor/ardupilot-sitl`, ArduCopter
//! with its own `AP_Logger`, the card's file backend and the MAVLink backend on together)
//! streams its DataFlash log to the daemon, a process, over UDP through a relay that can
//! lose, reorder and cut datagrams. What the daemon wrote is held against the SITL's own
//! card log of the same boot, both read by pymavlink's DFReader
//! (`tests/dataflash_compare.py`): every message of the card inside the streamed window is in
//! the received `.bin` with the same fields, none invented, but what the vehicle dropped at
//! the source (its own `DMS.Dp`). In flight, the failures the SITL is told to have (its
//! radio; a GPS glitch, a low battery, a weak motor) are found by the diagnostics, live and
//! from the files, beside the vehicle's own `ERR`; a clean flight gives no finding.
//!
//! Without the SITL the test says SKIPPED, and fails under CI.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::ardupilot_diagnostics::{check_against_the_vehicle, diagnostics_of, the_live_finding};
use common::ardupilot::{ArduPilot, Impairment, Relay, compare, vehicle_said};
use common::procs::{Proc, files_with_extension, fresh_dir, session_dirs};
use serde_json::Value as Json;

/// The daemon on `port`, writing into `dir`, a split every `split_s` seconds of log, its
/// metrics on `metrics`, and `extra` (without a live socket unless `extra` names one).
pub(crate) fn daemon(
    dir: &Path,
    port: u16,
    split_s: u32,
    metrics: u16,
    extra: &[String],
) -> (Proc, std::sync::mpsc::Receiver<String>) {
    let mut args: Vec<String> = vec![
        "--udp".into(),
        format!("127.0.0.1:{port}"),
        "--log-dir".into(),
        dir.display().to_string(),
        "--split-duration".into(),
        split_s.to_string(),
        "--metrics".into(),
        format!("127.0.0.1:{metrics}"),
    ];
    if !extra.iter().any(|a| a == "--socket") {
        args.push("--no-socket".into());
    }
    args.extend(extra.iter().cloned());
    Proc::spawn_watched("the daemon", &args)
}

/// `ulog-recv tail --json` on `socket` (once the daemon made it), every topic, its lines
/// into `lines`.
fn tail_into(socket: &Path, lines: &Path) -> Proc {
    let t0 = Instant::now();
    while !socket.exists() {
        assert!(t0.elapsed() < Duration::from_secs(10), "no live socket");
        std::thread::sleep(Duration::from_millis(20));
    }
    let child = std::process::Command::new(common::procs::BIN)
        .args(["tail", "--json", "--socket"])
        .arg(socket)
        .stdout(std::fs::File::create(lines).unwrap())
        .spawn()
        .unwrap();
    Proc(child, "tail")
}

/// The daemon's metrics exposition.
pub(crate) fn scrape(port: u16) -> String {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    c.read_to_string(&mut text).unwrap();
    text
}

pub(crate) fn free_tcp_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The report's counts, for a message.
pub(crate) fn brief(report: &Json) -> String {
    let mut r = report.clone();
    r.as_object_mut().unwrap().remove("windows");
    r.to_string()
}

/// Nothing the vehicle put into its stream is missing, nothing is invented: a card message
/// inside the window that is not in the received log can only be one the vehicle dropped at
/// the source (DMS.Dp rose in its second), a received one the card does not hold one the
/// card's own buffer dropped (DSF.Dp rose).
fn check_whole(report: &Json, what: &str) {
    assert!(
        report["card_in_window"].as_u64().unwrap() > 5000,
        "{what}: {}",
        brief(report)
    );
    assert_eq!(
        report["unexplained_missing"],
        0,
        "{what}: {}",
        brief(report)
    );
    assert_eq!(
        report["unexplained_invented"],
        0,
        "{what}: {}",
        brief(report)
    );

    assert!(
        report["types"].as_u64().unwrap() >= 30,
        "{what}: {}",
        brief(report)
    );
}

/// Waits until the relay has seen `blocks` log blocks (the vehicle takes 10-20 s to boot
/// and start logging).
pub(crate) fn wait_for_blocks(relay: &Relay, blocks: u64) {
    let t0 = Instant::now();
    while relay.blocks() < blocks {
        assert!(
            t0.elapsed() < Duration::from_secs(90),
            "the vehicle streamed {} blocks in 90 s",
            relay.blocks()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub(crate) fn splits(dir: &Path) -> (PathBuf, Vec<PathBuf>) {
    let sessions = session_dirs(dir);
    assert_eq!(sessions.len(), 1, "one session: {sessions:?}");
    let splits = files_with_extension(&sessions[0], "bin");
    (sessions[0].clone(), splits)
}

#[test]
fn on_the_ground_every_message_the_vehicle_streamed_is_written_and_each_split_opens_alone() {
    let Some(py) = common::venv_python() else {
        return;
    };
    let relay = Relay::start(Impairment::default());
    let Some(sitl) = ArduPilot::start("ground", 1, relay.listen) else {
        return;
    };
    let dir = fresh_dir("ground-ours");
    let metrics = free_tcp_port();
    let socket = dir.with_extension("sock");
    let extra = [
        "--socket".into(),
        socket.display().to_string(),
        "--foxglove".into(),
        "0".into(),
    ];
    let (mut d, lines) = daemon(&dir, relay.daemon_port, 8, metrics, &extra);
    // Live clients from before the log opens, for all of it: tail on the socket, and a
    // client made of Foxglove's own libraries.
    let live = dir.with_extension("ndjson");
    let mut tail = tail_into(&socket, &live);
    let url = crate::foxglove::ws_url(&common::procs::wait_for_line(
        &lines,
        "ws://",
        Duration::from_secs(10),
    ));
    std::thread::spawn(move || for _ in lines {});
    let foxglove = crate::foxglove::client_dir()
        .map(|dir| crate::foxglove::NodeClient::start(&dir, &url, "foxglove.websocket.v1", None));
    wait_for_blocks(&relay, 1);
    std::thread::sleep(Duration::from_secs(30));
    // The metrics name the autopilot.
    let exposition = scrape(metrics);
    assert!(
        exposition.contains("ulog_recv_vehicle_autopilot{autopilot=\"ardupilot\"} 1"),
        "{exposition}"
    );
    assert!(exposition.contains("ulog_recv_vehicle_autopilot{autopilot=\"px4\"} 0"));
    assert!(d.terminate().success());
    let summary = d.stdout_text();
    // The STOP reached the vehicle: no block after it (unacked ones would come again every
    // 100 ms for 10 s).
    std::thread::sleep(Duration::from_millis(500));
    let after_stop = relay.blocks();
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(relay.blocks(), after_stop, "blocks after the STOP");
    let card = sitl.stop();
    let (session, splits) = splits(&dir);
    assert!(splits.len() >= 4, "splits: {splits:?}");
    let report = compare(&py, &card, &splits);
    eprintln!("ground: {}\n{summary}", brief(&report));
    check_whole(&report, "on the ground");
    assert_eq!(report["marks"], 0, "{}", brief(&report));
    // Each split alone: read by DFReader from its own definitions, nothing in it that the
    // card log does not hold.
    for split in &splits {
        let alone = compare(&py, &card, std::slice::from_ref(split));
        assert_eq!(
            alone["unexplained_invented"],
            0,
            "{}: {}",
            split.display(),
            brief(&alone)
        );
        assert!(
            alone["received"].as_u64().unwrap() > 500,
            "{}: {}",
            split.display(),
            brief(&alone)
        );
        assert!(alone["types"].as_u64().unwrap() >= 20, "{}", brief(&alone));
    }
    check_drops_in_manifest(&session, &report);
    let manifest: Json =
        serde_json::from_slice(&std::fs::read(session.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["log_format"], "dataflash");
    assert_eq!(manifest["closed"], true);
    assert_eq!(manifest["splits"].as_array().unwrap().len(), splits.len());
    // Live: every message written was published, by its own name, instance and values.
    // The daemon's end closes the socket: tail ends.
    tail.wait(Duration::from_secs(10));
    let published = common::ardupilot::compare_live(&py, &live, &splits);
    eprintln!("ground, live: {published}");
    assert!(
        published["published"].as_u64().unwrap() > 5000,
        "{published}"
    );
    assert_eq!(published["missing"], 0, "{published}");
    assert_eq!(published["invented"], 0, "{published}");
    assert_eq!(published["bad_instances"], 0, "{published}");
    assert!(published["topics"].as_u64().unwrap() >= 30, "{published}");
    assert!(
        !published["instanced_topics"].as_array().unwrap().is_empty(),
        "{published}"
    );
    assert!(published["lines"].get("lagged").is_none(), "{published}");
    // Foxglove: a JSON channel per type and instance, every message as the socket's.
    if let Some(client) = foxglove {
        let report = client.report(Duration::from_secs(30));
        let channels = report["channels"].as_array().unwrap();
        let of = |topic: &str| channels.iter().find(|c| c["topic"] == topic);
        let att = of("/ATT").unwrap_or_else(|| panic!("no /ATT: {report}"));
        // From its first /ATT on (a client that subscribed late under load gets what its
        // channel held back for it, not every message before): as many as the socket's.
        let first = att["first"]["TimeUS"].as_u64().unwrap();
        let socket_att = std::fs::read_to_string(&live)
            .unwrap()
            .lines()
            .filter(|l| l.contains(r#""type":"data","topic":"ATT""#))
            .filter(|l| {
                let line: Json = serde_json::from_str(l).unwrap();
                line["timestamp"].as_u64().unwrap() >= first
            })
            .count();
        assert_eq!(att["count"].as_u64().unwrap() as usize, socket_att, "{att}");
        assert!(channels.len() >= 30, "{} channels", channels.len());
        for c in channels {
            assert_eq!(c["timeMismatches"], 0, "{c}");
            assert_eq!(c["trailing"], 0, "{c}");
        }
        assert!(att["first"]["Roll"].is_number(), "{att}");
        assert!(
            !report["logs"].as_array().unwrap().is_empty(),
            "no texts on /log"
        );
    }
}

/// The manifest tells the vehicle's own drops apart from the link's, per split, as its DMS
/// records count them (pymavlink's reading of the same splits says how many).
fn check_drops_in_manifest(session: &Path, report: &Json) {
    let manifest: Json =
        serde_json::from_slice(&std::fs::read(session.join("manifest.json")).unwrap()).unwrap();
    let splits = manifest["splits"].as_array().unwrap();
    let dropped: u64 = splits
        .iter()
        .map(|s| {
            s["dropped_at_source"]
                .as_u64()
                .unwrap_or_else(|| panic!("no dropped_at_source in {s}"))
        })
        .sum();
    assert_eq!(
        Json::from(dropped),
        report["dms_dropped"],
        "{}",
        brief(report)
    );
}

/// The received log holds a flight: armed, up to `alt_m`, down again.
fn check_flew(report: &Json, alt_m: f64) {
    let flight = &report["flight"];
    assert!(flight["armed"].as_u64().unwrap() >= 1, "{flight}");
    assert!(flight["disarmed"].as_u64().unwrap() >= 1, "{flight}");
    assert!(
        flight["max_alt_m"].as_f64().unwrap() > 0.9 * alt_m,
        "{flight}"
    );
}

#[test]
fn a_flight_through_a_lossy_reordering_link_loses_or_invents_nothing_streamed() {
    let Some(py) = common::venv_python() else {
        return;
    };
    let relay = Relay::start(Impairment {
        loss_down: 0.02,
        loss_up: 0.10,
        reorder: 0.02,
    });
    let Some(sitl) = ArduPilot::start("lossy", 2, relay.listen) else {
        return;
    };
    let dir = fresh_dir("lossy-ours");
    let (mut d, _lines) = daemon(&dir, relay.daemon_port, 30, free_tcp_port(), &[]);
    wait_for_blocks(&relay, 1);
    // The hover ends in a radio failure: the vehicle's failsafe brings it home and down.
    let mut flight = sitl.fly_into(&py, 10, 10, Some("rc"));
    flight.stage("landed", Duration::from_secs(240));
    std::thread::sleep(Duration::from_secs(2));
    assert!(d.terminate().success());
    let summary = d.stdout_text();
    let card = sitl.stop();
    let (session, splits) = splits(&dir);
    let report = compare(&py, &card, &splits);
    eprintln!("lossy: {}\n{summary}", brief(&report));
    assert!(
        relay
            .counts
            .dropped
            .load(std::sync::atomic::Ordering::Relaxed)
            > 20,
        "the relay lost little"
    );
    check_whole(
        &report,
        "a flight, 2 % loss, 2 % reorder, 10 % of acks lost",
    );
    check_flew(&report, 10.0);
    // Lost blocks came again (NACKed or resent), lost acks made duplicates: no gap stayed.
    assert_eq!(report["marks"], 0, "{}", brief(&report));
    assert!(summary.contains(" 0 lost in 0 gaps"), "{summary}");
    check_drops_in_manifest(&session, &report);
    // The radio failure: an RC loss from the vehicle's own failsafe flag to its disarm,
    // beside its ERR for it, from the files as pymavlink reads them and live, as it came.
    let said = vehicle_said(&py, &splits);
    let from_files = diagnostics_of(&session);
    check_against_the_vehicle("a radio failure", &from_files, &said, true);
    let (detail, _) = the_live_finding(&session, &from_files["diagnostics"][0]);
    assert!(detail.contains("ERR radio failsafe: occurred"), "{detail}");
}

#[test]
fn a_link_lost_for_15_s_in_flight_and_back_is_one_flight_with_the_outage_as_a_dropout_of_its_length()
 {
    let Some(py) = common::venv_python() else {
        return;
    };
    let relay = Relay::start(Impairment::default());
    let Some(sitl) = ArduPilot::start("outage", 3, relay.listen) else {
        return;
    };
    let dir = fresh_dir("outage-ours");
    let (mut d, _lines) = daemon(&dir, relay.daemon_port, 600, free_tcp_port(), &[]);
    wait_for_blocks(&relay, 1);
    let mut flight = sitl.fly(&py, 10, 30);
    flight.stage("hovering", Duration::from_secs(180));
    std::thread::sleep(Duration::from_secs(3));
    // Past the vehicle's 10 s: it drops us, and starts again from seqno 0 on our next START.
    relay.cut(true);
    std::thread::sleep(Duration::from_secs(15));
    relay.cut(false);
    flight.stage("landed", Duration::from_secs(120));
    std::thread::sleep(Duration::from_secs(2));
    assert!(d.terminate().success());
    let summary = d.stdout_text();
    let card = sitl.stop();
    let (session, splits) = splits(&dir);
    let report = compare(&py, &card, &splits);
    eprintln!("outage: {}\n{summary}", brief(&report));
    check_whole(&report, "15 s outage in flight");
    check_flew(&report, 10.0);
    // Two streams in one flight, the outage between them marked once, as long as the log
    // says it was (the link's 15 s, and the vehicle's restart of its stream after it).
    assert_eq!(report["marks"], 1, "{}", brief(&report));
    let windows = report["windows"].as_array().unwrap();
    assert_eq!(windows.len(), 2, "{}", report);
    let ms = report["mark_ms"][0]
        .as_u64()
        .expect("the mark says its length");
    assert!((15_000..25_000).contains(&ms), "the dropout says {ms} ms");
    check_drops_in_manifest(&session, &report);
    // A clean flight: the diagnostics find nothing, the outage listed as unseen.
    let said = vehicle_said(&py, &splits);
    let from_files = diagnostics_of(&session);
    check_against_the_vehicle("a clean flight", &from_files, &said, false);
    assert_eq!(
        from_files["blind"].as_array().unwrap().len(),
        1,
        "{from_files}"
    );
}

/// Side by side with mavlink-router's log endpoint (`-l DIR`, the recorder companion images
/// ship): the same SITL, the same lossy link (the same seed), a minute on the ground each,
/// one after the other (the vehicle serves one client). Each recording is held against its
/// own card log: ours keeps every message the vehicle streamed, and at least as many as
/// the router's; the table (in the guide's performance chapter) says what each kept,
/// invented and made the vehicle resend.
#[test]
fn side_by_side_with_mavlink_routers_log_endpoint_on_the_same_lossy_link() {
    let Some(py) = common::venv_python() else {
        return;
    };
    if common::router::binary().is_none() {
        return;
    }
    let impairment = Impairment {
        loss_down: 0.02,
        loss_up: 0.10,
        reorder: 0.02,
    };
    let mut rows = Vec::new();
    for recorder in ["mavlink-router", "ulog-recv"] {
        let relay = Relay::start(impairment);
        let Some(sitl) = ArduPilot::start(&format!("beside-{recorder}"), 4, relay.listen) else {
            return;
        };
        let dir = fresh_dir(&format!("beside-{recorder}"));
        std::fs::create_dir_all(&dir).unwrap();
        let (daemon, router) = match recorder {
            "ulog-recv" => {
                let (d, _lines) = daemon(&dir, relay.daemon_port, 600, free_tcp_port(), &[]);
                (Some(d), None)
            }
            _ => (
                None,
                common::router::start_logging(relay.daemon_port, &[], &dir),
            ),
        };
        wait_for_blocks(&relay, 1);
        std::thread::sleep(Duration::from_secs(30));
        let files = match (daemon, router) {
            (Some(mut d), _) => {
                assert!(d.terminate().success());
                splits(&dir).1
            }
            (None, router) => {
                drop(router);
                files_with_extension(&dir, "bin")
            }
        };
        let card = sitl.stop();
        assert!(!files.is_empty(), "{recorder} recorded nothing");
        let report = compare(&py, &card, &files);
        let load = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
        let (sent, once) = (load(&relay.counts.blocks), load(&relay.counts.top_seqno));
        eprintln!(
            "{recorder}: {} (blocks {sent}, {once} once)",
            brief(&report)
        );
        rows.push((recorder, report, files.len(), sent.saturating_sub(once)));
    }
    println!(
        "| recorder | card messages in the window | kept | missing (DMS-explained) | invented | files | blocks resent |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (recorder, r, files, resent) in &rows {
        let card = r["card_in_window"].as_u64().unwrap();
        let missing = r["missing"].as_u64().unwrap();
        let unexplained = r["unexplained_missing"].as_u64().unwrap();
        println!(
            "| {recorder} | {card} | {:.5} | {missing} ({}) | {} | {files} | {resent} |",
            (card - missing.min(card)) as f64 / card.max(1) as f64,
            missing - unexplained.min(missing),
            r["invented"],
        );
    }
    let kept = |r: &Json| {
        let card = r["card_in_window"].as_f64().unwrap();
        (card - r["unexplained_missing"].as_f64().unwrap()) / card
    };
    let (router, ours) = (&rows[0].1, &rows[1].1);
    check_whole(ours, "beside the router");
    assert!(
        kept(ours) >= kept(router),
        "{} against {}",
        brief(ours),
        brief(router)
    );
}

/// The SITL told to fail in flight, one failure after the other (`tests/ardupilot_fly.py`'s
/// `failures`): few satellites, a GPS glitch, a battery let down below its failsafe voltage,
/// a motor at half thrust. Each but the first gives the vehicle's own `ERR` and the
/// receiver's finding of the same moment, listed beside each other (the vehicle logs no
/// `ERR` for few satellites; the motor is found when it stayed at its top for 50 samples,
/// as pymavlink reads them), from the received files and live as the stream came; nothing
/// else is found.
#[test]
fn failures_injected_in_flight_are_found_beside_the_vehicles_own_err() {
    let Some(py) = common::venv_python() else {
        return;
    };
    let relay = Relay::start(Impairment::default());
    let Some(sitl) = ArduPilot::start("failures", 5, relay.listen) else {
        return;
    };
    let dir = fresh_dir("failures-ours");
    let (mut d, _lines) = daemon(&dir, relay.daemon_port, 600, free_tcp_port(), &[]);
    wait_for_blocks(&relay, 1);
    let mut flight = sitl.fly_into(&py, 10, 5, Some("failures"));
    flight.stage("landed", Duration::from_secs(300));
    std::thread::sleep(Duration::from_secs(2));
    assert!(d.terminate().success());
    let card = sitl.stop();
    let (session, splits) = splits(&dir);
    let report = compare(&py, &card, &splits);
    check_whole(&report, "a flight with failures");
    check_flew(&report, 10.0);
    let from_files = diagnostics_of(&session);
    let findings = from_files["diagnostics"].as_array().unwrap();
    let records = from_files["vehicle_records"].as_array().unwrap();
    // Few satellites: found, and nothing of the vehicle's beside it.
    let gps: Vec<usize> = (findings.iter().enumerate())
        .filter(|(_, f)| f["id"] == "gps_interference")
        .map(|(k, _)| k)
        .collect();
    assert!(!gps.is_empty(), "{from_files}");
    for k in gps {
        assert!(
            from_files["beside"][k]
                .as_array()
                .unwrap()
                .iter()
                .all(|r| records[r.as_u64().unwrap() as usize]["record"] == "EV"),
            "{from_files}"
        );
    }
    // The weak motor: the vehicle's thrust boost lets the motor off its top now and then, so
    // whether it stayed there for the 50 samples the analyzer asks (5 s of RCOU at 10 Hz)
    // varies from flight to flight. The finding is made exactly when pymavlink's reading
    // of the received files has such a run; the vehicle's ERR comes either way.
    let said = vehicle_said(&py, &splits);
    let saturated = said["longest_saturated_run"].as_u64().unwrap() >= 50;
    assert!(
        records
            .iter()
            .any(|r| r["text"] == "thrust loss check: thrust loss"),
        "{from_files}"
    );
    // (the finding, the vehicle's ERR subsystem and code, in words)
    let mut expected = vec![
        ("ekf_failure", 11, 2, "GPS: glitch"),
        ("battery_brownout", 6, 1, "battery failsafe: occurred"),
    ];
    if saturated {
        expected.push(("motor_failure", 25, 1, "thrust loss check: thrust loss"));
    }
    eprintln!("failures: the motor's longest run at its top: {said}");
    let mut ids: Vec<&str> = findings.iter().map(|f| f["id"].as_str().unwrap()).collect();
    ids.dedup();
    let in_order: Vec<&str> = std::iter::once("gps_interference")
        .chain(expected.iter().map(|e| e.0))
        .collect();
    assert_eq!(ids, in_order, "{from_files}");
    for &(id, subsystem, code, text) in &expected {
        let beside: Vec<&Json> = findings
            .iter()
            .enumerate()
            .filter(|(_, f)| f["id"] == id)
            .flat_map(|(k, _)| from_files["beside"][k].as_array().unwrap())
            .map(|r| &records[r.as_u64().unwrap() as usize])
            .collect();
        assert!(
            beside
                .iter()
                .any(|r| r["subsystem"] == subsystem && r["code"] == code && r["text"] == text),
            "{id}: {beside:?}"
        );
    }
    // Live: the daemon made each finding as the stream came, an event of the session.
    let info: Json = serde_json::from_str(&common::procs::run_ok(&[
        "info",
        "--json",
        session.to_str().unwrap(),
    ]))
    .unwrap();
    let live: Vec<&Json> = info["session"]["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["source"] == "diagnostic")
        .map(|e| &e["finding"])
        .collect();
    assert_eq!(live, findings.iter().collect::<Vec<_>>(), "{info}");
}
