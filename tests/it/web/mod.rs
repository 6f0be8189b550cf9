//! The web page (`--http`) against the daemon receiving the simulated vehicle: its API says
//! what `info` and `uploads` say of the same session and its downloads are what `export`
//! writes ([`api`]); who may use it and what a hostile client gets ([`security`]); the page in
//! a real browser, Debian's chromium driven over WebDriver ([`browser`]).

mod api;
mod ardupilot;
mod browser;
mod browser_ardupilot;
mod guessing;
mod security;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::garage::free_tcp_port;
use crate::common::procs::{Proc, free_udp_port, wait_for_line};
pub(crate) use crate::common::procs::{stream, stream_again};

/// An HTTP answer.
pub(crate) struct Reply {
    pub status: u16,
    pub head: String,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// A header's value.
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_owned())
        })
    }
}

/// Sends `request` (a whole HTTP/1.0 request, as written) to `addr` and reads the answer to
/// the connection's end.
pub(crate) fn raw(addr: &str, request: &[u8]) -> Reply {
    let s = std::net::TcpStream::connect(addr).unwrap_or_else(|e| panic!("{addr}: {e}"));
    exchange(s, request)
}

/// [`raw`] from the loopback address `source` (`127.0.0.66`: another client, as the page
/// sees it).
pub(crate) fn raw_from(source: std::net::Ipv4Addr, addr: &str, request: &[u8]) -> Reply {
    use socket2::{Domain, Socket, Type};
    let to: std::net::SocketAddr = addr.parse().unwrap();
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    socket
        .bind(&std::net::SocketAddr::from((source, 0)).into())
        .unwrap();
    socket
        .connect(&to.into())
        .unwrap_or_else(|e| panic!("{addr} from {source}: {e}"));
    exchange(socket.into(), request)
}

fn exchange(mut s: std::net::TcpStream, request: &[u8]) -> Reply {
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.write_all(request).unwrap();
    let mut bytes = Vec::new();
    // A refused request may be answered before it was all read: the reset that follows is
    // the end.
    let _ = s.read_to_end(&mut bytes);
    // No head: the connection was closed unanswered (status 0).
    let Some(split) = bytes.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Reply {
            status: 0,
            head: String::new(),
            body: bytes,
        };
    };
    let head = String::from_utf8_lossy(&bytes[..split]).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Reply {
        status,
        head,
        body: bytes[split + 4..].to_vec(),
    }
}

/// `METHOD path` with `headers` (each a whole line) and `body`.
pub(crate) fn request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[String],
    body: &[u8],
) -> Reply {
    raw(addr, &request_bytes(addr, method, path, headers, body))
}

/// [`request`] from the loopback address `source`.
pub(crate) fn request_from(
    source: std::net::Ipv4Addr,
    addr: &str,
    method: &str,
    path: &str,
    headers: &[String],
    body: &[u8],
) -> Reply {
    raw_from(
        source,
        addr,
        &request_bytes(addr, method, path, headers, body),
    )
}

fn request_bytes(addr: &str, method: &str, path: &str, headers: &[String], body: &[u8]) -> Vec<u8> {
    let mut r = format!("{method} {path} HTTP/1.0\r\nHost: {addr}\r\n");
    for h in headers {
        r.push_str(h);
        r.push_str("\r\n");
    }
    if !body.is_empty() || method == "POST" {
        r.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    r.push_str("\r\n");
    let mut bytes = r.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

pub(crate) fn get(addr: &str, path: &str, headers: &[String]) -> Reply {
    request(addr, "GET", path, headers, b"")
}

/// `POST path` with the CSRF token `GET /api/session` gives, as the page's actions post.
pub(crate) fn post_as_page(addr: &str, path: &str) -> Reply {
    let token = get(addr, "/api/session", &[]).json()["csrf_token"]
        .as_str()
        .expect("a CSRF token")
        .to_owned();
    request(addr, "POST", path, &[format!("X-CSRF-Token: {token}")], b"")
}

/// The daemon on a fresh UDP port with the web page on `http` (`[ADDR:]PORT`) and `extra`
/// options; returns it, its UDP port and the page's address, once it listens.
pub(crate) fn daemon(logs: &Path, http: &str, extra: &[&str]) -> (Proc, u16, String) {
    let port = free_udp_port();
    let mut args: Vec<String> = vec![
        "--udp".into(),
        format!("127.0.0.1:{port}"),
        "--log-dir".into(),
        logs.display().to_string(),
        "--no-socket".into(),
        "--http".into(),
        http.into(),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    let (daemon, lines) = Proc::spawn_watched("the daemon", &args);
    let addr = page_address(lines);
    (daemon, port, addr)
}

/// The page's address, from the line a daemon started with `--http` says it on (its other
/// lines read and dropped).
pub(crate) fn page_address(lines: std::sync::mpsc::Receiver<String>) -> String {
    let line = wait_for_line(&lines, "the web page on http://", Duration::from_secs(20));
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .expect("the page's address")
        .to_owned();
    std::thread::spawn(move || for _ in lines {});
    // Bound to every interface: reached on loopback.
    addr.replace("0.0.0.0", "127.0.0.1")
}

/// A free port on loopback, as `--http` takes it.
pub(crate) fn free_http_port() -> String {
    free_tcp_port().to_string()
}

/// Waits until `GET /api/flights` (with `headers`) shows `count` flights, all closed;
/// returns them.
pub(crate) fn closed_flights(
    addr: &str,
    headers: &[String],
    count: usize,
) -> Vec<serde_json::Value> {
    let t0 = Instant::now();
    loop {
        let reply = get(addr, "/api/flights", headers);
        // Closed unanswered: every connection the page serves at once is taken (a flood).
        let flights = match reply.status {
            0 => Vec::new(),
            200 => reply.json().as_array().cloned().unwrap_or_default(),
            _ => panic!("{}: {}", reply.status, reply.text()),
        };
        if flights.len() == count && flights.iter().all(|f| f["closed"] == true) {
            return flights;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(90),
            "no {count} closed flights: {flights:?}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// A session's directory under `logs`.
pub(crate) fn session(logs: &Path, id: &str) -> PathBuf {
    logs.join(id)
}
