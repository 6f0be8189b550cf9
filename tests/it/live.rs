//! End to end, the live socket: the daemon and `ulog-recv sim` as processes over loopback UDP,
//! clients on the daemon's Unix socket. Clients with different patterns receive exactly the
//! samples of their topics, with pyulog's values; a client that joins mid-stream gets the
//! catalogue, then data; a client that never reads gets `lagged` and costs nobody else a
//! sample; bad requests, huge lines and abrupt disconnects get errors and leak nothing;
//! `ulog-recv tail` and `ulog-recv topics` work against the real daemon.

use crate::common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::procs::{BIN, Proc, free_udp_port, fresh_dir, ulg_files, wait_for_line};
use common::{all_logs, expected_for};
use serde_json::{Value as Json, json};

/// The log to stream: the real one with tagged strings and parameter changes when
/// `../shared` is there, else our synthetic one.
fn test_log() -> PathBuf {
    let logs = all_logs();
    logs.iter()
        .find(|p| p.ends_with("sample_logging_tagged_and_default_params.ulg"))
        .unwrap_or(&logs[0])
        .clone()
}

fn connect(socket: &Path) -> UnixStream {
    let t0 = Instant::now();
    loop {
        match UnixStream::connect(socket) {
            Ok(s) => return s,
            Err(e) if t0.elapsed() > Duration::from_secs(10) => {
                panic!("cannot connect to {}: {e}", socket.display())
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

fn send(s: &mut UnixStream, request: &Json) {
    let mut line = request.to_string().into_bytes();
    line.push(b'\n');
    s.write_all(&line).unwrap();
}

/// Reads lines until the daemon closes the connection.
fn read_all(s: UnixStream) -> Vec<Json> {
    BufReader::new(s)
        .lines()
        .map(|l| serde_json::from_str(&l.unwrap()).expect("every line is JSON"))
        .collect()
}

/// A client that subscribes to `patterns` and reads until the end, in a thread.
fn follower(socket: &Path, patterns: Json) -> std::thread::JoinHandle<Vec<Json>> {
    let mut s = connect(socket);
    send(&mut s, &json!({ "subscribe": patterns }));
    std::thread::spawn(move || read_all(s))
}

fn data_counts(lines: &[Json]) -> BTreeMap<(String, u64), u64> {
    let mut out = BTreeMap::new();
    for l in lines.iter().filter(|l| l["type"] == "data") {
        let key = (
            l["topic"].as_str().unwrap().to_owned(),
            l["multi_id"].as_u64().unwrap(),
        );
        *out.entry(key).or_insert(0) += 1;
    }
    out
}

/// pyulog's count per topic instance, for the topics `keep` accepts.
fn expected_counts(expected: &Json, keep: impl Fn(&str) -> bool) -> BTreeMap<(String, u64), u64> {
    expected["datasets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| keep(d["name"].as_str().unwrap()))
        .map(|d| {
            (
                (
                    d["name"].as_str().unwrap().to_owned(),
                    d["multi_id"].as_u64().unwrap(),
                ),
                d["count"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// The first and last samples a client got of each instance equal pyulog's (numbers; floats
/// to `float` precision; booleans as 0/1; NaN as null; text fields, which pyulog lists per
/// character, are left to the in-memory tests).
fn assert_values_match(lines: &[Json], expected: &Json, what: &str) {
    let mut checked = 0;
    for ds in expected["datasets"].as_array().unwrap() {
        let mine: Vec<&Json> = lines
            .iter()
            .filter(|l| {
                l["type"] == "data" && l["topic"] == ds["name"] && l["multi_id"] == ds["multi_id"]
            })
            .collect();
        let Some(first) = mine.first() else { continue };
        for (ours, theirs) in [(first, &ds["first"]), (mine.last().unwrap(), &ds["last"])] {
            let mut flat = BTreeMap::new();
            common::flatten_fields("", &ours["fields"], &mut flat);
            for (k, t) in theirs.as_object().unwrap() {
                if k.contains("_padding") || k.ends_with(']') && !flat.contains_key(k) {
                    continue;
                }
                let o = flat
                    .get(k)
                    .unwrap_or_else(|| panic!("{what}: {} has no field {k}", ds["name"]));
                let equal = match (o, t) {
                    (Json::Null, Json::String(s)) => matches!(s.as_str(), "nan" | "inf" | "-inf"),
                    (Json::Bool(b), t) => t.as_u64() == Some(*b as u64),
                    (o, t) if o.is_u64() || o.is_i64() => o == t,
                    (o, t) => {
                        let (x, y) = (o.as_f64().unwrap(), t.as_f64().unwrap());
                        x == y || (x - y).abs() <= 1e-6 * y.abs()
                    }
                };
                assert!(equal, "{what}: {}.{k}: ours {o}, pyulog {t}", ds["name"]);
                checked += 1;
            }
        }
    }
    assert!(checked > 0, "{what}: no value compared");
}

/// The daemon on a UDP port with its socket in `dir`.
fn start_daemon(dir: &Path, extra: &[&str]) -> (Proc, PathBuf, u16) {
    let port = free_udp_port();
    let socket = dir.join("live.sock");
    let mut args: Vec<String> = vec![
        "--udp".into(),
        port.to_string(),
        "--log-dir".into(),
        dir.join("logs").display().to_string(),
        "--socket".into(),
        socket.display().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let daemon = Proc::spawn("the daemon", &args);
    (daemon, socket, port)
}

/// `ulog-recv sim --once` streaming `log` to `port`, watched (its lines on the channel).
fn start_sim(log: &Path, port: u16, rate: u64) -> (Proc, std::sync::mpsc::Receiver<String>) {
    Proc::spawn_watched(
        "the simulator",
        &[
            "sim".into(),
            log.display().to_string(),
            "--once".into(),
            "--link-rate".into(),
            // The log streams at 70 % of the link's rate.
            (rate * 10 / 7).to_string(),
            "--udp-connect".into(),
            format!("127.0.0.1:{port}"),
        ],
    )
}

#[test]
fn clients_receive_exactly_their_topics_and_a_stuck_one_harms_nobody() {
    let log = test_log();
    let expected = expected_for(&log);
    let dir = fresh_dir("live");
    std::fs::create_dir_all(&dir).unwrap();
    // A queue small enough for the stuck client to overflow within this short stream
    // (several MB of JSON), large enough for reading clients to absorb the bursts.
    let (mut daemon, socket, port) = start_daemon(&dir, &["--client-queue", "512K"]);
    let vehicles = follower(&socket, json!(["vehicle_*"]));
    let sensors = follower(&socket, json!(["sensor_*", "actuator_controls_0"]));
    let mut stuck = connect(&socket);
    send(&mut stuck, &json!({"subscribe": ["*"]}));
    // The socket is 0660.
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&socket).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o660);

    let (mut sim, _) = start_sim(&log, port, 600_000);
    // Mid-stream: a client that joins once samples flow.
    let mut late = None;
    let t0 = Instant::now();
    while late.is_none() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the log never started"
        );
        let mut probe = connect(&socket);
        send(&mut probe, &json!({"subscribe": ["*"]}));
        let mut reader = BufReader::new(probe.try_clone().unwrap());
        let mut hello = String::new();
        reader.read_line(&mut hello).unwrap();
        let hello: Json = serde_json::from_str(&hello).unwrap();
        // Joined once the log is open and its topics are known (the log opens with its
        // header; its topics come with the definitions after it).
        let mut catalogue = String::new();
        reader.read_line(&mut catalogue).unwrap();
        let catalogue: Json = serde_json::from_str(&catalogue).unwrap();
        let topics_known = catalogue["topics"]
            .as_array()
            .is_some_and(|t| !t.is_empty());
        if hello["log"].is_null() || !topics_known {
            drop(reader);
            drop(probe);
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        late = Some((
            (hello, catalogue),
            std::thread::spawn(move || {
                reader
                    .lines()
                    .map(|l| serde_json::from_str::<Json>(&l.unwrap()).unwrap())
                    .collect::<Vec<_>>()
            }),
        ));
    }
    assert!(sim.wait(Duration::from_secs(60)).success());
    std::thread::sleep(Duration::from_millis(300));
    // The stuck client reads at last, while the daemon still runs: its queue's newest lines,
    // after a `lagged` line saying how many went, up to the end of the log (which the
    // daemon declares once the vehicle stops streaming; session events are never dropped).
    let mut stuck_lines = Vec::new();
    for line in BufReader::new(stuck).lines() {
        let line: Json = serde_json::from_str(&line.unwrap()).unwrap();
        let end = line["type"] == "session" && line["event"] == "end";
        stuck_lines.push(line);
        if end {
            break;
        }
    }
    assert!(daemon.terminate().success(), "the daemon exits cleanly");
    assert!(!socket.exists(), "the socket file is removed at exit");

    // The file holds every sample, as pyulog counts them (nothing lost to the stuck client).
    let files = ulg_files(&dir.join("logs"));
    assert_eq!(files.len(), 1);
    let stored = common::pyulog_view(&std::fs::read(&files[0]).unwrap(), 1 << 16);
    let stored_counts = expected_counts(&stored, |_| true);
    assert_eq!(stored_counts, expected_counts(&expected, |_| true));

    let vehicles = vehicles.join().unwrap();
    assert_eq!(
        data_counts(&vehicles),
        expected_counts(&expected, |t| t.starts_with("vehicle_")),
        "the vehicle_* client got every sample of its topics, and only those"
    );
    assert_values_match(&vehicles, &expected, "vehicle_* client");
    let sensors = sensors.join().unwrap();
    assert_eq!(
        data_counts(&sensors),
        expected_counts(&expected, |t| t.starts_with("sensor_")
            || t == "actuator_controls_0"),
    );
    assert_values_match(&sensors, &expected, "sensor_* client");
    for lines in [&vehicles, &sensors] {
        assert_eq!(lines[0]["type"], "hello");
        assert_eq!(lines[0]["protocol"], 1);
        assert_eq!(lines[1]["type"], "topics");
        assert!(
            lines.iter().all(|l| l["type"] != "lagged"),
            "no gap for readers"
        );
        let kinds: Vec<&str> = lines.iter().filter_map(|l| l["type"].as_str()).collect();
        for kind in ["subscribed", "session", "stats", "data"] {
            assert!(kinds.contains(&kind), "no {kind} line");
        }
        let events: Vec<&str> = lines
            .iter()
            .filter(|l| l["type"] == "session")
            .filter_map(|l| l["event"].as_str())
            .collect();
        // The simulated vehicle is on the ground (its first heartbeat says disarmed); it is
        // lost 5 s after the simulator exits: the log has ended by then.
        assert_eq!(
            events,
            ["vehicle_found", "disarmed", "start", "end", "vehicle_lost"]
        );
    }
    let logged = expected["logged_messages"].as_array().unwrap().len()
        + expected["logged_messages_tagged"]
            .as_object()
            .map_or(0, |m| m.values().map(|v| v.as_array().unwrap().len()).sum());
    assert_eq!(
        vehicles.iter().filter(|l| l["type"] == "log").count(),
        logged
    );

    // The late client: hello with the open log, the catalogue, then data from where it joined.
    let ((hello, catalogue), late) = late.unwrap();
    let late = late.join().unwrap();
    assert_eq!(hello["type"], "hello");
    assert!(hello["log"]["number"].is_u64());
    assert_eq!(catalogue["type"], "topics");
    let late_counts = data_counts(&late);
    assert!(!late_counts.is_empty(), "the late client got data");
    for (k, n) in &late_counts {
        assert!(*n <= stored_counts[k], "{k:?}");
    }

    // The stuck client: told it lagged, and got only whole lines.
    let lines = stuck_lines;
    let lagged: u64 = lines
        .iter()
        .filter(|l| l["type"] == "lagged")
        .map(|l| l["dropped"].as_u64().unwrap())
        .sum();
    assert!(lagged > 0, "the stuck client was told it lagged");
    let got = lines.iter().filter(|l| l["type"] == "data").count() as u64;
    let total: u64 = stored_counts.values().sum();
    assert!(got < total, "it did not get everything ({got} of {total})");
}

#[test]
fn bad_requests_huge_lines_and_abrupt_disconnects_leave_the_daemon_serving() {
    let dir = fresh_dir("live-abuse");
    std::fs::create_dir_all(&dir).unwrap();
    let tcp_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let tcp = format!("127.0.0.1:{tcp_port}");
    let (mut daemon, socket, _port) = start_daemon(&dir, &["--publish-tcp", &tcp]);
    // Many clients that vanish at once, some mid-request.
    for i in 0..40 {
        let mut s = connect(&socket);
        if i % 2 == 0 {
            let _ = s.write_all(b"{\"subscribe\": [\"veh");
        }
        drop(s);
    }
    let mut s = connect(&socket);
    s.write_all(b"this is not json\n").unwrap();
    s.write_all(b"{\"subscribe\": [\"*\"], \"bogus\": 1}\n")
        .unwrap();
    // A line of 1 MB, then a good request: the daemon skips the one and answers the other.
    s.write_all(&vec![b'x'; 1 << 20]).unwrap();
    s.write_all(b"\n{\"subscribe\": [\"vehicle_*\"], \"max_rate_hz\": 5}\n")
        .unwrap();
    let mut lines = BufReader::new(s.try_clone().unwrap()).lines();
    let mut seen = Vec::new();
    let t0 = Instant::now();
    // Until the stats line that counts the clients, after the reply to the good request.
    let stats = loop {
        assert!(t0.elapsed() < Duration::from_secs(10));
        let l: Json = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        if l["type"] == "stats" && seen.iter().any(|s: &Json| s["type"] == "subscribed") {
            break l;
        }
        seen.push(l);
    };
    let errors: Vec<&str> = seen
        .iter()
        .filter(|l| l["type"] == "error")
        .map(|l| l["message"].as_str().unwrap())
        .collect();
    assert_eq!(errors.len(), 3, "{errors:?}");
    assert!(errors[0].contains("not JSON"));
    assert!(errors[1].contains("unknown key 'bogus'"));
    assert!(errors[2].contains("longer than"));
    let ok = seen.iter().find(|l| l["type"] == "subscribed").unwrap();
    assert_eq!(ok["patterns"], json!(["vehicle_*"]));
    assert_eq!(ok["max_rate_hz"], 5.0);
    // Only this client is left: the 40 that vanished were all let go.
    assert_eq!(stats["clients"], 1, "{stats}");
    assert!(stats["log"].is_null());
    // `ulog-recv topics` says there is no log yet.
    let out = Command::new(BIN)
        .args(["topics", "--socket"])
        .arg(&socket)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "no vehicle heard yet; no log streaming now\n"
    );
    // The same over TCP (for containers).
    let out = Command::new(BIN)
        .args(["topics", "--json", "--tcp", &tcp])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let catalogue: Json = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        catalogue,
        json!({"type": "topics", "log": null, "topics": []})
    );
    // `tail | head`: the reader goes away; tail ends quietly, successfully.
    let mut tail = Command::new(BIN)
        .args(["tail", "--json", "--socket"])
        .arg(&socket)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(tail.stdout.as_mut().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.contains("\"hello\""), "{first}");
    drop(tail.stdout.take());
    let out = tail.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(lines);
    drop(s);
    assert!(daemon.terminate().success());
    // Explicitly given, a socket another daemon serves is an error.
    let (mut first, socket, _) = start_daemon(&dir, &[]);
    connect(&socket);
    let second = Command::new(BIN)
        .args(["--udp", "0", "--log-dir"])
        .arg(dir.join("logs2"))
        .arg("--socket")
        .arg(&socket)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(!second.status.success());
    assert!(
        String::from_utf8_lossy(&second.stderr).contains("already serves"),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    assert!(first.terminate().success());
}

#[test]
fn tail_and_topics_follow_the_daemon() {
    let log = test_log();
    let expected = expected_for(&log);
    let dir = fresh_dir("live-tail");
    std::fs::create_dir_all(&dir).unwrap();
    let (mut daemon, socket, port) = start_daemon(&dir, &[]);
    connect(&socket);
    let tail = |args: &[&str]| {
        Command::new(BIN)
            .arg("tail")
            .arg("--socket")
            .arg(&socket)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let json_tail = tail(&["--json", "-n", "20", "vehicle_*"]);
    let text_tail = tail(&["-n", "20", "--fields", "timestamp,q", "vehicle_attitude"]);
    let (mut sim, sim_log) = start_sim(&log, port, 600_000);
    let json_out = json_tail.wait_with_output().unwrap();
    let text_out = text_tail.wait_with_output().unwrap();
    // While the log streams: the catalogue lists the log's topics.
    let topics = Command::new(BIN)
        .args(["topics", "--json", "--socket"])
        .arg(&socket)
        .output()
        .unwrap();
    // Stopped while the vehicle still streams, as systemd would.
    wait_for_line(&sim_log, "the whole log was sent", Duration::from_secs(60));
    assert!(daemon.terminate().success());
    assert!(sim.wait(Duration::from_secs(10)).success());

    assert!(
        json_out.status.success(),
        "{}",
        String::from_utf8_lossy(&json_out.stderr)
    );
    let lines: Vec<Json> = String::from_utf8(json_out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let data: Vec<&Json> = lines.iter().filter(|l| l["type"] == "data").collect();
    assert_eq!(data.len(), 20, "tail -n 20 stops after 20 samples");
    assert!(
        data.iter()
            .all(|l| l["topic"].as_str().unwrap().starts_with("vehicle_"))
    );

    assert!(text_out.status.success());
    let text = String::from_utf8(text_out.stdout).unwrap();
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("vehicle_attitude[0]"))
        .collect();
    assert_eq!(rows.len(), 20, "{text}");
    // Aligned: the values start in the same column on every row; only the asked fields.
    let col = rows[0].find("timestamp=").unwrap();
    for r in &rows {
        assert_eq!(r.find("timestamp=").unwrap(), col, "{text}");
        assert!(r.contains(" q=[") && !r.contains("rollspeed"), "{r}");
    }

    assert!(topics.status.success());
    let catalogue: Json = serde_json::from_slice(&topics.stdout).unwrap();
    let names: std::collections::BTreeSet<&str> = catalogue["topics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    let all: std::collections::BTreeSet<&str> = expected["datasets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    // The catalogue lists the subscriptions so far (some never get a sample, which pyulog
    // does not list); most of pyulog's topics are in it.
    let known = all.iter().filter(|n| names.contains(*n)).count();
    assert!(known * 2 > all.len(), "{names:?}");
    let attitude = catalogue["topics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "vehicle_attitude")
        .unwrap();
    assert_eq!(
        attitude["fields"][0],
        json!({"name": "timestamp", "type": "uint64_t"})
    );
}
