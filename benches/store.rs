//! Store benchmark: how fast the log store writes a log to disk with its power safety on
//! (splits, each with its preamble, SHA-256, fsync and manifest update; fsync of the open split
//! every interval), fed in the 256 KB batches the daemon hands its store thread. The rate is
//! also given in full 249-byte chunks per second, to set against the session's goal of
//! 200,000 chunks/s (50 MB/s). The last row stores the log in two columns (`imu`: the
//! sensor topics, about half the bytes; the main column: the rest).
//!
//! Run: `cargo bench --bench store [-- MEGABYTES]` (default 200; written under the system's
//! temporary directory).

use std::time::{Duration, Instant, SystemTime};

use ulog_recv::sim::chunk_log;
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
    println!("\n| split size | fsync interval | columns | splits | MB/s | chunks/s equivalent |");
    println!("|---:|---:|---:|---:|---:|---:|");
    let imu = ulog_recv::store::columns::ColumnSpec::parse("imu=sensor_*,vehicle_imu*").unwrap();
    for (split, fsync, columns) in [
        (None, 1.0, vec![]),
        (Some(64u64 << 20), 1.0, vec![]),
        (Some(16 << 20), 0.1, vec![]),
        (Some(4 << 20), 0.1, vec![]),
        (Some(4 << 20), 0.1, vec![imu]),
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
        let column_count = columns.len() + 1;
        options.columns = columns;
        let mut store = LogStore::open(options).unwrap();
        let t0 = Instant::now();
        let session = store.begin_log((1, 1), SystemTime::now()).unwrap();
        for batch in stream.chunks(256 << 10) {
            store.write(batch).unwrap();
            store.tick(Instant::now()).unwrap();
        }
        store.end_log().unwrap();
        let secs = t0.elapsed().as_secs_f64();
        let splits = ulog_recv::store::files::read_manifest(&session)
            .unwrap()
            .all_splits()
            .count();
        let mb_s = stream.len() as f64 / 1e6 / secs;
        println!(
            "| {} | {fsync} s | {column_count} | {splits} | {mb_s:.0} | {:.0} |",
            split.map_or("none".to_owned(), |s| format!("{} MB", s >> 20)),
            stream.len() as f64 / 249.0 / secs
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
