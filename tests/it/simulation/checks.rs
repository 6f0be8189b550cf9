//! The promises a run is judged by, against what the simulated vehicle wrote and what its
//! link let through, computed here independently of the receiver's code:
//!
//! - **Split as promised**: without their preambles, a log's splits are the log byte for
//!   byte, and each split reads on its own ([`super::splits`]).
//! - **On disk as received**: with the store on, each log's manifest lists exactly the split
//!   files in its folder, each closed with its true SHA-256, and the splits as the manifest
//!   describes them are the log, after any crash and repair ([`super::disk`]): the log as
//!   its store was handed it, which a stalled store's queue may have stripped of samples
//!   ([`super::store_thread`]).
//! - **Durable once synced**: after a power cut ([`super::power`]), a log is the beginning
//!   of what was received, at least what the store's last completed sync round promised (its
//!   last whole record ending in zeros possibly dropped by the repair as torn); a session
//!   nothing of was durable may be gone, no other. And at every sync round: one that
//!   completes leaves none of the whole messages handed before it began in the store's
//!   memory ([`super::disk::Disk::tick`]).
//! - **Writing resumes**: writing a full disk or a failed sync paused resumes at the first
//!   sync round that finds room on a disk that syncs ([`super::disk::Disk::tick`]).
//! - **Within the budget**: with a disk budget, the store deletes closed sessions only,
//!   uploaded ones first, then the oldest; after the last sync round the log folder holds
//!   at most the budget ([`super::disk::check_budget`]).
//! - **Uploaded once, whole**: with the uploader on, the upload journal never says a file is
//!   in the bucket that is not there with that content; after the last passes every closed
//!   split, amendment and manifest is in the bucket, byte for byte, and nothing else
//!   ([`super::bucket`]).
//! - **Filled from the SD card**: with a fill after the flight, a fill never changes a split;
//!   a filled session holds the SD log's records in its order, each at most once, none
//!   invented; with no gap left unfilled, all of them ([`super::fill`]).
//! - **Published as written**: a live client subscribed to every topic is sent each of the
//!   log's samples once, in order, and a dropout line per mark ([`check_live`]); a client of
//!   the Foxglove server subscribed to every log channel is sent each sample once, in order,
//!   on its topic, at its log time ([`super::foxglove`]).
//! - **Live**: the run ends (the log all out, the last session shut down and closed) within
//!   its time limit, every log of that session closed.
//! - **Signed both ways**: with signing, the vehicle refused none of the receiver's frames
//!   (its signing clock never went back, across restarts and power cuts, whatever the
//!   companion's wall clock says), and the receiver took no frame forged with another key
//!   ([`check_signing`]); replays of the vehicle's own frames invent nothing (below).
//! - **Nothing invented, nothing twice, nothing out of place**: each log the receiver handed
//!   out is, message for message and byte for byte, an in-order subsequence of the vehicle's
//!   log (PX4: its header's time aside, as PX4 stamps each new log; ArduPilot: of what its
//!   streams put into blocks, over all its boots), plus the receiver's dropout marks.
//! - **Honest dropouts**: a dropout mark stands exactly where messages are missing, one event
//!   per mark, and a PX4 mark says the time between the samples around it. ArduPilot's mark
//!   may also stand where a new stream begins (the time between two streams is in none), and
//!   it comes after the untimed messages that follow its gap; what a stream cut short lost of
//!   the startup records the next stream sends again whole needs none.
//! - **Nothing that got through is lost**: PX4: the last log holds every message all of
//!   whose chunks reached the receiver. ArduPilot, when no stream was abandoned, no reboot,
//!   no restart and no outage as long as the receiver's wait for a missing block: one log,
//!   no mark, and nothing missing beyond what the vehicle dropped at the source.

use std::collections::HashSet;

use ulog_recv::autopilot::LogFormat;
use ulog_recv::dataflash::Framer;
use ulog_recv::dataflash::format::time_us;
use ulog_recv::dataflash::gaps::dropout_ms;
use ulog_recv::dataflash::preamble::is_startup;
use ulog_recv::link::CloseReason;
use ulog_recv::link::session::GIVE_UP;
use ulog_recv::sim::ChunkedLog;
use ulog_recv::ulog::message::is_postflight;

use super::schedule::{Autopilot, CompanionClock, FaultKind};
use super::world::{Outcome, ReceivedLog};
use crate::common::split_messages;

/// The most log bytes that may wait for the store beyond its queue's bound.
const MOST_PAST_BOUND: usize = 1 << 20;

/// The first broken promise of `o`, if any.
pub fn check(o: &Outcome, ardupilot_logs: &super::world::ArduPilotLogs) -> Result<(), String> {
    if !o.finished {
        return Err(format!(
            "the run did not end within its time limit ({:?} simulated)",
            o.simulated
        ));
    }
    if o.logs.is_empty() {
        return Err("no log was received".into());
    }
    // Every log of the session that ran to the end was closed (those of a session a restart
    // killed stay as it left them).
    if let Some(n) = (o.logs.iter()).position(|l| l.last_session && l.closed.is_none()) {
        return Err(format!("log {n} was never closed"));
    }
    for (n, log) in o.logs.iter().enumerate() {
        let format = log.format.expect("a log opened with its format");
        super::splits::check(format, &log.bytes, &log.splits)
            .map_err(|e| format!("log {n}'s splits: {e}"))?;
        let deleted = |dir| (o.disk.as_ref()).is_some_and(|d| d.deleted.contains(dir));
        if let Some(dir) = log.stored.dir.as_ref().filter(|d| !deleted(d)) {
            let cut_short = (o.disk.as_ref()).and_then(|d| d.cut_short.get(dir).copied());
            let paused = (o.disk.as_ref()).is_some_and(|d| d.paused.contains(dir));
            let stripped = (log.stored.drop_runs > 0).then_some(&log.stored);
            let handed = &log.stored.handed;
            let columns = (o.disk.as_ref()).and_then(|d| {
                Some(super::columns::Judged {
                    plan: d.columns.as_ref().filter(|_| format == LogFormat::ULog)?,
                    events: (d.events.iter())
                        .filter(|(session, _)| session == dir)
                        .map(|(_, e)| e)
                        .collect(),
                })
            });
            super::disk::check(
                format,
                handed,
                dir,
                cut_short,
                paused,
                stripped,
                columns.as_ref(),
            )
            .map_err(|e| format!("log {n}'s session on disk ({}): {e}", dir.display()))?;
        }
        if let Some(published) = &log.published {
            check_live(format, &log.bytes, published)
                .map_err(|e| format!("log {n}'s live lines: {e}"))?;
        }
        if let Some(sent) = &log.foxglove {
            super::foxglove::check(format, &log.bytes, sent)
                .map_err(|e| format!("log {n}'s Foxglove messages: {e}"))?;
        }
    }
    // Bounded memory: past the store queue's bound only what a reader needs of the samples
    // stripped waits (definitions, parameters, texts).
    if o.past_bound > MOST_PAST_BOUND {
        return Err(format!(
            "the store's queue held {} bytes past its bound",
            o.past_bound
        ));
    }
    if let Some(ahead) = &o.journal_ahead {
        return Err(format!(
            "the upload journal is ahead of the bucket: {ahead}"
        ));
    }
    if let Some(disk) = &o.disk {
        if let Some(vanished) = &disk.vanished {
            return Err(vanished.clone());
        }
        if let Some(held) = &disk.held_through_round {
            return Err(held.clone());
        }
        if let Some(stuck) = &disk.stuck_paused {
            return Err(stuck.clone());
        }
        super::disk::check_budget(disk)?;
    }
    if let (Some(_), Some(disk)) = (o.schedule.fill, &o.disk) {
        let sd = (o.vehicle.px4().and_then(|v| v.sd_log()))
            .ok_or("a fill was planned and the vehicle has no SD log")?;
        super::fill::check(&o.fills, sd.1, &disk.deleted, &disk.events)?;
    }
    if let (Some(uploads), Some(disk)) = (&o.uploads, &o.disk) {
        super::bucket::check(disk.dir(), &disk.deleted, &uploads.objects())
            .map_err(|e| format!("the bucket after the last uploads: {e}"))?;
    }
    if let (Some(signing), Some(clock)) = (&o.signing, o.schedule.signing) {
        check_signing(signing, clock, o.restarts)?;
    }
    match o.schedule.autopilot {
        Autopilot::Px4 => check_px4(o),
        Autopilot::ArduPilot => check_ardupilot(o, ardupilot_logs),
    }
}

/// Signed both ways: the vehicle refused none of the receiver's frames (its signing clock
/// never went back, across the daemon's restarts and power cuts, whatever its wall clock
/// says), and the receiver took none of the frames forged with another key. Only a daemon
/// whose wall clock is behind the vehicle's, before it hears the vehicle (which sets its
/// clock), may send a frame or two a vehicle that does not know it refuses as too old.
fn check_signing(
    s: &super::world::SigningFigures,
    clock: CompanionClock,
    restarts: u32,
) -> Result<(), String> {
    let v = &s.vehicle;
    let behind = matches!(clock, CompanionClock::Behind(_) | CompanionClock::Unset);
    let too_old = if behind {
        v.too_old.saturating_sub(2 * (1 + u64::from(restarts)))
    } else {
        v.too_old
    };
    if v.bad_signature + v.replayed + too_old > 0 {
        return Err(format!(
            "the vehicle refused the receiver's signed frames: {} for their signature, {} as \
             replays, {} as too old",
            v.bad_signature, v.replayed, v.too_old
        ));
    }
    if s.receiver.bad_signature < s.forged {
        return Err(format!(
            "the receiver refused {} frames for their signature, of {} forged",
            s.receiver.bad_signature, s.forged
        ));
    }
    if s.receiver.valid == 0 {
        return Err("the receiver took no signed frame".into());
    }
    Ok(())
}

/// A sample as a live line names it: topic, instance (ULog's multi id; DataFlash's is left
/// out, FMTU saying which field it is), timestamp.
type Sample = (String, Option<u64>, Option<u64>);

/// The live client subscribed to everything was sent every sample of the log, once, in the
/// log's order, and a dropout line for each mark: PX4, each `D` message as its `A` names it;
/// ArduPilot, each message but the formats (FMT, FMTU, UNIT, MULT), the parameters, the
/// version and the texts, its `TimeUS` the timestamp.
fn check_live(
    format: LogFormat,
    bytes: &[u8],
    published: &[serde_json::Value],
) -> Result<(), String> {
    let mut want: Vec<Sample> = Vec::new();
    let mut dropouts = 0;
    match format {
        LogFormat::ULog => {
            let mut names = std::collections::HashMap::new();
            for m in &split_messages(bytes)[1..] {
                let id = |at: usize| u16::from_le_bytes([m[at], m[at + 1]]);
                match m[2] {
                    b'A' => {
                        let name = String::from_utf8_lossy(&m[6..]).into_owned();
                        names.insert(id(4), (name, u64::from(m[3])));
                    }
                    b'D' => {
                        let (name, multi) = names.get(&id(3)).ok_or("a sample before its A")?;
                        let t = u64::from_le_bytes(m[5..13].try_into().unwrap());
                        want.push((name.clone(), Some(*multi), Some(t)));
                    }
                    DROPOUT => dropouts += 1,
                    _ => {}
                }
            }
        }
        LogFormat::DataFlash => Framer::new().push(bytes, |m, f| match f.name.as_str() {
            "FMT" | "FMTU" | "UNIT" | "MULT" | "PARM" | "VER" => {}
            "MSG" => dropouts += usize::from(dropout_ms(m, f).is_some()),
            name => want.push((name.to_string(), None, time_us(f, m))),
        }),
    }
    let got: Vec<Sample> = (published.iter())
        .filter(|l| l["type"] == "data")
        .map(|l| {
            let multi = (format == LogFormat::ULog)
                .then(|| l["multi_id"].as_u64())
                .flatten();
            let topic = l["topic"].as_str().unwrap_or_default().to_string();
            (topic, multi, l["timestamp"].as_u64())
        })
        .collect();
    if let Some(i) = (0..want.len().max(got.len())).find(|&i| want.get(i) != got.get(i)) {
        return Err(format!(
            "sample {i} of {} in the log is {:?}, the client was sent {:?} ({} lines)",
            want.len(),
            want.get(i),
            got.get(i),
            got.len()
        ));
    }
    let dropout_lines = published.iter().filter(|l| l["type"] == "dropout").count();
    if dropout_lines != dropouts {
        return Err(format!(
            "{dropouts} dropout marks in the log, {dropout_lines} dropout lines"
        ));
    }
    Ok(())
}

const DROPOUT: u8 = b'O';
const SYNC: u8 = b'S';

/// Sync messages are all alike: they cannot say where in the log they are, so they are left
/// out of the matching (their loss is still a loss of the messages around them).
fn is_sync(m: &[u8]) -> bool {
    m.len() > 2 && m[2] == SYNC
}

fn check_px4(o: &Outcome) -> Result<(), String> {
    let v = o.vehicle.px4().expect("a PX4 run");
    let log = v.log();
    // Each received log is held to the stream it came from: the one of its header (each
    // stream's is its own: the time it started).
    let streams: Vec<&ChunkedLog> = v.past_streams().iter().chain([log]).collect();
    let mut final_matched = HashSet::new();
    let mut last_is_current = false;
    for (n, received) in o.logs.iter().enumerate() {
        if received.bytes.len() < 16 {
            continue;
        }
        // Two streams may share a header: a stream after a reboot may start where one of
        // the boot before did, at the same log time.
        let same_header = streams
            .iter()
            .rev()
            .filter(|s| s.stream[..16] == received.bytes[..16]);
        let mut verdict = Err(format!(
            "log {n}: its header is no stream's the vehicle sent"
        ));
        let mut from = log;
        for s in same_header {
            verdict = match_px4_log(received, &messages(s)).map_err(|e| format!("log {n}: {e}"));
            from = s;
            if verdict.is_ok() {
                break;
            }
        }
        let matched = verdict?;
        if n + 1 == o.logs.len() {
            final_matched = matched;
            last_is_current = std::ptr::eq(from, log);
        }
    }
    let vehicle = messages(log);
    // Completeness of the last log: every message all of whose chunks arrived (the
    // post-flight data the STOP after a stalled log's close brings out is no log's).
    let stalled = (o.logs.last()).is_some_and(|l| l.closed != Some(CloseReason::Shutdown));
    let arrived = v.arrived();
    let chunks = &log.chunks;
    let covered = chunks
        .last()
        .map_or(0, |c| c.stream_offset + c.data.len() as u64);
    let chunk_of =
        |at: u64| chunks.partition_point(|c| c.stream_offset + c.data.len() as u64 <= at);
    for (k, (&s, m)) in log.message_starts.iter().zip(&vehicle).enumerate().skip(1) {
        let e = s + m.len() as u64;
        if e > covered {
            break;
        }
        let whole = (chunk_of(s)..=chunk_of(e - 1)).all(|i| arrived[i]);
        let not_the_logs = stalled && is_postflight(m);
        if !last_is_current {
            // The last log is an earlier stream's: nothing of this one may have come whole.
            if whole {
                return Err(format!(
                    "message {k} of the last stream reached the receiver whole, and no log \
                     holds that stream"
                ));
            }
            continue;
        }
        if whole && !is_sync(m) && !final_matched.contains(&k) && !not_the_logs {
            return Err(format!(
                "message {k} ('{}', {} bytes at {s}) reached the receiver whole and is not in \
                 the last log",
                m[2] as char,
                m.len()
            ));
        }
    }
    Ok(())
}

/// A stream's messages, its file header first.
fn messages(log: &ChunkedLog) -> Vec<&[u8]> {
    let ends = (log.message_starts.iter().skip(1).copied()).chain([log.stream.len() as u64]);
    (log.message_starts.iter().zip(ends))
        .map(|(&s, e)| &log.stream[s as usize..e as usize])
        .collect()
}

/// Matches one received log against the vehicle's messages; the indices matched.
fn match_px4_log(received: &ReceivedLog, vehicle: &[&[u8]]) -> Result<HashSet<usize>, String> {
    if received.bytes.len() < 16 {
        return Ok(HashSet::new());
    }
    let got = split_messages(&received.bytes);
    if got[0][..8] != vehicle[0][..8] {
        return Err("its file header is not the vehicle's".into());
    }
    let mut matched = HashSet::new();
    let mut next = 1;
    // A mark not yet followed by a message of the vehicle's (which must show something
    // missing), and one whose duration waits for the first sample after it (`None` inside:
    // its event said the duration unknown, and the mark says 0 ms).
    let mut unexplained = false;
    let mut duration: Option<Option<u16>> = None;
    let mut marks = 0;
    // The log's time so far: the latest of its header's and its samples' (a sample from
    // before the header's time, as a replayed log's, does not take it back).
    let mut last_ts = u64::from_le_bytes(got[0][8..16].try_into().unwrap());
    let mut mark_since = last_ts;
    for (i, m) in got.iter().enumerate().skip(1) {
        if m[2] == DROPOUT && vehicle.get(next) != Some(&m.as_slice()) {
            if unexplained || duration.is_some() {
                return Err(format!(
                    "message {i}: a second dropout mark before the first resolved"
                ));
            }
            let known = received.dropouts.get(marks).copied().flatten().is_some();
            duration = Some(known.then(|| u16::from_le_bytes([m[3], m[4]])));
            unexplained = true;
            mark_since = last_ts;
            marks += 1;
            continue;
        }
        if is_sync(m) {
            continue;
        }
        let Some(k) = (next..vehicle.len()).find(|&k| vehicle[k] == m.as_slice()) else {
            let was = (1..next).rev().find(|&k| vehicle[k] == m.as_slice());
            return Err(match was {
                Some(k) => format!(
                    "message {i} ('{}') is the vehicle's message {k} again, or out of place \
                     (expected {next} or later)",
                    m[2] as char
                ),
                None => format!("message {i} ('{}') is not the vehicle's", m[2] as char),
            });
        };
        let skipped = (next..k).any(|j| !is_sync(vehicle[j]));
        if skipped && !unexplained {
            return Err(format!(
                "messages {next}..{k} of the vehicle are missing before message {i} without a \
                 dropout mark"
            ));
        }
        if unexplained && !skipped {
            return Err(format!(
                "a dropout mark before message {i} ('{}', the vehicle's message {k}), where \
                 nothing is missing",
                m[2] as char
            ));
        }
        unexplained = false;
        if duration == Some(None) {
            duration = None;
        }
        if let Some(ts) = sample_time(m) {
            if let Some(Some(ms)) = duration.take() {
                let said = u64::from(ms);
                let honest = (ts.saturating_sub(mark_since) / 1000).min(u64::from(u16::MAX));
                if said.abs_diff(honest) > 1 {
                    return Err(format!(
                        "the dropout mark before message {i} says {said} ms; the samples \
                         around it are {honest} ms apart"
                    ));
                }
            }
            last_ts = last_ts.max(ts);
        }
        matched.insert(k);
        next = k + 1;
    }
    if marks != received.dropouts.len() {
        return Err(format!(
            "{marks} dropout marks and {} dropout events",
            received.dropouts.len()
        ));
    }
    Ok(matched)
}

/// A data message's timestamp (its topic's first field, µs).
fn sample_time(m: &[u8]) -> Option<u64> {
    (m[2] == b'D' && m.len() >= 13).then(|| u64::from_le_bytes(m[5..13].try_into().unwrap()))
}

/// Where in the vehicle's streamed messages (`sent`, each with whether it begins its
/// stream; `stream_starts` the indices of those that do) `got[0]` is, at `from` or later: the first copy of it, unless a stream begins
/// with it there and with more of `got` after it (every stream begins with the same
/// records: the FMT of FMT, and FMT, UNIT and MULT are timeless).
const ALIGN_WINDOW: usize = 256;

fn aligned(
    got: &[Vec<u8>],
    sent: &[(Vec<u8>, bool)],
    stream_starts: &[usize],
    from: usize,
) -> Option<usize> {
    let first = (from..sent.len()).find(|&k| sent[k].0 == got[0])?;
    let common = |k: usize| {
        (got.iter().zip(&sent[k..]))
            .take(ALIGN_WINDOW)
            .take_while(|(g, (s, _))| g == &s)
            .count()
    };
    let later = &stream_starts[stream_starts.partition_point(|&k| k <= first)..];
    let mut starts = (later.iter().copied())
        .filter(|&k| sent[k].0 == got[0])
        .peekable();
    if starts.peek().is_none() {
        return Some(first);
    }
    let mut best = (common(first), first);
    for k in starts {
        let c = common(k);
        if c > best.0 {
            best = (c, k);
        }
    }
    Some(best.1)
}

/// A DataFlash log's messages (its dropout marks aside), whether each carries a time, and
/// for each mark how many messages came before it.
fn stream_messages(bytes: &[u8]) -> (Vec<Vec<u8>>, Vec<bool>, Vec<usize>) {
    let mut messages = Vec::new();
    let mut timed = Vec::new();
    let mut marks = Vec::new();
    Framer::new().push(bytes, |m, f| {
        if dropout_ms(m, f).is_some() {
            marks.push(messages.len());
        } else {
            messages.push(m.to_vec());
            timed.push(time_us(f, m).is_some());
        }
    });
    (messages, timed, marks)
}

/// A DataFlash log's data messages (the startup records, the stream's own DMS and the
/// receiver's marks aside) and, for each mark, how many data messages came before it.
fn dataflash_data(bytes: &[u8]) -> (Vec<Vec<u8>>, Vec<usize>) {
    let mut data = Vec::new();
    let mut marks = Vec::new();
    let mut startup = true;
    Framer::new().push(bytes, |m, f| {
        if dropout_ms(m, f).is_some() {
            marks.push(data.len());
            startup = true;
            return;
        }
        if f.name == "FMT" && !startup {
            // A stream begun again: its startup records come first.
            startup = true;
        }
        if f.name == "DMS" || is_startup(&f.name) || (startup && f.name == "MODE") {
            return;
        }
        startup = false;
        data.push(m.to_vec());
    });
    (data, marks)
}

fn check_ardupilot(o: &Outcome, logs: &super::world::ArduPilotLogs) -> Result<(), String> {
    let s = o.vehicle.ardupilot_stats().expect("an ArduPilot run");
    let whole = &logs[o.schedule.ardupilot_log];
    let played = &whole[..(whole.len() as f64 * o.schedule.ardupilot_share) as usize];
    let (vehicle, _) = dataflash_data(played);
    // Every message the vehicle's streams put into blocks, in order, and whether it is the
    // first of its stream (the time between two streams is missing from any log).
    let mut sent: Vec<(Vec<u8>, bool)> = Vec::new();
    for stream in o.vehicle.ardupilot_streams() {
        let mut first = true;
        Framer::new().push(stream, |m, _| {
            sent.push((m.to_vec(), first));
            first = false;
        });
    }
    let stream_starts: Vec<usize> = (0..sent.len()).filter(|&k| sent[k].1).collect();
    let mut got_total = 0;
    let mut marks_total = 0;
    // A later log holds later streams: no two logs share one.
    let mut next = 0;
    for (n, received) in o.logs.iter().enumerate() {
        let (got, timed, marks) = stream_messages(&received.bytes);
        if marks.len() != received.dropouts.len() {
            return Err(format!(
                "log {n}: {} dropout marks and {} dropout events",
                marks.len(),
                received.dropouts.len()
            ));
        }
        let mut mark_at = marks.iter().peekable();
        // A gap's mark waits for the first message with a time after it (to say the gap's
        // length): the untimed ones after the gap go out before it. So a mark may stand
        // anywhere from the gap to that message, and must stand there if messages are
        // missing (a new stream may be marked or not: what the vehicle wrote between two
        // streams is in neither).
        let mut may_mark = false;
        // Where messages went missing, while their mark is still to come.
        let mut must_mark: Option<(usize, usize, usize)> = None;
        for (i, m) in got.iter().enumerate() {
            let mut marked = false;
            while mark_at.next_if(|&&at| at == i).is_some() {
                marked = true;
            }
            let Some(k) = aligned(&got[i..], &sent, &stream_starts, next) else {
                let earlier = (0..next).rev().find(|&k| sent[k].0 == *m);
                return Err(format!(
                    "log {n}: message {i} (type {}) is not the vehicle's next ones (expected \
                     its streams' message {next} or later): {}",
                    m[2],
                    match earlier {
                        Some(k) => format!("it is its message {k}, again or out of place"),
                        None => "it is none of the vehicle's".into(),
                    }
                ));
            };
            if i == 0 || sent[k].1 || k > next {
                may_mark = true;
            }
            if i > 0 && k > next {
                must_mark.get_or_insert((next, k, i));
            }
            if marked && !may_mark {
                return Err(format!(
                    "log {n}: a dropout mark before message {i}, where nothing is missing"
                ));
            }
            if marked || timed[i] {
                // Unless what is missing comes again later: the startup records of a stream
                // cut short, which the next stream sends again whole (FMT has no time).
                let again = |from: usize, to: usize, at: usize| {
                    let later: HashSet<&[u8]> = got[at..].iter().map(Vec::as_slice).collect();
                    (from..to).all(|j| later.contains(sent[j].0.as_slice()))
                };
                if let (false, Some((from, to, at))) = (marked, must_mark)
                    && !again(from, to, at)
                {
                    return Err(format!(
                        "log {n}: the vehicle's streamed messages {from}..{to} are missing \
                         before message {at} without a dropout mark"
                    ));
                }
                may_mark = false;
                must_mark = None;
            }
            next = k + 1;
        }
        got_total += dataflash_data(&received.bytes).0.len();
        marks_total += marks.len();
    }
    // An outage longer than the receiver's wait for a hole ends the wait: the hole is
    // given up while the vehicle still holds the block.
    let long_outage =
        (o.schedule.faults.iter()).any(|f| f.kind == FaultKind::Outage && f.len >= GIVE_UP);
    if o.reboots == 0 && o.restarts == 0 && s.abandoned_blocks == 0 && !long_outage {
        if o.logs.len() != 1 || marks_total != 0 {
            return Err(format!(
                "{} logs and {marks_total} dropout marks, with no block ever given up ({s:?})",
                o.logs.len()
            ));
        }
        let missing = vehicle.len() - got_total;
        let unsent = s.dropped_messages + s.unserved_messages;
        if missing as u64 > unsent {
            return Err(format!(
                "{missing} of the vehicle's {} data messages are missing; it dropped {} at \
                 the source, wrote {} before it served a client and gave up no block",
                vehicle.len(),
                s.dropped_messages,
                s.unserved_messages
            ));
        }
    }
    Ok(())
}
