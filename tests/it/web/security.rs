//! Who may use the web page, and what a hostile client gets: beyond loopback the daemon does
//! not start without a password file only its owner reads; with one, every route without
//! credentials answers 401, HTTP Basic and the login's cookie get in, an action without the
//! CSRF token is refused; path traversal in every spelling and links planted in the log
//! directory get no byte; an oversized head and a body where none belongs are refused; a
//! thousand idle connections and a client reading a byte a second leave the stream's files
//! exactly as a run without them.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine as _;

use super::{closed_flights, daemon, free_http_port, get, request, request_from, stream};
use crate::common::procs::{BIN, fresh_dir, wait_for_line};
use crate::diagnostics::write_fault_flight;

pub(super) const PASSWORD: &str = "rotor wash at dawn";
/// The address the wrong passwords come from.
const GUESSER: std::net::Ipv4Addr = std::net::Ipv4Addr::new(127, 0, 0, 66);
/// What the files outside the log directory hold: no answer may carry it.
const SECRET: &str = "outside-the-log-directory-6f1d";

pub(super) fn basic(password: &str) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("ops:{password}"));
    format!("Authorization: Basic {encoded}")
}

pub(super) fn password_file(dir: &Path, mode: u32) -> std::path::PathBuf {
    let path = dir.join(format!("password-{mode:o}"));
    std::fs::write(&path, format!("{PASSWORD}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

/// The daemon's exit and its standard error, for a start that must fail.
fn refused_start(args: &[&str]) -> String {
    let out = Command::new(BIN)
        .args(args)
        .output()
        .expect("run the daemon");
    assert!(!out.status.success(), "{args:?} started");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn beyond_loopback_the_page_asks_for_a_password_and_gives_no_byte_outside_its_flights() {
    let dir = fresh_dir("web-security");
    std::fs::create_dir_all(&dir).unwrap();
    let logs = dir.join("logs");
    let port = free_http_port();
    let everywhere = format!("0.0.0.0:{port}");
    // No password file, or one others may read, or an empty one: no start.
    let logs_arg = logs.to_string_lossy().into_owned();
    let base = [
        "--udp",
        "127.0.0.1:0",
        "--log-dir",
        &logs_arg,
        "--http",
        &everywhere,
    ];
    let open = password_file(&dir, 0o644).to_string_lossy().into_owned();
    let empty = dir.join("empty-password");
    std::fs::write(&empty, "\n").unwrap();
    std::fs::set_permissions(&empty, std::fs::Permissions::from_mode(0o600)).unwrap();
    let empty = empty.to_string_lossy().into_owned();
    for (extra, why) in [
        (None, "without a password"),
        (Some(&open), "password file"),
        (Some(&empty), "is empty"),
    ] {
        let mut args = base.to_vec();
        if let Some(file) = extra {
            args.extend(["--http-password-file", file.as_str()]);
        }
        let said = refused_start(&args);
        assert!(said.contains(why), "{args:?}: {said}");
    }

    let file = password_file(&dir, 0o600);
    let file = file.to_string_lossy().into_owned();
    let (mut daemon, udp, addr) = daemon(&logs, &everywhere, &["--http-password-file", &file]);
    let flight = write_fault_flight(&dir, "motor");
    let (mut sim, lines) = stream(&flight, udp, &[]);
    wait_for_line(&lines, "the whole log was sent", Duration::from_secs(120));
    assert!(sim.wait(Duration::from_secs(30)).success());
    let authorised = [basic(PASSWORD)];
    let flights = closed_flights(&addr, &authorised, 1);
    let id = flights[0]["id"].as_str().unwrap().to_owned();

    // Every route, without credentials and with a wrong password: 401 and no data.
    let routes = [
        ("GET", "/".to_owned()),
        ("GET", "/api/session".to_owned()),
        ("GET", "/api/status".to_owned()),
        ("GET", "/api/flights".to_owned()),
        ("GET", format!("/api/flights/{id}")),
        ("GET", format!("/api/flights/{id}/download?format=ulg")),
        ("GET", format!("/api/flights/{id}/download?format=mcap")),
        ("GET", format!("/api/flights/{id}/files/split_0000.ulg")),
        ("GET", format!("/api/flights/{id}/signals")),
        ("GET", "/api/events".to_owned()),
        ("GET", "/api/vehicle/logs".to_owned()),
        ("GET", "/api/vehicle/fetch".to_owned()),
        ("GET", "/api/vehicle/fetched/log.ulg".to_owned()),
        (
            "POST",
            "/api/vehicle/fetch?path=/fs/microsd/log/a.ulg".to_owned(),
        ),
        ("POST", format!("/api/flights/{id}/delete")),
        ("POST", format!("/api/flights/{id}/fill")),
        ("POST", format!("/api/flights/{id}/upload")),
        ("POST", "/logout".to_owned()),
    ];
    for (method, path) in &routes {
        for headers in [
            vec![],
            vec![basic("guess")],
            vec![format!("Cookie: ulog_recv_session={}", "0".repeat(64))],
        ] {
            // The wrong passwords from an address of their own: past a few, they are
            // refused unchecked (429), which must not hold the operator's address back.
            let guessing = headers.iter().any(|h| h.starts_with("Authorization"));
            let reply = match guessing {
                true => request_from(GUESSER, &addr, method, path, &headers, b""),
                false => request(&addr, method, path, &headers, b""),
            };
            let expected: &[u16] = if guessing { &[401, 429] } else { &[401] };
            assert!(
                expected.contains(&reply.status),
                "{method} {path} {headers:?}: {} {}",
                reply.status,
                reply.text()
            );
            assert!(
                !reply.text().contains(&id),
                "{method} {path}: {}",
                reply.text()
            );
        }
    }
    // HTTP Basic gets in; so does the login form's cookie.
    assert_eq!(get(&addr, "/api/status", &authorised).status, 200);
    let wrong = request(
        &addr,
        "POST",
        "/login",
        &["Content-Type: application/x-www-form-urlencoded".into()],
        b"password=guess",
    );
    assert_eq!(wrong.status, 401);
    assert!(wrong.header("set-cookie").is_none());
    let form = format!("password={}", PASSWORD.replace(' ', "+"));
    let login = request(
        &addr,
        "POST",
        "/login",
        &["Content-Type: application/x-www-form-urlencoded".into()],
        form.as_bytes(),
    );
    assert_eq!(login.status, 303, "{}", login.text());
    let cookie = login.header("set-cookie").expect("a session cookie");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let cookie = format!("Cookie: {}", cookie.split(';').next().unwrap());
    let listed = get(&addr, "/api/flights", std::slice::from_ref(&cookie));
    assert_eq!(listed.status, 200);
    assert_eq!(listed.json()[0]["id"], id);

    // An action without the CSRF token, or with a wrong one: refused, the flight kept.
    let delete = format!("/api/flights/{id}/delete");
    for headers in [
        vec![cookie.clone()],
        vec![cookie.clone(), "X-CSRF-Token: guess".into()],
        vec![basic(PASSWORD)],
    ] {
        let reply = request(&addr, "POST", &delete, &headers, b"");
        assert_eq!(reply.status, 403, "{headers:?}: {}", reply.text());
    }
    assert!(logs.join(&id).join("split_0000.ulg").exists());

    // Files outside the log directory, and links to them planted inside it.
    let outside = dir.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), SECRET).unwrap();
    std::fs::copy(
        logs.join(&id).join("manifest.json"),
        outside.join("manifest.json"),
    )
    .unwrap();
    std::fs::write(outside.join("split_0000.ulg"), SECRET).unwrap();
    // A session directory that is a link out, and a session whose split is a link out.
    std::os::unix::fs::symlink(&outside, logs.join("2099-01-01T00-00-00Z_sys1")).unwrap();
    let planted = logs.join("2099-01-02T00-00-00Z_sys1");
    std::fs::create_dir_all(&planted).unwrap();
    std::fs::copy(
        logs.join(&id).join("manifest.json"),
        planted.join("manifest.json"),
    )
    .unwrap();
    std::os::unix::fs::symlink(outside.join("secret.txt"), planted.join("split_0000.ulg")).unwrap();
    // In the folder of logs fetched from the SD card: a link out and a partial fetch.
    let fetched = logs.join("sd-card");
    std::fs::create_dir_all(&fetched).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.txt"), fetched.join("link.ulg")).unwrap();
    std::fs::write(fetched.join("cut.ulg.part"), SECRET).unwrap();
    std::thread::sleep(Duration::from_secs(3));
    let secret_file = outside.join("secret.txt").to_string_lossy().into_owned();
    let spellings = [
        format!("/api/flights/{id}/files/../../outside/secret.txt"),
        format!("/api/flights/{id}/files/..%2F..%2Foutside%2Fsecret.txt"),
        format!("/api/flights/{id}/files/%2e%2e/%2e%2e/outside/secret.txt"),
        format!("/api/flights/{id}/files/{secret_file}"),
        format!(
            "/api/flights/{id}/files/%2F{}",
            secret_file.trim_start_matches('/').replace('/', "%2F")
        ),
        format!("/api/flights/{id}/files//etc/passwd"),
        "/api/flights/..%2Foutside/files/secret.txt".to_owned(),
        "/api/flights/%2e%2e/download?format=ulg".to_owned(),
        "/api/flights/../outside/download".to_owned(),
        "/api/flights/2099-01-01T00-00-00Z_sys1/files/split_0000.ulg".to_owned(),
        "/api/flights/2099-01-01T00-00-00Z_sys1/download?format=ulg".to_owned(),
        "/api/flights/2099-01-01T00-00-00Z_sys1".to_owned(),
        "/api/flights/2099-01-02T00-00-00Z_sys1/files/split_0000.ulg".to_owned(),
        "/api/flights/2099-01-02T00-00-00Z_sys1/download?format=ulg".to_owned(),
        "/api/flights/2099-01-02T00-00-00Z_sys1/download?format=mcap".to_owned(),
        "/assets/..%2F..%2Foutside%2Fsecret.txt".to_owned(),
        "/api/vehicle/fetched/..%2F..%2Foutside%2Fsecret.txt".to_owned(),
        "/api/vehicle/fetched/%2e%2e%2F%2e%2e%2Foutside%2Fsecret.txt".to_owned(),
        format!("/api/vehicle/fetched/{}", secret_file.replace('/', "%2F")),
        "/api/vehicle/fetched/link.ulg".to_owned(),
        "/api/vehicle/fetched/cut.ulg.part".to_owned(),
    ];
    for path in &spellings {
        let reply = get(&addr, path, &authorised);
        assert!(
            matches!(reply.status, 400 | 404),
            "{path}: {} {}",
            reply.status,
            reply.text()
        );
        let body = reply.text();
        assert!(
            !body.contains(SECRET) && !body.contains("root:"),
            "{path}: {body}"
        );
    }
    // The list does not hold the link out either.
    let listed = get(&addr, "/api/flights", &authorised).text();
    assert!(!listed.contains("2099-01-01"), "{listed}");

    // A head over the limit, and a body where none belongs.
    let big = format!("X-Filler: {}", "a".repeat(8000));
    let reply = get(&addr, "/api/status", &[basic(PASSWORD), big]);
    assert_eq!(reply.status, 431, "{}", reply.text());
    let reply = request(
        &addr,
        "GET",
        "/api/status",
        &[basic(PASSWORD)],
        &[b'x'; 100],
    );
    assert_eq!(reply.status, 413, "{}", reply.text());
    let reply = request(
        &addr,
        "POST",
        "/login",
        &["Content-Type: application/x-www-form-urlencoded".into()],
        &[b'p'; 10_000],
    );
    assert_eq!(reply.status, 413, "{}", reply.text());
    assert!(daemon.terminate().success());
}

/// Raises this process's open-file limit to its hard limit (a thousand sockets).
fn more_files() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct given.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        limit.rlim_cur = limit.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
    }
}

#[test]
fn idle_connections_and_a_slow_reader_leave_the_stream_as_it_is_without_them() {
    more_files();
    let dir = fresh_dir("web-idle");
    std::fs::create_dir_all(&dir).unwrap();
    let flight = write_fault_flight(&dir, "motor");
    let mut splits = Vec::new();
    let mut received = Vec::new();
    for crowded in [false, true] {
        let logs = dir.join(if crowded { "crowded" } else { "alone" });
        let (mut daemon, udp, addr) = daemon(&logs, &free_http_port(), &[]);
        let mut idle = Vec::new();
        let mut slow = None;
        if crowded {
            // A client that asks for the event stream and then reads a byte a second, and a
            // thousand connections after it that send nothing (the page closes those past
            // its limit as they come).
            let mut s = std::net::TcpStream::connect(&addr).unwrap();
            write!(s, "GET /api/events HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
            slow = Some(std::thread::spawn(move || {
                let mut byte = [0u8; 1];
                let t0 = Instant::now();
                while t0.elapsed() < Duration::from_secs(20)
                    && s.read(&mut byte).is_ok_and(|n| n > 0)
                {
                    std::thread::sleep(Duration::from_secs(1));
                }
            }));
            for _ in 0..1000 {
                if let Ok(s) = std::net::TcpStream::connect(&addr) {
                    idle.push(s);
                }
            }
        }
        let (mut sim, lines) = stream(&flight, udp, &["--link-rate", "60000"]);
        wait_for_line(&lines, "the whole log was sent", Duration::from_secs(120));
        assert!(sim.wait(Duration::from_secs(30)).success());
        // The page still answers, the flood notwithstanding.
        let flights = closed_flights(&addr, &[], 1);
        assert_eq!(
            flights[0]["dropouts_received"], 0,
            "crowded {crowded}: {flights:?}"
        );
        let id = flights[0]["id"].as_str().unwrap();
        splits.push(std::fs::read(logs.join(id).join("split_0000.ulg")).unwrap());
        drop(idle);
        if let Some(slow) = slow {
            slow.join().unwrap();
        }
        assert!(daemon.terminate().success());
        let said = daemon.stdout_text();
        let line = said
            .lines()
            .find(|l| l.starts_with("received"))
            .unwrap_or_default()
            .to_owned();
        // The counts, without the ack latency (which differs run to run).
        received.push(
            line.split("; ack latency")
                .next()
                .unwrap_or_default()
                .to_owned(),
        );
    }
    assert_eq!(received[0], received[1], "the link's counts");
    assert!(!received[0].is_empty());
    assert!(
        splits[0] == splits[1],
        "the crowded run's split differs from the one alone"
    );
}
