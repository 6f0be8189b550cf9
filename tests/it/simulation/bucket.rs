//! The uploader in the simulation: with the store on disk, the receiver's own uploader
//! ([`upload_session_to`]) sends each session the store writes to a bucket in memory
//! (`object_store`'s), which fails as the seed says: a request refused before it is done, an
//! answer lost after it was done, a multipart upload the server forgot (expired), and the
//! daemon killed with a request on the wire, before or after the server did it. An upload
//! pass runs every [`UPLOAD_EVERY`] of simulated time, as a restarted uploader would: from
//! the journal on disk alone. A pass takes simulated time when the bucket answers slowly:
//! the world goes on meanwhile (the store writes, the fill fills, the budget deletes, the
//! power goes), and a daemon that dies takes its pass with it. After the flight, passes run
//! without faults until every session is up.
//!
//! Its promises ([`check_journals`], [`check`]): the journal never says a file is in the
//! bucket that is not, with that content; and at the end every closed split, every
//! amendment a fill wrote, and the session's manifest, is in the bucket exactly once, byte
//! for byte as on disk, and nothing else is.
//!
//! Not simulated: the request's bytes on the wire (the uploader's own pace and stall guard
//! are tested against Garage, in `tests/it/upload.rs`).

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use object_store::memory::InMemory;
use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path as ObjectPath;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartId, MultipartUpload, ObjectMeta,
    ObjectStore, ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult,
};
use sha2::{Digest, Sha256};
use tokio::sync::Notify;
use ulog_recv::store::files::{MANIFEST, list_sessions};
use ulog_recv::store::manifest::{hex, read_manifest};
use ulog_recv::upload::journal::load_journal;
use ulog_recv::upload::plan::{Journal, ObjectRecord};
use ulog_recv::upload::s3::Bucket;
use ulog_recv::upload::uploader::{UploadConfig, upload_session_to};

/// Simulated time between upload passes.
pub const UPLOAD_EVERY: Duration = Duration::from_secs(20);

/// The bucket the simulation uploads to.
const URL: &str = "s3://fleet/sim";

/// How the bucket fails: each request's chance of each fault.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BucketFaults {
    /// Refused (a 503) before the server did anything.
    pub fail: f64,
    /// Done, and its answer lost on the way back.
    pub lost_answer: f64,
    /// The daemon killed while the request is on the wire (done by the server or not).
    pub crash: f64,
    /// The multipart upload the request is for forgotten by the server first (expired).
    pub forget: f64,
    /// Done, and its answer (or its loss) late by up to [`MOST_LATE`].
    pub slow: f64,
    /// Files over this go up in parts.
    pub part_size: u64,
}

impl BucketFaults {
    /// A swarm's draw: each fault kind on or off, one of them heavy.
    pub fn draw(rng: &mut fastrand::Rng) -> Self {
        let heavy = rng.usize(..4);
        let mut rate = |i: usize, most: f64| match (i == heavy, rng.u8(..3)) {
            (true, _) => most * (0.5 + 0.5 * rng.f64()),
            (false, 0) => 0.0,
            (false, _) => most * 0.2 * rng.f64(),
        };
        Self {
            fail: rate(0, 0.4),
            lost_answer: rate(1, 0.3),
            crash: rate(2, 0.1),
            forget: rate(3, 0.2),
            part_size: rng.u64(16 << 10..=256 << 10),
            slow: 0.0,
        }
    }
}

/// The latest a slow answer comes.
pub const MOST_LATE: Duration = Duration::from_secs(30);

/// What becomes of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Answered,
    Refused,
    AnswerLost,
    /// The daemon dies with the request on the wire; `done`: the server did it.
    Killed {
        done: bool,
    },
}

/// A bucket in memory that fails as it is told, as one seed decides.
pub struct SimStore {
    inner: InMemory,
    state: Mutex<StoreState>,
    /// Told when a request kills the daemon.
    killed: Arc<Notify>,
    /// Told when a request waits for a slow answer: the pass waits for simulated time.
    parked: Arc<Notify>,
}

struct StoreState {
    rng: fastrand::Rng,
    faults: BucketFaults,
    /// Faults happen (not in the passes after the flight).
    failing: bool,
    /// The simulated time, as the pass was last run.
    now: Option<Instant>,
    /// When the slow answer being waited for comes, and the task that waits for it.
    due: Option<Instant>,
    waiting: Option<Waker>,
    /// What happened, for the event log.
    said: Vec<String>,
}

impl fmt::Debug for SimStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SimStore")
    }
}

impl fmt::Display for SimStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the simulated bucket")
    }
}

fn refused(what: &str) -> object_store::Error {
    object_store::Error::Generic {
        store: "sim",
        source: format!("{what}: HTTP 503 SlowDown").into(),
    }
}

fn answer_lost(what: &str) -> object_store::Error {
    object_store::Error::Generic {
        store: "sim",
        source: format!("{what}: connection reset after the request was sent").into(),
    }
}

/// S3's answer to a request for an upload it does not have: 404 NoSuchUpload (the in-memory
/// store's own error is not a "not found").
fn no_such_upload(path: &ObjectPath, e: object_store::Error) -> object_store::Error {
    if e.to_string().contains("MultipartUpload not found") {
        object_store::Error::NotFound {
            path: path.to_string(),
            source: "NoSuchUpload".into(),
        }
    } else {
        e
    }
}

impl SimStore {
    pub fn new(seed: u64, faults: BucketFaults) -> Self {
        Self {
            inner: InMemory::new(),
            state: Mutex::new(StoreState {
                rng: fastrand::Rng::with_seed(seed ^ 0xb0c_4e7),
                faults,
                failing: true,
                now: None,
                due: None,
                waiting: None,
                said: Vec::new(),
            }),
            killed: Arc::new(Notify::new()),
            parked: Arc::new(Notify::new()),
        }
    }

    /// When the slow answer a pass waits for comes, if it waits for one.
    pub fn due(&self) -> Option<Instant> {
        self.state.lock().unwrap().due
    }

    /// Faults on or off.
    pub fn set_failing(&self, failing: bool) {
        self.state.lock().unwrap().failing = failing;
    }

    /// What happened since last asked.
    pub fn take_said(&self) -> Vec<String> {
        std::mem::take(&mut self.state.lock().unwrap().said)
    }

    /// The fate of request `what`, and how late its answer comes; `upload`: the multipart
    /// upload it is for, which the server may have forgotten first.
    async fn fate(&self, what: &str, upload: Option<&MultipartId>) -> (Fate, Duration) {
        let (fate, forget, late) = {
            let mut s = self.state.lock().unwrap();
            if !s.failing {
                return (Fate::Answered, Duration::ZERO);
            }
            let f = s.faults;
            let forget = upload.is_some() && s.rng.f64() < f.forget;
            let draw = s.rng.f64();
            let fate = if draw < f.fail {
                Fate::Refused
            } else if draw < f.fail + f.lost_answer {
                Fate::AnswerLost
            } else if draw < f.fail + f.lost_answer + f.crash {
                Fate::Killed { done: s.rng.bool() }
            } else {
                Fate::Answered
            };
            if forget {
                s.said.push(format!("bucket forgets upload {:?}", upload));
            }
            if fate != Fate::Answered {
                s.said.push(format!("bucket: {what}: {fate:?}"));
            }
            let answered = matches!(fate, Fate::Answered | Fate::AnswerLost);
            let late = if f.slow > 0.0 && s.rng.f64() < f.slow && answered {
                MOST_LATE.mul_f64(s.rng.f64())
            } else {
                Duration::ZERO
            };
            if !late.is_zero() {
                s.said.push(format!(
                    "bucket: {what}: answered {} ms late",
                    late.as_millis()
                ));
            }
            (fate, forget, late)
        };
        if let (true, Some(id)) = (forget, upload) {
            let _ = self.inner.abort_multipart(&ObjectPath::from(""), id).await;
        }
        (fate, late)
    }

    /// Waits `late` of simulated time: until the world runs the pass again at or past it
    /// (or the faults are over). Meanwhile the pass is parked.
    async fn answer_late(&self, late: Duration) {
        if late.is_zero() {
            return;
        }
        let due = {
            let mut s = self.state.lock().unwrap();
            let due = s.now.expect("a pass sets the time before it runs") + late;
            s.due = Some(due);
            due
        };
        std::future::poll_fn(|cx| {
            let mut s = self.state.lock().unwrap();
            if !s.failing || s.now.is_some_and(|now| now >= due) {
                s.due = None;
                Poll::Ready(())
            } else {
                // Woken when the world runs the pass again at its time (the request may be
                // one of several futures the uploader polls only when woken).
                s.waiting = Some(cx.waker().clone());
                self.parked.notify_one();
                Poll::Pending
            }
        })
        .await
    }

    /// Request `what` done or not as its fate says, its answer given or not; `upload`: the
    /// multipart upload it is for (see [`SimStore::fate`]), whose absence the server answers
    /// as S3 does.
    async fn request<T>(
        &self,
        what: String,
        upload: Option<(&ObjectPath, &MultipartId)>,
        request: impl Future<Output = object_store::Result<T>>,
    ) -> object_store::Result<T> {
        let (fate, late) = self.fate(&what, upload.map(|(_, id)| id)).await;
        let request = async {
            let answer = request.await;
            match upload {
                Some((path, _)) => answer.map_err(|e| no_such_upload(path, e)),
                None => answer,
            }
        };
        match fate {
            Fate::Refused => Err(refused(&what)),
            Fate::Answered => {
                let answer = request.await;
                self.answer_late(late).await;
                answer
            }
            Fate::AnswerLost => {
                let _ = request.await;
                self.answer_late(late).await;
                Err(answer_lost(&what))
            }
            Fate::Killed { done } => {
                if done {
                    let _ = request.await;
                }
                self.killed.notify_one();
                std::future::pending().await
            }
        }
    }

    /// Every object in the bucket: key → bytes.
    pub async fn objects(&self) -> BTreeMap<String, Bytes> {
        let metas: Vec<ObjectMeta> = (self.inner.list(None))
            .map(|m| m.expect("the in-memory list"))
            .collect()
            .await;
        let mut objects = BTreeMap::new();
        for m in metas {
            let bytes = (self.inner.get(&m.location).await.expect("a listed object"))
                .bytes()
                .await
                .expect("its bytes");
            objects.insert(m.location.to_string(), bytes);
        }
        objects
    }
}

#[async_trait]
impl ObjectStore for SimStore {
    async fn put_opts(
        &self,
        location: &ObjectPath,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let request = self.inner.put_opts(location, payload, opts);
        self.request(format!("PUT {location}"), None, request).await
    }

    async fn put_multipart_opts(
        &self,
        location: &ObjectPath,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &ObjectPath,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<ObjectPath>>,
    ) -> BoxStream<'static, object_store::Result<ObjectPath>> {
        self.inner.delete_stream(locations)
    }

    fn list(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &ObjectPath,
        to: &ObjectPath,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

#[async_trait]
impl MultipartStore for SimStore {
    async fn create_multipart(&self, path: &ObjectPath) -> object_store::Result<MultipartId> {
        let request = self.inner.create_multipart(path);
        self.request(format!("CreateMultipartUpload {path}"), None, request)
            .await
    }

    async fn put_part(
        &self,
        path: &ObjectPath,
        id: &MultipartId,
        part_idx: usize,
        data: PutPayload,
    ) -> object_store::Result<PartId> {
        let request = self.inner.put_part(path, id, part_idx, data);
        let what = format!("UploadPart {path} #{part_idx}");
        self.request(what, Some((path, id)), request).await
    }

    async fn complete_multipart(
        &self,
        path: &ObjectPath,
        id: &MultipartId,
        parts: Vec<PartId>,
    ) -> object_store::Result<PutResult> {
        let request = self.inner.complete_multipart(path, id, parts);
        let what = format!("CompleteMultipartUpload {path}");
        self.request(what, Some((path, id)), request).await
    }

    async fn abort_multipart(
        &self,
        path: &ObjectPath,
        id: &MultipartId,
    ) -> object_store::Result<()> {
        let request = self.inner.abort_multipart(path, id);
        let what = format!("AbortMultipartUpload {path}");
        self.request(what, Some((path, id)), request).await
    }
}

/// The uploader's side: the bucket and a runtime to drive the uploader's requests in.
pub struct Uploads {
    pub store: Arc<SimStore>,
    bucket: Bucket,
    runtime: tokio::runtime::Runtime,
}

/// What an upload pass came to.
#[derive(Debug, Default)]
pub struct Pass {
    /// What it did, for the event log.
    pub said: Vec<String>,
    /// The daemon was killed in it.
    pub killed: bool,
}

/// An upload pass under way: it goes on when its slow answer comes.
pub struct PassRun {
    future: Pin<Box<dyn Future<Output = ()>>>,
    said: Rc<RefCell<Vec<String>>>,
}

impl PassRun {
    /// What it did so far (a pass the daemon's death ends says it).
    pub fn take_said(&mut self) -> Vec<String> {
        std::mem::take(&mut self.said.borrow_mut())
    }
}

impl Uploads {
    pub fn new(seed: u64, faults: BucketFaults) -> Self {
        let store = Arc::new(SimStore::new(seed, faults));
        // One part in flight: the requests reach the bucket in one order, the seed's.
        let bucket = Bucket::over(store.clone(), URL, faults.part_size, 1).expect("the URL");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a runtime");
        Self {
            store,
            bucket,
            runtime,
        }
    }

    /// A newly started uploader's pass over the sessions in `log_dir`, oldest first, each
    /// until it has nothing more to do or a step fails; a kill ends it. Run it with
    /// [`resume`](Self::resume).
    pub fn start(&self, log_dir: &Path) -> PassRun {
        let said = Rc::new(RefCell::new(Vec::new()));
        let (store, bucket, log_dir): (_, _, PathBuf) =
            (self.store.clone(), self.bucket.clone(), log_dir.to_owned());
        let told = said.clone();
        let future = Box::pin(async move {
            let config = UploadConfig::default();
            for session in list_sessions(&log_dir).unwrap_or_default() {
                let name = session.file_name().unwrap().to_string_lossy().into_owned();
                let step_said = told.clone();
                let result = upload_session_to(&config, bucket.clone(), &session, |what| {
                    step_said.borrow_mut().push(format!("upload: {what}"))
                })
                .await;
                told.borrow_mut().extend(store.take_said());
                if let Err(e) = result {
                    // The path of the run's folder is not the seed's: left out.
                    let why = e.to_string().replace(&log_dir.display().to_string(), "");
                    told.borrow_mut()
                        .push(format!("upload: {name}: failed: {why}"));
                    return;
                }
            }
        });
        PassRun { future, said }
    }

    /// Runs `run` at `now` until it is over (what it came to) or waits for a slow answer
    /// (`None`: run it again at [`SimStore::due`]).
    pub fn resume(&self, run: &mut PassRun, now: Instant) -> Option<Pass> {
        {
            let mut s = self.store.state.lock().unwrap();
            s.now = Some(now);
            if s.due.is_some_and(|due| due <= now)
                && let Some(waker) = s.waiting.take()
            {
                waker.wake();
            }
        }
        let (killed, parked) = (self.store.killed.clone(), self.store.parked.clone());
        let over = self.runtime.block_on(async {
            tokio::select! {
                biased;
                () = killed.notified() => Some(true),
                () = &mut run.future => Some(false),
                () = parked.notified() => None,
            }
        });
        let killed = over?;
        let mut said = run.take_said();
        said.extend(self.store.take_said());
        if killed {
            said.push("upload: the daemon is killed".into());
        }
        Some(Pass { said, killed })
    }

    /// The pass `run` dies with the daemon, its request unanswered.
    pub fn abandon(&self, mut run: PassRun) -> Vec<String> {
        let mut s = self.store.state.lock().unwrap();
        (s.due, s.waiting) = (None, None);
        drop(s);
        let mut said = run.take_said();
        said.extend(self.store.take_said());
        said
    }

    /// The bucket's objects.
    pub fn objects(&self) -> BTreeMap<String, Bytes> {
        self.runtime.block_on(self.store.objects())
    }
}

/// The session journals in `log_dir`, each with its session's folder name.
fn journals(log_dir: &Path) -> Result<Vec<(std::path::PathBuf, Journal)>, String> {
    let mut all = Vec::new();
    for session in list_sessions(log_dir).map_err(|e| e.to_string())? {
        let journal = load_journal(&session).map_err(|e| format!("a journal: {e}"))?;
        if let Some(j) = journal {
            all.push((session, j));
        }
    }
    Ok(all)
}

fn sha256(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// The journal is never ahead of the bucket: each file it says is up is there, with the
/// content it says.
pub fn check_journals(log_dir: &Path, objects: &BTreeMap<String, Bytes>) -> Result<(), String> {
    for (session, journal) in journals(log_dir)? {
        for (file, record) in &journal.objects {
            if let ObjectRecord::Done { key, sha256: s, .. } = record {
                let there = objects.get(key).map(|b| sha256(b));
                if there.as_deref() != Some(s.as_str()) {
                    return Err(format!(
                        "{}: the journal has {file} up as {key} ({s}); the bucket has {there:?}",
                        session.display()
                    ));
                }
            }
        }
    }
    Ok(())
}

/// After the passes without faults: every closed split and amendment of every session in
/// `log_dir`, and its manifest, are in the bucket once, byte for byte, and nothing else is but what was
/// uploaded of the sessions the disk budget `deleted`; every closed session's upload is
/// complete.
pub fn check(
    log_dir: &Path,
    deleted: &[std::path::PathBuf],
    objects: &BTreeMap<String, Bytes>,
) -> Result<(), String> {
    check_journals(log_dir, objects)?;
    let mut expected = BTreeSet::new();
    for session in list_sessions(log_dir).map_err(|e| e.to_string())? {
        let manifest = read_manifest(&session).map_err(|e| format!("a manifest: {e}"))?;
        let journal = match load_journal(&session).map_err(|e| format!("a journal: {e}"))? {
            Some(j) => j,
            None if manifest.all_splits().all(|s| !s.closed) => continue,
            None => return Err(format!("{}: no upload journal", session.display())),
        };
        if manifest.closed && !journal.storage_complete(&manifest) {
            return Err(format!(
                "{}: closed, and its upload is not complete: {journal:?}",
                session.display()
            ));
        }
        let closed = manifest.all_splits().filter(|s| s.closed);
        let amendments = manifest.amendments.iter().map(|a| a.file.as_str());
        let files = (closed.map(|s| s.file.as_str()))
            .chain(amendments)
            .chain([MANIFEST]);
        for file in files {
            let key = journal.key(file);
            let on_disk = std::fs::read(session.join(file)).map_err(|e| e.to_string())?;
            match objects.get(&key) {
                Some(up) if up[..] == on_disk[..] => {}
                Some(up) => {
                    return Err(format!(
                        "{key}: {} bytes in the bucket, {} on disk, not the same",
                        up.len(),
                        on_disk.len()
                    ));
                }
                None => return Err(format!("{key}: not in the bucket")),
            }
            expected.insert(key);
        }
    }
    let of_deleted = |key: &str| {
        (deleted.iter().filter_map(|d| d.file_name()?.to_str()))
            .any(|name| key.contains(&format!("/{name}/")))
    };
    let extra: Vec<&String> = (objects.keys())
        .filter(|k| !expected.contains(*k) && !of_deleted(k))
        .collect();
    if !extra.is_empty() {
        return Err(format!("objects no session has: {extra:?}"));
    }
    Ok(())
}
