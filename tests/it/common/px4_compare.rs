//! Holding what the daemon wrote against PX4's own SD log of the same boot, both read by
//! pyulog (`tests/px4_compare.py`): samples matched by topic, instance and timestamp.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value as Json;

/// `tests/px4_compare.py ARGS`: its report.
pub fn px4_compare(py: &Path, args: &[&std::ffi::OsStr]) -> Json {
    super::json_output(
        Command::new(py)
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/px4_compare.py"))
            .args(args),
    )
}

/// A report as a failure shows it: its long lists (each dropout, each gap) as their lengths,
/// so that what went wrong (missing_examples, first_missing) is never cut from CI's output.
pub fn brief(report: &Json) -> Json {
    let mut shown = report.clone();
    for key in ["dropouts", "sd_gaps_ms"] {
        if let Some(list) = report[key].as_array() {
            shown[key] = format!("({} entries)", list.len()).into();
        }
    }
    shown
}

/// The session exported as one log, `out`.
pub fn export_session(session: &Path, out: &Path) -> PathBuf {
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    let done = Command::new(super::procs::BIN)
        .arg("export")
        .arg(session)
        .arg("-o")
        .arg(out)
        .output()
        .unwrap();
    assert!(
        done.status.success(),
        "export: {}",
        String::from_utf8_lossy(&done.stderr)
    );
    out.to_path_buf()
}

/// Holds a filled session, exported as one log, against PX4's log `sd` as far as it was
/// written when the fill read it (its first `seen_len` bytes): every sample PX4 had logged from the
/// stream's start (the header's time, so the head counts) to its last is in it, none
/// invented, none twice, every value equal. (PX4 logs a slow topic's sample up to a second
/// or two after its time, and the SITL's clock runs behind the wall's under load: a sample
/// stamped before the stream's end may reach the card after the fill read it.)
///
/// With `sent` (the stream PX4 put on the wire, [`Relay::finish`](super::px4::Relay::finish)),
/// a sample PX4 never sent is not required: its stream's rate limiter drops samples without
/// a sequence gap, so nothing tells the receiver, or its fill, that they are missing. Under
/// load that is a handful in a flight; more fails.
pub fn check_whole(
    py: &Path,
    sd: &Path,
    seen_len: usize,
    merged: &Path,
    sent: Option<&Path>,
    what: &str,
) -> Json {
    let whole = std::fs::read(sd).unwrap();
    assert!(whole.len() >= seen_len, "{what}: PX4's log shrank");
    let seen = merged.with_extension("sd-seen.ulg");
    std::fs::write(&seen, &whole[..seen_len]).unwrap();
    let mut args: Vec<&std::ffi::OsStr> = Vec::new();
    if let Some(sent) = sent {
        args.extend(["--sent".as_ref(), sent.as_os_str()]);
    }
    args.extend([
        "--from-start".as_ref(),
        seen.as_os_str(),
        merged.as_os_str(),
    ]);
    let report = px4_compare(py, &args);
    let shown = brief(&report);
    let sd_samples = report["sd_samples"].as_u64().unwrap();
    let matched = report["matched"].as_u64().unwrap();
    eprintln!(
        "{what}: {matched} of {sd_samples} samples of PX4's log from the stream's start \
         ({:.3} %): {shown}",
        100.0 * matched as f64 / sd_samples as f64
    );
    assert!(sd_samples > 5_000, "{what}: {shown}");
    let not_sent = report["not_sent"].as_u64().unwrap();
    assert!(
        not_sent <= sd_samples / 1000,
        "{what}: PX4 left out more than a handful: {shown}"
    );
    if report["postflight"] == true || matched + not_sent == sd_samples {
        assert_eq!(matched + not_sent, sd_samples, "{what}: not whole: {shown}");
    } else {
        // No STOP: where the stream ended is not known, and the fill took the SD log's
        // records to its end as it was then; a slow topic's sample stamped before the
        // window's end can be written up to TAIL_LAG_US after it, after that end. Only
        // those may be missing.
        let end = report["window"][1].as_u64().unwrap();
        let first_missing = report["first_missing"].as_u64().unwrap();
        assert!(
            first_missing + ulog_recv::fill::locate::TAIL_LAG_US >= end,
            "{what}: not whole: {shown}"
        );
    }
    assert_eq!(report["invented"], 0, "{what}: {shown}");
    assert_eq!(report["value_mismatches"], 0, "{what}: {shown}");
    let out = Command::new(py)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/same_samples.py"
        ))
        .arg(merged)
        .arg(sd)
        .output()
        .unwrap();
    let same: Json = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        same["extra_in_a"], 0,
        "{what}: a sample twice, or one PX4 never logged: {same}"
    );
    report
}
