//! A single-node Garage (a production S3 server) for the upload tests and the load bench:
//! its own directory, free ports, the default bucket and key, started, stopped and started
//! again like a real one; a credentials file for the daemon.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const ACCESS_KEY: &str = "GK0123456789abcdef01234567";
pub const SECRET_KEY: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
pub const BUCKET: &str = "flights";

pub fn free_tcp_port() -> u16 {
    let [port] = free_tcp_ports();
    port
}

/// `N` free ports, all different: each one's listener is held until all are picked (picked
/// and released one by one, two could be the same port).
pub fn free_tcp_ports<const N: usize>() -> [u16; N] {
    let listeners: [std::net::TcpListener; N] =
        std::array::from_fn(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap());
    listeners.map(|l| l.local_addr().unwrap().port())
}

/// Garage's binary: `$GARAGE`, else where `.ci/run` installs it.
pub fn binary() -> PathBuf {
    std::env::var_os("GARAGE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/ulog-recv/garage-2.5.0/bin/garage")
        })
}

/// A single-node Garage with a default bucket and key, in a directory of its own.
pub struct Garage {
    bin: PathBuf,
    dir: PathBuf,
    /// The address its S3 API listens on.
    s3_host: String,
    s3_port: u16,
    admin_port: u16,
    child: Option<Child>,
}

impl Garage {
    /// The server in `dir` (made anew), or why there is none (no binary).
    pub fn start(dir: PathBuf) -> Result<Self, String> {
        Self::start_at(dir, "127.0.0.1")
    }

    /// The same, its S3 API on `s3_host` (an address of this machine's, such as a slow
    /// link's end) rather than loopback.
    pub fn start_at(dir: PathBuf, s3_host: &str) -> Result<Self, String> {
        let bin = binary();
        if !bin.is_file() {
            return Err(format!("no Garage at {}", bin.display()));
        }
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let [s3_port, admin_port, rpc_port] = free_tcp_ports();
        std::fs::write(
            dir.join("garage.toml"),
            format!(
                "metadata_dir = \"{d}/meta\"\ndata_dir = \"{d}/data\"\ndb_engine = \"sqlite\"\n\
                 replication_factor = 1\nrpc_bind_addr = \"127.0.0.1:{rpc_port}\"\n\
                 rpc_public_addr = \"127.0.0.1:{rpc_port}\"\nrpc_secret = \"{secret}\"\n\
                 [s3_api]\ns3_region = \"garage\"\napi_bind_addr = \"{s3_host}:{s3_port}\"\n\
                 [admin]\napi_bind_addr = \"127.0.0.1:{admin_port}\"\n",
                d = dir.display(),
                secret = "ab".repeat(32),
            ),
        )
        .unwrap();
        let mut g = Garage {
            bin,
            dir,
            s3_host: s3_host.to_owned(),
            s3_port,
            admin_port,
            child: None,
        };
        g.run();
        Ok(g)
    }

    /// Starts the server (again) and waits for its health check.
    pub fn run(&mut self) {
        let log = std::fs::File::create(self.dir.join("garage.log")).unwrap();
        let child = Command::new(&self.bin)
            .arg("-c")
            .arg(self.dir.join("garage.toml"))
            .args(["server", "--single-node", "--default-bucket"])
            .env("GARAGE_DEFAULT_ACCESS_KEY", ACCESS_KEY)
            .env("GARAGE_DEFAULT_SECRET_KEY", SECRET_KEY)
            .env("GARAGE_DEFAULT_BUCKET", BUCKET)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("garage starts");
        self.child = Some(child);
        let t0 = Instant::now();
        while !http_ok(self.admin_port, "/health") {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "Garage not healthy in 20 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let _ = c.wait();
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}:{}", self.s3_host, self.s3_port)
    }

    /// Stops the server as a hung one is (`SIGSTOP`): its connections stay open, it reads
    /// and answers nothing until [`Garage::resume`].
    pub fn freeze(&self) {
        let child = self.child.as_ref().expect("a running server");
        unsafe { libc::kill(child.id() as i32, libc::SIGSTOP) };
    }

    /// Lets a [frozen](Garage::freeze) server go on (`SIGCONT`).
    pub fn resume(&self) {
        let child = self.child.as_ref().expect("a running server");
        unsafe { libc::kill(child.id() as i32, libc::SIGCONT) };
    }

    /// The CPU time (user and system, all threads) the server has used so far, from
    /// `/proc`; 0 when it is not running.
    pub fn cpu_seconds(&self) -> f64 {
        let Some(child) = &self.child else { return 0.0 };
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", child.id())).unwrap_or_default();
        // The fields after the command's closing parenthesis; utime and stime are the 14th
        // and 15th of the whole line, in clock ticks.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map_or("", |(_, rest)| rest)
            .split_whitespace()
            .collect();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<u64>().ok())
                .unwrap_or(0)
        };
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        (ticks(11) + ticks(12)) as f64 / hz
    }

    /// Where its S3 API listens.
    pub fn s3_addr(&self) -> std::net::SocketAddr {
        format!("{}:{}", self.s3_host, self.s3_port)
            .parse()
            .unwrap()
    }

    /// The daemon's options to upload here under `prefix`, with credentials in `creds`, as an
    /// operator gives them: the endpoint without a word on addressing (path style follows).
    pub fn upload_args(&self, prefix: &str, creds: &Path) -> Vec<String> {
        self.upload_args_at(&self.endpoint(), prefix, creds)
    }

    /// The same, reaching this server at `endpoint` (through something in front of it).
    pub fn upload_args_at(&self, endpoint: &str, prefix: &str, creds: &Path) -> Vec<String> {
        [
            "--upload-to",
            &format!("s3://{BUCKET}/{prefix}"),
            "--upload-endpoint",
            endpoint,
            "--upload-region",
            "garage",
            "--upload-credentials",
            &creds.display().to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    /// What boto3 finds under `prefix`.
    pub fn objects(&self, py: &Path, prefix: &str) -> serde_json::Value {
        self.objects_after(py, prefix, &[])
    }

    /// The multipart uploads open under `prefix` aborted by boto3, as a lifecycle rule
    /// aborts them; what it then finds there.
    pub fn abort_open_uploads(&self, py: &Path, prefix: &str) -> serde_json::Value {
        self.objects_after(py, prefix, &["--abort-open"])
    }

    fn objects_after(&self, py: &Path, prefix: &str, first: &[&str]) -> serde_json::Value {
        let out = Command::new(py)
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/s3_objects.py"))
            .args([&self.endpoint(), "garage", BUCKET, prefix])
            .args(first)
            .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
            .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "s3_objects.py: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

impl Drop for Garage {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// GET `path` on 127.0.0.1:`port` answers 200.
pub fn http_ok(port: u16, path: &str) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    let mut head = [0u8; 12];
    s.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.") && &head[9..12] == b"200"
}

/// A credentials file (mode 0600) with `secret`.
pub fn credentials(dir: &Path, secret: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("credentials");
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        &path,
        format!("[default]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {secret}\n"),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}
