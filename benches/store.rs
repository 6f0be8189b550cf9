//! Store benchmark: how fast the log store writes a log to disk with its power safety on
//! (splits, each with its preamble, SHA-256, fsync and manifest update; fsync of the open split
//! every interval), fed in the 256 KB batches the daemon hands its store thread. The rate is
//! also given in full 249-byte chunks per second, to set against the session's goal of
//! 200,000 chunks/s (50 MB/s). The `imu` rows store the log in two columns (`imu`: the sensor
//! topics, about half the bytes; the main column: the rest); the `imu buffer` rows make that
//! column an event buffer (10 s before, 5 s after, a logged-string and a field trigger
//! watching the whole log): without events (every imu sample held, then dropped), and with
//! one asked for every 64 batches (16 MB).
//!
//! Run: `cargo bench --bench store [-- MEGABYTES]` (default 200; written under the system's
//! temporary directory).

use std::time::{Duration, Instant, SystemTime};

use ulog_recv::sim::chunk_log;
use ulog_recv::store::events::{EventBufferSpec, FieldCondition, Trigger};
use ulog_recv::store::{LogStore, SplitPolicy, StoreOptions};

fn main() {
    let megabytes: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(200);
    // About 7.6 KB of synthetic log per second of log time.
    let duration_s = (megabytes as f64 * 1e6 / 7_600.0) as u32;
    let file = ulog_recv::sim::synth::generate(ulog_recv::sim::synth::SynthOptions {
        duration_s,
        seed: 1,
        appended_data: false,
    });
    let stream = chunk_log(&file, 0).unwrap().stream;
    drop(file);
    println!(
        "store benchmark: {:.0} MB of log per row, 256 KB batches, into {}",
        stream.len() as f64 / 1e6,
        std::env::temp_dir().display()
    );
    println!(
        "\n| split size | fsync interval | columns | splits | bytes written | MB/s | chunks/s equivalent |"
    );
    println!("|---:|---:|---|---:|---:|---:|---:|");
    let imu = ulog_recv::store::columns::ColumnSpec::parse("imu=sensor_*,vehicle_imu*").unwrap();
    let buffer = EventBufferSpec {
        column: imu.clone(),
        before_us: 10_000_000,
        after_us: 5_000_000,
        max_bytes: ulog_recv::store::events::DEFAULT_BUFFER_BYTES,
    };
    let triggers = || {
        vec![
            Trigger::logged_text("(?i)failsafe|crash").unwrap(),
            Trigger::Field(FieldCondition::parse("battery_status.remaining < 0.05").unwrap()),
        ]
    };
    for (split, fsync, columns, buffers, event_every) in [
        (None, 1.0, vec![], vec![], None),
        (Some(64u64 << 20), 1.0, vec![], vec![], None),
        (Some(16 << 20), 0.1, vec![], vec![], None),
        (Some(4 << 20), 0.1, vec![], vec![], None),
        (Some(4 << 20), 0.1, vec![imu.clone()], vec![], None),
        (Some(4 << 20), 0.1, vec![], vec![buffer.clone()], None),
        (Some(4 << 20), 0.1, vec![], vec![buffer.clone()], Some(64)),
    ] {
        let dir =
            std::env::temp_dir().join(format!("ulog-recv-store-bench-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut options = StoreOptions::new(dir.clone());
        options.policy = SplitPolicy {
            max_bytes: split,
            ..SplitPolicy::unlimited()
        };
        options.fsync_interval = Duration::from_secs_f64(fsync);
        let layout = match (columns.is_empty(), buffers.is_empty(), event_every) {
            (true, true, _) => "main".to_owned(),
            (false, _, _) => "main, imu".to_owned(),
            (_, false, None) => "main, imu buffer".to_owned(),
            (_, false, Some(n)) => format!("main, imu buffer, an event every {n} batches"),
        };
        options.columns = columns;
        if !buffers.is_empty() {
            options.event_buffers = buffers;
            options.triggers = triggers();
        }
        let mut store = LogStore::open(options).unwrap();
        let t0 = Instant::now();
        let session = store
            .begin_log(
                (1, 1),
                SystemTime::now(),
                ulog_recv::autopilot::LogFormat::ULog,
            )
            .unwrap();
        for (k, batch) in stream.chunks(256 << 10).enumerate() {
            if event_every.is_some_and(|n| k % n == n - 1) {
                store.request_event("bench", None).unwrap();
            }
            store.write(batch).unwrap();
            store.tick(Instant::now()).unwrap();
        }
        store.end_log().unwrap();
        let secs = t0.elapsed().as_secs_f64();
        let manifest = ulog_recv::store::files::read_manifest(&session).unwrap();
        let splits = manifest.all_splits().count();
        let written: u64 = manifest.all_splits().map(|s| s.summary.bytes).sum();
        let mb_s = stream.len() as f64 / 1e6 / secs;
        println!(
            "| {} | {fsync} s | {layout} | {splits} | {:.0} MB | {mb_s:.0} | {:.0} |",
            split.map_or("none".to_owned(), |s| format!("{} MB", s >> 20)),
            written as f64 / 1e6,
            stream.len() as f64 / 249.0 / secs
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
