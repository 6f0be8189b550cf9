//! The `ulog-recv info` command, run as a user runs it (also into a pipe closed early).

use std::process::Command;

fn info(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ulog-recv"))
        .arg("info")
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn info_json_lists_datasets_dropouts_and_logged_messages() {
    let out = info(&["testdata/synthetic.ulg", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let datasets = v["datasets"].as_array().unwrap();
    let accel1 = datasets
        .iter()
        .find(|d| d["name"] == "sensor_accel" && d["multi_id"] == 1)
        .unwrap();
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string("testdata/synthetic.expected.json").unwrap())
            .unwrap();
    let pyulog_count = expected["datasets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == "sensor_accel" && d["multi_id"] == 1)
        .unwrap()["count"]
        .clone();
    assert_eq!(accel1["count"], pyulog_count);
    assert_eq!(v["dropouts"].as_array().unwrap().len(), 1);
    assert_eq!(v["logged_messages"].as_array().unwrap().len(), 5);
}

#[test]
fn info_text_and_clear_errors() {
    let out = info(&["testdata/synthetic.ulg"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("vehicle_attitude") && text.contains("Dropouts: 1"));

    let out = info(&["Cargo.toml"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a ULog stream"));
    let out = info(&["/nonexistent.ulg"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot open"));
}

/// README's first command: the demo receives a simulated flight over a lossy link, stores it
/// in splits, summarises it, and publishes it live (`tail` follows it while it runs).
#[test]
fn info_into_a_closed_pipe_ends_quietly() {
    // `ulog-recv info FILE | head -1`: the reader is gone before the writer is done.
    let (read_end, write_end) = std::io::pipe().unwrap();
    drop(read_end);
    for args in [
        &["testdata/synthetic.ulg"][..],
        &["testdata/synthetic.ulg", "--json"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_ulog-recv"))
            .arg("info")
            .args(args)
            .stdout(write_end.try_clone().unwrap())
            .output()
            .unwrap();
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "{args:?}: {:?} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn the_demo_receives_stores_summarises_and_publishes_a_flight() {
    use std::io::{BufRead, BufReader, Read};
    use std::process::Stdio;
    let dir = std::env::temp_dir().join(format!("ulog-recv-cli-demo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut demo = Command::new(env!("CARGO_BIN_EXE_ulog-recv"))
        .args([
            "demo",
            "--duration",
            "40",
            "--link-rate",
            "86000",
            "--log-dir",
        ])
        .arg(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(demo.stdout.take().unwrap());
    let mut seen = String::new();
    let socket = loop {
        let mut line = String::new();
        assert!(lines.read_line(&mut line).unwrap() > 0, "{seen}");
        seen.push_str(&line);
        if let Some(rest) = line.split("ulog-recv tail --socket ").nth(1) {
            break rest.split_whitespace().next().unwrap().to_owned();
        }
    };
    let tail = Command::new(env!("CARGO_BIN_EXE_ulog-recv"))
        .args([
            "tail",
            "--json",
            "-n",
            "5",
            "--socket",
            &socket,
            "vehicle_*",
        ])
        .output()
        .unwrap();
    let mut rest = String::new();
    lines.read_to_string(&mut rest).unwrap();
    assert!(demo.wait().unwrap().success());
    let out = seen + &rest;
    assert!(out.contains("received 1 logs"), "{out}");
    assert!(out.contains("split_0000.ulg"), "{out}");
    assert!(out.contains("$ ulog-recv info"), "{out}");
    assert!(
        tail.status.success(),
        "{}",
        String::from_utf8_lossy(&tail.stderr)
    );
    let data = String::from_utf8_lossy(&tail.stdout)
        .lines()
        .filter(|l| l.contains("\"type\":\"data\""))
        .count();
    assert_eq!(data, 5, "tail followed the demo");
    let _ = std::fs::remove_dir_all(&dir);
}
