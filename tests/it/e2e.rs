//! End to end: the `ulog-recv` daemon and `ulog-recv sim` as two processes, over loopback UDP
//! and over a pair of pseudo-terminals (serial). The daemon is stopped with SIGTERM, as
//! systemd stops it; the files it wrote must hold what the vehicle streamed, and pyulog (from
//! the virtualenv `.ci/run` makes) must read them as we do.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::procs::{Proc, free_udp_port, fresh_dir, ulg_files, wait_for_line};
use common::{all_logs, check_with_pyulog, split_messages};
use ulog_recv::sim::chunk_log;

/// Once the simulator (watched through `sim_log`, run with `--once`) has sent the whole log,
/// stops the daemon as systemd does, while the vehicle still streams; both must exit cleanly.
fn stop_once_all_was_sent(
    daemon: &mut Proc,
    sim: &mut Proc,
    sim_log: &std::sync::mpsc::Receiver<String>,
) {
    wait_for_line(sim_log, "the whole log was sent", Duration::from_secs(120));
    // Time for the last chunks to be put in order and handed over.
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        daemon.terminate().success(),
        "the daemon exits cleanly on SIGTERM"
    );
    assert!(sim.wait(Duration::from_secs(10)).success());
}

/// Runs the daemon and the simulator with these link arguments until the whole log was sent,
/// then stops the daemon as systemd does (its STOP handshake with the still streaming vehicle
/// brings the post-flight data); returns the files written.
fn run_pair(
    name: &str,
    log: &Path,
    receiver_link: &[String],
    sim_link: &[String],
    sim_extra: &[&str],
) -> Vec<PathBuf> {
    let dir = fresh_dir(name);
    let mut args: Vec<String> = receiver_link.to_vec();
    args.extend(["--log-dir".into(), dir.display().to_string()]);
    let mut daemon = Proc::spawn("the daemon", &args);
    let mut args: Vec<String> = vec!["sim".into(), log.display().to_string(), "--once".into()];
    args.extend(sim_link.iter().cloned());
    args.extend(sim_extra.iter().map(|s| s.to_string()));
    let (mut sim, lines) = Proc::spawn_watched("the simulator", &args);
    stop_once_all_was_sent(&mut daemon, &mut sim, &lines);
    ulg_files(&dir)
}

fn udp_links() -> (Vec<String>, Vec<String>) {
    let port = free_udp_port();
    (
        vec!["--udp".into(), port.to_string()],
        vec!["--udp-connect".into(), format!("127.0.0.1:{port}")],
    )
}

#[test]
fn over_udp_every_log_arrives_whole_and_reads_in_pyulog() {
    for log in all_logs() {
        let (rx, tx) = udp_links();
        let files = run_pair("udp", &log, &rx, &tx, &["--link-rate", "5700000"]);
        assert_whole_log(&log, &files);
    }
}

#[test]
fn over_a_lossy_udp_link_the_file_holds_only_real_messages_and_dropouts() {
    let log = &common::synthetic_logs()[0];
    let (rx, tx) = udp_links();
    let files = run_pair(
        "udp-lossy",
        log,
        &rx,
        &tx,
        &[
            "--link-rate",
            "570000",
            "--loss",
            "0.05",
            "--duplicate",
            "0.05",
            "--reorder",
            "0.1",
            "--uplink-loss",
            "0.1",
            "--seed",
            "3",
        ],
    );
    assert_eq!(files.len(), 1);
    let got = split_messages(&std::fs::read(&files[0]).unwrap());
    let chunked = chunk_log(&std::fs::read(log).unwrap(), 0).unwrap();
    let original = split_messages(&[chunked.stream, chunked.postflight].concat());
    // Every message but our dropouts is one of the vehicle's, in order.
    // (An 'O' is the vehicle's only when it is the very next message of its log.)
    let mut rest = original.iter().peekable();
    let mut ours = 0;
    for (i, m) in got.iter().enumerate() {
        if m.len() == 5 && m[2] == b'O' && rest.peek() != Some(&m) {
            ours += 1;
            continue;
        }
        assert!(
            rest.any(|o| o == m),
            "message {i} of {} (type {:?}, {} bytes) is not in the vehicle's log, or out of order",
            got.len(),
            m.get(2).map(|&t| t as char),
            m.len()
        );
    }
    assert!(ours > 0, "5 % loss must leave dropouts");
    assert!(got.len() > original.len() / 2);
    check_with_pyulog(&files[0]);
}

/// A pseudo-terminal whose slave side stays open (so the other end never sees a hang-up).
struct Pty {
    master: i32,
    _slave: i32,
    path: PathBuf,
}

fn open_pty() -> Pty {
    let (mut master, mut slave) = (0, 0);
    let r = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(r, 0, "openpty failed");
    unsafe {
        // Not inherited by the daemon and the simulator: closing them here must close them.
        libc::fcntl(master, libc::F_SETFD, libc::FD_CLOEXEC);
        libc::fcntl(slave, libc::F_SETFD, libc::FD_CLOEXEC);
        let mut t: libc::termios = std::mem::zeroed();
        libc::tcgetattr(slave, &mut t);
        libc::cfmakeraw(&mut t);
        libc::tcsetattr(slave, libc::TCSANOW, &t);
    }
    let name = unsafe { std::ffi::CStr::from_ptr(libc::ttyname(slave)) };
    Pty {
        master,
        _slave: slave,
        path: PathBuf::from(name.to_str().unwrap()),
    }
}

/// Copies bytes from one pty master to the other, as a null-modem cable would.
fn relay(from: i32, to: i32) {
    relay_until(
        from,
        to,
        std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)),
    );
}

/// [`relay`] until `cut` is set.
fn relay_until(from: i32, to: i32, cut: std::sync::Arc<std::sync::atomic::AtomicBool>) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        loop {
            if cut.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            let mut pfd = libc::pollfd {
                fd: from,
                events: libc::POLLIN,
                revents: 0,
            };
            if unsafe { libc::poll(&mut pfd, 1, 10) } <= 0 {
                continue;
            }
            let n = unsafe { libc::read(from, buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                if n < 0
                    && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
                {
                    continue;
                }
                // EIO while no process holds the slave open: wait for the next one.
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
            let mut at = 0;
            while at < n as usize {
                let w = unsafe { libc::write(to, buf[at..].as_ptr().cast(), n as usize - at) };
                if w <= 0 {
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                at += w as usize;
            }
        }
    });
}

#[test]
fn over_a_serial_line_a_log_arrives_whole() {
    let (a, b) = (open_pty(), open_pty());
    relay(a.master, b.master);
    relay(b.master, a.master);
    let rx = vec!["--serial".into(), a.path.display().to_string()];
    let tx = vec!["--serial".into(), b.path.display().to_string()];
    let mut logs = common::synthetic_logs();
    logs.extend(
        common::shared_logs()
            .unwrap_or_default()
            .into_iter()
            .filter(|p| p.file_name().is_some_and(|n| n == "sample_log_small.ulg")),
    );
    for log in logs {
        let files = run_pair("serial", &log, &rx, &tx, &["--link-rate", "570000"]);
        assert_whole_log(&log, &files);
    }
}

/// Relays between the daemon's TCP connection and the simulator's UDP socket, like a MAVLink
/// router with a TCP server endpoint; drops the TCP connection once, `cut_after` bytes in.
fn tcp_router(cut_after: usize) -> (u16, u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{Read, Write};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let (tcp_port, udp_port) = (
        listener.local_addr().unwrap().port(),
        udp.local_addr().unwrap().port(),
    );
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    std::thread::spawn(move || {
        let mut forwarded = 0usize;
        let mut sim_addr = None;
        udp.set_read_timeout(Some(Duration::from_millis(2)))
            .unwrap();
        loop {
            let Ok((mut tcp, _)) = listener.accept() else {
                return;
            };
            count.fetch_add(1, Ordering::SeqCst);
            tcp.set_read_timeout(Some(Duration::from_millis(2)))
                .unwrap();
            let mut buf = [0u8; 65536];
            loop {
                // Vehicle → daemon.
                if let Ok((n, from)) = udp.recv_from(&mut buf) {
                    sim_addr = Some(from);
                    if tcp.write_all(&buf[..n]).is_err() {
                        break;
                    }
                    forwarded += n;
                    if forwarded > cut_after && count.load(Ordering::SeqCst) == 1 {
                        break; // the cable is pulled
                    }
                }
                // Daemon → vehicle.
                match tcp.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        if let Some(a) = sim_addr {
                            let _ = udp.send_to(&buf[..n], a);
                        }
                    }
                    Err(_) => {}
                }
            }
        }
    });
    (tcp_port, udp_port, accepted)
}

#[test]
fn over_tcp_the_daemon_reconnects_after_the_connection_drops() {
    let log = &common::synthetic_logs()[0];
    let (tcp_port, udp_port, accepted) = tcp_router(30_000);
    let files = run_pair(
        "tcp",
        log,
        &["--tcp".into(), format!("127.0.0.1:{tcp_port}")],
        &["--udp-connect".into(), format!("127.0.0.1:{udp_port}")],
        &["--link-rate", "28600"],
    );
    assert_eq!(
        accepted.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "one reconnect"
    );
    assert!(!files.is_empty());
    let chunked = chunk_log(&std::fs::read(log).unwrap(), 0).unwrap();
    let original = split_messages(&[chunked.stream, chunked.postflight].concat());
    let mut total = 0;
    for f in &files {
        let got = split_messages(&std::fs::read(f).unwrap());
        // The header and definitions came whole; what follows is the vehicle's or a dropout.
        assert_eq!(got[0], original[0]);
        total += got.len();
        check_with_pyulog(f);
    }
    // The stream went on after the reconnect: most of the log arrived.
    assert!(
        total > original.len() / 2,
        "{total} of {} messages",
        original.len()
    );
}

#[test]
fn over_a_serial_line_the_daemon_reopens_an_unplugged_adapter() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    // The daemon opens a stable name (as /dev/serial/by-id/... is), a symlink to the pty.
    let dir = fresh_dir("serial-unplug-link");
    std::fs::create_dir_all(&dir).unwrap();
    let name = dir.join("ttyPX4");
    let (a, b) = (open_pty(), open_pty());
    std::os::unix::fs::symlink(&a.path, &name).unwrap();
    let cut = Arc::new(AtomicBool::new(false));
    relay_until(a.master, b.master, cut.clone());
    relay_until(b.master, a.master, cut.clone());
    let log = common::synthetic_logs()[0].clone();
    let out = fresh_dir("serial-unplug");
    let mut daemon = Proc::spawn(
        "the daemon",
        &[
            "--serial".into(),
            name.display().to_string(),
            "--log-dir".into(),
            out.display().to_string(),
        ],
    );
    let (mut sim, sim_log) = Proc::spawn_watched(
        "the simulator",
        &[
            "sim".into(),
            log.display().to_string(),
            "--once".into(),
            "--serial".into(),
            b.path.display().to_string(),
            "--link-rate".into(),
            "28600".into(),
        ],
    );
    // Unplug a second into the 4 s stream: the daemon's side of the line goes away.
    std::thread::sleep(Duration::from_millis(1000));
    cut.store(true, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(50));
    unsafe {
        libc::close(a.master);
        libc::close(a._slave);
    }
    // Plugged back in: a new device behind the same name.
    std::thread::sleep(Duration::from_millis(300));
    let a2 = open_pty();
    std::fs::remove_file(&name).unwrap();
    std::os::unix::fs::symlink(&a2.path, &name).unwrap();
    relay(a2.master, b.master);
    relay(b.master, a2.master);
    stop_once_all_was_sent(&mut daemon, &mut sim, &sim_log);
    let files = ulg_files(&out);
    assert!(!files.is_empty());
    let chunked = chunk_log(&std::fs::read(&log).unwrap(), 0).unwrap();
    let original = split_messages(&[chunked.stream, chunked.postflight].concat());
    let last = split_messages(&std::fs::read(files.last().unwrap()).unwrap());
    assert_eq!(
        last.last(),
        original.last(),
        "the end of the log arrived after the re-plug"
    );
    for f in &files {
        check_with_pyulog(f);
    }
}

/// `files` is one split holding `log`'s stream byte for byte, and pyulog reads it; then its
/// log directory goes.
fn assert_whole_log(log: &Path, files: &[PathBuf]) {
    assert_eq!(files.len(), 1, "{}: {files:?}", log.display());
    let got = std::fs::read(&files[0]).unwrap();
    // The stream, then the post-flight data the vehicle sent on our STOP.
    let chunked = chunk_log(&std::fs::read(log).unwrap(), 0).unwrap();
    let expected = [chunked.stream, chunked.postflight].concat();
    assert!(
        got == expected,
        "{}: the file differs from the stream",
        log.display()
    );
    check_with_pyulog(&files[0]);
    remove_log_dir(&files[0]);
}

/// Removes the log directory above a split (splits are read-only, their directory is not).
fn remove_log_dir(split: &Path) {
    let log_dir = split.parent().unwrap().parent().unwrap();
    std::fs::remove_dir_all(log_dir).unwrap();
}

/// Every session under `dir` is closed in its manifest, and the manifest agrees with the files:
/// each split listed exists, is closed and read-only, has the size and SHA-256 recorded, and is
/// whole messages; pyulog reads it.
fn check_sessions(dir: &Path) -> usize {
    use sha2::Digest;
    use std::os::unix::fs::PermissionsExt;
    let mut splits = 0;
    for session in std::fs::read_dir(dir).unwrap() {
        let session = session.unwrap().path();
        let m = ulog_recv::store::files::read_manifest(&session).unwrap();
        assert!(m.closed, "{}: manifest not closed", session.display());
        let on_disk = std::fs::read_dir(&session)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "ulg")
            })
            .count();
        assert_eq!(
            on_disk,
            m.splits.len(),
            "{}: files vs manifest",
            session.display()
        );
        for e in &m.splits {
            let path = session.join(&e.file);
            let bytes = std::fs::read(&path).unwrap();
            assert!(e.closed);
            assert_eq!(e.summary.bytes, bytes.len() as u64, "{}", path.display());
            let sha: String = sha2::Sha256::digest(&bytes)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            assert_eq!(
                e.sha256.as_deref(),
                Some(sha.as_str()),
                "{}",
                path.display()
            );
            assert_eq!(
                std::fs::metadata(&path).unwrap().permissions().mode() & 0o222,
                0,
                "{} is writable",
                path.display()
            );
            assert_eq!(
                ulog_recv::store::files::complete_prefix(&bytes),
                bytes.len()
            );
            check_with_pyulog(&path);
            splits += 1;
        }
    }
    splits
}

#[test]
fn after_kill_9_at_random_moments_every_file_parses_and_the_manifests_agree() {
    let dir = fresh_dir("kill9");
    let port = free_udp_port();
    let daemon_args = |port: u16| -> Vec<String> {
        vec![
            "--udp".into(),
            port.to_string(),
            "--log-dir".into(),
            dir.display().to_string(),
            "--split-duration".into(),
            "5".into(),
            "--fsync-interval".into(),
            "0.2".into(),
        ]
    };
    // A vehicle streaming a long flight the whole time.
    let mut sim = Proc::spawn(
        "the simulator",
        &[
            "sim".into(),
            "--synthetic".into(),
            "--duration".into(),
            "3000".into(),
            "--udp-connect".into(),
            format!("127.0.0.1:{port}"),
            "--link-rate".into(),
            "215000".into(),
        ],
    );
    let mut rng = fastrand::Rng::with_seed(9);
    for _ in 0..6 {
        let mut daemon = Proc::spawn("the daemon", &daemon_args(port));
        std::thread::sleep(Duration::from_millis(rng.u64(400..2500)));
        daemon.0.kill().unwrap(); // SIGKILL
        daemon.0.wait().unwrap();
    }
    // A last run repairs what the last kill left, then stops cleanly.
    let mut daemon = Proc::spawn("the daemon", &daemon_args(port));
    std::thread::sleep(Duration::from_millis(1500));
    assert!(daemon.terminate().success());
    drop(sim.0.kill());
    let splits = check_sessions(&dir);
    assert!(splits >= 7, "{splits} splits");
    // One session per daemon run, but none for a run killed before anything reached the disk.
    let sessions = std::fs::read_dir(&dir).unwrap().count();
    assert!((3..=7).contains(&sessions), "{sessions} sessions");
}

#[test]
fn sighup_rolls_to_a_new_standalone_split() {
    let dir = fresh_dir("sighup");
    let (rx, tx) = udp_links();
    let mut args = rx.clone();
    args.extend(["--log-dir".into(), dir.display().to_string()]);
    let mut daemon = Proc::spawn("the daemon", &args);
    let mut sim_args: Vec<String> = vec![
        "sim".into(),
        "--synthetic".into(),
        "--duration".into(),
        "60".into(),
        "--once".into(),
        "--link-rate".into(),
        "286000".into(),
    ];
    sim_args.extend(tx);
    let (mut sim, sim_log) = Proc::spawn_watched("the simulator", &sim_args);
    std::thread::sleep(Duration::from_millis(1200));
    unsafe { libc::kill(daemon.0.id() as i32, libc::SIGHUP) };
    stop_once_all_was_sent(&mut daemon, &mut sim, &sim_log);
    let files = ulg_files(&dir);
    assert_eq!(files.len(), 2, "{files:?}");
    let m = ulog_recv::store::files::read_manifest(files[0].parent().unwrap()).unwrap();
    assert_eq!(m.splits[0].summary.preamble_bytes, 0);
    assert!(
        m.splits[1].summary.preamble_bytes > 0,
        "the second split has its own preamble"
    );
    for f in &files {
        check_with_pyulog(f);
    }
    check_sessions(&dir);
}
