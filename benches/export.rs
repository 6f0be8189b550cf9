//! Export throughput: each real log (and the synthetic one) exported in memory to each format
//! `ulog-recv export` writes (TIDE with each compression), and as Parquet tables to files in
//! the system's temporary directory (`--dataset`), in MB/s of ULog and as a ratio to
//! the MCAP export's time on the same log (MCAP also without the flight diagnostics, to show
//! what its `/diagnostics` costs), next to pyulog reading the same file (its
//! `ULog(path)`, parse only) in the same run: the ratio says how our export compares with the
//! time a Python user already spends just opening the log.
//!
//! Prints a table. Best of 5 runs for ours, of 3 for pyulog (from the project's `.venv`; without
//! it the column says so).
//!
//! Then a second table: the Parquet export as users run it, `ulog-recv export LOG --dataset
//! DIR`, beside Flight Review v2's converter (`ulog-convert LOG DIR`, from PX4/flight-review-rs,
//! which writes a Parquet file per topic too), both as processes writing to the temporary
//! directory: best of 5 wall times, and the peak RSS (`/usr/bin/time -f %M`). Ours syncs every
//! table and its folder before it ends, theirs nothing: a column also times theirs followed by
//! the syncs that would make its files as safe against a power cut (every file and folder it
//! wrote, 16 at a time). The converter is
//! `$FLIGHT_REVIEW_CONVERT`, else `~/.cache/ulog-recv/flight-review-rs/target/release/ulog-convert`
//! (`benches/flight-review-rs.sh` builds it there); without it the table says so.
//!
//! Then a third: the MCAP and Parquet exports of the previous release beside the current
//! code, both as processes (`ulog-recv export LOG -o F.mcap`, `--dataset DIR`), 15 rounds
//! taking turns (each first every other round), the ratio the median of the rounds' own: a
//! ratio below 1.0 is a regression, whatever the machine's noise between runs. The previous
//! release is `$PREVIOUS_RELEASE_BIN`, else the one `benches/previous-release.sh` builds in
//! `~/.cache/ulog-recv/previous-release/` (with the bench profile, as the current one).
//! The processes of the second and third tables are the binaries as shipped: stripped copies
//! (the bench profile keeps line tables for profilers, which slow a process's start).
//! Run: `cargo bench --bench export` (`EXPORT_TABLES=2,3` for only those tables).

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ulog_recv::export::ExportOptions;

#[path = "common/long_log.rs"]
mod long_log;
#[path = "common/peers.rs"]
mod peers;
use long_log::repeat_data;
use peers::{as_shipped, flight_review_convert, previous_release};

fn logs() -> Vec<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut logs: Vec<PathBuf> = std::fs::read_dir(root.join("../shared/testdata/ulog"))
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "ulg"))
                .collect()
        })
        .unwrap_or_else(|_| {
            eprintln!("WARNING: ../shared/testdata/ulog is missing: only the synthetic log");
            Vec::new()
        });
    logs.sort_by_key(|p| std::cmp::Reverse(std::fs::metadata(p).map_or(0, |m| m.len())));
    logs.push(root.join("testdata/synthetic.ulg"));
    logs
}

fn best(runs: usize, mut f: impl FnMut() -> u64) -> (Duration, u64) {
    let mut best = Duration::MAX;
    let mut out = 0;
    for _ in 0..runs {
        let t0 = Instant::now();
        out = black_box(f());
        best = best.min(t0.elapsed());
    }
    (best, out)
}

/// pyulog's best time to read `path`, if the project's virtualenv is there.
fn pyulog_seconds(path: &Path) -> Option<f64> {
    let py = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    let script = "import sys, time, pyulog\n\
                  best = min((lambda t: (pyulog.ULog(sys.argv[1]), time.perf_counter() - t)[1])(time.perf_counter()) for _ in range(3))\n\
                  print(best)";
    let out = std::process::Command::new(py)
        .args(["-c", script])
        .arg(path)
        .output()
        .ok()?;
    String::from_utf8(out.stdout).ok()?.trim().parse().ok()
}

fn main() {
    // e.g. EXPORT_TABLES=3 prints only the third table.
    let tables = std::env::var("EXPORT_TABLES").unwrap_or_else(|_| "1,2,3".into());
    let wanted = |n: &str| tables.split(',').any(|t| t.trim() == n);
    if wanted("1") {
        in_memory();
    }
    if wanted("2") {
        against_flight_review();
    }
    if wanted("3") {
        against_previous_release();
    }
}

/// The first table: each format exported in memory, and the Parquet tables to files.
fn in_memory() {
    println!(
        "| log | MB | format | MB/s of ULog | output MB | time / MCAP's | pyulog read s | export time / pyulog read |"
    );
    println!("|---|---:|---|---:|---:|---:|---:|---:|");
    for path in logs() {
        let bytes = std::fs::read(&path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let mb = bytes.len() as f64 / 1e6;
        let pyulog = pyulog_seconds(&path);
        type Writer = fn(
            &[u8],
            &ExportOptions,
            &mut std::io::Cursor<Vec<u8>>,
        )
            -> Result<ulog_recv::export::ExportStats, ulog_recv::export::ExportError>;
        use ulog_recv::export::tide::{Compression, write::write as tide};
        let formats: [(&str, Writer); 7] = [
            ("MCAP", |b, o, w| ulog_recv::export::mcap::write(b, o, w)),
            // What the flight diagnostics' `/diagnostics` channel costs the export.
            ("MCAP, --diagnostics none", |b, o, w| {
                let without = ExportOptions {
                    diagnostics: ulog_recv::diagnose::Selection::NONE,
                    ..o.clone()
                };
                ulog_recv::export::mcap::write(b, &without, w)
            }),
            ("bag 2.0", |b, o, w| ulog_recv::export::bag::write(b, o, w)),
            ("bag 1.2", |b, o, w| {
                ulog_recv::export::bag::write_v12(b, o, w)
            }),
            ("TIDE gzip", |b, o, w| tide(b, o, Compression::Gzip, w)),
            ("TIDE bzip2", |b, o, w| tide(b, o, Compression::Bzip2, w)),
            ("TIDE none", |b, o, w| tide(b, o, Compression::None, w)),
        ];
        let mut mcap_seconds = None;
        for (format, write) in formats {
            let (t, size) = best(5, || {
                let mut out = std::io::Cursor::new(Vec::new());
                write(&bytes, &ExportOptions::default(), &mut out).unwrap();
                out.into_inner().len() as u64
            });
            let mcap = *mcap_seconds.get_or_insert(t.as_secs_f64());
            print_row(&name, mb, format, t, size, mcap, pyulog);
        }
        // The flight as Parquet tables, written to files (each synced and renamed, as the
        // command writes them).
        let root =
            std::env::temp_dir().join(format!("ulog-recv-bench-dataset-{}", std::process::id()));
        let identity = ulog_recv::export::dataset::FlightIdentity {
            flight_id: "bench".into(),
            vehicle_uid: "sys1".into(),
            flight_date_days: 20_000,
            utc_offset_us: None,
            log_start_us: None,
        };
        let (t, size) = best(5, || {
            let tables = ulog_recv::export::dataset::write_dataset(
                bytes.as_slice(),
                &ExportOptions::default(),
                identity.clone(),
                &Default::default(),
                &root,
            )
            .unwrap();
            tables
                .iter()
                .map(|t| std::fs::metadata(root.join(&t.key)).unwrap().len())
                .sum()
        });
        let _ = std::fs::remove_dir_all(&root);
        let mcap = mcap_seconds.expect("MCAP measured first");
        print_row(&name, mb, "Parquet tables", t, size, mcap, pyulog);
    }
}

/// One process's run: its wall time, its peak RSS (KB) and where it wrote.
struct Run {
    took: Duration,
    peak_rss_kb: u64,
    output: PathBuf,
}

/// `command` followed by a new output under `outs` (a folder, or an `.mcap` file), run to its
/// end, its wall time and peak RSS measured by `/usr/bin/time`. The folders are left for the
/// caller to remove once the whole table is measured: ext4 without a journal (as on these
/// machines) passes over the inodes freed in the last 30 s when it allocates one, so
/// removing a run's hundreds of folders just before the next run would time that search
/// rather than the export.
fn run_once(outs: &Path, command: &[&std::ffi::OsStr], mcap: bool) -> Run {
    std::fs::create_dir_all(outs).unwrap();
    let extension = if mcap { ".mcap" } else { "" };
    let output = outs.join(format!("run-{}{extension}", fastrand::u64(..)));
    let t0 = Instant::now();
    let result = std::process::Command::new("/usr/bin/time")
        .args(["-f", "%M"])
        .args(command)
        .arg(&output)
        .output()
        .expect("/usr/bin/time runs");
    let took = t0.elapsed();
    assert!(
        result.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&result.stderr)
    );
    let said = String::from_utf8_lossy(&result.stderr);
    let kb = said
        .lines()
        .last()
        .and_then(|l| l.trim().parse::<u64>().ok());
    Run {
        took,
        peak_rss_kb: kb.expect("/usr/bin/time's %M"),
        output,
    }
}

/// Threads syncing a peer's output at once ([`sync_everything_under`]).
const SYNC_THREADS: usize = 16;

/// How long syncing every file and folder under `output` takes, [`SYNC_THREADS`] at a time
/// (so that their waits on the storage overlap, the cheapest way a writer has to make them
/// all durable without syncing the whole filesystem): what a peer that writes without
/// syncing would add to be as safe against a power cut as our export, which syncs each table
/// and its folder before it ends.
fn sync_everything_under(output: &Path) -> Duration {
    let mut paths = vec![output.to_owned()];
    let mut k = 0;
    while k < paths.len() {
        if paths[k].is_dir() {
            let entries = std::fs::read_dir(&paths[k]).unwrap();
            paths.extend(entries.map(|e| e.unwrap().path()));
        }
        k += 1;
    }
    let t0 = Instant::now();
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..SYNC_THREADS.min(paths.len()) {
            scope.spawn(|| {
                loop {
                    let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(path) = paths.get(k) else { break };
                    std::fs::File::open(path).unwrap().sync_all().unwrap();
                }
            });
        }
    });
    t0.elapsed()
}

/// The second table: `ulog-recv export --dataset` against Flight Review v2's converter.
fn against_flight_review() {
    println!();
    let Some(convert) = flight_review_convert() else {
        println!(
            "Flight Review v2's converter is not built (benches/flight-review-rs.sh): no comparison"
        );
        return;
    };
    println!(
        "| log | MB | ours MB/s | Flight Review v2 MB/s | their time / ours | theirs synced / ours | ours peak RSS MB | theirs | their RSS / ours |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    // The binary as shipped: the bench profile keeps line tables, which slow its start.
    let out = std::env::temp_dir().join(format!("ulog-recv-bench-vs-fr-{}", std::process::id()));
    let ours = as_shipped(std::path::Path::new(env!("CARGO_BIN_EXE_ulog-recv")), &out);
    let mut logs = logs();
    // A long flight: sample.ulg's data section 60 times (241 MB), where memory tells.
    let long =
        std::env::temp_dir().join(format!("ulog-recv-bench-long-{}.ulg", std::process::id()));
    if let Some(sample) = logs.iter().find(|p| p.ends_with("sample.ulg")) {
        let bytes = std::fs::read(sample).unwrap();
        std::fs::write(&long, repeat_data(&bytes, 60)).unwrap();
        logs.push(long.clone());
    }
    for path in logs {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let mb = std::fs::metadata(&path).unwrap().len() as f64 / 1e6;
        // Best of 5 each, taking turns (the machine's load drifts), with the largest RSS; theirs
        // also with its files synced once it has ended (ours syncs before it ends).
        let (mut t_ours, mut rss_ours) = (Duration::MAX, 0);
        let (mut t_fr, mut t_fr_synced, mut rss_fr) = (Duration::MAX, Duration::MAX, 0);
        for _ in 0..5 {
            let ours = [
                ours.as_os_str(),
                "export".as_ref(),
                path.as_os_str(),
                "--dataset".as_ref(),
            ];
            let run = run_once(&out, &ours, false);
            (t_ours, rss_ours) = (t_ours.min(run.took), rss_ours.max(run.peak_rss_kb));
            let run = run_once(&out, &[convert.as_os_str(), path.as_os_str()], false);
            let synced = run.took + sync_everything_under(&run.output);
            (t_fr, rss_fr) = (t_fr.min(run.took), rss_fr.max(run.peak_rss_kb));
            t_fr_synced = t_fr_synced.min(synced);
        }
        println!(
            "| {name} | {mb:.2} | {:.0} | {:.0} | {:.2} | {:.2} | {:.1} | {:.1} | {:.2} |",
            mb / t_ours.as_secs_f64(),
            mb / t_fr.as_secs_f64(),
            t_fr.as_secs_f64() / t_ours.as_secs_f64(),
            t_fr_synced.as_secs_f64() / t_ours.as_secs_f64(),
            rss_ours as f64 / 1e3,
            rss_fr as f64 / 1e3,
            rss_fr as f64 / rss_ours as f64,
        );
    }
    let _ = std::fs::remove_file(&long);
    let _ = std::fs::remove_dir_all(&out);
}

/// One row of the table: `format`'s best time `t` for a log of `mb` MB, its output's `size`,
/// beside MCAP's and pyulog's seconds.
fn print_row(
    name: &str,
    mb: f64,
    format: &str,
    t: Duration,
    size: u64,
    mcap: f64,
    pyulog: Option<f64>,
) {
    println!(
        "| {name} | {mb:.2} | {format} | {:.0} | {:.2} | {:.2} | {} | {} |",
        mb / t.as_secs_f64(),
        size as f64 / 1e6,
        t.as_secs_f64() / mcap,
        pyulog.map_or("no .venv".to_owned(), |s| format!("{s:.3}")),
        pyulog.map_or("-".to_owned(), |s| format!("{:.3}", t.as_secs_f64() / s)),
    );
}

/// Runs of each export in the third table: a process on a small log takes a few ms, where
/// the machine's noise is as large as the differences looked for.
const PREVIOUS_ROUNDS: usize = 15;

/// The third table: the previous release's MCAP and Parquet exports against the current ones.
fn against_previous_release() {
    println!();
    let Some((previous, commit)) = previous_release() else {
        println!("The previous release is not built (benches/previous-release.sh): no comparison");
        return;
    };
    println!(
        "Beside the previous release ({commit}), as processes, {PREVIOUS_ROUNDS} rounds taking \
         turns: the best MB/s of each, and the median of the rounds' ratios (each round's two \
         runs a few ms apart see the same machine, where the best of each may not):\n"
    );
    println!(
        "| log | MB | export | current MB/s (best) | previous MB/s (best) | previous time / current (median) |"
    );
    println!("|---|---:|---|---:|---:|---:|");
    // Both as shipped: the bench profile keeps line tables, which slow a start.
    let out = std::env::temp_dir().join(format!("ulog-recv-bench-vs-prev-{}", std::process::id()));
    let current = as_shipped(std::path::Path::new(env!("CARGO_BIN_EXE_ulog-recv")), &out);
    let previous = as_shipped(&previous, &out);
    for path in logs() {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let mb = std::fs::metadata(&path).unwrap().len() as f64 / 1e6;
        for (export, flag) in [("MCAP", "-o"), ("Parquet tables", "--dataset")] {
            let command = |bin: &PathBuf| -> Vec<std::ffi::OsString> {
                vec![
                    bin.clone().into(),
                    "export".into(),
                    path.clone().into(),
                    flag.into(),
                ]
            };
            let (mut t_now, mut t_before) = (Duration::MAX, Duration::MAX);
            let mut ratios = Vec::with_capacity(PREVIOUS_ROUNDS);
            let time = |bin: &PathBuf| {
                let args = command(bin);
                let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
                run_once(&out, &args, export == "MCAP").took
            };
            for round in 0..PREVIOUS_ROUNDS {
                // Each goes first every other round: the second of two runs may find the
                // machine in another state.
                let (now, before) = match round % 2 {
                    0 => (time(&current), time(&previous)),
                    _ => {
                        let before = time(&previous);
                        (time(&current), before)
                    }
                };
                (t_now, t_before) = (t_now.min(now), t_before.min(before));
                ratios.push(before.as_secs_f64() / now.as_secs_f64());
            }
            ratios.sort_by(f64::total_cmp);
            println!(
                "| {name} | {mb:.2} | {export} | {:.0} | {:.0} | {:.2} |",
                mb / t_now.as_secs_f64(),
                mb / t_before.as_secs_f64(),
                ratios[ratios.len() / 2],
            );
        }
    }
    let _ = std::fs::remove_dir_all(&out);
}
