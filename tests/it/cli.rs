//! The `ulog-recv info` command, run as a user runs it (also into a pipe closed early), and
//! every command that reads a log refusing what is not one.

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
    assert!(String::from_utf8_lossy(&out.stderr).contains("Cargo.toml is not a ULog log"));
    let out = info(&["/nonexistent.ulg"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read /nonexistent.ulg"));
}

/// A file that is not a ULog log (too short, junk, empty) or a directory that is not a
/// session: every command that reads a log refuses it, naming it and why, with a non-zero
/// exit, and writes nothing under its output's name.
#[test]
fn every_command_that_reads_a_log_refuses_what_is_not_one_and_writes_nothing() {
    let dir = std::env::temp_dir().join(format!("ulog-recv-not-a-log-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut random = vec![0u8; 100 * 1024];
    let mut rng = fastrand::Rng::with_seed(7);
    rng.fill(&mut random);
    random[0] = b'X'; // never the magic's first byte by chance
    let inputs: [(&str, Option<&[u8]>, &str); 4] = [
        (
            "five.ulg",
            Some(b"junk\n"),
            "does not begin with the ULog magic",
        ),
        (
            "random.ulg",
            Some(&random),
            "does not begin with the ULog magic",
        ),
        ("empty.ulg", Some(b""), "the file is empty"),
        ("plain-dir", None, "nor a log session"),
    ];
    let commands: [&[&str]; 8] = [
        &["info"],
        &["export", "-o", "OUT.mcap"],
        &["export", "-o", "OUT.bag"],
        &["export", "-o", "OUT.ulg"],
        &["snippet", "--from", "0", "--to", "10", "-o", "OUT.ulg"],
        &["upload", "--upload-to", "s3://flights/fleet"],
        &["fill", "--udp", "127.0.0.1:9", "--wait", "1"],
        &["sim", "--once", "--udp-connect", "127.0.0.1:9"],
    ];
    for (name, bytes, why) in inputs {
        let input = dir.join(name);
        match bytes {
            Some(b) => std::fs::write(&input, b).unwrap(),
            None => {
                std::fs::create_dir_all(&input).unwrap();
                std::fs::write(input.join("notes.txt"), "not a flight").unwrap();
            }
        }
        for command in commands {
            let out_dir = dir.join("out");
            std::fs::create_dir_all(&out_dir).unwrap();
            let args: Vec<String> = command
                .iter()
                .map(|a| match a.strip_prefix("OUT") {
                    Some(ext) => out_dir.join(format!("flight{ext}")).display().to_string(),
                    None => a.to_string(),
                })
                .collect();
            let out = Command::new(env!("CARGO_BIN_EXE_ulog-recv"))
                .args(&args[..1])
                .arg(&input)
                .args(&args[1..])
                .env("AWS_ACCESS_KEY_ID", "x")
                .env("AWS_SECRET_ACCESS_KEY", "y")
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            let what = format!("{command:?} on {name}");
            assert!(!out.status.success(), "{what}: exit 0, {stderr}");
            assert!(
                stderr.contains(&format!("{} is not a ULog log", input.display())),
                "{what}: {stderr}"
            );
            assert!(stderr.contains(why), "{what}: {stderr}");
            let written: Vec<_> = std::fs::read_dir(&out_dir)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert!(written.is_empty(), "{what}: wrote {written:?}");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A log cut mid-message is read as far as it goes, and says how much was cut.
#[test]
fn a_log_cut_mid_message_reads_what_it_has_and_says_how_much_was_cut() {
    let whole = std::fs::read("testdata/synthetic.ulg").unwrap();
    let path = std::env::temp_dir().join(format!("ulog-recv-cut-{}.ulg", std::process::id()));
    // Past the definitions, inside some message.
    std::fs::write(&path, &whole[..whole.len() / 2 + 3]).unwrap();
    let out = info(&[path.to_str().unwrap()]);
    std::fs::remove_file(&path).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let cut: u64 = text
        .split(" bytes truncated")
        .next()
        .and_then(|t| t.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no 'bytes truncated' in {text}"));
    assert!(cut > 0, "{text}");
    assert!(text.contains("vehicle_attitude"), "{text}");
}

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

/// README's first command: the demo receives a simulated flight over a lossy link, stores it
/// in splits, summarises it, and publishes it live (`tail` follows it while it runs).
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

/// `snippet` cuts a window from a .ulg file as from a session.
#[test]
fn a_window_is_cut_from_a_ulog_file() {
    let out_path =
        std::env::temp_dir().join(format!("ulog-recv-file-snippet-{}.ulg", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_ulog-recv"))
        .args([
            "snippet",
            "testdata/synthetic.ulg",
            "--from",
            "22",
            "--to",
            "25",
            "-o",
        ])
        .arg(&out_path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary = info(&[out_path.to_str().unwrap(), "--json"]);
    std::fs::remove_file(&out_path).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&summary.stdout).unwrap();
    assert_eq!(v["start_timestamp"], 22_000_000, "{v}");
    assert_eq!(v["last_timestamp"], 25_000_000, "{v}");
    // The file's appended data was cut inline: the snippet declares none.
    assert_eq!(v["incompat_flags"][0], 0, "{v}");
    assert_eq!(v["appended_offsets"], serde_json::json!([]), "{v}");
}
