//! The promises a run is judged by, against what the simulated vehicle wrote and what its
//! link let through, computed here independently of the receiver's code:
//!
//! - **Split as promised**: without their preambles, a log's splits are the log byte for
//!   byte, and each split reads on its own ([`super::splits`]).
//! - **Live**: the run ends (the log all out, the last session shut down and closed) within
//!   its time limit, every log of that session closed.
//! - **Nothing invented, nothing twice, nothing out of place**: each log the receiver handed
//!   out is, message for message and byte for byte, an in-order subsequence of the vehicle's
//!   log (its header's time aside: PX4 stamps each new log), plus the receiver's dropout marks.
//! - **Honest dropouts**: a dropout mark stands exactly where messages are missing (PX4; and
//!   ArduPilot's when its vehicle dropped nothing at the source), one event per mark, and a
//!   PX4 mark says the time between the samples around it.
//! - **Nothing that got through is lost**: PX4: the last log holds every message all of
//!   whose chunks reached the receiver. ArduPilot, when no stream was abandoned, no reboot,
//!   no restart and no outage as long as the receiver's wait for a missing block: one log,
//!   no mark, and nothing missing beyond what the vehicle dropped at the source.

use std::collections::HashSet;

use ulog_recv::dataflash::Framer;
use ulog_recv::dataflash::gaps::dropout_ms;
use ulog_recv::dataflash::preamble::is_startup;
use ulog_recv::link::session::GIVE_UP;

use super::schedule::{Autopilot, FaultKind};
use super::world::{Outcome, ReceivedLog};
use crate::common::split_messages;

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
    }
    match o.schedule.autopilot {
        Autopilot::Px4 => check_px4(o),
        Autopilot::ArduPilot => check_ardupilot(o, ardupilot_logs),
    }
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
    let stream = &log.stream;
    let ends = log
        .message_starts
        .iter()
        .skip(1)
        .copied()
        .chain([stream.len() as u64]);
    let vehicle: Vec<&[u8]> = (log.message_starts.iter().zip(ends))
        .map(|(&s, e)| &stream[s as usize..e as usize])
        .collect();
    let mut final_matched = HashSet::new();
    for (n, received) in o.logs.iter().enumerate() {
        let matched = match_px4_log(received, &vehicle).map_err(|e| format!("log {n}: {e}"))?;
        if n + 1 == o.logs.len() {
            final_matched = matched;
        }
    }
    // Completeness of the last log: every message all of whose chunks arrived.
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
        if whole && !is_sync(m) && !final_matched.contains(&k) {
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
    let mut got_total = 0;
    let mut marks_total = 0;
    for (n, received) in o.logs.iter().enumerate() {
        let (got, marks) = dataflash_data(&received.bytes);
        if marks.len() != received.dropouts.len() {
            return Err(format!(
                "log {n}: {} dropout marks and {} dropout events",
                marks.len(),
                received.dropouts.len()
            ));
        }
        let mut next = 0;
        let mut mark_at = marks.iter().peekable();
        for (i, m) in got.iter().enumerate() {
            let mut marked = false;
            while mark_at.next_if(|&&at| at == i).is_some() {
                marked = true;
            }
            let Some(k) = (next..vehicle.len()).find(|&k| vehicle[k] == *m) else {
                let earlier = (0..next).rev().find(|&k| vehicle[k] == *m);
                return Err(format!(
                    "log {n}: data message {i} (type {}) is not the vehicle's next ones \
                     (expected its message {next} or later): {}",
                    m[2],
                    match earlier {
                        Some(k) => format!("it is its message {k}, again or out of place"),
                        None => "it is none of the vehicle's".into(),
                    }
                ));
            };
            if i > 0 && marked && k == next {
                return Err(format!(
                    "log {n}: a dropout mark before data message {i}, where nothing is missing"
                ));
            }
            if i > 0 && !marked && k > next && s.dropped_messages == 0 {
                return Err(format!(
                    "log {n}: the vehicle's data messages {next}..{k} are missing before data \
                     message {i} without a dropout mark (it dropped none at the source)"
                ));
            }
            next = k + 1;
        }
        got_total += got.len();
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
