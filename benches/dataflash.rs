//! ArduPilot's log on the receiving side, on ArduPilot's own logs (`../shared/testdata/bin/`):
//!
//! - `receive`: the whole log cut into 200-byte `REMOTE_LOG_DATA_BLOCK` frames (the crate's
//!   framing), fed to the session as the datagrams the vehicle sends; the session checks and
//!   acks every block, frames and marks the DataFlash messages and hands the log bytes out
//!   (what the network loop does for each datagram, the store's thread aside). Its rate,
//!   against the fastest link an ArduPilot streams over (921600 baud: 92 KB/s).
//! - `decode`: every field of every message read (framed by its FMT, each value scaled as
//!   ArduPilot's tools show it: [`ulog_recv::dataflash::values`]), against the fastest
//!   published Rust DataFlash reader (the `ardupilot-binlog` crate, reading the same bytes
//!   into its entries) and pymavlink's `DFReader` reading every message of the same file, in
//!   the same run (DFReader from the project's `.venv`; without it that column says so).
//!   Both Rust readers must find the same number of messages.
//!
//! - `PX4 peer`: PX4's stream of its own largest log in `../shared/testdata/ulog/` (its chunks
//!   as the simulated PX4 sends them, acks answered, recorded once), fed to a session the same
//!   way: the receive rate of a PX4 stream in the same run, and ArduPilot's CPU time per MB
//!   as a share of PX4's.
//!
//! - `diagnose`: the flight diagnostics over the whole log's bytes (as `info --diagnostics`
//!   reads a `.bin`), against the same over PX4's largest real log (a `.ulg`) in the same
//!   run: time per MB as a share of the `.ulg`'s.
//!
//! - `mcap`: the flight exported as MCAP (`export -o F.mcap`, into memory), against the same
//!   export of PX4's largest real log in the same run: time per MB as a share of the
//!   `.ulg`'s.
//! - `tables`: the flight as the fleet's Parquet tables (`export --dataset`: every type's
//!   table, the tables beside, written and synced in a temporary folder), against the same
//!   export of PX4's largest real log in the same run: time per MB as a share of the
//!   `.ulg`'s, and time per row (a table's row is a sample, each with the flight's columns)
//!   as a share of the `.ulg`'s, as a MB of `.bin` holds more rows than a MB of `.ulg`.
//!
//! - `signed`: `receive` with MAVLink 2 signing, every block signed by the vehicle and
//!   checked by the session (its signature, and its timestamp against the stream's window
//!   of the last taken), against the same blocks unsigned in the same run: time per MB as a
//!   share of the unsigned.
//!
//! Best of 5 runs for ours (of 9 interleaved rounds for the tables), of 3 for DFReader.
//! Run: `cargo bench --bench dataflash`; `--` and section names (`receive`, `diagnose`,
//! `mcap`, `tables`, `signed`) run only those.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use mavlink::MavHeader;
use mavlink::dialects::ardupilotmega::{HEARTBEAT_DATA, MavAutopilot, MavMessage, MavType};
use ulog_recv::dataflash::Framer;
use ulog_recv::dataflash::values::fields;
use ulog_recv::diagnose::{BinDiagnosis, Selection, diagnose};
use ulog_recv::link::frames::encode;
use ulog_recv::link::log_block::{BLOCK_BYTES, LOG_COMPONENT, LogBlock, encode_block};
use ulog_recv::link::signing::{Signer, SigningKey};
use ulog_recv::link::{Event, Session, SessionConfig, SigningSetup};

/// The fastest serial link a flight controller's TELEM port runs at, bytes per second.
const FASTEST_LINK: f64 = 921_600.0 / 10.0;

fn logs() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/testdata/bin");
    let mut logs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "bin"))
                .collect()
        })
        .unwrap_or_default();
    logs.sort();
    if logs.is_empty() {
        eprintln!(
            "WARNING: no ArduPilot logs in {}: nothing to measure",
            dir.display()
        );
    }
    logs
}

fn best(runs: usize, mut f: impl FnMut()) -> Duration {
    (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .min()
        .unwrap()
}

/// The log as the vehicle's datagrams: one block frame each.
fn datagrams(log: &[u8]) -> Vec<Vec<u8>> {
    datagrams_signed(log, None)
}

/// The log as the vehicle's datagrams, each block signed by `signer` if any.
fn datagrams_signed(log: &[u8], mut signer: Option<&mut Signer>) -> Vec<Vec<u8>> {
    let header = MavHeader {
        system_id: 1,
        component_id: LOG_COMPONENT,
        sequence: 0,
    };
    let now = Instant::now();
    log.chunks(BLOCK_BYTES)
        .enumerate()
        .map(|(k, c)| {
            let mut block = LogBlock {
                target_system: 1,
                target_component: 155,
                seqno: k as u32,
                ..LogBlock::default()
            };
            block.data[..c.len()].copy_from_slice(c);
            let mut f = Vec::with_capacity(235);
            match signer.as_deref_mut() {
                Some(s) => s.sign_data(header, &block, now, &mut f),
                None => encode_block(header, &block, &mut f),
            }
            f
        })
        .collect()
}

/// Every datagram through a session that found an ArduPilot vehicle; the log bytes out.
fn receive(frames: &[Vec<u8>]) -> u64 {
    receive_signed(frames, None)
}

/// [`receive`], the vehicle's heartbeat signed by `vehicle` and the session given its key
/// when `vehicle` is there.
fn receive_signed(frames: &[Vec<u8>], vehicle: Option<&mut Signer>) -> u64 {
    let t0 = Instant::now();
    let config = SessionConfig {
        signing: vehicle.is_some().then(|| SigningSetup {
            key: bench_key(),
            link_id: 0,
            timestamp: SIGNING_START,
        }),
        ..SessionConfig::default()
    };
    let mut s = Session::new(config, t0);
    let mut hb = Vec::new();
    let heartbeat = MavMessage::HEARTBEAT(HEARTBEAT_DATA {
        autopilot: MavAutopilot::MAV_AUTOPILOT_ARDUPILOTMEGA,
        mavtype: MavType::MAV_TYPE_QUADROTOR,
        ..Default::default()
    });
    let header = MavHeader {
        system_id: 1,
        component_id: 1,
        sequence: 0,
    };
    match vehicle {
        Some(v) => v.sign(header, &heartbeat, t0, &mut hb),
        None => encode(header, &heartbeat, &mut hb),
    }
    s.handle_datagram(&hb, t0);
    let mut out = feed(&mut s, frames, t0);
    s.shutdown(t0);
    while let Some(e) = s.poll_event() {
        if let Event::LogBytes(b) = e {
            out += b.len() as u64;
        }
    }
    out
}

/// The signing benchmark's key.
fn bench_key() -> SigningKey {
    SigningKey::from_bytes([7; 32])
}

/// Where the signing benchmark's clocks start (2026).
const SIGNING_START: u64 = 35_000_000_000_000;

/// `signed`: receiving signed blocks against the same blocks unsigned, interleaved.
fn signed_section() {
    println!("\n| log | unsigned MB/s | signed MB/s | signed time per MB / unsigned |");
    println!("|---|---|---|---|");
    for path in logs() {
        let log = std::fs::read(&path).unwrap();
        let mb = log.len() as f64 / 1e6;
        let plain = datagrams(&log);
        let mut vehicle = Signer::new(bench_key(), 0, SIGNING_START, Instant::now());
        let signed = datagrams_signed(&log, Some(&mut vehicle));
        let (mut t_plain, mut t_signed) = (Duration::MAX, Duration::MAX);
        for _ in 0..5 {
            t_plain = t_plain.min(best(1, || {
                assert!(receive(&plain) as usize + 200 >= log.len());
            }));
            t_signed = t_signed.min(best(1, || {
                // The heartbeat comes from component 1: a stream of its own.
                let mut v = Signer::new(bench_key(), 0, SIGNING_START, Instant::now());
                let out = receive_signed(&signed, Some(&mut v));
                assert!(out as usize + 200 >= log.len(), "{out} bytes out");
            }));
        }
        println!(
            "| {} | {:.0} | {:.0} | {:.2} |",
            path.file_name().unwrap().to_string_lossy(),
            mb / t_plain.as_secs_f64(),
            mb / t_signed.as_secs_f64(),
            t_signed.as_secs_f64() / t_plain.as_secs_f64(),
        );
    }
}

/// The largest real ULog log in `../shared/testdata/ulog/`.
fn largest_ulog() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/testdata/ulog");
    std::fs::read_dir(&dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "ulg"))
        .max_by_key(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
}

/// Seconds per MB of exporting `log` (a `.ulg` or a `.bin`) as MCAP into memory (best of 5),
/// and the bytes written.
fn mcap_per_mb(log: &Path) -> (f64, usize) {
    use ulog_recv::export::ExportOptions;
    use ulog_recv::store::input::dataflash_files;
    let options = ExportOptions::default();
    let mut written = 0;
    let t = best(5, || {
        let mut out = Vec::new();
        match dataflash_files(log) {
            Some(files) => {
                ulog_recv::export::mcap::dataflash::write_bin(&files, &options, &mut out)
                    .expect("the .bin exported");
            }
            None => {
                let flight = std::fs::read(log).unwrap();
                ulog_recv::export::mcap::write(&flight, &options, &mut out)
                    .expect("the .ulg exported");
            }
        }
        written = out.len();
    });
    let mb = std::fs::metadata(log).unwrap().len() as f64 / 1e6;
    (t.as_secs_f64() / mb, written)
}

/// What exporting a log's tables measured: seconds per MB of the log (the best of
/// [`TABLES_ROUNDS`]), the tables written and their rows.
struct TablesRun {
    per_mb: f64,
    tables: usize,
    rows: u64,
    mb: f64,
}

impl TablesRun {
    /// Seconds per row written.
    fn per_row(&self) -> f64 {
        self.per_mb * self.mb / self.rows as f64
    }
}

/// Rounds of [`tables_runs`]: each exports every log once.
const TABLES_ROUNDS: usize = 9;

/// Exports the tables of each of `logs` once a round, [`TABLES_ROUNDS`] rounds, the logs
/// interleaved so that a shared machine's slow spell weighs on all of them alike (the
/// filesystem's syncs vary most); the best round of each: see [`TablesRun`].
fn tables_runs(logs: &[PathBuf]) -> Vec<TablesRun> {
    use ulog_recv::export::ExportOptions;
    use ulog_recv::export::dataset::{FlightFacts, export_tables};
    let root = std::env::temp_dir().join(format!("ulog-recv-bench-tables-{}", std::process::id()));
    let mut runs: Vec<TablesRun> = (logs.iter())
        .map(|log| TablesRun {
            per_mb: f64::MAX,
            tables: 0,
            rows: 0,
            mb: std::fs::metadata(log).unwrap().len() as f64 / 1e6,
        })
        .collect();
    for round in 0..TABLES_ROUNDS {
        for (k, (log, run)) in logs.iter().zip(&mut runs).enumerate() {
            // Each export writes a dataset of its own, as a flight is exported once:
            // removing the last one's tables is not the export's work.
            let dir = root.join(format!("{round}-{k}"));
            let t = Instant::now();
            let written = export_tables(
                log,
                &ExportOptions::default(),
                &FlightFacts::default(),
                &dir,
            );
            let seconds = t.elapsed().as_secs_f64();
            let written = written.expect("the tables written");
            run.per_mb = run.per_mb.min(seconds / run.mb);
            run.tables = written.len();
            run.rows = written.iter().map(|w| w.rows).sum();
        }
    }
    let _ = std::fs::remove_dir_all(&root);
    runs
}

/// The flight diagnostics over a DataFlash log's bytes, in 64 KB pieces: the findings.
fn diagnose_bin(log: &[u8]) -> usize {
    let mut d = BinDiagnosis::new(Selection::ALL);
    log.chunks(1 << 16).for_each(|piece| d.push(piece));
    d.finish().findings().len()
}

/// PX4's datagrams for the largest real ULog log: the simulated PX4 streaming it to a session
/// (acks answered), every datagram it sent recorded.
fn px4_datagrams() -> Option<(f64, Vec<Vec<u8>>)> {
    use ulog_recv::sim::{SimVehicle, VehicleConfig, chunk_log};
    let file = std::fs::read(largest_ulog()?).ok()?;
    let log = chunk_log(&file, 0).ok()?;
    let mb = log.stream.len() as f64 / 1e6;
    let config = VehicleConfig {
        link_rate: None,
        sd_log: false,
        ..VehicleConfig::default()
    };
    let mut now = Instant::now();
    let mut vehicle = SimVehicle::new(log, config, now, std::time::SystemTime::now());
    let mut session = Session::new(SessionConfig::default(), now);
    let mut sent = Vec::new();
    let mut turns = 0u32;
    while !vehicle.finished() {
        turns += 1;
        if turns > 10_000_000 {
            eprintln!("PX4 peer: the simulated PX4 never finished streaming");
            return None;
        }
        loop {
            let mut moved = false;
            while let Some(f) = vehicle.poll_transmit() {
                session.handle_datagram(&f, now);
                sent.push(f);
                moved = true;
            }
            while let Some(f) = session.poll_transmit() {
                vehicle.handle_bytes(&f, now);
                moved = true;
            }
            while session.poll_event().is_some() {}
            if !moved {
                break;
            }
        }
        let next = [vehicle.poll_timeout(), session.poll_timeout()]
            .into_iter()
            .flatten()
            .min()?;
        now = now.max(next);
        vehicle.handle_timeout(now);
        session.handle_timeout(now);
    }
    Some((mb, sent))
}

/// Every datagram of `frames` through `s` at `now`, its answers dropped; the log bytes out.
fn feed(s: &mut Session, frames: &[Vec<u8>], now: Instant) -> u64 {
    let mut out = 0u64;
    for f in frames {
        s.handle_datagram(f, now);
        while s.poll_transmit().is_some() {}
        while let Some(e) = s.poll_event() {
            if let Event::LogBytes(b) = e {
                out += b.len() as u64;
            }
        }
    }
    out
}

/// Every recorded datagram through a fresh session; the log bytes out.
fn receive_px4(frames: &[Vec<u8>]) -> u64 {
    let t0 = Instant::now();
    let mut s = Session::new(SessionConfig::default(), t0);
    feed(&mut s, frames, t0)
}

/// Every field of every message of `log` read by our engine: (messages, a sum of the
/// numeric values, so that nothing is optimised away).
fn decode_ours(log: &[u8]) -> (u64, f64) {
    let mut framer = Framer::new();
    let (mut messages, mut sum) = (0u64, 0.0f64);
    for piece in log.chunks(1 << 16) {
        framer.push(piece, |m, f| {
            messages += 1;
            sum += fields(f, m).filter_map(|(_, _, v)| v.as_f64()).sum::<f64>();
        });
    }
    framer.finish(|_, _| messages += 1);
    (messages, sum)
}

/// The same, read by the `ardupilot-binlog` crate.
fn decode_binlog(log: &[u8]) -> (u64, f64) {
    let (mut messages, mut sum) = (0u64, 0.0f64);
    for entry in ardupilot_binlog::Reader::new(std::io::Cursor::new(log)).flatten() {
        messages += 1;
        sum += entry.fields().filter_map(|(_, v)| v.as_f64()).sum::<f64>();
    }
    (messages, sum)
}

/// DFReader's best time to read every message of `path`, if the project's virtualenv is there.
fn dfreader_seconds(path: &Path) -> Option<f64> {
    let py = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    let script = "import sys, time\n\
                  from pymavlink import DFReader\n\
                  def read():\n    \
                      t = time.perf_counter()\n    \
                      log = DFReader.DFReader_binary(sys.argv[1])\n    \
                      while log.recv_msg() is not None:\n        pass\n    \
                      return time.perf_counter() - t\n\
                  print(min(read() for _ in range(3)))\n";
    let out = std::process::Command::new(py)
        .arg("-c")
        .arg(script)
        .arg(path)
        .output()
        .ok()?;
    String::from_utf8(out.stdout).ok()?.trim().parse().ok()
}

fn main() {
    // `cargo bench --bench dataflash -- tables mcap`: only those sections (cargo adds
    // `--bench`).
    let named: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let sections: [(&str, fn()); 5] = [
        ("receive", receive_and_decode),
        ("diagnose", diagnose_section),
        ("mcap", mcap_section),
        ("tables", tables_section),
        ("signed", signed_section),
    ];
    for (name, run) in sections {
        if named.is_empty() || named.iter().any(|n| n == name) {
            run();
        }
    }
}

/// `receive` and `decode` (see the module docs), against PX4's stream and the two readers.
fn receive_and_decode() {
    let px4 = px4_datagrams().map(|(mb, frames)| {
        let mut received = 0;
        let t = best(5, || received = receive_px4(&frames));
        assert!(received as f64 >= mb * 1e6 * 0.99, "{received} bytes out");
        mb / t.as_secs_f64()
    });
    match px4 {
        Some(rate) => println!("PX4 peer: a PX4 stream received at {rate:.0} MB/s\n"),
        None => println!("PX4 peer: no log in ../shared/testdata/ulog\n"),
    }
    println!(
        "| log | MB | receive MB/s | × a 921600-baud link | CPU per MB / PX4's | decode MB/s | ardupilot-binlog MB/s | decode time / ardupilot-binlog's | DFReader s | decode time / DFReader's |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for path in logs() {
        let log = std::fs::read(&path).unwrap();
        let mb = log.len() as f64 / 1e6;
        let frames = datagrams(&log);
        let mut received = 0;
        let t_receive = best(5, || received = receive(&frames));
        assert!(
            received as usize + 200 >= log.len(),
            "the session handed out {received} of {} bytes",
            log.len()
        );
        let (mut ours, mut theirs) = ((0, 0.0), (0, 0.0));
        let t_decode = best(5, || ours = decode_ours(&log));
        let t_binlog = best(5, || theirs = decode_binlog(&log));
        assert_eq!(ours.0, theirs.0, "messages read: ours, ardupilot-binlog's");
        let receive_rate = mb / t_receive.as_secs_f64();
        let dfreader = dfreader_seconds(&path);
        println!(
            "| {} | {mb:.1} | {receive_rate:.0} | {:.0} | {} | {:.0} | {:.0} | {:.2} | {} | {} |",
            path.file_name().unwrap().to_string_lossy(),
            receive_rate * 1e6 / FASTEST_LINK,
            px4.map_or("-".to_owned(), |r| format!("{:.2}", r / receive_rate)),
            mb / t_decode.as_secs_f64(),
            mb / t_binlog.as_secs_f64(),
            t_decode.as_secs_f64() / t_binlog.as_secs_f64(),
            dfreader.map_or("no .venv".to_owned(), |s| format!("{s:.2}")),
            dfreader.map_or("-".to_owned(), |s| format!(
                "{:.3}",
                t_decode.as_secs_f64() / s
            )),
        );
        eprintln!("{} messages decoded", ours.0);
    }
}

/// `diagnose`: seconds per MB of a .bin against a .ulg's.
fn diagnose_section() {
    let ulog_per_mb = largest_ulog()
        .and_then(|p| std::fs::read(p).ok())
        .map(|ulg| {
            let t = best(5, || {
                std::hint::black_box(diagnose(&ulg, Selection::ALL));
            });
            t.as_secs_f64() / (ulg.len() as f64 / 1e6)
        });
    println!(
        "\n| log | diagnose MB/s | findings | time per MB / a .ulg's ({}) |",
        ulog_per_mb.map_or("no .ulg".to_owned(), |s| format!("{:.0} MB/s", 1.0 / s))
    );
    println!("|---|---|---|---|");
    for path in logs() {
        let log = std::fs::read(&path).unwrap();
        let mb = log.len() as f64 / 1e6;
        let mut findings = 0;
        let t = best(5, || findings = diagnose_bin(&log));
        let per_mb = t.as_secs_f64() / mb;
        println!(
            "| {} | {:.0} | {findings} | {} |",
            path.file_name().unwrap().to_string_lossy(),
            1.0 / per_mb,
            ulog_per_mb.map_or("-".to_owned(), |u| format!("{:.2}", per_mb / u)),
        );
    }
}

/// `mcap`: seconds per MB of a .bin against a .ulg's.
fn mcap_section() {
    let ulog_mcap = largest_ulog().map(|p| mcap_per_mb(&p).0);
    println!(
        "\n| log | MCAP MB/s | MCAP bytes / log bytes | time per MB / a .ulg's ({}) |",
        ulog_mcap.map_or("no .ulg".to_owned(), |s| format!("{:.0} MB/s", 1.0 / s))
    );
    println!("|---|---|---|---|");
    for path in logs() {
        let (per_mb, written) = mcap_per_mb(&path);
        let len = std::fs::metadata(&path).unwrap().len() as f64;
        println!(
            "| {} | {:.0} | {:.2} | {} |",
            path.file_name().unwrap().to_string_lossy(),
            1.0 / per_mb,
            written as f64 / len,
            ulog_mcap.map_or("-".to_owned(), |u| format!("{:.2}", per_mb / u)),
        );
    }
}

/// `tables`: seconds per MB and per row of a .bin against a .ulg's.
fn tables_section() {
    let bins = logs();
    let ulog = largest_ulog();
    let mut runs = tables_runs(&[ulog.iter().cloned().collect(), bins.clone()].concat());
    let ulog_tables = ulog.is_some().then(|| runs.remove(0));
    let or_none = |f: &dyn Fn(&TablesRun) -> String| ulog_tables.as_ref().map(f);
    println!(
        "\n| log | tables MB/s | tables | rows per MB | time per MB / a .ulg's ({}) | time per row / a .ulg's ({}) |",
        or_none(&|u| format!("{:.0} MB/s", 1.0 / u.per_mb)).unwrap_or("no .ulg".into()),
        or_none(&|u| format!(
            "{:.0} rows per MB, {:.2} µs a row",
            u.rows as f64 / u.mb,
            u.per_row() * 1e6
        ))
        .unwrap_or("no .ulg".into()),
    );
    println!("|---|---|---|---|---|---|");
    for (path, run) in bins.iter().zip(&runs) {
        println!(
            "| {} | {:.0} | {} | {:.0} | {} | {} |",
            path.file_name().unwrap().to_string_lossy(),
            1.0 / run.per_mb,
            run.tables,
            run.rows as f64 / run.mb,
            or_none(&|u| format!("{:.2}", run.per_mb / u.per_mb)).unwrap_or("-".into()),
            or_none(&|u| format!("{:.2}", run.per_row() / u.per_row())).unwrap_or("-".into()),
        );
    }
}
