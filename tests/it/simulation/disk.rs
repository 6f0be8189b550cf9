//! The store in the simulation: the receiver's own [`LogStore`] writes each log as the
//! daemon's store thread does (every write handed to the OS at once, a sync round as the
//! simulated clock reaches it), into a folder of its own on tmpfs. A daemon's restart is a
//! crash: the store is dropped mid-log, and the next one opens the folder and repairs what it
//! finds, as the daemon does at start. [`check`] holds a log's session folder to the log.
//! With a disk budget, each session the store deletes is checked against the budget's
//! order as it goes, and the folder's size once the run is over ([`check_budget`]).
//!
//! A full disk is real too: a seed that fills it gets a tmpfs of its own, in which another
//! program's file takes the room for a while ([`Disk::fill_up`]); the store's writes fail as
//! they would on any full disk, and the daemon's store thread takes each error as it does.
//! A session whose writing paused is held to the splits it kept: each a run of the log.
//!
//! The files are real and the kernel's: a crash of the process loses nothing handed to it.
//! A power cut loses what the receiver had not synced: [`super::power`] models that from the
//! receiver's own syncs. Each sync round the store completes promises that what was written
//! before it began is durable; a log a power cut cut short is held to that
//! ([`Disk::cut_short`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use ulog_recv::autopilot::LogFormat;
use ulog_recv::diagnose::Selection;
use ulog_recv::store::events::EventRecord;
use ulog_recv::store::files::{UPLOADED_MARK, list_sessions};
use ulog_recv::store::manifest::read_manifest;
use ulog_recv::store::{LogStore, SplitPolicy, StoreOptions};
use ulog_recv::ulog::message::{framed, msg_type};

use super::columns::{Judged, Kept};
use super::power::{Cut, PowerModel};
use super::schedule::ColumnPlan;
use super::splits::Splits;
use super::store_thread::Stored;
use crate::common::tmpfs::Tmpfs;

/// The size of a run's own tmpfs.
const TMPFS_BYTES: u64 = 256 << 20;

/// A disk budget of so many bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Budget {
    /// `max-total`: the log folder's size at most.
    MaxTotal(u64),
    /// `min-free`: the folder's filesystem keeps all of its room free but these bytes.
    MinFree(u64),
}

/// A run's log folder and the store writing into it.
pub struct Disk {
    dir: PathBuf,
    options: StoreOptions,
    store: Option<LogStore>,
    /// With a budget: the sessions as last seen, oldest first (the open one not closed).
    seen: Vec<Seen>,
    /// Sessions the budget deleted.
    pub deleted: Vec<PathBuf>,
    /// The first deletion out of the budget's order.
    pub misordered: Option<String>,
    /// What the disk keeps through a power cut.
    power: PowerModel,
    /// The log bytes written, over all sessions.
    written: u64,
    /// Each session's log bytes, as a span of [`written`](Self::written).
    sessions: Vec<SessionBytes>,
    /// [`written`](Self::written) when the sync round under way began.
    round_from: u64,
    /// [`written`](Self::written) when the last completed sync round began: durable.
    promised: u64,
    /// The sessions power cuts cut short, with how many of their log bytes were durable
    /// then (the fewest, over the cuts).
    pub cut_short: HashMap<PathBuf, u64>,
    /// The first session a power cut took whole although some of it was durable.
    pub vanished: Option<String>,
    /// Bytes of whole messages the store held in memory as the sync round under way began,
    /// and the first round that completed with them still held (out of its reach: no power
    /// cut needed to see a promise broken).
    held_at_round: usize,
    pub held_through_round: Option<String>,
    /// The power cuts so far: the machine's boot is another after each.
    boots: u32,
    /// The tmpfs of its own a seed that fills the disk has (unmounted when dropped), and the
    /// other program's file that takes its room while the disk is full.
    tmpfs: Option<Tmpfs>,
    ballast: Option<PathBuf>,
    /// The bytes the other program leaves free.
    room: u64,
    /// The other program gave back only part of the room: less than `min-free` asks.
    eased: bool,
    /// The store's errors, as the daemon's store thread logs them.
    pub errors: u32,
    /// Sessions whose writing failed (a full disk, a failed sync): writing paused, and
    /// resumed in a new split once there was room and the disk synced again.
    pub paused: Vec<PathBuf>,
    /// The disk fails every sync (an I/O error) for now.
    syncs_fail: bool,
    /// The first tick that found writing paused on a disk with room that syncs, while it
    /// stays so.
    writable_since: Option<Instant>,
    /// The first time writing stayed paused a whole sync interval past that.
    pub stuck_paused: Option<String>,
    /// The store keeps columns and an event buffer ([`super::columns`]) as this plan says.
    pub columns: Option<ColumnPlan>,
    /// The events the store handed out, each with its session's folder, in order.
    pub events: Vec<(PathBuf, EventRecord)>,
}

/// A session's log bytes: `from..to` of all the bytes written.
#[derive(Debug)]
struct SessionBytes {
    dir: PathBuf,
    from: u64,
    to: u64,
}

/// A session folder as last seen: whether it was closed and uploaded then.
#[derive(Debug, Clone)]
struct Seen {
    dir: PathBuf,
    closed: bool,
    uploaded: bool,
}

impl Seen {
    /// The budget's order: uploaded before not, then oldest first.
    fn key(&self) -> (bool, &Path) {
        (!self.uploaded, &self.dir)
    }
}

impl Disk {
    /// A store for seed `seed`'s run in a new, empty folder; `budget`: its disk budget,
    /// `uploads`: the budget deletes uploaded sessions first; `fills`: the folder is on a
    /// tmpfs of its own, to fill (a `min-free` budget needs it: without one, none is kept);
    /// `columns`: its columns and event buffer.
    pub fn new(
        seed: u64,
        policy: SplitPolicy,
        budget: Option<Budget>,
        uploads: bool,
        fills: bool,
        columns: Option<&ColumnPlan>,
    ) -> Self {
        let shm = Path::new("/dev/shm");
        let base = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let mut dir = base.join(format!(
            "ulog-recv-sim-{}-{seed}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("the log folder is made");
        let tmpfs = fills
            .then(|| Tmpfs::mount_at(&dir, &TMPFS_BYTES.to_string()))
            .flatten();
        if tmpfs.is_some() {
            dir = dir.join("logs");
            std::fs::create_dir_all(&dir).expect("the log folder is made");
        }
        let power = PowerModel::watch(&dir);
        let (columns_options, event_buffers, triggers) = columns
            .map(super::columns::store_options)
            .unwrap_or_default();
        let options = StoreOptions {
            columns: columns_options,
            event_buffers,
            triggers,
            policy,
            // The flight diagnostics run in the store thread, on every log: here too.
            diagnostics: Selection::ALL,
            max_total: match budget {
                Some(Budget::MaxTotal(bytes)) => Some(bytes),
                _ => None,
            },
            min_free: match budget {
                Some(Budget::MinFree(bytes)) if tmpfs.is_some() => {
                    Some(TMPFS_BYTES.saturating_sub(bytes))
                }
                _ => None,
            },
            uploads,
            boot_id: Some("simulated boot 0".into()),
            ..StoreOptions::new(dir.clone())
        };
        let mut disk = Self {
            dir,
            options,
            store: None,
            seen: Vec::new(),
            deleted: Vec::new(),
            misordered: None,
            power,
            written: 0,
            sessions: Vec::new(),
            round_from: 0,
            promised: 0,
            cut_short: HashMap::new(),
            vanished: None,
            held_at_round: 0,
            held_through_round: None,
            boots: 0,
            tmpfs,
            ballast: None,
            room: 0,
            eased: false,
            errors: 0,
            paused: Vec::new(),
            syncs_fail: false,
            writable_since: None,
            stuck_paused: None,
            columns: columns.cloned(),
            events: Vec::new(),
        };
        disk.start();
        disk
    }

    /// The log folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Opens the store on what is there, repairing what a crash left, as the daemon's start
    /// does. The repair closes every session left open, and removes one that nothing of
    /// reached the disk: the budget's watch begins again from what it leaves.
    fn start(&mut self) {
        // (The daemon's start is spared a failing disk: a store that cannot open stops the
        // daemon, and systemd starts it again.)
        self.power.fail_syncs(false);
        let mut store = LogStore::open(self.options.clone()).expect("the store opens");
        store.recover();
        self.power.fail_syncs(self.syncs_fail);
        self.store = Some(store);
        self.look();
    }

    fn store(&mut self) -> &mut LogStore {
        self.store.as_mut().expect("a store while the daemon runs")
    }

    /// A log begins: its session folder (made later when the disk is too full for it).
    pub fn begin(&mut self, vehicle: (u8, u8), started: SystemTime, format: LogFormat) -> PathBuf {
        self.collect_events();
        let dir = (self.store().begin_log(vehicle, started, format)).expect("a session begins");
        self.sessions.push(SessionBytes {
            dir: dir.clone(),
            from: self.written,
            to: self.written,
        });
        if self.store().is_paused() {
            // The disk too full for its folder: it is made when there is room.
            self.errors += 1;
            self.paused.push(dir.clone());
        }
        self.check_deletions(false);
        self.look();
        dir
    }

    /// Whether the store keeps a budget (`max-total` or `min-free`).
    fn has_budget(&self) -> bool {
        self.options.max_total.is_some() || self.options.min_free.is_some()
    }

    /// Sees which sessions are there, closed and uploaded (with a budget).
    pub fn look(&mut self) {
        if !self.has_budget() {
            return;
        }
        let sessions = list_sessions(&self.dir).expect("the log folder lists");
        self.seen = sessions
            .into_iter()
            .map(|dir| Seen {
                closed: read_manifest(&dir).is_ok_and(|m| m.closed),
                uploaded: dir.join(UPLOADED_MARK).exists(),
                dir,
            })
            .collect();
    }

    /// Sessions gone since last seen: each must have been closed, and before every closed
    /// session that stays in the budget's order. `rounds`: the store's tick ran a sync round
    /// (or tried to resume paused writing), which may complete a session a full disk kept
    /// from completing.
    fn check_deletions(&mut self, rounds: bool) {
        if !self.has_budget() {
            return;
        }
        let now = list_sessions(&self.dir).expect("the log folder lists");
        if self.seen.iter().all(|s| now.contains(&s.dir)) {
            // None gone; a session seen open may have been closed since, as a sync round
            // completes one a full disk kept from completing: the budget may delete it next.
            if rounds {
                for s in self.seen.iter_mut().filter(|s| !s.closed) {
                    s.closed = read_manifest(&s.dir).is_ok_and(|m| m.closed);
                }
            }
            if now.len() != self.seen.len() {
                self.look();
            }
            return;
        }
        let (gone, stayed): (Vec<&Seen>, Vec<&Seen>) =
            self.seen.iter().partition(|s| !now.contains(&s.dir));
        for g in &gone {
            let wrong = if !g.closed {
                Some("it was open".to_string())
            } else {
                (stayed.iter().find(|s| s.closed && s.key() < g.key()))
                    .map(|s| format!("{} stays, before it in the budget's order", s.dir.display()))
            };
            if let (Some(why), None) = (wrong, &self.misordered) {
                self.misordered = Some(format!("the budget deleted {}: {why}", g.dir.display()));
            }
            self.deleted.push(g.dir.clone());
        }
        self.look();
    }

    /// The session's bytes, handed to the OS at once.
    pub fn write(&mut self, bytes: &[u8]) {
        let store = self.store.as_mut().expect("a store while the daemon runs");
        let written = store.write(bytes).and_then(|()| store.flush());
        if let Err(e) = written {
            self.failed("a write", e);
        }
        self.written += bytes.len() as u64;
        if let Some(s) = self.sessions.last_mut() {
            s.to = self.written;
        }
        self.collect_events();
    }

    /// An event asked for (`ulog-recv event NAME`); one the store refuses (no log open, or
    /// its list full) is refused as the daemon's store thread refuses it, and makes nothing.
    pub fn request_event(&mut self, name: &str) {
        let _refused = self.store().request_event(name, None).err();
        self.collect_events();
    }

    /// The events the store hands out now, as the open (or last) session's: taken after
    /// every step of the store, so none is another session's.
    fn collect_events(&mut self) {
        let Some(store) = self.store.as_mut() else {
            return;
        };
        let events = store.take_events();
        if let Some(s) = self.sessions.last() {
            self.events
                .extend(events.into_iter().map(|e| (s.dir.clone(), e)));
        }
    }

    /// The queue's bound stripped `samples` before the next bytes.
    pub fn lost(&mut self, samples: u64) {
        self.store().lost(samples);
    }

    pub fn link_dropout(&mut self, chunks: u64, resolved: bool) {
        self.store().link_dropout(chunks, resolved);
    }

    pub fn end(&mut self) {
        if let Err(e) = self.store().end_log() {
            self.failed("the end of a session", e);
        }
        self.collect_events();
        self.check_deletions(false);
        self.look();
    }

    /// A store error, taken as the daemon's store thread takes it (logged, and receiving
    /// goes on); only a full disk or a failing one may cause one here.
    fn failed(&mut self, what: &str, e: std::io::Error) {
        assert!(
            (self.ballast.is_some() && !self.eased) || self.syncs_fail || self.store().is_paused(),
            "{what} failed with room on the disk: {e}"
        );
        self.errors += 1;
        if let Some(s) = self.sessions.last()
            && !self.paused.contains(&s.dir)
        {
            self.paused.push(s.dir.clone());
        }
    }

    /// Another program takes the disk's room but `room` bytes (false without a tmpfs of
    /// its own: the seed was drawn where none can be mounted).
    pub fn fill_up(&mut self, room: u64) -> bool {
        let Some(tmpfs) = &self.tmpfs else {
            return false;
        };
        self.ballast = Some(tmpfs.take_room("ballast", room));
        self.room = room;
        self.eased = false;
        true
    }

    /// With a `min-free` budget: the other program gives back only part of the room, and
    /// keeps its filesystem at half the free space `min-free` asks, which the budget, deleting
    /// every closed session, cannot meet (the disk holds more than the log folder). False
    /// without one: the other program's file goes.
    pub fn ease_up(&mut self) -> bool {
        let Some(min_free) = self.options.min_free.filter(|_| self.ballast.is_some()) else {
            self.free_up();
            return false;
        };
        self.free_up();
        self.fill_up(min_free / 2);
        self.eased = true;
        true
    }

    /// The other program's file is there (the disk full, or eased).
    pub fn has_ballast(&self) -> bool {
        self.ballast.is_some()
    }

    /// The disk fails every sync from now (`on`: an I/O error), or no longer.
    pub fn fail_syncs(&mut self, on: bool) {
        self.syncs_fail = on;
        self.power.fail_syncs(on);
    }

    /// The other program's file goes: room again.
    pub fn free_up(&mut self) {
        if let Some(b) = self.ballast.take() {
            std::fs::remove_file(b).expect("the other program's file goes");
        }
        self.eased = false;
    }

    /// The sync round and the budget, at simulated time `now`.
    pub fn tick(&mut self, now: Instant) {
        let written = self.written;
        let store = self.store.as_mut().expect("a store while the daemon runs");
        let (under_way, rounds, was_paused) =
            (store.syncing(), store.sync_rounds(), store.is_paused());
        if !under_way {
            self.round_from = written;
            self.held_at_round = store.held_bytes();
        }
        let ticked = store.tick(now);
        let completed = store.sync_rounds() > rounds;
        let held = store.held_bytes();
        if completed && self.held_at_round > 0 && held > 0 && self.held_through_round.is_none() {
            self.held_through_round = Some(format!(
                "a sync round completed with {held} bytes of whole messages the store was \
                 handed before it began still in memory, unwritten"
            ));
        }
        if let Err(e) = ticked {
            self.failed("a sync round", e);
        }
        self.collect_events();
        if completed {
            self.promised = self.round_from;
        }
        self.check_resumed(now);
        self.check_deletions(completed || was_paused);
    }

    /// Paused writing resumes at the first sync round that finds room on a disk that syncs:
    /// within a sync interval of the first tick that could see it.
    fn check_resumed(&mut self, now: Instant) {
        let store = self.store.as_ref().expect("a store while the daemon runs");
        let writable = (self.ballast.is_none() || self.eased) && !self.syncs_fail;
        if !(writable && store.is_paused()) {
            self.writable_since = None;
            return;
        }
        let since = *self.writable_since.get_or_insert(now);
        let interval = self.options.fsync_interval;
        if now >= since + interval && self.stuck_paused.is_none() {
            let free = ulog_recv::sys::os::free_bytes(&self.dir).unwrap_or(0);
            self.stuck_paused = Some(format!(
                "writing stayed paused {} ms after the disk had room again ({free} bytes free) \
                 and synced, through a sync interval of {} ms",
                (now - since).as_millis(),
                interval.as_millis()
            ));
        }
    }

    /// Sync rounds until one is over (and the budget kept), from simulated time `now`.
    pub fn settle(&mut self, now: Instant) {
        let interval = self.options.fsync_interval;
        for i in 1..=20 {
            self.tick(now + interval * i);
        }
    }

    /// The daemon dies mid-log and starts again: the next store repairs what it finds.
    pub fn crash_and_restart(&mut self) {
        drop(self.store.take());
        self.start();
    }

    /// The power goes mid-log and comes back: the daemon dies with it, the folder is found
    /// as the disk kept it ([`PowerModel::cut`]), and the next store repairs what it finds.
    pub fn power_cut(&mut self, rng: &mut fastrand::Rng) -> Cut {
        self.power.freeze();
        drop(self.store.take());
        for s in &self.sessions {
            let durable = self.promised.clamp(s.from, s.to) - s.from;
            if durable < s.to - s.from {
                let least = self.cut_short.entry(s.dir.clone()).or_insert(durable);
                *least = (*least).min(durable);
            }
        }
        // (The model rebuilds the folder as the disk kept it: with room to, on a full disk
        // too; the other program's file takes the room again after.)
        let (full, eased) = (self.ballast.is_some().then_some(self.room), self.eased);
        self.free_up();
        let cut = self.power.cut(rng);
        if let Some(room) = full {
            self.fill_up(room);
            self.eased = eased;
        }
        // The machine boots again: the repair looks for torn pages.
        self.boots += 1;
        self.options.boot_id = Some(format!("simulated boot {}", self.boots));
        // What power-up finds is on disk: durable.
        self.promised = self.written;
        self.start();
        // A session nothing of was durable may be gone (its folder's name, or its only
        // split, never reached the disk); its name is free for the next.
        let (gone, stayed): (Vec<SessionBytes>, _) = std::mem::take(&mut self.sessions)
            .into_iter()
            .partition(|s| !s.dir.exists());
        self.sessions = stayed;
        for dir in gone.into_iter().map(|s| s.dir) {
            // (A session whose writing paused is held to the runs it kept, if any.)
            if self.deleted.contains(&dir) || self.paused.contains(&dir) {
                continue;
            }
            match self.cut_short.remove(&dir) {
                Some(0) => {}
                durable => {
                    let _ = self.vanished.get_or_insert_with(|| {
                        format!(
                            "a power cut took {} whole, {durable:?} bytes of it durable",
                            dir.display()
                        )
                    });
                }
            }
        }
        cut
    }
}

impl Drop for Disk {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        // (The tmpfs, if any, is unmounted as it drops.)
    }
}

/// The first broken promise of a log's session folder: its manifest lists exactly the split
/// files there, each closed, with its true SHA-256; and the splits, as the manifest
/// describes them, are the log (see [`super::splits::check`]). For a log a power cut cut
/// short (`cut_short`: how many of its bytes were durable then), a beginning of the log, at
/// least as long as the whole messages of what was durable (and no folder at all if nothing
/// was).
///
/// A session whose writing paused (`paused`: a full disk) is held to less: each split,
/// without its preamble, is a run of the log's whole messages, the runs in the log's order;
/// what lies between them the pause lost.
///
/// A log whose samples the store's queue stripped (`stripped`: what the store did with it)
/// is held to [`check_stripped`]'s promises.
///
/// A session in columns (`columns`: the events the store handed out for it) is held column
/// by column ([`super::columns::check`]).
pub fn check(
    format: LogFormat,
    log: &[u8],
    session: &Path,
    cut_short: Option<u64>,
    paused: bool,
    stripped: Option<&Stored>,
    columns: Option<&Judged>,
) -> Result<(), String> {
    // Nothing of it reached the disk: a power cut before anything was durable, or a disk
    // full from its beginning to its end.
    if (cut_short == Some(0) || paused) && !session.exists() {
        return Ok(());
    }
    let manifest = read_manifest(session).map_err(|e| format!("its manifest: {e}"))?;
    if let Some(judged) = columns {
        let kept = match (cut_short, paused || stripped.is_some()) {
            (None, false) => Kept::All,
            (Some(durable), false) => Kept::Beginning { durable },
            (cut_short, true) => Kept::Some {
                torn: cut_short.is_some(),
            },
        };
        return super::columns::check(log, session, &manifest, judged, kept);
    }
    let mut splits = super::columns::read_column(session, super::columns::MAIN, &manifest.splits)?;
    if let Some(stored) = stripped {
        return check_stripped(format, stored, &splits, cut_short, paused);
    }
    if paused {
        return check_runs(format, log, &splits, cut_short.is_some());
    }
    let Some(durable) = cut_short else {
        return super::splits::check(format, log, &splits);
    };
    let whole = whole_messages_within(format, log, durable);
    // The repair takes a last message whose bytes from a page boundary to the file's end are
    // zeros for torn (`torn_from`): a durable one that ends in zeros may go too.
    let last = last_record_len(format, &log[..whole as usize]) as u64;
    let least = if whole > 0 && log[whole as usize - 1] == 0 {
        whole - last
    } else {
        whole
    };
    let cut_short_err = |held: usize, what: &str| {
        Err(format!(
            "a power cut came when {durable} of its {} bytes were durable ({least} in whole \
             messages): its splits hold {held}, {what}",
            log.len()
        ))
    };
    let mut joined: Vec<u8> = Vec::new();
    for (file, s) in splits.files.iter().zip(&splits.summaries) {
        joined.extend_from_slice(&file[(s.preamble_bytes as usize).min(file.len())..]);
    }
    if !log.starts_with(&joined) {
        // A torn write (a page whose size reached the disk before its data) can leave the
        // last record of the last split part zeros: neither format has a checksum to tell
        // it by. It goes, if it is past what was durable; all before it must be the log.
        let (Some(file), Some(summary)) = (splits.files.last_mut(), splits.summaries.last_mut())
        else {
            return cut_short_err(joined.len(), "none of them");
        };
        let last = last_record_len(format, file);
        let body = file.len() - summary.preamble_bytes as usize;
        let before = joined.len() - last.min(body);
        let differs = joined.iter().zip(log).position(|(a, b)| a != b);
        let at = differs.unwrap_or(joined.len().min(log.len()));
        if at < before || before < least as usize || !log.starts_with(&joined[..before]) {
            return cut_short_err(joined.len(), &format!("not the log from byte {at}"));
        }
        file.truncate(file.len() - last);
        summary.bytes -= last as u64;
        summary.preamble_bytes = summary.preamble_bytes.min(summary.bytes);
        joined.truncate(before);
    }
    if (joined.len() as u64) < least {
        return cut_short_err(joined.len(), "too few");
    }
    super::splits::check(format, &log[..joined.len()], &splits)
}

/// See [`check`]: the splits of a session whose writing paused. With a power cut
/// (`cut_short`), the last split's last record may be torn, and is then left out.
fn check_runs(
    format: LogFormat,
    log: &[u8],
    splits: &Splits,
    cut_short: bool,
) -> Result<(), String> {
    super::splits::check_each(format, splits)?;
    let log = messages(format, log, 0);
    let mut next = 0;
    for (k, (file, s)) in splits.files.iter().zip(&splits.summaries).enumerate() {
        let mut body = messages(format, file, s.preamble_bytes as usize);
        let run_at = |body: &[Vec<u8>], next: usize| {
            (next..=log.len()).find(|&i| log[i..].starts_with(body))
        };
        let mut at = run_at(&body, next);
        // The split writing resumed in marks what the pause lost, before its first sample:
        // one of its marks is not the log's.
        let marks: Vec<usize> = (body.iter().enumerate())
            .filter_map(|(k, m)| is_mark(format, m).then_some(k))
            .collect();
        for m in marks {
            if at.is_some() {
                break;
            }
            let mut without = body.clone();
            without.remove(m);
            at = run_at(&without, next);
            if at.is_some() {
                body = without;
            }
        }
        if at.is_none() && cut_short && k + 1 == splits.files.len() {
            body.pop();
            at = run_at(&body, next);
        }
        let Some(at) = at else {
            return Err(format!(
                "split {k} (after a pause in writing) is not a run of the log's messages after \
                 the split before it"
            ));
        };
        next = at + body.len();
    }
    Ok(())
}

/// See [`check`]: the splits of a log whose samples the store's queue stripped, in runs,
/// while the store stalled. The store wrote what it was handed (`stored.handed`), and a
/// dropout of its own before the next sample after each run:
/// - the marks aside, its messages are those handed: all of them; after a power cut, a
///   beginning of them (at least what was durable, its last record possibly torn); with
///   writing paused, some of them in order;
/// - it has a mark of its own for at least one run when a sample came after the first (none
///   cut short nor paused), and never more than runs and resumed splits;
/// - ULog: no mark says more time than lies between the samples around it.
fn check_stripped(
    format: LogFormat,
    stored: &Stored,
    splits: &Splits,
    cut_short: Option<u64>,
    paused: bool,
) -> Result<(), String> {
    super::splits::check_each(format, splits)?;
    let handed = messages(format, &stored.handed, 0);
    let mut on_disk = Vec::new();
    for (file, s) in splits.files.iter().zip(&splits.summaries) {
        on_disk.extend(messages(format, file, s.preamble_bytes as usize));
    }
    let unmarked = |ms: &[Vec<u8>]| -> Vec<Vec<u8>> {
        ms.iter().filter(|m| !is_mark(format, m)).cloned().collect()
    };
    let (want, got) = (unmarked(&handed), unmarked(&on_disk));
    let own_marks = (on_disk.len() - got.len()).saturating_sub(handed.len() - want.len());
    let most = stored.drop_runs as usize + if paused { splits.files.len() } else { 0 };
    if own_marks > most {
        return Err(format!(
            "{own_marks} dropouts of the store's own, for {} runs of samples stripped",
            stored.drop_runs
        ));
    }
    let whole = |n: usize| format!("{n} of the {} messages handed to the store", want.len());
    if paused {
        let mut rest = want.iter();
        if !got.iter().all(|m| rest.any(|w| w == m)) {
            return Err(format!(
                "its {} messages (after a pause in writing) are not {} in order",
                got.len(),
                whole(got.len())
            ));
        }
    } else if let Some(durable) = cut_short {
        let kept = match want.starts_with(&got) {
            true => got.len(),
            false if want.starts_with(&got[..got.len().saturating_sub(1)]) => got.len() - 1,
            false => {
                return Err(format!(
                    "after a power cut, its {} messages are not the first {}",
                    got.len(),
                    whole(got.len())
                ));
            }
        };
        let within = whole_messages_within(format, &stored.handed, durable) as usize;
        let least = unmarked(&messages(format, &stored.handed[..within], 0)).len();
        if kept + 1 < least {
            return Err(format!(
                "a power cut came when {durable} bytes were durable: it holds {}",
                whole(kept)
            ));
        }
    } else {
        if got != want {
            let at = got.iter().zip(&want).position(|(a, b)| a != b);
            return Err(format!(
                "its messages are not those handed to the store ({} against {}, the marks \
                 aside; first difference at {at:?})",
                got.len(),
                want.len()
            ));
        }
        let sample_after =
            (stored.first_drop_at).is_some_and(|at| has_sample(format, &stored.handed[at..]));
        if own_marks == 0 && sample_after {
            return Err(format!(
                "samples were stripped in {} runs, and a sample came after: no dropout says so",
                stored.drop_runs
            ));
        }
    }
    if format == LogFormat::ULog {
        check_mark_durations(&on_disk)?;
    }
    Ok(())
}

/// Whether whole messages `bytes` hold a sample (ULog's `D`, a DataFlash record with a
/// time).
fn has_sample(format: LogFormat, bytes: &[u8]) -> bool {
    match format {
        LogFormat::ULog => framed(bytes).any(|m| m[2] == msg_type::DATA),
        LogFormat::DataFlash => {
            let mut timed = false;
            ulog_recv::dataflash::Framer::new().push(bytes, |m, f| {
                timed |= ulog_recv::dataflash::format::time_us(f, m).is_some();
            });
            timed
        }
    }
}

/// No ULog dropout says more time than lies between the samples around it (1 ms of rounding
/// allowed).
fn check_mark_durations(messages: &[Vec<u8>]) -> Result<(), String> {
    let time = |m: &Vec<u8>| {
        (m[2] == msg_type::DATA && m.len() >= 13)
            .then(|| u64::from_le_bytes(m[5..13].try_into().expect("8 bytes")))
    };
    let mut before = None;
    for (k, m) in messages.iter().enumerate() {
        if let Some(t) = time(m) {
            before = Some(t);
            continue;
        }
        if m[2] != msg_type::DROPOUT || m.len() < 5 {
            continue;
        }
        let ms = u64::from(u16::from_le_bytes([m[3], m[4]]));
        let after = messages[k + 1..].iter().find_map(time);
        if let (Some(b), Some(a)) = (before, after)
            && ms * 1000 > a.saturating_sub(b) + 1000
        {
            return Err(format!(
                "a dropout of {ms} ms between samples {} µs apart",
                a.saturating_sub(b)
            ));
        }
    }
    Ok(())
}

/// A dropout mark: ULog's 'O', the `MSG` DataFlash's says it with.
fn is_mark(format: LogFormat, m: &[u8]) -> bool {
    match format {
        LogFormat::ULog => m[2] == msg_type::DROPOUT,
        LogFormat::DataFlash => {
            let prefix = ulog_recv::dataflash::gaps::DROPOUT_PREFIX.as_bytes();
            m.windows(prefix.len()).any(|w| w == prefix)
        }
    }
}

/// The whole messages of a log or split `file` after its first `preamble` bytes: ULog's
/// walked from its file header, DataFlash's framed from its start (its FMTs tell lengths).
fn messages(format: LogFormat, file: &[u8], preamble: usize) -> Vec<Vec<u8>> {
    match format {
        LogFormat::DataFlash => {
            let mut all = Vec::new();
            let mut framer = ulog_recv::dataflash::Framer::new();
            framer.push(file, |m, _| all.push(m.to_vec()));
            let mut before = 0;
            ulog_recv::dataflash::Framer::new().push(&file[..preamble], |_, _| before += 1);
            all.split_off(before.min(all.len()))
        }
        LogFormat::ULog => {
            let body = file.get(preamble.max(16)..).unwrap_or_default();
            framed(body).map(<[u8]>::to_vec).collect()
        }
    }
}

/// The length of the last whole record of split `file` (0 if it has none): ULog's walked
/// from its header, DataFlash's by its framer.
fn last_record_len(format: LogFormat, file: &[u8]) -> usize {
    match format {
        LogFormat::DataFlash => {
            let mut last = 0;
            ulog_recv::dataflash::Framer::new().push(file, |m, _| last = m.len());
            last
        }
        LogFormat::ULog => framed(file.get(16..).unwrap_or_default())
            .last()
            .map_or(0, <[u8]>::len),
    }
}

/// How many bytes of `log` are whole messages within its first `n`: ULog's, walked from
/// its header; DataFlash's, at least `n` less the longest a record can be.
fn whole_messages_within(format: LogFormat, log: &[u8], n: u64) -> u64 {
    let n = (n as usize).min(log.len());
    match format {
        LogFormat::DataFlash => n.saturating_sub(255) as u64,
        LogFormat::ULog if n < 16 => 0,
        LogFormat::ULog => (16 + framed(&log[16..n]).map(<[u8]>::len).sum::<usize>()) as u64,
    }
}

/// The budget's promises, once the run is over: no session deleted out of its order (nor
/// while open), and the log folder, its files' bytes counted here, within the budget (with
/// `min-free`, its filesystem's free space at least that).
pub fn check_budget(disk: &Disk) -> Result<(), String> {
    if let Some(wrong) = &disk.misordered {
        return Err(wrong.clone());
    }
    fn bytes(dir: &Path) -> u64 {
        let entries = std::fs::read_dir(dir).into_iter().flatten().flatten();
        entries
            .map(|e| match e.file_type() {
                Ok(t) if t.is_dir() => bytes(&e.path()),
                _ => e.metadata().map_or(0, |m| m.len()),
            })
            .sum()
    }
    if let Some(min_free) = disk.options.min_free {
        let free = ulog_recv::sys::os::free_bytes(disk.dir()).map_err(|e| e.to_string())?;
        if free < min_free {
            // What its files take says whether the room went to them or to a file removed
            // but still open somewhere.
            let files = disk.tmpfs.as_ref().map_or(0, |t| bytes(&t.0));
            return Err(format!(
                "the log folder's filesystem has {free} bytes free after the last sync round, \
                 under the budget's min-free {min_free} (its files take {files} of its \
                 {TMPFS_BYTES} bytes)"
            ));
        }
    }
    let Some(max_total) = disk.options.max_total else {
        return Ok(());
    };
    let used = bytes(disk.dir());
    if used > max_total {
        return Err(format!(
            "the log folder holds {used} bytes after the last sync round, over the budget's \
             {max_total}"
        ));
    }
    Ok(())
}
