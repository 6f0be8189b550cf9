//! The store's sync rounds, tested against the store itself.

use super::*;
use crate::ulog::message::FILE_MAGIC;

/// A dropout record: 2 bytes of payload, type 'O'.
const DROPOUT: [u8; 5] = [2, 0, b'O', 5, 0];

/// A store in `dir` with a ULog log begun, its file header written.
fn store_with_a_log(dir: &Path) -> LogStore {
    let mut store = LogStore::open(StoreOptions::new(dir.to_path_buf())).unwrap();
    store
        .begin_log((1, 1), SystemTime::now(), crate::autopilot::LogFormat::ULog)
        .unwrap();
    let mut header = FILE_MAGIC.to_vec();
    header.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0, 0]);
    store.write(&header).unwrap();
    store
}

#[test]
fn a_lossy_link_never_holds_the_open_splits_sync_back() {
    let dir = std::env::temp_dir().join(format!("ulog-recv-rounds-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut store = store_with_a_log(&dir);
    // Four seconds of 10 ms turns, each with data and a dropout on the link (2 % loss
    // at 700 KB/s is a dropout every few ms), as the store thread runs them.
    let t0 = Instant::now();
    // The store's clock starts with its first tick.
    store.tick(t0).unwrap();
    let mut data_synced = Vec::new();
    for turn in 1..=400u64 {
        store.write(&DROPOUT).unwrap();
        store.link_dropout(1, true);
        store.flush().unwrap();
        store.tick(t0 + Duration::from_millis(10 * turn)).unwrap();
        if !store.unsynced.data {
            data_synced.push(turn);
        }
    }
    // A sync of the open split in each second after the first (at 1, 2, 3 and 4 s), the
    // manifest's update riding along.
    assert_eq!(data_synced, [101, 200, 300, 400]);
    store.end_log().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn what_is_written_between_a_rounds_steps_is_synced_by_the_next_round_though_nothing_follows() {
    use std::os::unix::fs::MetadataExt;
    use std::sync::{Arc, Mutex};
    let dir = std::env::temp_dir().join(format!("ulog-recv-quiet-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // The open split's length at each of its syncs.
    let synced = Arc::new(Mutex::new(Vec::new()));
    let _watch = fsync::watch(&dir, {
        let synced = synced.clone();
        Arc::new(move |s: fsync::Synced<'_>| {
            if let fsync::Synced::File { file, path } = s
                && path.to_string_lossy().contains("split_")
            {
                synced.lock().unwrap().push(file.metadata().unwrap().size());
            }
        })
    });
    let mut store = store_with_a_log(&dir);
    store.write(&DROPOUT).unwrap();
    let t0 = Instant::now();
    store.tick(t0).unwrap();
    let t = t0 + store.options.fsync_interval;
    // A round's step syncs the open split; a write comes before its next step.
    while synced.lock().unwrap().is_empty() {
        store.tick(t).unwrap();
    }
    assert!(store.syncing(), "the round goes on after the split's sync");
    store.write(&DROPOUT).unwrap();
    store.flush().unwrap();
    let written = 16 + 2 * DROPOUT.len() as u64;
    // Then the vehicle goes quiet: rounds go on, and one syncs the last write.
    for k in 1..=20 {
        store.tick(t + store.options.fsync_interval * k).unwrap();
    }
    let synced = synced.lock().unwrap().clone();
    assert_eq!(
        synced.last(),
        Some(&written),
        "the split's syncs: {synced:?}"
    );
    store.end_log().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}
