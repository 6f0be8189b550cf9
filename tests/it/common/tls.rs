//! TLS in front of a test server, as an operator puts it in front of theirs: a private CA of
//! the test's own and a certificate it signed for 127.0.0.1 (made by `openssl`), and `socat`
//! terminating TLS with it and passing the bytes on to a plain TCP port.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// A private CA's certificate, and a server certificate it signed for 127.0.0.1 with its
/// key, as PEM files.
pub struct PrivateCa {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl PrivateCa {
    /// Makes the CA and the server's certificate in `dir`.
    pub fn make(dir: &Path) -> Self {
        let file = |name: &str| dir.join(name);
        let (ca, ca_key, cert, key) = (
            file("ca.pem"),
            file("ca.key"),
            file("server.pem"),
            file("server.key"),
        );
        let (request, extensions) = (file("server.csr"), file("server.ext"));
        std::fs::write(
            &extensions,
            "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        let ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
        openssl(
            &format!("req -x509 {ec} -days 1 -subj /CN=test-CA"),
            &[("-keyout", &ca_key), ("-out", &ca)],
        );
        openssl(
            &format!("req {ec} -subj /CN=127.0.0.1"),
            &[("-keyout", &key), ("-out", &request)],
        );
        openssl(
            "x509 -req -days 1 -CAcreateserial",
            &[
                ("-in", &request),
                ("-CA", &ca),
                ("-CAkey", &ca_key),
                ("-extfile", &extensions),
                ("-out", &cert),
            ],
        );
        Self { ca, cert, key }
    }
}

/// `openssl WORDS` followed by each (option, file).
fn openssl(words: &str, files: &[(&str, &Path)]) {
    let mut command = Command::new("openssl");
    command.args(words.split(' '));
    for (option, path) in files {
        command.arg(option).arg(path);
    }
    let out = command.output().expect("openssl runs");
    assert!(
        out.status.success(),
        "openssl {words}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `socat` terminating TLS on a port of its own with `ca`'s server certificate, each
/// connection passed on to 127.0.0.1:`to`. Stopped when dropped.
pub struct Terminator {
    child: Child,
    port: u16,
}

impl Terminator {
    pub fn start(ca: &PrivateCa, to: u16) -> Self {
        let port = super::garage::free_tcp_port();
        let listen = format!(
            "OPENSSL-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork,verify=0,cert={},key={}",
            ca.cert.display(),
            ca.key.display()
        );
        let child = Command::new("socat")
            .args([listen, format!("TCP:127.0.0.1:{to}")])
            // Its complaint about the readiness probe below (not a TLS client) is noise.
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("socat runs");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "socat not listening in 10 s");
            std::thread::sleep(Duration::from_millis(50));
        }
        Self { child, port }
    }

    /// `https://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }
}

impl Drop for Terminator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
