//! An upload cut by the power, on LazyFS, against a real Garage: a 12 MB split going up in
//! 5 MiB parts (at 4 MB/s) while the power goes at the upload journal's write, sync or
//! rename, at a moment drawn from a printed seed, or at the `uploaded` mark. The daemon
//! started again goes on from what the disk's journal says: it sends exactly the parts the
//! journal lacks (none it has), the split is in the bucket once and byte for byte, the
//! manifest beside it, and no multipart upload is left open.

use std::time::{Duration, Instant};

use serde_json::Value as Json;

use crate::common::garage::{Garage, SECRET_KEY, credentials};
use crate::common::lazyfs::{LazyFs, copy_dir, fault_seed};
use crate::common::procs::{Proc, free_udp_port, session_dirs};
use crate::common::{self, sha256_file, venv_python};

/// Where the power goes: LazyFS dies `before` (or after) the `op` on a path `regex` matches.
const STEPS: &[(bool, &str, &str)] = &[
    (true, "write", r"upload\.json\.tmp"),
    (true, "fsync", r"upload\.json\.tmp"),
    (true, "rename", r"upload\.json\.tmp"),
    (false, "rename", r"upload\.json\.tmp"),
    (false, "rename", r"uploaded\.tmp"),
];

#[test]
fn an_upload_cut_by_the_power_goes_on_from_its_journal_each_part_once() {
    let seed = fault_seed("upload cuts");
    let mut rng = fastrand::Rng::with_seed(seed);
    let Some(py) = venv_python() else {
        return;
    };
    let garage = match Garage::start(crate::common::procs::fresh_dir("upload-cut-garage")) {
        Ok(g) => g,
        Err(e) => {
            assert!(std::env::var_os("CI").is_none(), "CI must run: {e}");
            eprintln!("\n!!! SKIPPED: {e} !!!\n");
            return;
        }
    };
    let Some(mut fs) = LazyFs::mount("upload-cut", &[]) else {
        return;
    };
    let creds = credentials(fs.mount.parent().unwrap(), SECRET_KEY);
    let logs = fs.mount.join("logs");
    // One split of about 12 MB, recorded whole (a clean stop syncs everything).
    let port = free_udp_port();
    let daemon_args = |extra: &[String]| {
        let mut args: Vec<String> = vec![
            "--udp".into(),
            format!("127.0.0.1:{port}"),
            "--no-socket".into(),
            "--log-dir".into(),
            logs.display().to_string(),
        ];
        args.extend_from_slice(extra);
        args
    };
    let mut daemon = Proc::spawn("the daemon", &daemon_args(&[]));
    let mut vehicle = Proc::spawn(
        "the simulator",
        &[
            "sim".into(),
            "--synthetic".into(),
            "--duration".into(),
            "1500".into(),
            "--once".into(),
            "--link-rate".into(),
            "3000000".into(),
            "--udp-connect".into(),
            format!("127.0.0.1:{port}"),
        ],
    );
    assert!(vehicle.wait(Duration::from_secs(120)).success());
    assert!(daemon.terminate().success());
    let sessions = session_dirs(&logs);
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    let name = sessions[0].file_name().unwrap().to_owned();
    let (session, on_disk) = (logs.join(&name), fs.root.join("logs").join(&name));
    let size = std::fs::metadata(session.join("split_0000.ulg"))
        .unwrap()
        .len();
    let parts = size.div_ceil(5 << 20);
    assert!(parts >= 3, "{size} bytes");
    let pristine = fs.mount.parent().unwrap().join("pristine");
    let _ = std::fs::remove_dir_all(&pristine);
    copy_dir(&on_disk, &pristine);

    for (k, &(before, op, regex)) in STEPS.iter().enumerate() {
        let step = format!(
            "{} {op} of {regex}",
            if before { "before" } else { "after" }
        );
        std::fs::remove_dir_all(&on_disk).unwrap();
        copy_dir(&pristine, &on_disk);
        fs.remount(&[]);
        let prefix = format!("cut{k}");
        let mut upload = garage.upload_args(&prefix, &creds);
        upload.extend(
            ["--upload-part-size", "5M", "--log-level", "ulog_recv=debug"].map(String::from),
        );
        let mut rated = upload.clone();
        rated.extend(["--upload-rate", "4M"].map(String::from));
        let mut cut = Proc::spawn("the daemon", &daemon_args(&rated));
        // Past the first part, for the journal's later updates (the mark comes at the end).
        let delay = if regex.starts_with("uploaded") {
            0
        } else {
            rng.u64(0..2500)
        };
        std::thread::sleep(Duration::from_millis(delay));
        fs.crash_at(before, op, regex);
        let crashed = fs.wait_crashed(Duration::from_secs(30));
        let _ = cut.0.kill();
        let _ = cut.0.wait();
        assert!(
            crashed,
            "seed {seed}, {step} after {delay} ms: the upload never came to it"
        );
        fs.remount(&[]);
        // What the disk's journal says went up.
        let journal: Option<Json> = std::fs::read(session.join("upload.json"))
            .ok()
            .map(|b| serde_json::from_slice(&b).unwrap());
        let recorded = journal.as_ref().map_or(0, |j| {
            let record = &j["objects"]["split_0000.ulg"];
            match record["state"].as_str() {
                Some("multipart") => record["parts"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|p| p.is_string())
                    .count() as u64,
                Some(_) => parts,
                None => 0,
            }
        });
        let marked = session.join("uploaded").exists();
        // Started again: it goes on from there.
        let (mut again, lines) = Proc::spawn_watched("the daemon", &daemon_args(&upload));
        let t0 = Instant::now();
        let mut sent_after = 0;
        if !marked {
            loop {
                let line = lines
                    .recv_timeout(Duration::from_secs(60).saturating_sub(t0.elapsed()))
                    .unwrap_or_else(|_| panic!("seed {seed}, {step}: not uploaded in 60 s"));
                sent_after += line.contains("part sent") as u64;
                if line.contains("session uploaded") {
                    break;
                }
            }
        } else {
            std::thread::sleep(Duration::from_secs(2));
        }
        assert!(again.terminate().success());
        eprintln!(
            "{step} after {delay} ms: {recorded} of {parts} parts in the journal on the disk, \
             {sent_after} sent after the restart"
        );
        if recorded < parts {
            assert_eq!(
                sent_after,
                parts - recorded,
                "seed {seed}, {step}: the restart sends the parts the journal lacks, only them"
            );
        } else {
            assert_eq!(sent_after, 0, "seed {seed}, {step}: nothing sent twice");
        }
        assert!(session.join("uploaded").exists(), "{step}: marked uploaded");
        // In the bucket: the split byte for byte, the manifest, nothing left open.
        let found = garage.objects(&py, &format!("{prefix}/"));
        let objects = found["objects"].as_object().unwrap();
        let split_key = objects
            .keys()
            .find(|k| k.ends_with("/split_0000.ulg"))
            .unwrap_or_else(|| panic!("{step}: no split in {found}"));
        assert_eq!(
            objects[split_key]["sha256"].as_str().unwrap(),
            sha256_file(&session.join("split_0000.ulg")),
            "seed {seed}, {step}"
        );
        assert!(
            objects.keys().any(|k| k.ends_with("/manifest.json")),
            "{step}: {found}"
        );
        assert_eq!(
            objects.len(),
            2,
            "{step}: the split and the manifest: {found}"
        );
        assert!(
            found["open_multipart"].as_array().unwrap().is_empty(),
            "seed {seed}, {step}: a multipart upload left open: {found}"
        );
        common::check_with_pyulog(&session.join("split_0000.ulg"));
    }
}
