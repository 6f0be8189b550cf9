//! Guessing the web page's password as an attacker on the companion's network would: many
//! connections at once from one address, by HTTP Basic and by the login form, as fast as the
//! daemon answers. Past a few wrong passwords the address gets 429 with `Retry-After`, its
//! guesses unchecked; the right password from another address still gets in at once; the log
//! says so once, not a line per guess; the metrics count both kinds.

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::security::{PASSWORD, basic, password_file};
use super::{free_http_port, get, request_from};
use crate::common::procs::{Proc, fresh_dir, wait_for_line};

const ATTACKER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 66);
/// Connections guessing at once.
const CONNECTIONS: usize = 16;
/// How long they guess.
const GUESSING: Duration = Duration::from_secs(3);
/// Wrong passwords an address gets checked before it is held back (the guide's figure).
const BURST: usize = 5;

#[test]
fn a_password_guessed_over_many_connections_is_throttled_and_the_right_one_still_gets_in() {
    let dir = fresh_dir("web-guessing");
    std::fs::create_dir_all(&dir).unwrap();
    let file = password_file(&dir, 0o600);
    let metrics = free_http_port();
    let args: Vec<String> = [
        "--udp",
        "127.0.0.1:0",
        "--log-dir",
        &dir.join("logs").display().to_string(),
        "--no-socket",
        "--http",
        &format!("0.0.0.0:{}", free_http_port()),
        "--http-password-file",
        &file.display().to_string(),
        "--metrics",
        &format!("127.0.0.1:{metrics}"),
    ]
    .map(String::from)
    .to_vec();
    let (mut daemon, lines) = Proc::spawn_watched("the daemon", &args);
    let line = wait_for_line(&lines, "the web page on http://", Duration::from_secs(20));
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap()
        .replace("0.0.0.0", "127.0.0.1");
    let said = Arc::new(Mutex::new(Vec::new()));
    let keep = said.clone();
    std::thread::spawn(move || {
        for line in lines {
            keep.lock().unwrap().push(line);
        }
    });

    // Every connection guesses, by Basic and by the form in turn, until the time is up.
    let done = Arc::new(AtomicBool::new(false));
    let guessers: Vec<_> = (0..CONNECTIONS)
        .map(|c| {
            let (addr, done) = (addr.clone(), done.clone());
            std::thread::spawn(move || {
                let mut answers = Vec::new();
                let mut n = 0;
                while !done.load(Ordering::Relaxed) {
                    n += 1;
                    let guess = format!("guess-{c}-{n}");
                    let reply = if n % 2 == 0 {
                        request_from(ATTACKER, &addr, "GET", "/api/status", &[basic(&guess)], b"")
                    } else {
                        let form = format!("password={guess}");
                        let content = "Content-Type: application/x-www-form-urlencoded".into();
                        request_from(
                            ATTACKER,
                            &addr,
                            "POST",
                            "/login",
                            &[content],
                            form.as_bytes(),
                        )
                    };
                    answers.push((reply.status, reply.header("retry-after").is_some()));
                }
                answers
            })
        })
        .collect();
    std::thread::sleep(GUESSING);
    done.store(true, Ordering::Relaxed);
    let answers: Vec<(u16, bool)> = guessers
        .into_iter()
        .flat_map(|g| g.join().unwrap())
        .collect();
    let checked = answers.iter().filter(|(s, _)| *s == 401).count();
    let refused = answers.iter().filter(|(s, _)| *s == 429).count();
    eprintln!(
        "{} guesses in {GUESSING:?} over {CONNECTIONS} connections: {checked} checked, {refused} \
         refused unchecked",
        answers.len()
    );
    assert_eq!(checked + refused, answers.len(), "{answers:?}");
    assert!(checked <= BURST, "{checked} wrong passwords checked");
    assert!(
        refused > 100,
        "only {refused} guesses made: the test did not press"
    );
    assert!(
        answers.iter().all(|(s, retry)| *s != 429 || *retry),
        "a 429 without Retry-After"
    );

    // The operator, from another address, gets in at once, by Basic and by the form.
    let operator = Ipv4Addr::new(127, 0, 0, 2);
    let status = request_from(
        operator,
        &addr,
        "GET",
        "/api/status",
        &[basic(PASSWORD)],
        b"",
    );
    assert_eq!(status.status, 200, "{}", status.text());
    let form = format!("password={}", PASSWORD.replace(' ', "+"));
    let content = "Content-Type: application/x-www-form-urlencoded".to_owned();
    let login = request_from(
        operator,
        &addr,
        "POST",
        "/login",
        &[content],
        form.as_bytes(),
    );
    assert_eq!(login.status, 303, "{}", login.text());
    // The attacker's address, even with the right password, stays held back: a 429 tells
    // nothing of what it tried.
    let held = request_from(
        ATTACKER,
        &addr,
        "GET",
        "/api/status",
        &[basic(PASSWORD)],
        b"",
    );
    assert_eq!(held.status, 429, "{}", held.text());

    // Counted in the metrics, said in the log once.
    let exposition = get(&format!("127.0.0.1:{metrics}"), "/metrics", &[]).text();
    let count = |outcome: &str| -> usize {
        let series = format!("ulog_recv_http_passwords_total{{outcome=\"{outcome}\"}} ");
        let line = exposition.lines().find(|l| l.starts_with(&series));
        line.and_then(|l| l[series.len()..].trim().parse().ok())
            .unwrap_or_else(|| panic!("no {series} in {exposition}"))
    };
    assert_eq!(count("wrong"), checked);
    assert_eq!(count("refused"), refused + 1);
    assert!(daemon.terminate().success());
    let said = said.lock().unwrap();
    let warned: Vec<&String> = said
        .iter()
        .filter(|l| l.contains("wrong passwords from this address"))
        .collect();
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(warned[0].contains("127.0.0.66"), "{warned:?}");
}
