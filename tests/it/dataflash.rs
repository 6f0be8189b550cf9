//! The DataFlash engine and the store's `.bin` splits against ArduPilot's own logs
//! (`../shared/testdata/bin/`, written by ArduCopter's logger): the framer takes every
//! message of them in pieces of any size, the splitter's splits each open alone in pymavlink's
//! DFReader with nothing in them the log does not hold, and a split a crash left open (torn
//! in a message, zeros after it) is cut back to its last whole message at the next start and
//! entered in its manifest, the session closed.

use crate::common;

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use common::ardupilot::compare;
use common::procs::{files_with_extension, fresh_dir, session_dirs};
use ulog_recv::autopilot::LogFormat;
use ulog_recv::dataflash::{BinSummaryBuilder, Framer};
use ulog_recv::store::{LogStore, SplitPolicy, StoreOptions};

/// ArduPilot's own logs, or None (said loudly; CI fails).
fn ardupilot_logs() -> Option<Vec<PathBuf>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/testdata/bin");
    let logs = files_with_extension(&dir, "bin");
    if logs.is_empty() {
        assert!(
            std::env::var_os("CI").is_none(),
            "{} holds no .bin: CI must run the ArduPilot log tests",
            dir.display()
        );
        eprintln!(
            "\n!!! SKIPPED: no ArduPilot logs at {} !!!\n",
            dir.display()
        );
        return None;
    }
    Some(logs)
}

#[test]
fn every_message_of_ardupilots_logs_is_framed_whole_from_pieces_of_any_size() {
    let Some(logs) = ardupilot_logs() else { return };
    for log in logs {
        let bytes = std::fs::read(&log).unwrap();
        let mut whole = Framer::new();
        let mut expected = 0u64;
        whole.push(&bytes, |_, _| expected += 1);
        whole.finish(|_, _| expected += 1);
        // The SITL was stopped while it wrote: its card log ends in a torn message.
        let torn = whole.stats().skipped_bytes as usize;
        assert!(torn < 200, "{}: {torn} bytes not whole", log.display());
        let bytes = &bytes[..bytes.len() - torn];
        // The logs' own READMEs count their messages (FMT records aside): over 78,000 each.
        assert!(expected > 78_000, "{}: {expected}", log.display());
        for piece in [1, 13, 200, 4096] {
            let mut f = Framer::new();
            let mut n = 0u64;
            let mut again = Vec::with_capacity(bytes.len());
            for p in bytes.chunks(piece) {
                f.push(p, |m, _| {
                    n += 1;
                    again.extend_from_slice(m);
                });
            }
            f.finish(|m, _| {
                n += 1;
                again.extend_from_slice(m);
            });
            assert_eq!(n, expected, "{} in pieces of {piece}", log.display());
            assert!(again == bytes, "{} in pieces of {piece}", log.display());
            assert_eq!(f.stats().skipped_bytes, 0);
        }
        let mut summary = BinSummaryBuilder::default();
        summary.push(bytes);
        let s = summary.finish();
        assert_eq!(s.messages, expected);
        assert!(s.vehicle.as_deref().unwrap().starts_with("ArduCopter"));
        assert!(s.parameters > 1000, "{}", s.parameters);
    }
}

#[test]
fn splits_of_a_real_log_open_alone_and_a_split_torn_by_a_crash_is_repaired_at_start() {
    let Some(logs) = ardupilot_logs() else { return };
    let Some(py) = common::venv_python() else {
        return;
    };
    let log = logs
        .iter()
        .find(|p| p.ends_with("sitl_copter_hover.bin"))
        .expect("the hover log");
    let bytes = std::fs::read(log).unwrap();
    let dir = fresh_dir("store");
    let mut options = StoreOptions::new(dir.clone());
    options.policy = SplitPolicy {
        max_duration_us: Some(20_000_000),
        ..SplitPolicy::unlimited()
    };
    options.fsync_interval = Duration::from_secs(3600);
    let mut store = LogStore::open(options.clone()).unwrap();
    let session = store
        .begin_log((1, 1), SystemTime::now(), LogFormat::DataFlash)
        .unwrap();
    // Three quarters of the flight, in the pieces the network loop hands over.
    let cut = bytes.len() * 3 / 4;
    for piece in bytes[..cut].chunks(4000) {
        store.write(piece).unwrap();
    }
    store.flush().unwrap();
    // A crash: the store is gone without closing the session; the open split ends torn
    // (half a message) with zeros after it, as a power cut leaves a file.
    drop(store);
    let open = files_with_extension(&session, "bin").pop().unwrap();
    let closed_before = files_with_extension(&session, "bin").len() - 1;
    let mut torn = std::fs::read(&open).unwrap();
    let whole_len = torn.len();
    torn.extend_from_slice(&[0xA3, 0x95, 0x80, 1, 2, 3]);
    torn.extend_from_slice(&[0; 512]);
    let mut perms = std::fs::metadata(&open).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    std::fs::set_permissions(&open, perms).unwrap();
    std::fs::write(&open, &torn).unwrap();
    // The next start repairs it.
    let recovered = ulog_recv::store::files::recover(&dir);
    assert_eq!(recovered.len(), 1, "{recovered:?}");
    assert_eq!(std::fs::metadata(&open).unwrap().len() as usize, whole_len);
    let manifest = ulog_recv::store::manifest::read_manifest(&session).unwrap();
    assert!(manifest.closed);
    assert_eq!(manifest.log_format, LogFormat::DataFlash);
    assert_eq!(manifest.splits.len(), closed_before + 1);
    assert!(
        manifest
            .splits
            .iter()
            .all(|s| s.closed && s.sha256.is_some())
    );
    assert!(closed_before >= 3, "{closed_before} closed splits");
    // Every split, the repaired one too, opens alone and holds only what the log holds; the
    // splits together hold every message of the log's first three quarters.
    let splits = files_with_extension(&session, "bin");
    for split in &splits {
        let alone = compare(&py, log, std::slice::from_ref(split));
        assert_eq!(alone["invented"], 0, "{}: {alone}", split.display());
        assert!(alone["received"].as_u64().unwrap() > 1000, "{alone}");
    }
    let together = compare(&py, log, &splits);
    assert_eq!(together["invented"], 0, "{together}");
    assert_eq!(together["missing"], 0, "{together}");
    assert_eq!(session_dirs(&dir).len(), 1);
    // The commands that read ULog refuse the session and its splits, naming what they are,
    // and write nothing; `info` reads them.
    let out_file = dir.join("flight.mcap");
    let session_arg = session.display().to_string();
    let split_arg = splits[0].display().to_string();
    let out_arg = out_file.display().to_string();
    for args in [
        vec!["export", &session_arg, "-o", &out_arg],
        vec!["export", &split_arg, "-o", &out_arg],
        vec![
            "snippet",
            &session_arg,
            "--from",
            "0",
            "--to",
            "10",
            "--output",
            &out_arg,
        ],
        vec!["fill", &session_arg],
    ] {
        let out = std::process::Command::new(common::procs::BIN)
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(
            err.contains("is an ArduPilot DataFlash log"),
            "{args:?}: {err}"
        );
    }
    assert!(!out_file.exists());
    let info = common::procs::run_ok(&["info", &session_arg]);
    assert!(info.contains("ArduPilot"), "{info}");
}
