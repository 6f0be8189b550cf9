//! PX4's Flight Review, the log server most PX4 users upload to, run for real from
//! `../shared/vendor/flight_review` (a copy per test, since it writes beside its code) in the
//! virtualenv `.venv-flight-review` that `.ci/run` makes.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::garage::http_ok;
use super::procs::fresh_dir;

/// A Flight Review server from `../shared/vendor/flight_review`, run from a copy.
pub struct FlightReviewServer {
    port: u16,
    child: Child,
    /// Its storage: the logs and their database.
    data: std::path::PathBuf,
}

impl FlightReviewServer {
    /// The server for test `name` on 127.0.0.1:`port`, or a loud skip (a failure under CI)
    /// when the vendored copy or its virtualenv is missing.
    #[track_caller]
    pub fn start(name: &str, port: u16) -> Option<Self> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let vendor = root.join("../shared/vendor/flight_review");
        let python = root.join(".venv-flight-review/bin/python");
        if !vendor.is_dir() || !python.is_file() {
            let what = "no Flight Review (../shared/vendor/flight_review, .venv-flight-review)";
            eprintln!("SKIPPED: {what}");
            assert!(std::env::var_os("CI").is_none(), "CI must run it: {what}");
            return None;
        }
        let dir = fresh_dir(&format!("flight-review-{name}"));
        std::fs::create_dir_all(&dir).unwrap();
        let copy = dir.join("fr");
        let status = Command::new("cp")
            .arg("-r")
            .arg(&vendor)
            .arg(&copy)
            .status()
            .unwrap();
        assert!(status.success());
        let app = copy.join("app");
        std::fs::write(
            app.join("config_user.ini"),
            format!(
                "[general]\ndomain_name=127.0.0.1:{port}\nhttp_protocol=http\nstorage_path={}\n",
                dir.join("data").display()
            ),
        )
        .unwrap();
        let ok = Command::new(&python)
            .arg("setup_db.py")
            .current_dir(&app)
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(ok.success(), "Flight Review's setup_db.py failed");
        let log = std::fs::File::create(dir.join("serve.log")).unwrap();
        let child = Command::new(&python)
            .args([
                "serve.py",
                "--port",
                &port.to_string(),
                "--address",
                "127.0.0.1",
            ])
            .arg("--allow-websocket-origin")
            .arg(format!("127.0.0.1:{port}"))
            .current_dir(&app)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let server = Self {
            port,
            child,
            data: dir.join("data"),
        };
        let t0 = Instant::now();
        while !http_ok(port, "/upload") {
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "Flight Review not up in 60 s (see {})",
                dir.join("serve.log").display()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        Some(server)
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The description of every log the server holds, read from its database.
    pub fn descriptions(&self) -> Vec<String> {
        let db = self.data.join("logs.sqlite");
        let read = super::json_output(
            Command::new("python3")
                .args([
                    "-c",
                    "import sqlite3,sys,json;print(json.dumps([r[0] for r in \
                     sqlite3.connect(sys.argv[1]).execute('select Description from Logs')]))",
                ])
                .arg(&db),
        );
        serde_json::from_value(read).unwrap()
    }

    pub fn download(&self, id: &str) -> Vec<u8> {
        let out = Command::new("curl")
            .args(["-sf", &format!("{}/download?log={id}", self.url())])
            .output()
            .unwrap();
        assert!(out.status.success(), "download of {id} failed");
        out.stdout
    }
}

impl Drop for FlightReviewServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
