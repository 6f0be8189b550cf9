//! mavlink-router (`../shared/vendor/mavlink-router`), as companion computers run it: the
//! autopilot's link on one side, a UDP endpoint in `Normal` mode per program on the other; and
//! a ground station's stand-in (pymavlink, `tests/gcs_statustext.py`) on one of them.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::Duration;

/// The router's binary. Without it a test says so loudly and returns `None`; under CI its
/// absence is a failure.
pub fn binary() -> Option<PathBuf> {
    let bin = super::project().join("../shared/vendor/mavlink-router/bin/mavlink-routerd");
    if bin.is_file() {
        return Some(bin);
    }
    if std::env::var_os("CI").is_some() {
        panic!("{} missing: CI must route through it", bin.display());
    }
    eprintln!(
        "\n!!! SKIPPED: no {} (the tests behind mavlink-router) !!!\n",
        bin.display()
    );
    None
}

/// A child that is not ours (the router, the ground station): SIGTERM, then SIGKILL, on
/// drop, so that a failing test leaves none behind.
pub struct Other(pub Child);

impl Drop for Other {
    fn drop(&mut self) {
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        std::thread::sleep(Duration::from_millis(100));
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the router from its command line: the autopilot's link on UDP `autopilot` (a
/// server there: the autopilot sends first), no TCP server, and one `Normal` UDP endpoint
/// per port of `endpoints` on loopback. `None` (said loudly) without the router.
pub fn start(autopilot: u16, endpoints: &[u16]) -> Option<Other> {
    start_with(autopilot, endpoints, &[])
}

/// [`start`], with the router's own log endpoint recording the autopilot's log stream into
/// `dir` (`-l DIR`: a `.ulg` for PX4, a `.bin` for ArduPilot, from the first heartbeat).
pub fn start_logging(autopilot: u16, endpoints: &[u16], dir: &Path) -> Option<Other> {
    start_with(
        autopilot,
        endpoints,
        &["-l".into(), dir.display().to_string()],
    )
}

fn start_with(autopilot: u16, endpoints: &[u16], extra: &[String]) -> Option<Other> {
    let bin = binary()?;
    let mut command = Command::new(bin);
    command.args(["-t", "0"]).args(extra);
    for port in endpoints {
        command.arg("-e").arg(format!("127.0.0.1:{port}"));
    }
    let child = command
        .arg(format!("127.0.0.1:{autopilot}"))
        .stdout(Stdio::null())
        .spawn()
        .expect("mavlink-routerd runs");
    Some(Other(child))
}

/// A ground station on UDP `port` (`tests/gcs_statustext.py` run by `py`): it sends a GCS
/// heartbeat every second and prints what it hears, one line each (`ready` first), on the
/// receiver, each prefixed `gcs: ` on the test's own output.
pub fn ground_station(py: &Path, port: u16) -> (Other, Receiver<String>) {
    let mut gcs = Command::new(py)
        .arg(super::project().join("tests/gcs_statustext.py"))
        .arg(port.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the ground station runs");
    let heard = super::procs::watch_lines(gcs.stdout.take().unwrap(), "gcs: ");
    (Other(gcs), heard)
}
