//! Running `ulog-recv` as a child process in tests: the binary, a child killed if the test
//! fails, fresh directories, free ports.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_ulog-recv");

/// A child process killed if the test fails.
pub struct Proc(pub Child, pub &'static str);

impl Proc {
    /// Starts `ulog-recv ARGS`. A daemon gets a runtime directory of its own (as systemd
    /// gives one), so its default live socket never meets another test's.
    #[track_caller]
    pub fn spawn(what: &'static str, args: &[String]) -> Self {
        Self::spawn_with(what, args, &[], Stdio::null(), Stdio::inherit())
    }

    #[track_caller]
    fn spawn_with(
        what: &'static str,
        args: &[String],
        env: &[(&str, &str)],
        stdout: Stdio,
        stderr: Stdio,
    ) -> Self {
        static SPAWNED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = SPAWNED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let runtime_dir = fresh_dir(&format!("run{n}"));
        let child = Command::new(BIN)
            .args(args)
            .env("RUNTIME_DIRECTORY", &runtime_dir)
            .envs(env.iter().copied())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        Self(child, what)
    }

    /// Like [`spawn`](Self::spawn), its stderr lines also sent to the returned channel (and
    /// still shown), its stdout kept for [`stdout_text`](Self::stdout_text).
    #[track_caller]
    pub fn spawn_watched(
        what: &'static str,
        args: &[String],
    ) -> (Self, std::sync::mpsc::Receiver<String>) {
        Self::spawn_watched_with_env(what, args, &[])
    }

    /// Like [`spawn_watched`](Self::spawn_watched), with `env` set for it.
    #[track_caller]
    pub fn spawn_watched_with_env(
        what: &'static str,
        args: &[String],
        env: &[(&str, &str)],
    ) -> (Self, std::sync::mpsc::Receiver<String>) {
        let mut p = Self::spawn_with(what, args, env, Stdio::piped(), Stdio::piped());
        let rx = watch_lines(p.0.stderr.take().unwrap(), "");
        (p, rx)
    }

    /// What a watched process wrote on stdout (read to its end: call it once it has exited).
    pub fn stdout_text(&mut self) -> String {
        let mut out = String::new();
        if let Some(mut stdout) = self.0.stdout.take() {
            std::io::Read::read_to_string(&mut stdout, &mut out).unwrap();
        }
        out
    }

    pub fn wait(&mut self, limit: Duration) -> std::process::ExitStatus {
        let t0 = Instant::now();
        loop {
            if let Some(s) = self.0.try_wait().unwrap() {
                return s;
            }
            assert!(
                t0.elapsed() < limit,
                "{} did not finish within {limit:?}",
                self.1
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn terminate(&mut self) -> std::process::ExitStatus {
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        self.wait(Duration::from_secs(10))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The lines a child writes to `pipe`, as they come, sent to the returned channel and shown
/// on the test's stderr behind `prefix`.
pub fn watch_lines(
    pipe: impl std::io::Read + Send + 'static,
    prefix: &'static str,
) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
            eprintln!("{prefix}{line}");
            let _ = tx.send(line);
        }
    });
    rx
}

/// The folder a test names `name`, not yet made (its parent is): `target/tmp/MODULE/NAME`,
/// in cargo's scratch space for integration tests, MODULE the test's area (`faults` for
/// tests/it/faults/mod.rs and tests/it/faults/settings.rs, `live` for tests/it/live.rs; a
/// helper that calls this is `#[track_caller]` to keep its caller's),
/// emptied when a test asks for it again. So a run's files stay to be looked at after a
/// failure, the next run replaces them rather than piling up beside them, and `cargo clean`
/// removes them. The calling test takes its share of the machine
/// ([`beside_others`](super::machine::beside_others)).
#[track_caller]
pub fn fresh_dir(name: &str) -> PathBuf {
    super::machine::beside_others();
    let file = Path::new(std::panic::Location::caller().file());
    let within = file
        .strip_prefix("tests/it")
        .unwrap_or_else(|_| Path::new(file.file_name().expect("a test's file")));
    let first = within.components().next().expect("a test's file");
    let module = Path::new(first.as_os_str()).with_extension("");
    let parent = Path::new(env!("CARGO_TARGET_TMPDIR")).join(module);
    std::fs::create_dir_all(&parent).unwrap();
    let dir = parent.join(name);
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// The session directories (any directory) under `dir`, oldest (by name) first.
pub fn session_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    v.sort();
    v
}

/// Every file under `root`, as paths relative to it, sorted.
pub fn files_under(root: &Path) -> Vec<String> {
    fn walk(dir: &Path, root: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, root, out);
            } else {
                out.push(path.strip_prefix(root).unwrap().display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    if root.exists() {
        walk(root, root, &mut out);
    }
    out.sort();
    out
}

/// The split files under `dir` (in its session directories), in order.
pub fn ulg_files(dir: &Path) -> Vec<PathBuf> {
    files_with_extension(dir, "ulg")
}

/// Every file under `dir`, at any depth, whose name ends in `.EXTENSION`, in order.
pub fn files_with_extension(dir: &Path, extension: &str) -> Vec<PathBuf> {
    let mut v = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == extension) {
                v.push(p);
            }
        }
    }
    v.sort();
    v
}

pub fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits for a line containing `needle` on `lines`; returns it.
pub fn wait_for_line(
    lines: &std::sync::mpsc::Receiver<String>,
    needle: &str,
    limit: Duration,
) -> String {
    let t0 = Instant::now();
    loop {
        let left = limit.saturating_sub(t0.elapsed());
        match lines.recv_timeout(left) {
            Ok(line) if line.contains(needle) => return line,
            Ok(_) => {}
            Err(_) => panic!("no line with {needle:?} within {limit:?}"),
        }
    }
}

/// Runs `ulog-recv ARGS` to its end; asserts it succeeded (its stderr says why not) and
/// returns its standard output.
pub fn run_ok(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Ends a recording: waits until the simulator has sent its whole log (on `sim_lines`), stops
/// the daemon (it must exit cleanly) and the simulator; returns the one session in `logs`.
pub fn finish_recording(
    daemon: &mut Proc,
    sim: &mut Proc,
    sim_lines: &std::sync::mpsc::Receiver<String>,
    logs: &Path,
) -> PathBuf {
    wait_for_line(
        sim_lines,
        "the whole log was sent",
        Duration::from_secs(120),
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(daemon.terminate().success(), "the daemon exits cleanly");
    assert!(sim.wait(Duration::from_secs(10)).success());
    let sessions = session_dirs(logs);
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    sessions[0].clone()
}

/// Debian's strace, for a test that uses it to `why` (slow the disk down, watch which files
/// are opened); without it a loud skip, or a failure under CI.
pub fn strace(why: &str) -> Option<&'static str> {
    let path = "/usr/bin/strace";
    if Path::new(path).exists() {
        return Some(path);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI must {why}: install strace (`.ci/run` does)"
    );
    eprintln!("\n!!! SKIPPED: no {path} to {why} !!!\n");
    None
}

/// The simulator streaming `flight` once to `port` with `impairment`.
pub fn stream(
    flight: &Path,
    port: u16,
    impairment: &[&str],
) -> (Proc, std::sync::mpsc::Receiver<String>) {
    let mut once = vec!["--once"];
    once.extend_from_slice(impairment);
    stream_again(flight, port, &once)
}

/// The simulator streaming `flight` to `port` with `options`, again and again (serving its
/// SD log over MAVLink FTP in between) unless they say `--once`.
pub fn stream_again(
    flight: &Path,
    port: u16,
    options: &[&str],
) -> (Proc, std::sync::mpsc::Receiver<String>) {
    let mut args: Vec<String> = vec![
        "sim".into(),
        flight.display().to_string(),
        "--udp-connect".into(),
        format!("127.0.0.1:{port}"),
    ];
    args.extend(options.iter().map(|a| a.to_string()));
    Proc::spawn_watched("the simulator", &args)
}
