//! Uploads against the real servers users run: Garage (a production S3 server) and PX4's
//! Flight Review, with the daemon and the simulator as processes. What is in the bucket is
//! read back by boto3 (`tests/s3_objects.py`), an S3 client independent of ours. Sessions
//! stored in columns (an event buffer among them) go up whole, the main column first.
//!
//! Garage is `cargo install --locked garage@2.5.0` (`.ci/run` caches it under
//! `~/.cache/ulog-recv/`; `$GARAGE` names another binary); Flight Review is
//! `../shared/vendor/flight_review` in the virtualenv `.venv-flight-review` that `.ci/run`
//! makes. Without them the tests say SKIPPED, and fail under CI.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use common::flight_review::FlightReviewServer;
use common::garage::{Garage, SECRET_KEY, credentials, free_tcp_port};
use common::http_relay::{HttpRelay, RequestHead};
use common::procs::{Proc, free_udp_port, fresh_dir, wait_for_line};
use common::sha256_file;
use common::tls::{PrivateCa, Terminator};
use serde_json::Value as Json;

fn skip_or_fail(what: &str) {
    eprintln!("SKIPPED: {what}");
    assert!(
        std::env::var_os("CI").is_none(),
        "CI must run the upload tests: {what}"
    );
}

/// A Garage for test `name`, or a loud skip.
fn garage(name: &str) -> Option<Garage> {
    Garage::start(fresh_dir(&format!("garage-{name}")))
        .map_err(|e| skip_or_fail(&e))
        .ok()
}

fn daemon(dir: &Path, port: u16, extra: &[String]) -> (Proc, Receiver<String>) {
    let mut args: Vec<String> = vec![
        "--udp".into(),
        format!("127.0.0.1:{port}"),
        "--log-dir".into(),
        dir.join("logs").display().to_string(),
        "--no-socket".into(),
    ];
    args.extend_from_slice(extra);
    Proc::spawn_watched("the daemon", &args)
}

fn sim(port: u16, duration_s: u32, link_rate: u64) -> Proc {
    Proc::spawn(
        "the simulator",
        &[
            "sim".into(),
            "--synthetic".into(),
            "--duration".into(),
            duration_s.to_string(),
            "--once".into(),
            "--link-rate".into(),
            link_rate.to_string(),
            "--udp-connect".into(),
            format!("127.0.0.1:{port}"),
        ],
    )
}

/// The one session directory under `dir/logs`.
fn the_session(dir: &Path) -> PathBuf {
    let sessions = common::procs::session_dirs(&dir.join("logs"));
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    sessions[0].clone()
}

/// Records a synthetic flight of `duration_s` into `dir/logs` (daemon and simulator as
/// processes, no uploads) and returns its session.
fn record(dir: &Path, duration_s: u32, extra: &[String]) -> PathBuf {
    let port = free_udp_port();
    let (mut d, _lines) = daemon(dir, port, extra);
    let mut s = sim(port, duration_s, 3_000_000);
    assert!(s.wait(Duration::from_secs(120)).success());
    assert!(d.terminate().success());
    the_session(dir)
}

/// The "uploaded" lines' keys, in order, until `stop` is seen.
fn uploaded_keys(lines: &Receiver<String>, stop: &str, limit: Duration) -> Vec<String> {
    let t0 = Instant::now();
    let mut keys = Vec::new();
    loop {
        let line = lines
            .recv_timeout(limit.saturating_sub(t0.elapsed()))
            .unwrap_or_else(|_| panic!("no {stop:?} within {limit:?}"));
        if line.contains(" uploaded ")
            && let Some(k) = line.split("key=").nth(1)
        {
            keys.push(
                k.split_whitespace()
                    .next()
                    .unwrap()
                    .trim_matches('"')
                    .to_string(),
            );
        }
        if line.contains(stop) {
            return keys;
        }
    }
}

#[test]
fn a_session_reaches_the_bucket_whole_split_by_split_through_half_a_minute_without_the_server() {
    let Some(py) = common::venv_python() else {
        return;
    };
    let Some(mut garage) = garage("outage") else {
        return;
    };
    let dir = fresh_dir("upload-outage");
    let creds = credentials(&dir, SECRET_KEY);
    let port = free_udp_port();
    let mut args = garage.upload_args("fleet", &creds);
    args.extend(["--split-size".into(), "1M".into(), "--upload-tables".into()]);
    let (mut d, lines) = daemon(&dir, port, &args);
    // About 6 MB of log at 160 KB/s: 40 s of streaming.
    let mut s = sim(port, 800, 230_000);
    // The first split goes up as soon as it is closed; then the server goes away for 30 s.
    let first = uploaded_keys(&lines, "split_0000.ulg", Duration::from_secs(60));
    assert_eq!(first.len(), 1, "{first:?}");
    garage.stop();
    let down = Instant::now();
    std::thread::sleep(Duration::from_secs(30));
    garage.run();
    eprintln!("Garage back after {:?}", down.elapsed());
    assert!(s.wait(Duration::from_secs(120)).success());
    // The session closes once the vehicle is gone; everything then reaches the bucket.
    let mut keys = first;
    keys.extend(uploaded_keys(
        &lines,
        "session uploaded",
        Duration::from_secs(180),
    ));
    let session = the_session(&dir);
    assert!(d.terminate().success());

    let manifest: Json =
        serde_json::from_slice(&std::fs::read(session.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["closed"], true);
    let splits = manifest["splits"].as_array().unwrap();
    assert!(splits.len() >= 5, "{} splits", splits.len());
    let name = session.file_name().unwrap().to_string_lossy().into_owned();
    let prefix = format!("fleet/sys1/{name}/");
    let found = garage.objects(&py, &prefix);
    let objects = found["objects"].as_object().unwrap();
    assert_eq!(objects.len(), splits.len() + 1, "{:?}", objects.keys());
    for split in splits {
        let file = split["file"].as_str().unwrap();
        let object = &objects[&format!("{prefix}{file}")];
        assert_eq!(object["sha256"], split["sha256"], "{file}");
        assert_eq!(
            object["sha256"].as_str().unwrap(),
            sha256_file(&session.join(file))
        );
        // Each split once: never uploaded twice.
        let times = keys.iter().filter(|k| k.ends_with(file)).count();
        assert_eq!(times, 1, "{file} uploaded {times} times: {keys:?}");
    }
    assert_eq!(
        objects[&format!("{prefix}manifest.json")]["sha256"]
            .as_str()
            .unwrap(),
        sha256_file(&session.join("manifest.json"))
    );
    // The manifest went after each split, and last.
    assert!(keys.last().unwrap().ends_with("manifest.json"), "{keys:?}");
    assert!(found["open_multipart"].as_array().unwrap().is_empty());
    assert!(session.join("uploaded").exists());
    // The flight's tables went after every split, once each, and the manifest lists them.
    let tables: Vec<&String> = keys.iter().filter(|k| k.contains("/parquet/v1/")).collect();
    let last_split = keys.iter().rposition(|k| k.ends_with(".ulg")).unwrap();
    let first_table = keys
        .iter()
        .position(|k| k.contains("/parquet/v1/"))
        .unwrap();
    assert!(last_split < first_table, "{keys:?}");
    let listed: Vec<&String> = manifest["tables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .map(|k| tables.iter().copied().find(|t| *t == k).expect(k))
        .collect();
    assert_eq!(listed.len(), tables.len(), "{keys:?}");
    let in_bucket = garage.objects(&py, "fleet/parquet/");
    assert_eq!(
        in_bucket["objects"].as_object().unwrap().len(),
        tables.len()
    );

    // `ulog-recv uploads` says so.
    let out = Command::new(common::procs::BIN)
        .args(["uploads", "--log-dir"])
        .arg(dir.join("logs"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!(
            "{name}  uploaded  splits {n}/{n}",
            n = splits.len()
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(", tables {n}/{n}", n = tables.len())),
        "{text}"
    );
}

#[test]
fn the_tables_wait_until_no_session_has_a_split_or_manifest_to_upload() {
    let Some(garage) = garage("tables-last") else {
        return;
    };
    let dir = fresh_dir("upload-tables-last");
    let creds = credentials(&dir, SECRET_KEY);
    // Two flights already recorded (a daemon restarted, its uploads not begun), two vehicles.
    let sessions: Vec<PathBuf> = [(1u8, 1_795_165_200u64), (2, 1_795_165_800)]
        .iter()
        .map(|&(system_id, start_s)| {
            let log = ulog_recv::sim::synth::generate(ulog_recv::sim::synth::SynthOptions {
                duration_s: 6,
                seed: u64::from(system_id),
                appended_data: false,
            });
            let options = common::split_every(&dir.join("logs"), 2, Vec::new());
            common::store_session(options, system_id, &log, 4096, start_s)
        })
        .collect();
    let mut args = garage.upload_args("fleet", &creds);
    args.push("--upload-tables".into());
    let (mut d, lines) = daemon(&dir, free_udp_port(), &args);
    let mut keys = uploaded_keys(&lines, "session uploaded", Duration::from_secs(120));
    keys.extend(uploaded_keys(
        &lines,
        "session uploaded",
        Duration::from_secs(120),
    ));
    assert!(d.terminate().success());
    // Every split and a manifest of both sessions, then the tables.
    let first_table = (keys.iter().position(|k| k.contains("/parquet/v1/")))
        .unwrap_or_else(|| panic!("no table uploaded: {keys:?}"));
    for session in &sessions {
        let name = session.file_name().unwrap().to_string_lossy().into_owned();
        let manifest = ulog_recv::store::files::read_manifest(session).unwrap();
        assert!(
            manifest.splits.len() >= 2,
            "{} splits",
            manifest.splits.len()
        );
        for split in &manifest.splits {
            let key = format!("/{name}/{}", split.file);
            let at = keys.iter().position(|k| k.ends_with(&key)).expect(&key);
            assert!(at < first_table, "{key} after a table: {keys:?}");
        }
        let manifest_key = format!("/{name}/manifest.json");
        let first_manifest = keys.iter().position(|k| k.ends_with(&manifest_key));
        assert!(
            first_manifest.is_some_and(|at| at < first_table),
            "{keys:?}"
        );
        assert!(!manifest.tables.is_empty());
    }
}

/// The session's first split is in the bucket under `prefix` with its SHA-256 (as boto3
/// reads it), and no multipart upload is left open there.
fn assert_whole_split(garage: &Garage, py: &Path, prefix: &str, session: &Path) {
    let name = session.file_name().unwrap().to_string_lossy().into_owned();
    let found = garage.objects(py, &format!("{prefix}/sys1/{name}/"));
    assert_eq!(
        found["objects"][&format!("{prefix}/sys1/{name}/split_0000.ulg")]["sha256"]
            .as_str()
            .unwrap(),
        sha256_file(&session.join("split_0000.ulg"))
    );
    assert!(
        found["open_multipart"].as_array().unwrap().is_empty(),
        "{found}"
    );
}

/// The daemon with `args` (which pace the upload slow enough to be cut) killed with
/// `kill -9` once it has sent a part: the journal's record of the session's first split,
/// a multipart upload under way.
fn killed_after_a_part(dir: &Path, session: &Path, args: &[String]) -> Json {
    let (mut d, lines) = daemon(dir, free_udp_port(), args);
    wait_for_line(&lines, "part sent", Duration::from_secs(30));
    unsafe { libc::kill(d.0.id() as i32, libc::SIGKILL) };
    let _ = d.0.wait();
    let journal: Json =
        serde_json::from_slice(&std::fs::read(session.join("upload.json")).unwrap()).unwrap();
    let record = journal["objects"]["split_0000.ulg"].clone();
    assert_eq!(record["state"], "multipart", "{journal}");
    record
}

#[test]
fn a_multipart_upload_cut_by_kill_9_resumes_at_its_next_part_and_the_rate_cap_holds() {
    let Some(py) = common::venv_python() else {
        return;
    };
    let Some(garage) = garage("multipart") else {
        return;
    };
    let dir = fresh_dir("upload-multipart");
    let creds = credentials(&dir, SECRET_KEY);
    // One split of about 12 MB: three parts of 5 MiB.
    let session = record(&dir, 1500, &[]);
    let split = session.join("split_0000.ulg");
    let size = std::fs::metadata(&split).unwrap().len();
    assert!(size > 10 << 20, "{size} bytes");
    let parts = size.div_ceil(5 << 20);
    // A copy for the rate measurement, before anything is uploaded.
    let rated = dir.join("rated");
    std::fs::create_dir_all(&rated).unwrap();
    let copy = rated.join(session.file_name().unwrap());
    std::fs::create_dir_all(&copy).unwrap();
    for f in ["split_0000.ulg", "manifest.json"] {
        std::fs::copy(session.join(f), copy.join(f)).unwrap();
    }

    let mut args = garage.upload_args("kill", &creds);
    args.extend(
        [
            // The explicit spelling of the default, still accepted.
            "--upload-path-style",
            "--upload-part-size",
            "5M",
            "--upload-rate",
            "2M",
            "--log-level",
            "ulog_recv=debug",
        ]
        .map(String::from),
    );
    let record = &killed_after_a_part(&dir, &session, &args);
    // Parts complete in any order: those recorded have their id, the others are null.
    let listed = record["parts"].as_array().unwrap();
    assert_eq!(listed.len() as u64, parts, "{record}");
    let sent_before = listed.iter().filter(|p| p.is_string()).count() as u64;
    assert!(
        sent_before >= 1 && sent_before < parts,
        "{sent_before} of {parts}"
    );

    args.truncate(args.len() - 4);
    args.extend(["--log-level", "ulog_recv=debug"].map(String::from));
    let (mut d, lines) = daemon(&dir, free_udp_port(), &args);
    let t0 = Instant::now();
    let mut sent_after = 0;
    loop {
        let line = lines
            .recv_timeout(Duration::from_secs(60).saturating_sub(t0.elapsed()))
            .expect("the session uploaded within 60 s of the restart");
        sent_after += line.contains("part sent") as u64;
        if line.contains("session uploaded") {
            break;
        }
    }
    assert!(d.terminate().success());
    assert_eq!(
        sent_before + sent_after,
        parts,
        "parts sent before and after the kill"
    );
    assert_whole_split(&garage, &py, "kill", &session);

    // By hand, at 1 MiB/s: the whole upload takes what the cap says, within 10 %.
    let t0 = Instant::now();
    let mut up = Command::new(common::procs::BIN);
    up.arg("upload")
        .arg(&copy)
        .args(garage.upload_args("rated", &creds));
    up.args(["--upload-part-size", "5M", "--upload-rate", "1M"]);
    let out = up.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let took = t0.elapsed().as_secs_f64();
    let bytes = size + std::fs::metadata(copy.join("manifest.json")).unwrap().len();
    let rate = bytes as f64 / took;
    eprintln!("{bytes} bytes in {took:.2} s: {rate:.0} B/s against a cap of 1048576");
    assert!((rate / 1048576.0 - 1.0).abs() < 0.10, "rate {rate:.0} B/s");
}

/// A multipart upload the bucket no longer has (a lifecycle rule aborted it while the
/// vehicle was away) fails once, with the server's word, and the next try begins the file
/// again: never the same refusal for ever.
#[test]
fn a_multipart_upload_the_bucket_aborted_is_begun_again_from_its_first_part() {
    let Some(py) = common::venv_python() else {
        return;
    };
    let Some(garage) = garage("aborted") else {
        return;
    };
    let dir = fresh_dir("upload-aborted");
    let creds = credentials(&dir, SECRET_KEY);
    let session = record(&dir, 1500, &[]);
    let mut args = garage.upload_args("aborted", &creds);
    args.extend(["--upload-part-size", "5M"].map(String::from));
    let mut slow = args.clone();
    slow.extend(["--upload-rate", "2M", "--log-level", "ulog_recv=debug"].map(String::from));
    let record = killed_after_a_part(&dir, &session, &slow);
    let sent = record["parts"].as_array().unwrap();
    assert!(
        sent.iter().any(|p| p.is_null()),
        "parts left to send: {record}"
    );

    let found = garage.abort_open_uploads(&py, "aborted/");
    assert!(
        found["open_multipart"].as_array().unwrap().is_empty(),
        "{found}"
    );
    let (ok, said) = upload_by_hand(&session, &args, &[]);
    assert!(!ok && said.contains("not found"), "{said}");
    let (ok, said) = upload_by_hand(&session, &args, &[]);
    assert!(ok, "{said}");
    assert_whole_split(&garage, &py, "aborted", &session);
}

/// `ulog-recv upload SESSION ARGS` with the environment `env`: whether it succeeded, and
/// what it said on stderr.
fn upload_by_hand(session: &Path, args: &[String], env: &[(&str, &Path)]) -> (bool, String) {
    let mut up = Command::new(common::procs::BIN);
    up.arg("upload").arg(session).args(args);
    for (name, value) in env {
        up.env(name, value);
    }
    let out = up.output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The checksums every request carries, seen on the way by a relay in front of Garage that
/// changes one byte of one part: over TLS (socat in front, with a private CA's certificate)
/// the payload goes unsigned with a CRC64-NVME, over plain HTTP signed with its SHA-256, and
/// either way the server refuses the changed part, the upload says so, and a second run
/// sends it again whole. Without the CA, the certificate is refused with what to do.
#[test]
fn over_tls_parts_go_unsigned_with_a_crc64nvme_over_http_signed_and_a_byte_changed_on_the_way_is_refused()
 {
    let Some(py) = common::venv_python() else {
        return;
    };
    let Some(garage) = garage("checksums") else {
        return;
    };
    let dir = fresh_dir("upload-checksums");
    let creds = credentials(&dir, SECRET_KEY);
    // One split of about 12 MB: three parts of 5 MiB.
    let session = record(&dir, 1500, &[]);
    // The second part's body gets one bit flipped on its way (once per relay).
    let second_part = |r: &RequestHead| r.method == "PUT" && r.target.contains("partNumber=2");
    let ca = PrivateCa::make(&dir);

    for tls in [true, false] {
        let relay = HttpRelay::start(garage.s3_addr(), second_part);
        // Over TLS: a terminator in front of the relay, as an operator puts one in front of
        // their server, with a certificate the system does not know (SSL_CERT_FILE names it).
        let terminator = tls.then(|| Terminator::start(&ca, relay.port()));
        let endpoint = match &terminator {
            Some(t) => t.endpoint(),
            None => format!("http://127.0.0.1:{}", relay.port()),
        };
        let prefix = if tls { "tls" } else { "plain" };
        let mut args = garage.upload_args_at(&endpoint, prefix, &creds);
        args.extend(["--upload-part-size", "5M"].map(String::from));
        let env = [("SSL_CERT_FILE", ca.ca.as_path())];
        let _ = std::fs::remove_file(session.join("upload.json"));
        if tls {
            // Without the CA, the certificate is refused, and the error says what to do.
            let (done, said) = upload_by_hand(&session, &args, &[]);
            assert!(!done, "{said}");
            assert!(
                said.contains("has a TLS certificate this machine does not trust")
                    && said.contains("UnknownIssuer")
                    && said.contains("SSL_CERT_FILE"),
                "{said}"
            );
        }

        // The changed part is refused by the server, and the upload says so...
        let (done, said) = upload_by_hand(&session, &args, &env);
        assert!(
            !done,
            "an upload with a changed byte in it succeeded: {said}"
        );
        eprintln!("tls {tls}: the first upload said: {said}");
        // ... then goes on where it stopped, and the split is whole in the bucket.
        let (done, said) = upload_by_hand(&session, &args, &env);
        assert!(done, "{said}");
        assert_whole_split(&garage, &py, prefix, &session);

        let seen = relay.seen();
        let puts: Vec<&RequestHead> = seen.iter().filter(|r| r.method == "PUT").collect();
        let changed: Vec<_> = puts.iter().filter(|r| r.changed).collect();
        assert_eq!(changed.len(), 1, "{seen:#?}");
        let sent_again = puts
            .iter()
            .filter(|r| !r.changed && r.target == changed[0].target)
            .count();
        assert_eq!(sent_again, 1, "the changed part sent again once: {seen:#?}");
        for put in &puts {
            let payload = put.header("x-amz-content-sha256").unwrap_or("");
            match tls {
                // The channel guards the bytes: no SHA-256 of the body, a CRC64-NVME.
                true => {
                    assert_eq!(payload, "UNSIGNED-PAYLOAD", "{put:?}");
                    assert!(put.header("x-amz-checksum-crc64nvme").is_some(), "{put:?}");
                    assert!(put.header("x-amz-checksum-sha256").is_none(), "{put:?}");
                }
                // The signature covers the body's SHA-256.
                false => {
                    assert!(
                        payload.len() == 64 && payload.bytes().all(|b| b.is_ascii_hexdigit()),
                        "{put:?}"
                    );
                    assert!(put.header("x-amz-checksum-sha256").is_some(), "{put:?}");
                }
            }
        }
    }
}

#[test]
fn wrong_credentials_are_said_clearly_within_ten_seconds_and_nothing_is_deleted() {
    let Some(garage) = garage("wrong-secret") else {
        return;
    };
    let dir = fresh_dir("upload-wrong-secret");
    let session = record(&dir, 30, &[]);
    let split = session.join("split_0000.ulg");
    let before = sha256_file(&split);
    let creds = credentials(&dir, &"0".repeat(64));
    let args = garage.upload_args("nope", &creds);
    let (mut d, lines) = daemon(&dir, free_udp_port(), &args);
    let line = wait_for_line(&lines, "upload failed", Duration::from_secs(10));
    assert!(line.contains("refused our credentials"), "{line}");
    assert!(line.contains("--upload-credentials"), "{line}");
    // Said once, not in a loop.
    std::thread::sleep(Duration::from_secs(3));
    let again = lines
        .try_iter()
        .filter(|l| l.contains("upload failed"))
        .count();
    assert_eq!(again, 0, "the error was repeated within a minute");
    assert!(d.terminate().success());
    assert_eq!(sha256_file(&split), before);
    let journal: Json =
        serde_json::from_slice(&std::fs::read(session.join("upload.json")).unwrap()).unwrap();
    assert!(
        journal["failing"].as_str().unwrap().contains("credentials"),
        "{journal}"
    );
    assert!(!session.join("uploaded").exists());
}

#[test]
fn a_missing_bucket_is_said_as_the_server_named_it_with_the_option_to_check() {
    let Some(garage) = garage("no-bucket") else {
        return;
    };
    let dir = fresh_dir("upload-no-bucket");
    let session = record(&dir, 5, &[]);
    let creds = credentials(&dir, SECRET_KEY);
    let mut args = garage.upload_args("fleet", &creds);
    let to = args.iter().position(|a| a == "--upload-to").unwrap();
    args[to + 1] = "s3://no-such-flights/fleet".into();
    let (mut d, lines) = daemon(&dir, free_udp_port(), &args);
    let line = wait_for_line(&lines, "upload failed", Duration::from_secs(10));
    // Garage's own code and words, the bucket it looked for (ours: the request carried
    // it), and the options to check.
    assert!(line.contains("no bucket no-such-flights"), "{line}");
    assert!(line.contains("NoSuchBucket"), "{line}");
    assert!(line.contains("Bucket not found: no-such-flights"), "{line}");
    assert!(line.contains("--upload-to"), "{line}");
    assert!(line.contains("--upload-endpoint"), "{line}");
    assert!(d.terminate().success());
    assert!(session.join("split_0000.ulg").is_file());
    assert!(!session.join("uploaded").exists());
}

/// An ArduPilot session (ArduPilot's own hover log in 20 s `.bin` splits, as the daemon
/// writes a stream) goes up as a PX4 flight does: every split and the manifest once, then
/// its tables; Flight Review, which reads ULog only, is not sent it (the address given
/// answers nothing) and the journal and `uploads` say so; a second run sends nothing.
#[test]
fn an_ardupilot_session_goes_to_the_bucket_once_with_its_tables_and_not_to_flight_review() {
    let Some(garage) = garage("ardupilot") else {
        return;
    };
    let Some(py) = common::venv_python() else {
        return;
    };
    let dir = fresh_dir("upload-ardupilot");
    let creds = credentials(&dir, SECRET_KEY);
    let Some(session) = common::ardupilot::write_bin_session(&dir.join("logs")) else {
        return;
    };
    let nobody = format!("http://127.0.0.1:{}", free_tcp_port());
    let mut args = garage.upload_args("fleet", &creds);
    args.extend(["--upload-tables", "--flight-review", &nobody].map(String::from));
    let (ok, said) = upload_by_hand(&session, &args, &[]);
    assert!(ok, "{said}");
    let journal: Json =
        serde_json::from_slice(&std::fs::read(session.join("upload.json")).unwrap()).unwrap();
    assert_eq!(journal["flight_review"]["state"], "not_ulog", "{journal}");
    let name = session.file_name().unwrap().to_string_lossy().into_owned();
    let found = garage.objects(&py, "fleet/");
    let objects = found["objects"].as_object().unwrap();
    let manifest = ulog_recv::store::files::read_manifest(&session).unwrap();
    assert!(
        manifest.splits.len() >= 5,
        "{} splits",
        manifest.splits.len()
    );
    for split in &manifest.splits {
        let key = format!("fleet/sys1/{name}/{}", split.file);
        assert!(key.ends_with(".bin"), "{key}");
        assert_eq!(
            objects[&key]["sha256"].as_str(),
            Some(sha256_file(&session.join(&split.file)).as_str()),
            "{key}"
        );
    }
    let table = |t: &str| {
        let key = format!("/parquet/v1/{t}/");
        objects
            .keys()
            .any(|k| k.contains(&key) && k.ends_with(&format!("{name}.parquet")))
    };
    assert!(table("BAT") && table("ATT") && table("flights"), "{found}");
    let report = Command::new(common::procs::BIN)
        .args(["uploads", "--log-dir"])
        .arg(dir.join("logs"))
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&report.stdout);
    assert!(
        report.contains(ulog_recv::report::uploads::NOT_FOR_FLIGHT_REVIEW),
        "{report}"
    );
    // Again: everything is where it goes.
    let (ok, said) = upload_by_hand(&session, &args, &[]);
    assert!(ok, "{said}");
    assert!(!said.contains(" → "), "sent again: {said}");
}

#[test]
fn the_flight_goes_to_flight_review_once_whole_and_a_log_it_cannot_read_is_not_sent_again() {
    let Some(server) = FlightReviewServer::start("flight", free_tcp_port()) else {
        return;
    };
    let dir = fresh_dir("upload-flight-review");
    let port = free_udp_port();
    let args: Vec<String> = ["--split-size", "1M", "--flight-review", &server.url()]
        .map(String::from)
        .to_vec();
    let (mut d, lines) = daemon(&dir, port, &args);
    let mut s = sim(port, 300, 3_000_000);
    assert!(s.wait(Duration::from_secs(60)).success());
    let line = wait_for_line(&lines, "session uploaded", Duration::from_secs(60));
    eprintln!("{line}");
    assert!(d.terminate().success());
    let session = the_session(&dir);
    assert!(common::procs::ulg_files(&session).len() >= 2);
    let journal: Json =
        serde_json::from_slice(&std::fs::read(session.join("upload.json")).unwrap()).unwrap();
    let url = journal["flight_review"]["url"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(url.starts_with(&server.url()), "{url}");
    let id = ulog_recv::upload::flight_review::log_id(&url).unwrap();
    // The server holds exactly the joined flight.
    let joined = ulog_recv::export::flight::load(&session, &Default::default()).unwrap();
    assert_eq!(server.download(id), joined);
    // Again by hand: nothing goes twice.
    let out = Command::new(common::procs::BIN)
        .arg("upload")
        .arg(&session)
        .args(["--flight-review", &server.url()])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), url);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("Flight Review:"));

    // An answer lost: the journal's write after the server took the flight fails (strace
    // fails the third rename of `upload.json.tmp` over it: made, sending, done). Flight Review cannot
    // be asked whether it holds a flight, so the next run sends it again and says that it
    // may be there twice.
    let name = session.file_name().unwrap().to_string_lossy().into_owned();
    let on_review = || {
        (server.descriptions().iter())
            .filter(|d| d.contains(&format!("session {name},")))
            .count()
    };
    assert_eq!(on_review(), 1);
    let journal_path = session.join("upload.json");
    std::fs::remove_file(&journal_path).unwrap();
    if let Some(strace) = common::procs::strace("lose Flight Review's answer for real") {
        let out = Command::new(strace)
            .args(["-f", "-qq", "-o", "/dev/null", "-P"])
            .arg(session.join("upload.json.tmp"))
            .args([
                "-e",
                "trace=rename,renameat,renameat2",
                "-e",
                "inject=rename,renameat,renameat2:error=EIO:when=3",
                common::procs::BIN,
                "upload",
            ])
            .arg(&session)
            .args(["--flight-review", &server.url()])
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{said}");
        assert!(said.contains("Input/output error"), "{said}");
        let journal: Json = serde_json::from_slice(&std::fs::read(&journal_path).unwrap()).unwrap();
        assert_eq!(journal["flight_review"]["state"], "sending", "{journal}");
        assert_eq!(on_review(), 2);
        let (sent, said) = upload_by_hand(&session, &["--flight-review".into(), server.url()], &[]);
        assert!(sent, "{said}");
        assert_eq!(on_review(), 3);
        let journal: Json = serde_json::from_slice(&std::fs::read(&journal_path).unwrap()).unwrap();
        assert_eq!(journal["flight_review"]["maybe_twice"], true, "{journal}");
        let listed = Command::new(common::procs::BIN)
            .args(["uploads", "--log-dir"])
            .arg(session.parent().unwrap())
            .output()
            .unwrap();
        let listed = String::from_utf8_lossy(&listed.stdout);
        assert!(
            listed.contains(ulog_recv::upload::flight_review::MAYBE_TWICE),
            "{listed}"
        );
    }

    // Bytes the server cannot read: refused (400), said as such, for the journal to keep.
    let fr = ulog_recv::upload::flight_review::FlightReview::new(
        ulog_recv::upload::flight_review::FlightReviewOptions {
            url: server.url(),
            public: false,
            email: String::new(),
            key: None,
            stall: Duration::from_secs(60),
        },
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let garbage = b"ULog\x01\x12\x35\x01this is no flight log at all".repeat(100);
    match rt.block_on(fr.upload(garbage, "garbage.ulg", "not a log")) {
        Err(ulog_recv::upload::flight_review::FlightReviewError::Refused { status, .. }) => {
            assert_eq!(status, 400)
        }
        other => panic!("garbage not refused: {other:?}"),
    }
}

#[test]
fn columns_and_an_event_buffer_reach_the_bucket_main_column_first() {
    let Some(py) = common::venv_python() else {
        return;
    };
    let Some(garage) = garage("columns") else {
        return;
    };
    let dir = fresh_dir("upload-columns");
    let creds = credentials(&dir, SECRET_KEY);
    let extra: Vec<String> = [
        "--column=esc=esc_status",
        "--event-buffer=accel=sensor_accel",
        "--event-on-log=Takeoff",
        "--split-size=1M",
    ]
    .map(String::from)
    .to_vec();
    let session = record(&dir, 400, &extra);
    let out = Command::new(common::procs::BIN)
        .arg("upload")
        .arg(&session)
        .args(garage.upload_args("columns", &creds))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    // One line per step: "  FILE → KEY  (0.1 s)".
    let keys: Vec<&str> = said
        .lines()
        .filter_map(|l| l.split(" → ").nth(1)?.split_whitespace().next())
        .collect();

    let manifest = ulog_recv::store::files::read_manifest(&session).unwrap();
    assert_eq!(manifest.events.len(), 1, "{:?}", manifest.events);
    let buffer = manifest.columns[1].event_buffer.as_ref().unwrap();
    assert_eq!(buffer.windows.len(), 1);
    let name = session.file_name().unwrap().to_string_lossy().into_owned();
    let prefix = format!("columns/sys1/{name}/");
    let found = garage.objects(&py, &prefix);
    let objects = found["objects"].as_object().unwrap();
    let splits: Vec<_> = manifest.all_splits().collect();
    assert!(
        manifest.columns.iter().all(|c| !c.splits.is_empty()),
        "{manifest:?}"
    );
    assert_eq!(objects.len(), splits.len() + 1, "{:?}", objects.keys());
    for split in &splits {
        let object = &objects[&format!("{prefix}{}", split.file)];
        assert_eq!(
            object["sha256"].as_str().unwrap(),
            sha256_file(&session.join(&split.file)),
            "{}",
            split.file
        );
    }
    // The main column's splits went first, the manifest last.
    let first_other = keys
        .iter()
        .position(|k| k.contains("/esc/") || k.contains("/accel/"));
    let last_main = keys
        .iter()
        .rposition(|k| k.contains(&format!("{name}/split_")));
    assert!(
        first_other.is_some() && last_main.is_some() && last_main < first_other,
        "{keys:?}"
    );
    assert!(keys.last().unwrap().ends_with("manifest.json"), "{keys:?}");
}

#[test]
fn through_a_slow_link_parts_go_together_and_a_kill_9_among_them_leaves_each_part_once() {
    let Some(up) = SlowUpload::new("upload-slow-link") else {
        return;
    };
    // One split of about 12 MB: parts of 5 MiB, 5 MiB and the rest, all three on the link at
    // once at 2.5 MB/s: the short one completes first, the others are under way.
    let split = up.session.join("split_0000.ulg");
    let size = std::fs::metadata(&split).unwrap().len();
    let parts = size.div_ceil(5 << 20);
    assert_eq!(parts, 3, "{size} bytes");
    let mut upload = up.command();
    upload
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let mut child = upload.spawn().unwrap();
    let lines = common::procs::watch_lines(child.stderr.take().unwrap(), "");
    let (mut begun, mut sent_before) = (0, 0);
    while sent_before == 0 {
        let line = lines
            .recv_timeout(Duration::from_secs(60))
            .expect("a part completes within a minute");
        begun += line.contains("part begun") as u64;
        sent_before += line.contains("part sent") as u64;
    }
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let _ = child.wait();
    assert_eq!(begun, parts, "every part was on the link at once");
    let journal: Json =
        serde_json::from_slice(&std::fs::read(up.session.join("upload.json")).unwrap()).unwrap();
    let record = &journal["objects"]["split_0000.ulg"];
    let recorded = record["parts"].as_array().unwrap();
    let done = recorded.iter().filter(|p| p.is_string()).count() as u64;
    assert!(
        done >= 1 && done < parts,
        "parts in flight at the kill: {record}"
    );

    // Again, at the machine's speed and the default parts in flight: only the parts not
    // recorded go.
    let mut args = up.args.clone();
    let in_flight = args
        .iter()
        .position(|a| a == "--upload-parts-in-flight")
        .unwrap();
    args.drain(in_flight..in_flight + 2);
    let out = Command::new(common::procs::BIN)
        .arg("upload")
        .arg(&up.session)
        .args(&args)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    let sent_after = said.lines().filter(|l| l.contains("part sent")).count() as u64;
    assert_eq!(
        done + sent_after,
        parts,
        "each part sent once after the kill: {said}"
    );
    up.assert_whole();
}

/// A session of about 12 MB ([`record`]) and a Garage behind a 20 Mbit/s link, with
/// `ulog-recv upload`'s arguments for parts of 5 MiB, 3 at once.
struct SlowUpload {
    py: PathBuf,
    link: common::slow_link::SlowLink,
    garage: Garage,
    args: Vec<String>,
    session: PathBuf,
}

impl SlowUpload {
    /// Made in the test folder `name`; `None` (said) when a part is missing.
    #[track_caller]
    fn new(name: &str) -> Option<Self> {
        let py = common::venv_python()?;
        let dir = fresh_dir(name);
        let link = match common::slow_link::SlowLink::new(20) {
            Ok(link) => link,
            Err(why) => {
                skip_or_fail(&format!("a slow link (network namespace): {why}"));
                return None;
            }
        };
        let Ok(garage) = Garage::start_at(dir.join("garage"), link.host_ip()) else {
            skip_or_fail("Garage");
            return None;
        };
        let creds = credentials(&dir, SECRET_KEY);
        let mut args = garage.upload_args("slow", &creds);
        args.extend(
            [
                "--upload-part-size",
                "5M",
                "--upload-parts-in-flight",
                "3",
                "--log-level",
                "ulog_recv=debug",
            ]
            .map(String::from),
        );
        let session = record(&dir, 1500, &[]);
        Some(Self {
            py,
            link,
            garage,
            args,
            session,
        })
    }

    /// `ulog-recv upload SESSION ARGS`, to be run through the link.
    fn command(&self) -> Command {
        let mut upload = self.link.command(common::procs::BIN);
        upload.arg("upload").arg(&self.session).args(&self.args);
        upload
    }

    /// The upload run to its end: whether it succeeded, and what it said.
    fn run(&self) -> (bool, String) {
        let out = self.command().output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// The split is in the bucket, whole.
    fn assert_whole(&self) {
        assert_whole_split(&self.garage, &self.py, "slow", &self.session);
    }

    /// The same with a stall time of 2 s.
    #[track_caller]
    fn with_short_stall(name: &str) -> Option<Self> {
        let mut up = Self::new(name)?;
        up.args
            .extend(["--upload-stall-timeout", "2"].map(String::from));
        Some(up)
    }
}

#[test]
fn a_part_that_takes_longer_than_the_stall_time_but_keeps_moving_arrives_whole() {
    let Some(up) = SlowUpload::with_short_stall("upload-slower-than-the-stall-time") else {
        return;
    };
    let started = Instant::now();
    let (ok, said) = up.run();
    let took = started.elapsed();
    assert!(ok, "{said}");
    // Two parts of 5 MiB share 2.5 MB/s: each request lasts twice the stall time or more.
    assert!(
        took > Duration::from_secs(4),
        "{took:?}: the link was not slow"
    );
    assert_eq!(
        said.matches("part sent").count(),
        3,
        "each part once: {said}"
    );
    up.assert_whole();
}

#[test]
fn a_server_that_hangs_mid_part_is_left_after_the_stall_time_and_the_part_sent_again() {
    let Some(up) = SlowUpload::with_short_stall("upload-hung-server") else {
        return;
    };
    let mut upload = up.command();
    upload
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let mut child = Proc(upload.spawn().unwrap(), "the upload to a server that hangs");
    let lines = common::procs::watch_lines(child.0.stderr.take().unwrap(), "");
    while !lines
        .recv_timeout(Duration::from_secs(60))
        .expect("a part begins within a minute")
        .contains("part begun")
    {}
    up.garage.freeze();
    let status = child.wait(Duration::from_secs(30));
    let said: Vec<String> = lines.iter().collect();
    up.garage.resume();
    assert!(!status.success(), "{said:?}");
    assert!(
        said.iter()
            .any(|l| l.contains("stopped taking a request: no progress for 2 s")),
        "{said:?}"
    );

    // Once the server is back, the same command completes the split.
    let (ok, said) = up.run();
    assert!(ok, "{said}");
    up.assert_whole();
}
