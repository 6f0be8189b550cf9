//! A TCP relay between an S3 client and its server that reads the HTTP/1.1 requests going
//! through it, as a proxy on the way would see them: it keeps each request's head (method,
//! target, headers) and can change one byte of one request's body, as a faulty link or a
//! meddling middlebox could. Responses pass untouched.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// A request as the relay saw it go by.
#[derive(Debug, Clone)]
pub struct RequestHead {
    pub method: String,
    /// The path and query.
    pub target: String,
    /// Names lower-cased.
    pub headers: Vec<(String, String)>,
    /// Whether the relay changed a byte of its body.
    pub changed: bool,
}

impl RequestHead {
    /// The value of header `name` (lower case), if sent.
    pub fn header(&self, name: &str) -> Option<&str> {
        (self.headers.iter())
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Which request's body to change: asked of each request with a body until it says yes once.
type Pick = dyn Fn(&RequestHead) -> bool + Send + Sync;

pub struct HttpRelay {
    port: u16,
    seen: Arc<Mutex<Vec<RequestHead>>>,
    stop: Arc<AtomicBool>,
}

impl HttpRelay {
    /// Relays 127.0.0.1:`port()` to `server`, changing the middle byte of the body of the
    /// first request `pick` chooses (and of no other).
    pub fn start(
        server: SocketAddr,
        pick: impl Fn(&RequestHead) -> bool + Send + Sync + 'static,
    ) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let pick: Arc<Pick> = Arc::new(pick);
        let picked = Arc::new(AtomicBool::new(false));
        let (seen2, stop2) = (seen.clone(), stop.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                let Ok(upstream) = TcpStream::connect(server) else {
                    continue;
                };
                let (seen, pick, picked) = (seen2.clone(), pick.clone(), picked.clone());
                let (from_server, to_client) =
                    (upstream.try_clone().unwrap(), client.try_clone().unwrap());
                std::thread::spawn(move || {
                    let (mut from_server, mut to_client) = (from_server, to_client);
                    let _ = std::io::copy(&mut from_server, &mut to_client);
                    let _ = to_client.shutdown(Shutdown::Write);
                });
                std::thread::spawn(move || {
                    let _ = requests(client, upstream, &seen, &*pick, &picked);
                });
            }
        });
        Self { port, seen, stop }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The requests seen so far, each once its body went by, in that order.
    pub fn seen(&self) -> Vec<RequestHead> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for HttpRelay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accepting thread, which then ends.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Passes one connection's requests from `client` to `server`, each head kept in `seen`.
fn requests(
    client: TcpStream,
    mut server: TcpStream,
    seen: &Mutex<Vec<RequestHead>>,
    pick: &Pick,
    picked: &AtomicBool,
) -> std::io::Result<()> {
    let mut client = BufReader::new(client);
    loop {
        let mut head = Vec::new();
        loop {
            let mut line = Vec::new();
            if client.read_until(b'\n', &mut line)? == 0 {
                let _ = server.shutdown(Shutdown::Write);
                return Ok(());
            }
            head.extend_from_slice(&line);
            if line == b"\r\n" {
                break;
            }
        }
        let text = String::from_utf8_lossy(&head).into_owned();
        let mut lines = text.split("\r\n");
        let mut first = lines.next().unwrap_or("").split(' ');
        let mut request = RequestHead {
            method: first.next().unwrap_or("").to_owned(),
            target: first.next().unwrap_or("").to_owned(),
            headers: (lines.filter_map(|l| l.split_once(':')))
                .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
                .collect(),
            changed: false,
        };
        assert!(
            request.header("transfer-encoding").is_none(),
            "the relay reads bodies of a known length only: {request:?}"
        );
        let length: usize = request
            .header("content-length")
            .map_or(0, |l| l.parse().unwrap());
        let mut body = vec![0; length];
        client.read_exact(&mut body)?;
        // Taken at once (`swap`): two connections' requests are never both changed.
        if length > 0 && pick(&request) && !picked.swap(true, Ordering::SeqCst) {
            body[length / 2] ^= 0x01;
            request.changed = true;
        }
        seen.lock().unwrap().push(request);
        server.write_all(&head)?;
        server.write_all(&body)?;
    }
}
