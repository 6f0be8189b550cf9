//! A fill cut by the power at each of its steps, on LazyFS: the amendment's write, its sync,
//! its rename, the manifest's update that names it. The fill run again after each cut goes
//! on from where the disk says it was: every dropout filled, the session read as one log
//! holds the original's samples exactly (pyulog, per topic instance), none twice, and the
//! splits are untouched.

use std::process::Command;
use std::time::Duration;

use serde_json::Value as Json;

use crate::common::lazyfs::{LazyFs, copy_dir};
use crate::common::procs::{BIN, Proc, free_udp_port, session_dirs, wait_for_line};
use crate::common::{self, json_output, sha256_file, venv_python};

const SYNTHETIC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/synthetic.ulg");

/// Where the power goes: LazyFS dies `before` (or after) the `op` on a path `regex` matches.
const STEPS: &[(bool, &str, &str)] = &[
    (true, "write", r"amend_0000\.ulg\.tmp"),
    (true, "fsync", r"amend_0000\.ulg\.tmp"),
    (true, "rename", r"amend_0000\.ulg\.tmp"),
    (false, "rename", r"amend_0000\.ulg\.tmp"),
    (true, "rename", r"manifest\.json\.tmp"),
    (false, "rename", r"manifest\.json\.tmp"),
];

#[test]
fn a_fill_cut_by_the_power_at_each_step_goes_on_and_fills_each_record_once() {
    let Some(py) = venv_python() else {
        return;
    };
    let Some(mut fs) = LazyFs::mount("fill-cut", &[]) else {
        return;
    };
    let logs = fs.mount.join("logs");
    let port = free_udp_port();
    // The vehicle: the synthetic flight over a fast link losing 5 % of its frames; it stays,
    // to serve its SD log to the fills.
    let (mut vehicle, vehicle_lines) = Proc::spawn_watched(
        "the simulator",
        &[
            "sim".into(),
            SYNTHETIC.into(),
            "--link-rate".into(),
            "1000000".into(),
            "--loss".into(),
            "0.05".into(),
            "--seed".into(),
            "5".into(),
            "--udp-connect".into(),
            format!("127.0.0.1:{port}"),
        ],
    );
    let mut daemon = Proc::spawn(
        "the daemon",
        &[
            "--udp".into(),
            format!("127.0.0.1:{port}"),
            "--no-socket".into(),
            "--log-dir".into(),
            logs.display().to_string(),
        ],
    );
    wait_for_line(
        &vehicle_lines,
        "whole log was sent",
        Duration::from_secs(60),
    );
    std::thread::sleep(Duration::from_millis(500));
    assert!(daemon.terminate().success());
    let sessions = session_dirs(&logs);
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    let name = sessions[0].file_name().unwrap().to_owned();
    let (session, on_disk) = (logs.join(&name), fs.root.join("logs").join(&name));
    // The recorded session, as the disk has it, kept aside: each cut starts from it.
    let pristine = fs.mount.parent().unwrap().join("pristine");
    let _ = std::fs::remove_dir_all(&pristine);
    copy_dir(&on_disk, &pristine);
    let splits_before: Vec<(String, String)> = ulog_recv::store::files::read_manifest(&pristine)
        .unwrap()
        .splits
        .iter()
        .map(|s| (s.file.clone(), s.sha256.clone().unwrap()))
        .collect();

    for &(before, op, regex) in STEPS {
        let step = format!(
            "{} {op} of {regex}",
            if before { "before" } else { "after" }
        );
        std::fs::remove_dir_all(&on_disk).unwrap();
        copy_dir(&pristine, &on_disk);
        fs.remount(&[]);
        fs.crash_at(before, op, regex);
        let mut cut = Proc::spawn(
            "the fill",
            &[
                "fill".into(),
                session.display().to_string(),
                "--udp".into(),
                port.to_string(),
            ],
        );
        let crashed = fs.wait_crashed(Duration::from_secs(120));
        let _ = cut.0.kill();
        let _ = cut.0.wait();
        assert!(crashed, "{step}: the fill never came to it");
        fs.remount(&[]);
        let named = ulog_recv::store::files::read_manifest(&session)
            .unwrap_or_else(|e| panic!("{step}: the manifest after the cut: {e}"))
            .amendments
            .len();
        eprintln!("{step}: after the cut the manifest names {named} amendments");
        // Only a cut after the manifest's rename leaves the amendment named: then the fill
        // is over, and the next has nothing to do.
        let over = !before && op == "rename" && regex.starts_with("manifest");
        assert_eq!(
            named,
            usize::from(over),
            "{step}: amendments named after the cut"
        );
        // Again, to its end: it goes on from what the disk holds.
        let report = json_output(Command::new(BIN).arg("fill").arg(&session).args([
            "--json",
            "--udp",
            &port.to_string(),
        ]));
        eprintln!("{step}: fill again: {report}");
        assert_eq!(report["unfilled"], Json::Array(vec![]), "{step}: {report}");
        if over {
            assert_eq!(
                report["already_filled"], report["dropouts"],
                "{step}: {report}"
            );
        }
        assert_eq!(
            report["filled"].as_u64().unwrap() + report["already_filled"].as_u64().unwrap(),
            report["dropouts"].as_u64().unwrap(),
            "{step}: {report}"
        );
        // The splits untouched.
        for (file, sha) in &splits_before {
            assert_eq!(
                &sha256_file(&session.join(file)),
                sha,
                "{step}: {file} changed"
            );
        }
        // The session as one log: the original's samples, each once.
        let merged = fs.mount.parent().unwrap().join("merged.ulg");
        let out = Command::new(BIN)
            .arg("export")
            .arg(&session)
            .arg("-o")
            .arg(&merged)
            .output()
            .unwrap();
        assert!(out.status.success(), "{step}: export: {out:?}");
        common::check_with_pyulog(&merged);
        let same = json_output(
            Command::new(&py)
                .arg(common::project().join("tests/same_samples.py"))
                .arg(&merged)
                .arg(SYNTHETIC),
        );
        assert_eq!(same["differ"], serde_json::json!({}), "{step}: {same}");
        assert_eq!(same["extra_in_a"], 0, "{step}: {same}");
    }
    let _ = vehicle.0.kill();
}
