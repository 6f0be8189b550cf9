//! The DataFlash engine and the store's `.bin` splits against ArduPilot's own logs
//! (`../shared/testdata/bin/`, written by ArduCopter's logger): the framer takes every
//! message of them in pieces of any size, the splitter's splits each open alone in pymavlink's
//! DFReader with nothing in them the log does not hold, and a split a crash left open (torn
//! in a message, zeros after it) is cut back to its last whole message at the next start and
//! entered in its manifest, the session closed. Streamed by the simulated ArduPilot
//! (`ulog-recv sim FILE.bin`) to the daemon through a lossy, reordering link and an outage
//! longer than the vehicle's patience, each log comes out message for message, read by
//! pymavlink on both sides.

use crate::common;

use std::time::{Duration, SystemTime};

use common::ardupilot::{ardupilot_logs, compare, replay};
use common::procs::{files_with_extension, fresh_dir, session_dirs};
use ulog_recv::autopilot::LogFormat;
use ulog_recv::dataflash::{BinSummaryBuilder, Framer};
use ulog_recv::store::{LogStore, SplitPolicy, StoreOptions};

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
    let recovered =
        ulog_recv::store::files::recover(&dir, ulog_recv::store::files::this_boot().as_deref());
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
    // The manifest never listed the splits begun after the session (no sync round came):
    // each one's preamble was found at start beside the split before it, so that without
    // their preambles the splits are the log as far as it was written.
    let mut joined = Vec::new();
    for (k, s) in manifest.splits.iter().enumerate() {
        let file = std::fs::read(session.join(&s.file)).unwrap();
        assert!(
            k == 0 || s.summary.preamble_bytes > 0,
            "{}: no preamble",
            s.file
        );
        joined.extend_from_slice(&file[s.summary.preamble_bytes as usize..]);
    }
    assert!(joined.len() > cut - 4000, "{} of {cut} bytes", joined.len());
    assert!(
        bytes.starts_with(&joined),
        "the splits without preambles are not the log"
    );
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
    // The commands that read ULog (and the exports to ROS bags and TIDE) refuse the session
    // and its splits, naming what they are, and write nothing; `info` reads them.
    let out_file = dir.join("flight.bag");
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
    ] {
        let out = std::process::Command::new(common::procs::BIN)
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        let said = match args[0] {
            "export" => "is an ArduPilot flight: it exports to NAME.mcap or NAME.bin, or as tables",
            _ => "is an ArduPilot DataFlash log",
        };
        assert!(err.contains(said), "{args:?}: {err}");
    }
    assert!(!out_file.exists());
    let info = common::procs::run_ok(&["info", &session_arg]);
    assert!(info.contains("ArduPilot"), "{info}");
}

#[test]
fn real_logs_streamed_through_loss_reordering_and_an_outage_come_out_message_for_message() {
    let Some(logs) = ardupilot_logs() else { return };
    let Some(py) = common::venv_python() else {
        return;
    };
    let lossy = [
        "--loss",
        "0.02",
        "--reorder",
        "0.02",
        "--duplicate",
        "0.01",
        "--uplink-loss",
        "0.1",
    ];
    for log in &logs {
        let name = log.file_stem().unwrap().to_str().unwrap();
        // The hover log (126 s, 32 s played) also loses its link for 11 s from 17 s on:
        // past the vehicle's 10 s, it drops the daemon and starts its stream again.
        let outage = name == "sitl_copter_hover";
        let mut impairments = lossy.to_vec();
        if outage {
            impairments.extend(["--outage-every-ms", "17000", "--outage-ms", "11000"]);
        }
        let (splits, counters) = replay(log, name, &impairments);
        let report = compare(&py, log, &splits);
        let mut brief = report.clone();
        brief.as_object_mut().unwrap().remove("windows");
        eprintln!("{name}: {brief}\n{counters}");
        assert!(counters["resends"].as_u64().unwrap() > 0, "{counters}");
        assert!(
            report["card_in_window"].as_u64().unwrap() > 20_000,
            "{brief}"
        );
        assert_eq!(report["unexplained_invented"], 0, "{brief}");
        assert_eq!(report["unexplained_missing"], 0, "{brief}");
        // The outage made the vehicle drop the daemon once; each stream after the first was
        // begun by a START after that, or after a STOP of a stream found in its middle (its
        // block 0 lost).
        let timeouts = u64::from(outage);
        assert_eq!(counters["client_timeouts"], timeouts, "{counters}");
        let (starts, stops) = (counters["starts"].as_u64(), counters["stops"].as_u64());
        assert_eq!(starts, Some(1 + timeouts + stops.unwrap()), "{counters}");
        // One mark as long as the outage for each time the vehicle dropped the daemon, and
        // short ones before it: blocks missing behind later ones when the link went, which
        // the vehicle never sent again (it frees them when it drops a client). Loss can
        // leave more than one such gap among the blocks in flight, but together they span
        // well under a second; a link that never went leaves no mark at all.
        let marks: Vec<u64> = report["mark_ms"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m.as_u64().expect("each mark says how long"))
            .collect();
        let long = marks.iter().filter(|&&ms| ms >= 40_000).count() as u64;
        assert_eq!(long, timeouts, "{brief}");
        assert!(
            marks.iter().all(|ms| !(1_000..40_000).contains(ms)),
            "{brief}"
        );
        let short_ms: u64 = marks.iter().filter(|&&ms| ms < 1_000).sum();
        assert!(short_ms < 1_000, "{brief}");
        assert!(timeouts > 0 || marks.is_empty(), "{brief}");
    }
}

/// Each simulated autopilot refuses the other's options, saying which they are for.
#[test]
fn the_simulator_refuses_options_of_the_other_autopilot() {
    let Some(logs) = ardupilot_logs() else { return };
    let ulg = common::synthetic_logs()
        .into_iter()
        .next()
        .expect("a synthetic log");
    let refusals = [
        (&logs[0], "--arm-after", "are for a simulated PX4 (a .ulg)"),
        (
            &ulg,
            "--speed",
            "--speed is for a simulated ArduPilot (a .bin)",
        ),
    ];
    for (log, option, says) in refusals {
        let out = std::process::Command::new(common::procs::BIN)
            .arg("sim")
            .arg(log)
            .args([option, "2", "--udp-connect", "127.0.0.1:9", "--once"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{option}: {stderr}");
        assert!(stderr.contains(says), "{option}: {stderr}");
    }
}
