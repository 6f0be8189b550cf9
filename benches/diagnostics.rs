//! The flight diagnostics offline, as users run them: `ulog-recv info --diagnostics LOG`
//! beside Flight Review v2's converter running its own analyzers on the same log
//! (`ulog-convert batch DIR --diagnostics --format json`, no conversion; DIR holds that log
//! alone), both as processes, taking turns: best of 7 wall times each, and their ratio. Each
//! real log, the synthetic one, a fault flight, and a long flight (sample.ulg's data 60 times
//! over). Both must find the same number of findings (the tests hold them equal finding by
//! finding); a row says so.
//!
//! The converter is `$FLIGHT_REVIEW_CONVERT`, else the one built in
//! `../shared/vendor/flight-review-rs/bin/`, else `~/.cache/ulog-recv/flight-review-rs/`
//! (`benches/flight-review-rs.sh`); without one the bench says so. Ours is timed as shipped:
//! a stripped copy (the bench profile keeps line tables for profilers, which slow its start).
//! Run: `cargo bench --bench diagnostics`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

#[path = "common/long_log.rs"]
mod long_log;
#[path = "common/peers.rs"]
#[allow(dead_code)]
mod peers;
use long_log::repeat_data;

/// The logs measured, as files in `dir`, each in a folder of its own.
fn logs(dir: &Path) -> Vec<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut sources: Vec<(String, Vec<u8>)> = Vec::new();
    let shared = root.join("../shared/testdata/ulog");
    match std::fs::read_dir(&shared) {
        Ok(d) => {
            let mut paths: Vec<PathBuf> = d
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "ulg"))
                .collect();
            paths.sort();
            for p in paths {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                sources.push((name, std::fs::read(&p).unwrap()));
            }
        }
        Err(_) => eprintln!(
            "WARNING: {} is missing: real logs not measured",
            shared.display()
        ),
    }
    sources.push((
        "synthetic.ulg".into(),
        std::fs::read(root.join("testdata/synthetic.ulg")).unwrap(),
    ));
    sources.push((
        "fault flight (motor).ulg".into(),
        ulog_recv::sim::faults::fault_flight(ulog_recv::sim::faults::FaultFlight {
            fault: ulog_recv::sim::faults::Fault::MotorDrop,
            armed: true,
            seed: 1,
            rc_lost_as_uint8: false,
        }),
    ));
    if let Some((_, sample)) = sources.iter().find(|(n, _)| n == "sample.ulg") {
        let long = repeat_data(sample, 60);
        sources.push(("sample.ulg x60.ulg".into(), long));
    }
    sources
        .into_iter()
        .enumerate()
        .map(|(k, (name, bytes))| {
            let folder = dir.join(format!("log{k}"));
            std::fs::create_dir_all(&folder).unwrap();
            let path = folder.join(name.replace(' ', "_"));
            std::fs::write(&path, bytes).unwrap();
            path
        })
        .collect()
}

/// Runs `command` to its end: its wall time and its stdout.
fn timed(command: &mut Command) -> (Duration, Vec<u8>) {
    let t0 = Instant::now();
    let out = command.output().expect("the command runs");
    let took = t0.elapsed();
    assert!(
        out.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (took, out.stdout)
}

/// Findings in a JSON text of either tool (one object, or one per line).
fn findings(stdout: &[u8]) -> usize {
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(stdout) {
        return v["diagnostics"].as_array().map_or(0, Vec::len);
    }
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|v| v["diagnostics"].as_array().map_or(0, Vec::len))
        .sum()
}

fn main() {
    let Some(convert) = peers::flight_review_convert() else {
        println!("Flight Review v2's converter is not built: no comparison");
        return;
    };
    let dir = std::env::temp_dir().join(format!("ulog-recv-bench-diag-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // The binary as shipped: the bench profile keeps line tables, which slow its start.
    let ours = peers::as_shipped(std::path::Path::new(env!("CARGO_BIN_EXE_ulog-recv")), &dir);
    println!(
        "| log | MB | ours ms | Flight Review v2 ms | their time / ours | ours MB/s | findings (ours, theirs) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---|");
    for path in logs(&dir) {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let mb = std::fs::metadata(&path).unwrap().len() as f64 / 1e6;
        let (mut t_ours, mut t_fr) = (Duration::MAX, Duration::MAX);
        let (mut n_ours, mut n_fr) = (0, 0);
        for _ in 0..7 {
            let (t, out) = timed(
                Command::new(&ours)
                    .args(["info", "--diagnostics", "--json"])
                    .arg(&path),
            );
            (t_ours, n_ours) = (t_ours.min(t), findings(&out));
            let (t, out) = timed(
                Command::new(&convert)
                    .args(["batch", "--diagnostics", "--format", "json"])
                    .arg(path.parent().unwrap()),
            );
            (t_fr, n_fr) = (t_fr.min(t), findings(&out));
        }
        println!(
            "| {name} | {mb:.2} | {:.1} | {:.1} | {:.2} | {:.0} | {n_ours}, {n_fr}{} |",
            t_ours.as_secs_f64() * 1e3,
            t_fr.as_secs_f64() * 1e3,
            t_fr.as_secs_f64() / t_ours.as_secs_f64(),
            mb / t_ours.as_secs_f64(),
            if n_ours == n_fr { "" } else { " (DIFFER)" }
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
