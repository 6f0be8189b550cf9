//! Columns and an event buffer in the simulation: in the PX4 seeds a [`ColumnPlan`] draws, the
//! store keeps the accelerometers (`sensor_accel*`) in a column of their own, `imu`, and the
//! ESC status in an event buffer, `esc`, written only around events: a logged string that
//! matches, two field conditions (the first ESC's speed past a drawn rpm, the battery's
//! remaining charge under 60 %), the flight diagnostics' findings, and events asked for at
//! drawn times (`ulog-recv event`), each through the store's queue as the daemon's are.
//!
//! [`check`] holds each column of a session to the log the store was handed, routed as this
//! test reads the store's promise (not with the store's router): a subscription, its samples
//! and its removal go to the column of the topic's name; flag bits, info, parameters, syncs
//! and dropouts to every column; logged strings and the rest to the main one. Each column's
//! splits read on their own, and, their preambles aside, are that column's share of the log
//! (its formats aside: each one of the log's). The buffer's samples are each inside a
//! window of an event the store handed out, and every sample inside the window of an event
//! asked for or triggered is there, unless the buffer's memory bound may have dropped it.

use std::collections::HashSet;
use std::path::Path;

use sha2::{Digest, Sha256};
use ulog_recv::store::columns::ColumnSpec;
use ulog_recv::store::events::{
    DEFAULT_BUFFER_BYTES, EventBufferSpec, EventRecord, EventSource, FieldCondition, Trigger,
};
use ulog_recv::store::manifest::{Manifest, SplitEntry, hex};
use ulog_recv::ulog::message::{FILE_HEADER_LEN, framed};

use super::schedule::ColumnPlan;
use super::splits::{Splits, check_each};

/// The columns besides the main one, as the test names them.
pub const MAIN: &str = ulog_recv::store::columns::MAIN;
const IMU: &str = "imu";
const ESC: &str = "esc";

/// The store's columns, its event buffer and the triggers of `plan`.
pub fn store_options(plan: &ColumnPlan) -> (Vec<ColumnSpec>, Vec<EventBufferSpec>, Vec<Trigger>) {
    let column = |name: &str, pattern: &str| ColumnSpec {
        name: name.into(),
        patterns: vec![pattern.into()],
    };
    let buffer = EventBufferSpec {
        column: column(ESC, "esc_status"),
        before_us: plan.before_us,
        after_us: plan.after_us,
        max_bytes: plan.max_bytes,
    };
    let condition = |text: &str| {
        Trigger::Field(FieldCondition::parse(text).expect("the simulation's condition parses"))
    };
    let triggers = vec![
        Trigger::logged_text("(?i)takeoff|mission item").expect("a regular expression"),
        condition(&format!("esc_status.esc[0].esc_rpm > {}", plan.rpm_over)),
        condition("battery_status.remaining < 0.6"),
    ];
    (vec![column(IMU, "sensor_accel*")], vec![buffer], triggers)
}

/// Which of the session's columns a topic of the simulated PX4 belongs to.
fn column_of(topic: &[u8]) -> &'static str {
    if topic.starts_with(b"sensor_accel") {
        IMU
    } else if topic == b"esc_status" {
        ESC
    } else {
        MAIN
    }
}

/// ULog message types, as the format's specification spells them.
const FORMAT: u8 = b'F';
const DATA: u8 = b'D';
const ADD_LOGGED: u8 = b'A';
const REMOVE_LOGGED: u8 = b'R';
/// The types every column gets: flag bits, info, multi-info, parameters, defaults, syncs and
/// dropouts.
const EVERY_COLUMN: &[u8] = b"BIMPQSO";
const DROPOUT: u8 = b'O';

fn msg_id(m: &[u8]) -> u16 {
    u16::from_le_bytes([m[3], m[4]])
}

/// A sample's timestamp (its first field, as every PX4 topic's).
fn sample_time(m: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(m.get(5..13)?.try_into().ok()?))
}

/// The log's messages past its file header, each with the column it goes to (formats left
/// out: which of them a column needs depends on the formats' nesting).
fn routed(log: &[u8]) -> Vec<(&'static str, &[u8])> {
    routed_to(log, usize::MAX)
}

/// [`routed`] of the log's whole messages within its first `n` bytes.
fn routed_to(log: &[u8], n: usize) -> Vec<(&'static str, &[u8])> {
    let mut topics = std::collections::HashMap::new();
    let mut out = Vec::new();
    let mut end = FILE_HEADER_LEN;
    for m in framed(log.get(FILE_HEADER_LEN..).unwrap_or_default()) {
        end += m.len();
        if end > n {
            break;
        }
        let column = match m[2] {
            FORMAT => continue,
            ADD_LOGGED => {
                let column = column_of(&m[6..]);
                topics.insert(u16::from_le_bytes([m[4], m[5]]), column);
                column
            }
            DATA | REMOVE_LOGGED => topics.get(&msg_id(m)).copied().unwrap_or(MAIN),
            t if EVERY_COLUMN.contains(&t) => {
                for c in [MAIN, IMU, ESC] {
                    out.push((c, m));
                }
                continue;
            }
            _ => MAIN,
        };
        out.push((column, m));
    }
    out
}

/// The SD log `sd`'s data records and logged strings that `column` takes (an event
/// buffer's samples only inside `windows`), in order: what a fill may bring back to it.
pub fn records_of(sd: &[u8], column: &str, windows: Option<&[[u64; 2]]>) -> Vec<Vec<u8>> {
    let inside = |m: &[u8]| match (windows, sample_time(m)) {
        (Some(w), Some(ts)) if m[2] == DATA => w.iter().any(|w| w[0] <= ts && ts <= w[1]),
        _ => true,
    };
    (routed(sd).into_iter())
        .filter(|(c, m)| *c == column && matches!(m[2], DATA | b'L' | b'C') && inside(m))
        .map(|(_, m)| m.to_vec())
        .collect()
}

/// What a check of a columned session knows besides its folder: the events the store handed
/// out for it, and the plan its store was configured by (within the daemon's default bound,
/// the buffer's memory drops no sample before its time).
pub struct Judged<'a> {
    pub events: Vec<&'a EventRecord>,
    pub plan: &'a ColumnPlan,
}

/// How much of its share of the log each column must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    /// All of it: nothing was lost between the store and the disk.
    All,
    /// A beginning of it, at least its share of the log's first `durable` bytes (what a
    /// power cut found durable) less its last message (a torn one the repair cut).
    Beginning { durable: u64 },
    /// Some of it, in order, with dropout marks of the store's own (a pause, samples the
    /// queue stripped), its last message torn when `torn` (a power cut came).
    Some { torn: bool },
}

/// The first broken promise of the columned session in `session` (its manifest `manifest`),
/// against `log`, the bytes its store was handed: each column holds its share of the log as
/// `kept` says (the event buffer's samples aside, held to [`check_buffer`]).
pub fn check(
    log: &[u8],
    session: &Path,
    manifest: &Manifest,
    judged: &Judged,
    kept: Kept,
) -> Result<(), String> {
    let formats: HashSet<&[u8]> = framed(log.get(FILE_HEADER_LEN..).unwrap_or_default())
        .filter(|m| m[2] == FORMAT)
        .collect();
    let routed = routed(log);
    let columns = std::iter::once((MAIN, &manifest.splits, None)).chain(
        (manifest.columns.iter()).map(|c| (c.name.as_str(), &c.splits, c.event_buffer.as_ref())),
    );
    for (name, entries, buffer) in columns {
        let splits =
            read_column(session, name, entries).map_err(|e| format!("column {name}: {e}"))?;
        check_each(ulog_recv::autopilot::LogFormat::ULog, &splits)
            .map_err(|e| format!("column {name}: {e}"))?;
        let mut written: Vec<Vec<u8>> = Vec::new();
        for (file, s) in splits.files.iter().zip(&splits.summaries) {
            // (A first split has no preamble but the log's own, unless writing resumed in it.)
            let from = (s.preamble_bytes as usize).max(FILE_HEADER_LEN);
            written.extend(framed(file.get(from..).unwrap_or_default()).map(<[u8]>::to_vec));
        }
        if let Some(f) = written
            .iter()
            .find(|m| m[2] == FORMAT && !formats.contains(&m[..]))
        {
            return Err(format!(
                "column {name} defines a format the log does not: {}",
                String::from_utf8_lossy(&f[3..])
            ));
        }
        written.retain(|m| m[2] != FORMAT);
        let share: Vec<&[u8]> = (routed.iter())
            .filter(|(c, _)| *c == name)
            .map(|(_, m)| *m)
            .collect();
        let in_buffer = |m: &[u8]| buffer.is_some() && m[2] == DATA;
        let (samples, rest): (Vec<&Vec<u8>>, Vec<&Vec<u8>>) =
            written.iter().partition(|m| in_buffer(m));
        let (share_samples, share_rest): (Vec<&[u8]>, Vec<&[u8]>) =
            share.iter().partition(|m| in_buffer(m));
        let what = |e: String| format!("column {name}: {e}");
        match kept {
            Kept::All => equal(&rest, &share_rest).map_err(what)?,
            Kept::Beginning { durable } => {
                let least = (routed_to(log, durable as usize).iter())
                    .filter(|(c, m)| *c == name && !in_buffer(m))
                    .count();
                beginning(&rest, &share_rest, least.saturating_sub(1)).map_err(what)?
            }
            Kept::Some { torn } => part_of(&rest, &share_rest, torn).map_err(what)?,
        }
        if buffer.is_some() {
            check_buffer(&samples, &share_samples, judged, kept == Kept::All).map_err(what)?;
        }
    }
    Ok(())
}

/// A column's splits as its manifest entries list them: exactly the split files in its
/// folder, each closed with its true SHA-256.
pub fn read_column(session: &Path, name: &str, entries: &[SplitEntry]) -> Result<Splits, String> {
    let folder = match name {
        MAIN => session.to_path_buf(),
        _ => session.join(name),
    };
    let mut on_disk: Vec<String> = std::fs::read_dir(&folder)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("split_"))
        .collect();
    on_disk.sort();
    let listed: Vec<&str> = (entries.iter())
        .map(|s| s.file.rsplit('/').next().unwrap_or_default())
        .collect();
    if listed != on_disk {
        return Err(format!(
            "the manifest lists {listed:?}, the folder has {on_disk:?}"
        ));
    }
    let mut splits = Splits::default();
    for s in entries {
        let bytes = std::fs::read(session.join(&s.file)).map_err(|e| format!("{}: {e}", s.file))?;
        let sha = hex(&Sha256::digest(&bytes));
        if !s.closed || s.sha256.as_deref() != Some(sha.as_str()) {
            return Err(format!(
                "{}: closed {}, SHA-256 {:?} in the manifest, {sha} on disk",
                s.file, s.closed, s.sha256
            ));
        }
        splits.files.push(bytes);
        splits.summaries.push(s.summary.clone());
    }
    Ok(splits)
}

fn describe(m: &[u8]) -> String {
    format!("a '{}' message of {} bytes", m[2] as char, m.len())
}

/// The column's messages are its share, all of it, in order.
fn equal(written: &[&Vec<u8>], share: &[&[u8]]) -> Result<(), String> {
    if let Some(k) = (0..written.len().max(share.len()))
        .find(|&k| written.get(k).map(|m| &m[..]) != share.get(k).copied())
    {
        return Err(format!(
            "its messages are not its share of the log: {} of {} alike, then {} where the \
             log has {}",
            k,
            share.len(),
            written.get(k).map_or("nothing".into(), |m| describe(m)),
            share.get(k).map_or("nothing".into(), |m| describe(m)),
        ));
    }
    Ok(())
}

/// The column's messages are a beginning of its share, at least `least` of them long; the
/// last may be torn (a power cut's).
fn beginning(written: &[&Vec<u8>], share: &[&[u8]], least: usize) -> Result<(), String> {
    let alike = (written.iter().zip(share))
        .take_while(|(w, s)| &w[..] == **s)
        .count();
    if alike + 1 < written.len() || written.len() > share.len() {
        return Err(format!(
            "a power cut came: its messages are not a beginning of its share of the log ({} \
             of {} alike)",
            alike,
            written.len()
        ));
    }
    if written.len() < least {
        return Err(format!(
            "a power cut came: it holds {} of its share's messages, and {least} of them were \
             durable",
            written.len()
        ));
    }
    Ok(())
}

/// The column's messages are some of its share, in its order, each once, with dropout marks
/// of the store's own between them (a mark is passed over, not matched: one of the store's
/// may have the bytes of a later one of the link's); the last may be torn (`torn`: a power
/// cut came).
fn part_of(written: &[&Vec<u8>], share: &[&[u8]], torn: bool) -> Result<(), String> {
    let mut from = 0;
    for (n, m) in written.iter().enumerate() {
        if m[2] == DROPOUT {
            continue;
        }
        match (from..share.len()).find(|&k| share[k] == &m[..]) {
            Some(k) => from = k + 1,
            None if torn && n + 1 == written.len() => {}
            None => {
                return Err(format!(
                    "its message {n} of {} ({}) is not in its share of the log after the \
                     one before it (invented, twice or out of place)",
                    written.len(),
                    describe(m)
                ));
            }
        }
    }
    Ok(())
}

/// The event buffer's samples: some of the log's, in its order, each inside a window of an
/// event the store handed out; with `exact`, every sample inside the window of an event asked
/// for or triggered (a finding's moment may lie before what the buffer still held), unless
/// the memory bound could have dropped it.
fn check_buffer(
    written: &[&Vec<u8>],
    share: &[&[u8]],
    judged: &Judged,
    exact: bool,
) -> Result<(), String> {
    let windows = |only_timely: bool| -> Vec<[u64; 2]> {
        (judged.events.iter())
            .filter(|e| !only_timely || e.source != EventSource::Diagnostic)
            .flat_map(|e| &e.windows)
            .filter(|w| w.buffer == ESC)
            .map(|w| [w.from_us, w.to_us])
            .collect()
    };
    let inside = |windows: &[[u64; 2]], ts: u64| windows.iter().any(|w| w[0] <= ts && ts <= w[1]);
    let all = windows(false);
    let mut from = 0;
    for (n, m) in written.iter().enumerate() {
        let Some(k) = (from..share.len()).find(|&k| share[k] == &m[..]) else {
            return Err(format!(
                "its sample {n} of {} is not the log's next (invented, twice or out of place)",
                written.len()
            ));
        };
        from = k + 1;
        let ts = sample_time(m).unwrap_or_default();
        if !inside(&all, ts) {
            return Err(format!(
                "its sample at {ts} µs is inside no event's window ({} events)",
                judged.events.len()
            ));
        }
    }
    if !exact || judged.plan.max_bytes < DEFAULT_BUFFER_BYTES {
        return Ok(());
    }
    let timely = windows(true);
    let kept: HashSet<&[u8]> = written.iter().map(|m| &m[..]).collect();
    if let Some(missing) = (share.iter())
        .filter(|m| sample_time(m).is_some_and(|ts| inside(&timely, ts)))
        .find(|m| !kept.contains(*m))
    {
        return Err(format!(
            "its sample at {} µs, inside an event's window, is not written ({} of the log's \
             {} written)",
            sample_time(missing).unwrap_or_default(),
            written.len(),
            share.len()
        ));
    }
    Ok(())
}
