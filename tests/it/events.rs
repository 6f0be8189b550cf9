//! Event buffers: sensor_accel held in memory and written only around events. An event asked
//! for at a known log time, a logged "Failsafe" string and a field condition each open a
//! window of [t - before, t + after]; pyulog finds the buffer's samples exactly in those windows
//! (to the sample) and every other topic complete; every split of every column opens alone;
//! the byte bound drops the oldest held samples and says so; the daemon takes events from
//! `ulog-recv event`, from the command line's and the config file's triggers.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use common::procs::{BIN, Proc, finish_recording, fresh_dir, wait_for_line};
use ulog_recv::sim::synth::{START_US, SynthOptions, generate};
use ulog_recv::store::columns::ColumnSpec;
use ulog_recv::store::events::{
    EventBufferSpec, EventRecord, EventRefused, EventSource, FieldCondition, MAX_LISTED_EVENTS,
    Trigger,
};
use ulog_recv::store::files::read_manifest;
use ulog_recv::store::reading::read_session;
use ulog_recv::store::{LogStore, StoreOptions};
use ulog_recv::ulog::Writer;
use ulog_recv::ulog::message::{Message, framed, msg_type};

const SECOND: u64 = 1_000_000;
/// Log time of the "Failsafe" string put into the synthetic flight.
const FAILSAFE_AT: u64 = START_US + 25 * SECOND;
const FAILSAFE_TEXT: &str = "[failsafe] Failsafe activated: RC lost";
/// The synthetic ESC voltage falls 0.01 V/s from 16.8 V: true from 30 s into the flight.
const LOW_VOLTAGE: &str = "esc_status.esc[0].esc_voltage < 16.5";

/// The sample time of a data message (every synthetic topic starts with its timestamp).
fn data_time(m: &[u8]) -> Option<u64> {
    (m[2] == msg_type::DATA).then(|| u64::from_le_bytes(m[5..13].try_into().unwrap()))
}

/// Byte offset (in the whole log) of the first data message stamped at or after `t`.
fn offset_of_time(log: &[u8], t: u64) -> usize {
    let mut at = 16;
    for m in framed(&log[16..]) {
        if data_time(m).is_some_and(|ts| ts >= t) {
            return at;
        }
        at += m.len();
    }
    log.len()
}

/// A 60 s synthetic flight with a "Failsafe" string logged at [`FAILSAFE_AT`].
fn flight_with_failsafe() -> Vec<u8> {
    let log = generate(SynthOptions {
        duration_s: 60,
        seed: 5,
        appended_data: false,
    });
    let mut w = Writer::new();
    w.write(&Message::Logging {
        level: b'2',
        timestamp: FAILSAFE_AT,
        text: FAILSAFE_TEXT.as_bytes(),
    })
    .unwrap();
    let at = offset_of_time(&log, FAILSAFE_AT);
    [&log[..at], w.bytes(), &log[at..]].concat()
}

fn accel_buffer(max_bytes: u64) -> EventBufferSpec {
    EventBufferSpec {
        column: ColumnSpec::parse("accel=sensor_accel").unwrap(),
        before_us: 5 * SECOND,
        after_us: 2 * SECOND,
        max_bytes,
    }
}

/// The failsafe string's and the low voltage's triggers.
fn failsafe_and_low_voltage() -> Vec<Trigger> {
    vec![
        Trigger::logged_text("(?i)failsafe|crash").unwrap(),
        Trigger::Field(FieldCondition::parse(LOW_VOLTAGE).unwrap()),
    ]
}

/// Stores `log` with `buffer` and `triggers` (splits of 20 s), asking for an event named
/// "payload_drop" once the log reaches `request_at`. Returns the session, what the request
/// got and every event handed out.
fn store(
    dir: &Path,
    log: &[u8],
    buffer: EventBufferSpec,
    triggers: Vec<Trigger>,
    request_at: u64,
) -> (PathBuf, Result<EventRecord, EventRefused>, Vec<EventRecord>) {
    let options = StoreOptions {
        event_buffers: vec![buffer],
        triggers,
        ..common::split_every(dir, 20, Vec::new())
    };
    let mut store = LogStore::open(options).unwrap();
    assert!(
        store.request_event("too early", None) == Err(EventRefused::NoLog),
        "no log is open yet"
    );
    store
        .begin_log(
            (1, 1),
            SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
            ulog_recv::autopilot::LogFormat::ULog,
        )
        .unwrap();
    let cut = offset_of_time(log, request_at);
    let mut events = Vec::new();
    for piece in log[..cut].chunks(3_001) {
        store.write(piece).unwrap();
        events.extend(store.take_events());
    }
    let request = store.request_event("payload_drop", None);
    for piece in log[cut..].chunks(3_001) {
        store.write(piece).unwrap();
        events.extend(store.take_events());
    }
    let session = store.end_log().unwrap().unwrap();
    events.extend(store.take_events());
    (session, request, events)
}

/// The log's largest sample time before byte `cut`.
fn log_time_before(log: &[u8], cut: usize) -> u64 {
    framed(&log[16..cut]).filter_map(data_time).max().unwrap()
}

/// The joined session as a file, for pyulog.
fn joined_file(session: &Path) -> PathBuf {
    let path = session.with_extension("joined.ulg");
    std::fs::write(&path, read_session(session, None).unwrap()).unwrap();
    path
}

/// Runs tests/event_windows.py; its counts.
fn check_windows(original: &Path, stored: &Path, session: &Path) -> Option<serde_json::Value> {
    let py = common::venv_python()?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/event_windows.py");
    Some(common::json_output(
        std::process::Command::new(py)
            .arg(script)
            .args([original, stored, &session.join("manifest.json")])
            .arg("accel"),
    ))
}

#[test]
fn the_buffer_holds_its_topics_exactly_inside_the_windows_of_each_event() {
    let root = fresh_dir("events-windows");
    std::fs::create_dir_all(&root).unwrap();
    let log = flight_with_failsafe();
    let original = root.join("original.ulg");
    std::fs::write(&original, &log).unwrap();
    let request_at = START_US + 15 * SECOND;
    let (session, request, events) = store(
        &root.join("logs"),
        &log,
        accel_buffer(32 << 20),
        failsafe_and_low_voltage(),
        request_at,
    );
    let request = request.unwrap();

    // The request takes the log time reached: the last sample written before it.
    let t = log_time_before(&log, offset_of_time(&log, request_at));
    assert_eq!(request.at_us, t);
    assert_eq!(request.source, EventSource::Request);
    assert_eq!(request.windows.len(), 1);
    assert_eq!(
        (request.windows[0].from_us, request.windows[0].to_us),
        (t - 5 * SECOND, t + 2 * SECOND)
    );

    // Three events, in log order: the request, the failsafe string, the voltage crossing.
    let sources: Vec<EventSource> = events.iter().map(|e| e.source).collect();
    assert_eq!(
        sources,
        [
            EventSource::Request,
            EventSource::LoggedText,
            EventSource::Field
        ],
        "{events:#?}"
    );
    let failsafe = &events[1];
    assert_eq!(failsafe.at_us, FAILSAFE_AT);
    assert_eq!(failsafe.detail, FAILSAFE_TEXT);
    let low = &events[2];
    assert_eq!(low.name, LOW_VOLTAGE);
    assert!(
        low.detail
            .starts_with("esc_status[0].esc[0].esc_voltage = 16.4"),
        "{}",
        low.detail
    );
    assert!(
        (START_US + 29 * SECOND..START_US + 31 * SECOND).contains(&low.at_us),
        "{}",
        low.at_us
    );

    // The manifest: the events, and the buffer's windows with the overlapping two merged.
    let manifest = read_manifest(&session).unwrap();
    assert_eq!(manifest.events, events);
    let buffer = manifest.columns[0].event_buffer.as_ref().unwrap();
    assert_eq!(
        buffer.windows,
        [
            [t - 5 * SECOND, t + 2 * SECOND],
            [FAILSAFE_AT - 5 * SECOND, low.at_us + 2 * SECOND]
        ]
    );
    assert_eq!(buffer.dropped_for_memory, 0);

    // Every split of every column opens alone.
    assert!(manifest.columns[0].splits.len() >= 2, "{manifest:#?}");
    for split in manifest.all_splits() {
        common::check_with_pyulog(&session.join(&split.file));
    }

    // pyulog: sensor_accel exactly inside the windows, everything else complete.
    if let Some(counts) = check_windows(&original, &joined_file(&session), &session) {
        let (kept, total) = (
            counts["gated_kept"].as_u64().unwrap(),
            counts["gated_total"].as_u64().unwrap(),
        );
        eprintln!("pyulog: {counts}");
        // 7 s + 12 s of 60 s, at 125 samples/s.
        assert!(
            kept > 18 * 125 && kept < 20 * 125 && total > 59 * 125,
            "{counts}"
        );
        assert_eq!(counts["events"], 3);
    }
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn the_byte_bound_drops_the_oldest_held_samples_and_the_manifest_says_how_many() {
    let root = fresh_dir("events-bound");
    let log = flight_with_failsafe();
    // sensor_accel: 125 samples/s of 35 bytes; 16 KB holds under 4 s, not 5 + 2.
    let (session, request, _) = store(
        &root.join("logs"),
        &log,
        accel_buffer(16 << 10),
        failsafe_and_low_voltage(),
        START_US + 15 * SECOND,
    );
    let request = request.unwrap();
    let manifest = read_manifest(&session).unwrap();
    let buffer = manifest.columns[0].event_buffer.as_ref().unwrap();
    assert!(buffer.dropped_for_memory > 0, "{buffer:?}");
    // What was written of the request's window: its newest held samples, not its oldest.
    let joined = read_session(&session, Some("accel")).unwrap();
    let [from, to] = [request.windows[0].from_us, request.windows[0].to_us];
    let times: Vec<u64> = framed(&joined[16..])
        .filter_map(data_time)
        .filter(|&ts| ts <= to)
        .collect();
    assert!(!times.is_empty());
    assert!(times.iter().all(|&ts| ts >= from));
    let first = *times.iter().min().unwrap();
    assert!(
        first > from + SECOND && first < request.at_us - 2 * SECOND,
        "first sample {} s into a window from {} s to {} s",
        (first - from) as f64 / 1e6,
        from as f64 / 1e6,
        request.at_us as f64 / 1e6
    );
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn a_trigger_that_fires_on_every_few_samples_lists_a_thousand_events_and_still_writes_windows() {
    let root = fresh_dir("events-flood");
    let log = flight_with_failsafe();
    // The synthetic z acceleration is -9.81 m/s² with noise: below -9.81 on about every
    // other sample, a rising edge many times a second.
    let noisy = Trigger::Field(FieldCondition::parse("sensor_accel.z < -9.81").unwrap());
    let (session, request, events) = store(
        &root.join("logs"),
        &log,
        accel_buffer(32 << 20),
        vec![noisy],
        START_US + 50 * SECOND,
    );
    assert_eq!(request, Err(EventRefused::TooMany));
    assert_eq!(events.len(), MAX_LISTED_EVENTS);
    let manifest = read_manifest(&session).unwrap();
    assert_eq!(manifest.events.len(), MAX_LISTED_EVENTS);
    assert!(
        manifest.events_unlisted > 500,
        "{}",
        manifest.events_unlisted
    );
    // The events past the list still wrote their windows: one, from 5 s before the first
    // to 2 s after the last.
    let buffer = manifest.columns[0].event_buffer.as_ref().unwrap();
    assert_eq!(buffer.windows.len(), 1, "{:?}", buffer.windows);
    let [from, to] = buffer.windows[0];
    assert_eq!(from, manifest.events[0].at_us - 5 * SECOND);
    let last_sample = framed(&log[16..]).filter_map(data_time).max().unwrap();
    assert!(to > last_sample - SECOND, "{to} {last_sample}");
    let _ = std::fs::remove_dir_all(&root);
}

fn run_bin(args: &[&str]) -> std::process::Output {
    std::process::Command::new(BIN).args(args).output().unwrap()
}

#[test]
fn the_daemon_takes_events_from_the_event_command_and_its_triggers() {
    for (how, from_config) in [("cli", false), ("config", true)] {
        let dir = fresh_dir(&format!("events-daemon-{how}"));
        std::fs::create_dir_all(&dir).unwrap();
        let log = flight_with_failsafe();
        let original = dir.join("original.ulg");
        std::fs::write(&original, &log).unwrap();
        let socket = dir.join("live.sock");
        let port = common::procs::free_udp_port();
        let mut args = vec![
            "--udp".to_owned(),
            format!("127.0.0.1:{port}"),
            "--log-dir".into(),
            dir.join("logs").to_string_lossy().into_owned(),
            "--socket".into(),
            socket.to_string_lossy().into_owned(),
        ];
        if from_config {
            let config = dir.join("ulog-recv.toml");
            std::fs::write(
                &config,
                "event-before = 5\nevent-after = 2\nevent-on-log = [\"(?i)failsafe|crash\"]\n\
                 event-when = [\"esc_status.esc[0].esc_voltage < 16.5\"]\n\
                 [event-buffer]\naccel = \"sensor_accel\"\n",
            )
            .unwrap();
            args.extend(["--config".into(), config.to_string_lossy().into_owned()]);
        } else {
            for a in [
                "--event-buffer=accel=sensor_accel",
                "--before=5",
                "--after=2",
                "--event-on-log=(?i)failsafe|crash",
                "--event-when=esc_status.esc[0].esc_voltage < 16.5",
            ] {
                args.push(a.into());
            }
        }
        let (mut daemon, daemon_log) = Proc::spawn_watched("the daemon", &args);
        wait_for_line(&daemon_log, "logs into", Duration::from_secs(20));
        let socket_arg = socket.to_str().unwrap();

        // No log open: refused, and said why.
        let out = run_bin(&["event", "early", "--socket", socket_arg]);
        assert!(!out.status.success());
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(said.contains("no log is open"), "{said}");

        // The flight streams for about 8 s (1 MB at 70 % of 140 KB/s).
        let (mut sim, sim_log) = Proc::spawn_watched(
            "the simulator",
            &[
                "sim".into(),
                original.to_string_lossy().into_owned(),
                "--once".into(),
                "--udp-connect".into(),
                format!("127.0.0.1:{port}"),
            ],
        );
        wait_for_line(&daemon_log, "log session opened", Duration::from_secs(20));
        std::thread::sleep(Duration::from_secs(2));
        let out = run_bin(&[
            "event",
            "payload_drop",
            "--after",
            "1",
            "--json",
            "--socket",
            socket_arg,
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let line: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(line["type"], "event");
        assert_eq!(line["after_us"], SECOND);
        let at = line["at_us"].as_u64().unwrap();
        assert!(at > START_US, "{line}");
        assert_eq!(line["windows"][0]["buffer"], "accel");
        assert_eq!(line["windows"][0]["to_us"], at + SECOND);

        let session = &finish_recording(&mut daemon, &mut sim, &sim_log, &dir.join("logs"));
        let manifest = read_manifest(session).unwrap();
        // In the order they came: the one asked for and those the log made race (the store
        // may be behind the stream), so they are compared as a set.
        let mut names: Vec<&str> = manifest.events.iter().map(|e| e.name.as_str()).collect();
        names.sort_unstable();
        let mut expected = ["payload_drop", "(?i)failsafe|crash", LOW_VOLTAGE];
        expected.sort_unstable();
        assert_eq!(names, expected, "{how}");
        let asked = manifest.events.iter().find(|e| e.name == "payload_drop");
        assert_eq!(asked.unwrap().at_us, at);
        for split in manifest.all_splits() {
            common::check_with_pyulog(&session.join(&split.file));
        }
        let exported = dir.join("flight.ulg");
        let out = run_bin(&[
            "export",
            session.to_str().unwrap(),
            "-o",
            exported.to_str().unwrap(),
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        check_windows(&original, &exported, session);
        let out = run_bin(&["info", session.to_str().unwrap(), "--json"]);
        let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(info["session"]["events"].as_array().unwrap().len(), 3);
        let accel = &info["session"]["columns"][1];
        assert_eq!(accel["name"], "accel");
        assert_eq!(
            accel["event_buffer"]["windows"],
            serde_json::json!(manifest.columns[0].event_buffer.as_ref().unwrap().windows)
        );
        let out = run_bin(&["info", session.to_str().unwrap()]);
        let info = String::from_utf8_lossy(&out.stdout);
        assert!(
            info.contains("event buffer: written only around events"),
            "{info}"
        );
        assert!(info.contains("event payload_drop at"), "{info}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
