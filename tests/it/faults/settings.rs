//! Nonsense values for every size, duration and interval option, refused at start and on
//! SIGHUP naming the option; `--socket` at a regular file, a directory or a live socket:
//! nothing there is removed.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::forward_lines;
use crate::common::procs::{BIN, Proc, free_udp_port, fresh_dir, wait_for_line};

/// The daemon's stderr when started with `args` (it must fail at once).
fn refused_at_start(args: &[&str]) -> String {
    let out = Command::new(BIN)
        .args(["--udp", &free_udp_port().to_string(), "--log-dir"])
        .arg(fresh_dir("bad-values"))
        .args(args)
        .output()
        .unwrap();
    assert!(!out.status.success(), "{args:?} was taken");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn nonsense_values_are_refused_at_start_and_on_reload_naming_the_option() {
    let cases: &[(&str, &[&str])] = &[
        (
            "split-size",
            &["64", "512K", "0M", "-5M", "nanM", "2T", "big"],
        ),
        ("split-duration", &["nan", "-5", "inf", "0", "1e20"]),
        (
            "fsync-interval",
            &["nan", "-1", "1e20", "0", "inf", "0.001"],
        ),
        ("max-total", &["20", "0G", "nanG"]),
        ("min-free", &["1", "-1G"]),
        ("client-queue", &["4096", "1K", "100G"]),
        ("store-queue", &["32", "10G"]),
    ];
    let dir = fresh_dir("bad-config");
    std::fs::create_dir_all(&dir).unwrap();
    for (option, values) in cases {
        for value in *values {
            // On the command line: clap names the option and the value.
            let err = refused_at_start(&[&format!("--{option}={value}")]);
            assert!(
                err.contains(&format!("--{option}")) && err.contains(value),
                "--{option} {value}: {err}"
            );
            // In the config file: the error names the key.
            let config = dir.join("bad.toml");
            std::fs::write(&config, format!("{option} = \"{value}\"\n")).unwrap();
            let out = Command::new(BIN)
                .arg("--config")
                .arg(&config)
                .arg("--check-config")
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{option} = {value} was taken");
            assert!(err.contains(option) && err.contains(value), "{err}");
        }
    }
    // On SIGHUP: each bad value is refused, the running configuration stays, the daemon
    // runs on; then a good one applies.
    let port = free_udp_port();
    let config = dir.join("ulog-recv.toml");
    let base = format!(
        "udp = {port}\nno-socket = true\nlog-dir = \"{}\"\n",
        dir.join("logs").display()
    );
    std::fs::write(&config, &base).unwrap();
    let mut daemon = Proc(
        Command::new(BIN)
            .arg("--config")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
        "the daemon",
    );
    let log = forward_lines(daemon.0.stderr.take().unwrap());
    wait_for_line(&log, "ulog-recv", Duration::from_secs(5));
    for (option, values) in cases {
        let value = values[0];
        std::fs::write(&config, format!("{base}{option} = \"{value}\"\n")).unwrap();
        unsafe { libc::kill(daemon.0.id() as i32, libc::SIGHUP) };
        let said = wait_for_line(&log, "config not reloaded", Duration::from_secs(5));
        assert!(said.contains(option) && said.contains(value), "{said}");
        assert!(daemon.0.try_wait().unwrap().is_none(), "the daemon runs on");
    }
    std::fs::write(&config, format!("{base}fsync-interval = 0.5\n")).unwrap();
    unsafe { libc::kill(daemon.0.id() as i32, libc::SIGHUP) };
    wait_for_line(&log, "config reloaded from", Duration::from_secs(5));
    assert!(daemon.terminate().success());
}

#[test]
fn the_socket_path_never_loses_what_is_there() {
    let dir = fresh_dir("socket-path");
    std::fs::create_dir_all(dir.join("a directory")).unwrap();
    std::fs::write(dir.join("a file"), "precious").unwrap();
    for what in ["a file", "a directory"] {
        let path = dir.join(what);
        let err = refused_at_start(&["--socket", path.to_str().unwrap()]);
        assert!(err.contains("is not a socket"), "{err}");
        assert!(path.exists());
    }
    assert_eq!(
        std::fs::read_to_string(dir.join("a file")).unwrap(),
        "precious"
    );
    // A live socket of another daemon: its own, untouched.
    let socket = dir.join("live.sock");
    let mut first = Proc::spawn(
        "the first daemon",
        &[
            "--udp".into(),
            free_udp_port().to_string(),
            "--socket".into(),
            socket.display().to_string(),
            "--log-dir".into(),
            dir.join("logs").display().to_string(),
        ],
    );
    let t0 = Instant::now();
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        assert!(t0.elapsed() < Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(20));
    }
    let err = refused_at_start(&["--socket", socket.to_str().unwrap()]);
    assert!(err.contains("already serves"), "{err}");
    assert!(std::os::unix::net::UnixStream::connect(&socket).is_ok());
    assert!(first.terminate().success());
    assert!(!socket.exists(), "the first daemon removed its own socket");
}
