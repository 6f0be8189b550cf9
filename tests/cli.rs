//! The `ulog-recv info` command, run as a user runs it.

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
