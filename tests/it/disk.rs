//! The disk side of the store: the budget deletes the oldest closed sessions and never the
//! open one; a full disk pauses writing (with every file still whole) and writing resumes in a
//! new standalone split when space comes back. The full disk is a real one: a small tmpfs
//! mounted by the test (it needs root; under CI its absence is a failure).

use crate::common;
use crate::common::tmpfs::Tmpfs;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use ulog_recv::sim::chunk_log;
use ulog_recv::store::files::{UPLOADED_MARK, complete_prefix, read_manifest};
use ulog_recv::store::{LogStore, SplitPolicy, StoreOptions};

fn stream(duration_s: u32) -> Vec<u8> {
    let file = ulog_recv::sim::synth::generate(ulog_recv::sim::synth::SynthOptions {
        duration_s,
        seed: 3,
        appended_data: false,
    });
    chunk_log(&file, 0).unwrap().stream
}

fn fresh_dir(name: &str) -> PathBuf {
    let dir = common::procs::fresh_dir(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn sessions(dir: &Path) -> Vec<PathBuf> {
    common::procs::session_dirs(dir)
}

/// Every split of every session is whole messages, and its manifest lists exactly the files.
fn check_whole(dir: &Path) {
    for s in sessions(dir) {
        let m = read_manifest(&s).unwrap();
        for e in &m.splits {
            let bytes = std::fs::read(s.join(&e.file)).unwrap();
            assert!(bytes.len() > 16);
            assert_eq!(complete_prefix(&bytes), bytes.len(), "{}", e.file);
            if e.closed {
                assert_eq!(
                    e.summary.bytes,
                    bytes.len() as u64,
                    "{}: {:?}",
                    e.file,
                    m.splits
                        .iter()
                        .map(|e| (&e.file, e.closed, e.summary.bytes, e.summary.preamble_bytes))
                        .collect::<Vec<_>>()
                );
            }
        }
        let files = std::fs::read_dir(&s)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "ulg")
            })
            .count();
        assert_eq!(files, m.splits.len(), "{}", s.display());
    }
}

#[test]
fn the_budget_deletes_the_oldest_closed_sessions_and_keeps_the_open_one() {
    let dir = fresh_dir("budget");
    let log = stream(20);
    let mut options = StoreOptions::new(dir.clone());
    options.max_total = Some(3 * log.len() as u64 + log.len() as u64 / 2);
    let mut store = LogStore::open(options).unwrap();
    let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    for k in 0..6u64 {
        // Distinct start times, so that the names sort by age.
        store
            .begin_log(
                (1, 1),
                t + Duration::from_secs(k),
                ulog_recv::autopilot::LogFormat::ULog,
            )
            .unwrap();
        for piece in log.chunks(4096) {
            store.write(piece).unwrap();
        }
        if k < 5 {
            store.end_log().unwrap();
        }
        store.enforce_budget().unwrap();
    }
    let left = sessions(&dir);
    let names: Vec<String> = left
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left.len(), 3, "{names:?}");
    // The newest three remain, the open one among them.
    assert!(names[2].starts_with("2027-01-15T08-00-05Z"), "{names:?}");
    assert_eq!(store.session_dir(), Some(left[2].as_path()));
    // Even a budget the open session alone exceeds deletes only closed ones.
    let mut options = StoreOptions::new(dir.clone());
    options.max_total = Some(1);
    let mut tight = LogStore::open(options).unwrap();
    // (The first store's open session, left as a crash leaves it, is repaired and closed.)
    tight.recover();
    tight
        .begin_log(
            (1, 1),
            t + Duration::from_secs(100),
            ulog_recv::autopilot::LogFormat::ULog,
        )
        .unwrap();
    tight.write(&log).unwrap();
    tight.enforce_budget().unwrap();
    let left = sessions(&dir);
    assert_eq!(left.len(), 1);
    assert_eq!(Some(left[0].as_path()), tight.session_dir());
    tight.end_log().unwrap();
    check_whole(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn with_uploads_on_the_budget_deletes_uploaded_sessions_first_and_the_others_last() {
    let dir = fresh_dir("budget-uploaded");
    let log = stream(20);
    let mut options = StoreOptions::new(dir.clone());
    options.uploads = true;
    let mut store = LogStore::open(options.clone()).unwrap();
    let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let mut closed = Vec::new();
    for k in 0..4u64 {
        store
            .begin_log(
                (1, 1),
                t + Duration::from_secs(k),
                ulog_recv::autopilot::LogFormat::ULog,
            )
            .unwrap();
        store.write(&log).unwrap();
        closed.push(store.end_log().unwrap().unwrap());
    }
    // The two newest are uploaded, the two oldest not.
    for s in &closed[2..] {
        std::fs::write(s.join(UPLOADED_MARK), b"").unwrap();
    }
    // Room for two sessions: the uploaded ones go, though they are the newest.
    options.max_total = Some(2 * log.len() as u64 + log.len() as u64 / 2);
    store.reconfigure(options.clone());
    store.enforce_budget().unwrap();
    assert_eq!(sessions(&dir), closed[..2].to_vec());
    // Room for one: now a session that is not uploaded goes, the oldest.
    options.max_total = Some(log.len() as u64 + log.len() as u64 / 2);
    store.reconfigure(options);
    store.enforce_budget().unwrap();
    assert_eq!(sessions(&dir), closed[1..2].to_vec());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A 1 MB tmpfs that another program's 700 KB file (`filler`) fills up as a log is written
/// to it: a store on it (splits of 64 KB, `min_free` as given), its log begun and its clock
/// started at `t`.
struct FillingDisk {
    store: LogStore,
    t: Instant,
    filler: PathBuf,
    dir: PathBuf,
    /// Unmounted as it drops, after the store (fields drop in order).
    _tmpfs: Tmpfs,
}

impl FillingDisk {
    /// `None` (said loudly) where no tmpfs can be mounted outside CI.
    fn begin(name: &str, min_free: Option<u64>) -> Option<Self> {
        let fs = Tmpfs::mount(name, "1M")?;
        let filler = fs.0.join("filler");
        std::fs::write(&filler, vec![0u8; 700 << 10]).unwrap();
        let dir = fs.0.join("logs");
        let mut options = StoreOptions::new(dir.clone());
        options.policy = SplitPolicy {
            max_bytes: Some(64 << 10),
            ..SplitPolicy::unlimited()
        };
        options.min_free = min_free;
        let mut store = LogStore::open(options).unwrap();
        store
            .begin_log(
                (1, 1),
                SystemTime::now(),
                ulog_recv::autopilot::LogFormat::ULog,
            )
            .unwrap();
        // The store's clock starts with its first tick.
        let t = Instant::now();
        store.tick(t).unwrap();
        Some(Self {
            store,
            t,
            filler,
            dir,
            _tmpfs: fs,
        })
    }
}

#[test]
fn a_full_disk_pauses_writing_and_it_resumes_in_a_new_split_when_space_comes_back() {
    let Some(mut disk) = FillingDisk::begin("tmpfs", None) else {
        return;
    };
    let log = stream(80); // ~620 KB: does not fit beside the filler, fits without it
    let mut errors = 0;
    let mut resumed_at = None;
    for (i, piece) in log.chunks(4096).enumerate() {
        if disk.store.write(piece).is_err() && resumed_at.is_none() {
            errors += 1;
        }
        if disk.store.is_paused() && resumed_at.is_none() && errors > 0 {
            // Room again.
            std::fs::remove_file(&disk.filler).unwrap();
            disk.t += Duration::from_secs(2);
            disk.store.tick(disk.t).unwrap();
            assert!(
                !disk.store.is_paused(),
                "writing resumes once there is room"
            );
            resumed_at = Some(i);
        }
    }
    assert_eq!(
        errors, 1,
        "one clear error until space is back, not one per write"
    );
    let resumed_at = resumed_at.expect("the disk filled up");
    assert!(resumed_at < log.len() / 4096);
    assert!(!disk.store.is_paused());
    disk.store.end_log().unwrap();
    check_whole(&disk.dir);
    let session = &sessions(&disk.dir)[0];
    let m = read_manifest(session).unwrap();
    // Splits after the pause begin with their own header and definitions.
    let later = m
        .splits
        .iter()
        .filter(|e| e.summary.preamble_bytes > 0)
        .count();
    assert!(
        later >= 1,
        "{:?}",
        m.splits.iter().map(|e| &e.file).collect::<Vec<_>>()
    );
    for e in &m.splits {
        let f = session.join(&e.file);
        common::check_with_pyulog(&f);
    }
}

#[test]
fn writing_resumes_when_space_comes_back_though_min_free_cannot_be_met() {
    // More free space than the open session ever leaves: only the open session is there,
    // and the budget has nothing to delete.
    let Some(mut disk) = FillingDisk::begin("tmpfs-min-free", Some(900 << 10)) else {
        return;
    };
    let log = stream(60);
    let mut freed = false;
    for piece in log.chunks(4096) {
        let _ = disk.store.write(piece);
        if disk.store.is_paused() && !freed {
            std::fs::remove_file(&disk.filler).unwrap();
            freed = true;
            disk.t += Duration::from_secs(2);
            disk.store.tick(disk.t).unwrap();
            let free = ulog_recv::sys::os::free_bytes(&disk.dir).unwrap();
            assert!(
                free < 900 << 10,
                "min-free cannot be met: {free} bytes free"
            );
            assert!(
                !disk.store.is_paused(),
                "writing resumes with {free} bytes free, as it writes below min-free when the \
                 disk never filled"
            );
        }
    }
    assert!(freed, "the disk filled up");
    disk.store.end_log().unwrap();
    check_whole(&disk.dir);
}

#[test]
fn a_log_that_begins_on_a_full_disk_is_received_and_its_session_begins_when_space_comes_back() {
    let Some(fs) = Tmpfs::mount("tmpfs-begin", "1M") else {
        return;
    };
    let dir = fs.0.join("logs");
    std::fs::create_dir(&dir).unwrap();
    // Another program takes every byte: not even the session's manifest fits.
    let filler = fs.take_room("filler", 0);
    let mut store = LogStore::open(StoreOptions::new(dir.clone())).unwrap();
    let session = store
        .begin_log(
            (1, 1),
            SystemTime::now(),
            ulog_recv::autopilot::LogFormat::ULog,
        )
        .expect("the session begins, in memory, though its folder cannot be made yet");
    assert!(store.is_paused());
    assert!(!session.exists(), "no folder without its manifest");
    let log = stream(20);
    let (before, after) = log.split_at(log.len() / 2);
    let mut t = Instant::now();
    store.tick(t).unwrap();
    store.write(before).unwrap();
    // Room again: the folder, its manifest and a split with its own preamble.
    std::fs::remove_file(&filler).unwrap();
    t += Duration::from_secs(2);
    store.tick(t).unwrap();
    assert!(!store.is_paused(), "writing resumes once there is room");
    store.write(after).unwrap();
    store.end_log().unwrap();
    check_whole(&dir);
    let m = read_manifest(&session).unwrap();
    assert!(m.closed);
    assert_eq!(m.splits.len(), 1, "{:?}", m.splits);
    let split = std::fs::read(session.join(&m.splits[0].file)).unwrap();
    assert!(m.splits[0].summary.preamble_bytes > 16);
    // Its data: a dropout of a length not known (what the full disk lost), then the log's
    // end from about where the room came back (the message then half-written whole).
    let body = &split[m.splits[0].summary.preamble_bytes as usize..];
    assert_eq!(
        body[..5],
        [2, 0, b'O', 0, 0],
        "a dropout of 0 ms: not known"
    );
    assert_eq!(m.splits[0].summary.dropouts, 1);
    let body = &body[5..];
    assert!(log.ends_with(body), "{} bytes", body.len());
    assert!(
        body.len().abs_diff(after.len()) < 512,
        "{} bytes",
        body.len()
    );
    common::check_with_pyulog(&session.join(&m.splits[0].file));
}

#[test]
fn a_log_that_ends_on_a_full_disk_is_completed_once_space_comes_back() {
    let Some(fs) = Tmpfs::mount("tmpfs-end", "2M") else {
        return;
    };
    let dir = fs.0.join("logs");
    let mut options = StoreOptions::new(dir.clone());
    options.policy = SplitPolicy {
        max_bytes: Some(64 << 10),
        ..SplitPolicy::unlimited()
    };
    let mut store = LogStore::open(options).unwrap();
    let format = ulog_recv::autopilot::LogFormat::ULog;
    let first = store.begin_log((1, 1), SystemTime::now(), format).unwrap();
    let log = stream(20);
    let mut t = Instant::now();
    store.tick(t).unwrap();
    store.write(&log).unwrap();
    // Another program takes every byte left before the log ends.
    let filler = fs.take_room("filler", 0);
    assert!(
        store.end_log().is_err(),
        "the last split cannot be completed"
    );
    // The next log begins though (in memory: no room for its folder either).
    let started = SystemTime::now() + Duration::from_secs(60);
    let second = store.begin_log((1, 1), started, format).unwrap();
    assert!(!read_manifest(&first).unwrap().closed);
    // Room again: the first session is completed as the repair after a crash would.
    std::fs::remove_file(&filler).unwrap();
    t += Duration::from_secs(2);
    store.tick(t).unwrap();
    let m = read_manifest(&first).unwrap();
    assert!(m.closed, "completed once there is room");
    assert!(m.splits.iter().all(|e| e.closed && e.sha256.is_some()));
    assert!(second.exists(), "and the next session has its folder");
    store.write(&log).unwrap();
    store.end_log().unwrap();
    check_whole(&dir);
    // The first log's whole messages are all there, its splits read as one.
    let read = ulog_recv::store::reading::read_session(&first, None).unwrap();
    assert!(
        log.starts_with(&read),
        "{} of {} bytes",
        read.len(),
        log.len()
    );
    assert!(
        read.len() > log.len() / 2,
        "{} of {} bytes",
        read.len(),
        log.len()
    );
}

#[test]
fn under_a_steady_stream_the_manifest_says_each_split_closed_within_a_sync_round_or_two() {
    let dir = fresh_dir("steady");
    let log = stream(600);
    let mut options = StoreOptions::new(dir.clone());
    options.policy = SplitPolicy::unlimited();
    options.policy.max_bytes = Some(1 << 20);
    options.fsync_interval = Duration::from_millis(10);
    let mut store = LogStore::open(options).unwrap();
    let session = store
        .begin_log(
            (1, 1),
            SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
            ulog_recv::autopilot::LogFormat::ULog,
        )
        .unwrap();
    // A write between any two sync steps, as a vehicle that never pauses: the open split
    // always has new data, and the manifest must still come.
    let mut now = Instant::now();
    let mut closed_at: Option<usize> = None;
    let mut listed_at: Option<usize> = None;
    for (i, piece) in log.chunks(4096).enumerate() {
        store.write(piece).unwrap();
        now += Duration::from_millis(5);
        store.tick(now).unwrap();
        if closed_at.is_none() && dir_has_closed_split(&session) {
            closed_at = Some(i);
        }
        if closed_at.is_some()
            && read_manifest(&session).is_ok_and(|m| m.splits.iter().any(|s| s.closed))
        {
            listed_at = Some(i);
            break;
        }
    }
    let (closed, listed) = (closed_at.expect("a split closed"), listed_at);
    assert!(
        listed.is_some_and(|l| l - closed <= 20),
        "split closed at write {closed}, in the manifest at {listed:?}"
    );
    store.end_log().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A read-only split file (closed) is in `session`.
fn dir_has_closed_split(session: &Path) -> bool {
    std::fs::read_dir(session).unwrap().any(|e| {
        let e = e.unwrap();
        e.path().extension().is_some_and(|x| x == "ulg")
            && e.metadata().unwrap().permissions().readonly()
    })
}

#[test]
fn a_crash_before_the_manifest_lists_a_split_loses_no_byte_of_the_log_and_adds_none() {
    let dir = fresh_dir("unlisted");
    let log = stream(120);
    let mut options = StoreOptions::new(dir.clone());
    options.policy = SplitPolicy {
        max_bytes: Some(64 << 10),
        ..SplitPolicy::unlimited()
    };
    // No sync round comes: the manifest never lists a split after the session began.
    options.fsync_interval = Duration::from_secs(3600);
    let (store, session) = common::store_session_open(options.clone(), 1, &log, 4000, 0);
    // The daemon dies; the next start repairs the session.
    drop(store);
    let listed = read_manifest(&session).unwrap().splits.len();
    let mut store = LogStore::open(options).unwrap();
    store.recover();
    let manifest = read_manifest(&session).unwrap();
    assert!(
        manifest.splits.len() >= 5 && listed < manifest.splits.len(),
        "{listed} splits listed before the crash, {} after the repair",
        manifest.splits.len()
    );
    // Each split after the first gets its preamble from beside the split before it: the
    // session, read as one log, is the log, with no definitions again in its middle.
    for s in &manifest.splits[1..] {
        assert!(s.summary.preamble_bytes > 16, "{}: {:?}", s.file, s.summary);
    }
    let read = ulog_recv::store::reading::read_session(&session, None).unwrap();
    assert_eq!(read.len(), log.len());
    assert!(read == log, "the session read back is not the log");
    check_whole(&dir);
}
