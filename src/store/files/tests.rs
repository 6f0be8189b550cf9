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

/// An empty folder of the test's own (`name`, and this process's id).
fn fresh_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A ULog writer with a log's header, one topic's format and its subscription written.
fn one_topic_log() -> crate::ulog::Writer {
    use crate::ulog::{Message, Writer};
    let mut w = Writer::new();
    w.header(1, 0);
    w.write(&Message::Format("t:uint64_t timestamp;")).unwrap();
    w.write(&Message::AddLogged {
        multi_id: 0,
        msg_id: 0,
        name: "t",
    })
    .unwrap();
    w
}

/// What `w` holds, then a sample of its topic at `t` µs.
fn sample(w: &mut crate::ulog::Writer, t: u64) -> Vec<u8> {
    w.write(&crate::ulog::Message::Data {
        msg_id: 0,
        data: &t.to_le_bytes(),
    })
    .unwrap();
    w.take()
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
    let dir = fresh_dir("ulog-recv-quiet");
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

#[test]
fn a_failed_sync_cuts_the_split_back_to_what_was_durable_and_writing_resumes_once_the_disk_syncs() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = fresh_dir("ulog-recv-eio");
    let failing = Arc::new(AtomicBool::new(false));
    let _fail = fsync::fail(&dir, {
        let failing = failing.clone();
        Arc::new(move |_: fsync::Synced<'_>| {
            (failing.load(Ordering::Relaxed)).then(|| io::Error::from_raw_os_error(5))
        })
    });
    let mut store = store_with_a_log(&dir);
    store.write(&DROPOUT).unwrap();
    let t0 = Instant::now();
    let interval = store.options.fsync_interval;
    for k in 0..20 {
        store.tick(t0 + interval * k).unwrap();
    }
    let session = store.session.as_ref().unwrap().dir.clone();
    let split = session.join("split_0000.ulg");
    let durable = 16 + DROPOUT.len() as u64;
    assert_eq!(std::fs::metadata(&split).unwrap().len(), durable);
    // The disk fails its syncs: what was written since the last one may be lost.
    failing.store(true, Ordering::Relaxed);
    store.write(&DROPOUT).unwrap();
    store.write(&DROPOUT).unwrap();
    store.flush().unwrap();
    let mut failed = 0;
    for k in 20..40 {
        failed += u32::from(store.tick(t0 + interval * k).is_err());
    }
    assert_eq!(
        failed, 1,
        "one failed sync pauses writing; no retry while it fails"
    );
    assert!(store.is_paused());
    assert_eq!(
        std::fs::metadata(&split).unwrap().len(),
        durable,
        "cut back to what was durable"
    );
    // Dropped while paused (and marked once writing resumes).
    store.write(&DROPOUT).unwrap();
    // The disk syncs again: the cut split is closed, and writing resumes in a new split.
    failing.store(false, Ordering::Relaxed);
    store.tick(t0 + interval * 40).unwrap();
    assert!(!store.is_paused());
    store.write(&DROPOUT).unwrap();
    store.end_log().unwrap();
    let manifest = crate::store::manifest::read_manifest(&session).unwrap();
    assert!(manifest.closed);
    let files: Vec<(&str, bool)> = (manifest.splits.iter())
        .map(|e| (e.file.as_str(), e.closed))
        .collect();
    assert_eq!(
        files,
        [("split_0000.ulg", true), ("split_0001.ulg", true)],
        "{manifest:?}"
    );
    assert_eq!(manifest.splits[0].summary.bytes, durable);
    let resumed = std::fs::read(session.join("split_0001.ulg")).unwrap();
    // What came after, then the loss marked, of a length not known (before the first
    // sample after it: none came).
    assert!(
        resumed.ends_with(&[2, 0, b'O', 5, 0, 2, 0, b'O', 0, 0]),
        "{resumed:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_split_closed_at_a_roll_has_its_data_and_its_name_durable_before_the_next_split_exists() {
    use std::sync::{Arc, Mutex};
    let dir = fresh_dir("ulog-recv-roll-name");
    let mut store = LogStore::open(StoreOptions::new(dir.clone())).unwrap();
    let session = store
        .begin_log((1, 1), SystemTime::now(), crate::autopilot::LogFormat::ULog)
        .unwrap();
    // Each sync in the session's folder, with whether the next split existed then.
    let syncs = Arc::new(Mutex::new(Vec::new()));
    let _watch = fsync::watch(&session, {
        let (syncs, next) = (syncs.clone(), session.join("split_0001.ulg"));
        Arc::new(move |s: fsync::Synced<'_>| {
            let what = match s {
                fsync::Synced::File { path, .. } => path.display().to_string(),
                fsync::Synced::Dir { path } => format!("folder {}", path.display()),
            };
            syncs.lock().unwrap().push((what, next.exists()));
        })
    });
    let mut w = one_topic_log();
    store.write(&sample(&mut w, 1_000)).unwrap();
    store.roll();
    store.write(&sample(&mut w, 2_000)).unwrap();
    let syncs = syncs.lock().unwrap().clone();
    let closed = (syncs.iter())
        .position(|(what, _)| what.ends_with("split_0000.ulg"))
        .expect("the closed split synced");
    let folder = format!("folder {}", session.display());
    assert!(
        syncs[closed..]
            .iter()
            .any(|(what, next_exists)| *what == folder && !next_exists),
        "the folder synced after the closed split, before the next split existed: {syncs:?}"
    );
    assert!(session.join("split_0001.ulg").exists());
    store.end_log().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_split_a_failed_folder_sync_kept_from_beginning_leaves_nothing_to_close_and_writing_resumes() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = fresh_dir("ulog-recv-begin-fail");
    let failing = Arc::new(AtomicBool::new(false));
    let _fail = fsync::fail(&dir, {
        let failing = failing.clone();
        Arc::new(move |s: fsync::Synced<'_>| {
            let folder = matches!(s, fsync::Synced::Dir { .. });
            (folder && failing.load(Ordering::Relaxed)).then(|| io::Error::from_raw_os_error(5))
        })
    });
    let mut store = LogStore::open(StoreOptions::new(dir.clone())).unwrap();
    let session = store
        .begin_log((1, 1), SystemTime::now(), crate::autopilot::LogFormat::ULog)
        .unwrap();
    let mut w = one_topic_log();
    store.write(&sample(&mut w, 1_000)).unwrap();
    // The folder's sync fails as the next split would begin: it is not made.
    failing.store(true, Ordering::Relaxed);
    store.roll();
    assert!(store.write(&sample(&mut w, 2_000)).is_err());
    assert!(store.is_paused());
    failing.store(false, Ordering::Relaxed);
    let t0 = Instant::now();
    store.tick(t0).unwrap();
    store.tick(t0 + store.options.fsync_interval).unwrap();
    assert!(
        !store.is_paused(),
        "nothing left to close holds writing back"
    );
    store.write(&sample(&mut w, 3_000)).unwrap();
    store.end_log().unwrap();
    let manifest = crate::store::manifest::read_manifest(&session).unwrap();
    assert!(manifest.closed);
    for e in &manifest.splits {
        assert!(e.closed, "{manifest:?}");
        assert!(session.join(&e.file).is_file(), "{manifest:?}");
    }
    assert!(manifest.splits.len() >= 2, "{manifest:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
