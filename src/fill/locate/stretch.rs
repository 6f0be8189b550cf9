//! The scan from where the bisection landed, in pieces: each anchor before the dropout
//! starts the stretch anew, the first anchor after it ends it; at the flight's edges the
//! stretch runs to a time (the head from the stream's start, a stopped tail until PX4's
//! logger resumed and no topic's pace says a sample stamped before the stop is still to
//! come). A scan that finds no anchor before the dropout steps back.

use std::collections::{HashMap, HashSet};

use super::boundary::{CHAIN, sync};
use super::merge::merge;
use super::{
    BISECT_STOP, BLOCK_RUN, CHUNK_LAG_US, EARLY_RECORDS, EDGE_PIECE, FRESH_RECORDS, JUMP_US,
    LOST_AT_STOP, Locator, MAX_STEP_BACKS, Outcome, PAST_MARGIN_US, PAST_RECORDS, PROBE,
    SCAN_PIECE, STEP_BACK, STRETCH_PIECE, Stage, TAIL_LAG_US, TAIL_PIECE, Unfilled,
};
use crate::fill::pace::{CADENCE_JITTER_US, Pace};
use crate::fill::scan::Edge;
use crate::fill::walk::timestamp;
use crate::ulog::message::{framed, msg_type};

#[derive(Debug, Default)]
pub(super) struct Scan {
    /// The next byte to read.
    at: u64,
    /// Bytes read but not yet cut into messages, and where in the SD log they begin.
    carry: Vec<u8>,
    carry_at: u64,
    synced: bool,
    /// The stretch has begun: at an anchor before the dropout, or (the head) at the
    /// stream's start.
    begun: bool,
    /// Where in the SD log the stretch began (that anchor, or the head's first record).
    begun_at: u64,
    /// Reads since the stretch began (each piece of a head or window twice the last).
    stretch_reads: u32,
    /// The last anchor before the dropout found so far (its index in the site's messages).
    anchor: Option<usize>,
    /// The SD log's messages since the stretch began (since that anchor).
    stretch: Vec<Vec<u8>>,
    /// Records seen stamped after the give-up time.
    past: u32,
    /// Bytes of the tail's records that the stream does not have.
    lost: u64,
    /// Bytes of the SD log's messages since the last anchor that the stream lacks (a
    /// counted dropout's chunks are taken while they last: [`Locator::link_lost`]).
    link_seen: u64,
    /// A stopped stream's end so far (log time): its newest anchor's time, or a newer one
    /// of the records its last chunk lost.
    stop_us: u64,
    /// Records seen stamped past the stop by more than [`TAIL_LAG_US`].
    beyond: u32,
    /// Where PX4's logger is after a STOP: held up by its post-flight records, then
    /// resumed.
    resume: Resume,
    /// The newest sample seen after the stop.
    clock: u64,
    /// A counted dropout's records the stream's end does not follow yet.
    ahead: Ahead,
    /// The log's clock to read on from (the scan leaves off here for a bisection to it).
    jump_to: Option<u64>,
    /// The times of the first dated records of a scan not begun (at most [`EARLY_RECORDS`]).
    early: Vec<u64>,
}

/// A counted dropout's records stamped too far past the stream's end so far to follow (see
/// [`BLOCK_RUN`]), since it last moved on.
#[derive(Debug, Default)]
struct Ahead {
    /// How many, and the newest time among them.
    count: usize,
    newest: u64,
    /// How often the stream's end moved on by a record within [`CHUNK_LAG_US`] since the
    /// first of them (more than [`BLOCK_RUN`] times: they were a topic on its own clock).
    moved: usize,
}

impl Ahead {
    /// Moves the stream's end `stop` on with a counted dropout's record stamped `t`.
    fn follow(&mut self, stop: &mut u64, t: u64) {
        if t <= *stop {
            return;
        }
        if t <= *stop + CHUNK_LAG_US {
            *stop = t;
            self.moved += 1;
            if self.moved > BLOCK_RUN {
                *self = Self::default();
            }
        } else {
            self.count += 1;
            self.newest = self.newest.max(t);
            if self.count >= BLOCK_RUN {
                *stop = self.newest;
                *self = Self::default();
            }
        }
    }
}

/// A stopped stream's tail: PX4's logger after the STOP, as the SD log shows it.
#[derive(Debug, Default)]
enum Resume {
    /// Held up while it sends its post-flight records: nothing written since the stop yet.
    #[default]
    Held,
    /// Its first pass over its topics since (the ids written, the last one).
    Pass(HashSet<u16>, u16),
    /// Past that pass, by this many records.
    Over(u32),
}

impl Scan {
    /// A scan from `at` on, which finds its first message boundary itself.
    pub(super) fn from(at: u64) -> Self {
        Self {
            at,
            carry_at: at,
            ..Self::default()
        }
    }

    /// The same scan going on from `at` (where a bisection landed), which finds its first
    /// message boundary there itself.
    pub(super) fn restart_at(&mut self, at: u64) {
        self.at = at;
        self.carry_at = at;
        self.carry.clear();
        self.synced = false;
    }
}

impl Locator {
    /// The piece of the SD log the scan `s` reads next, `None` at the end of the file.
    pub(super) fn next_piece(&self, s: &Scan) -> Option<(u64, u64)> {
        if s.at >= self.sd_len {
            return None;
        }
        let piece = match self.edge {
            Some(Edge::Tail) if s.begun && !self.stopped => TAIL_PIECE,
            // What a counted dropout lost, at once.
            Some(Edge::Tail) if s.begun && s.link_seen < self.link_lost => {
                (self.link_lost - s.link_seen).clamp(SCAN_PIECE, TAIL_PIECE)
            }
            // A stretch that runs to a time: up to seconds of log, not a gap's
            // worth (PX4's head holds a handful of records: the pieces grow).
            Some(Edge::Head | Edge::Window) if s.begun => {
                (EDGE_PIECE << s.stretch_reads.min(8)).min(STRETCH_PIECE)
            }
            Some(Edge::Tail) if s.begun => EDGE_PIECE,
            _ => SCAN_PIECE,
        };
        Some((s.at, piece.min(self.sd_len - s.at)))
    }

    /// Takes a piece the scan asked for: walks its whole messages, and ends with an outcome,
    /// steps back, or leaves off for a bisection to where a slow topic is due.
    pub(super) fn handle_scan_read(&mut self, offset: u64, data: &[u8]) {
        let Stage::Scan(s) = &mut self.stage else {
            return;
        };
        if offset != s.at {
            return;
        }
        s.at += data.len() as u64;
        s.carry.extend_from_slice(data);
        if s.begun {
            s.stretch_reads += 1;
        }
        let ended = data.is_empty() || s.at >= self.sd_len;
        let outcome = match self.scan_carry() {
            Some(outcome) => Some(outcome),
            None if ended => Some(self.at_eof()),
            None => None,
        };
        match outcome {
            // The bisection landed past the records (a stretch of lagging samples
            // looked early): start again further back.
            Some(Outcome::Unfilled(Unfilled::NoRecordBefore))
                if self.step_backs < MAX_STEP_BACKS
                    && self.scan_start.is_some_and(|s| s > self.from)
                    && self.dated =>
            {
                let back = STEP_BACK << self.step_backs;
                self.step_backs += 1;
                let at = self
                    .scan_start
                    .map_or(self.from, |s| s.saturating_sub(back).max(self.from));
                self.scan_start = Some(at);
                self.stage = Stage::Scan(Scan::from(at));
            }
            Some(outcome) => self.stage = Stage::Done(outcome),
            None => self.jump(),
        }
    }

    /// The SD log ended before the outcome: a tail that began takes all it read.
    fn at_eof(&self) -> Outcome {
        match &self.stage {
            Stage::Scan(s) if s.begun && matches!(self.edge, Some(Edge::Tail | Edge::Window)) => {
                merge(&self.site, s.anchor, None, &s.stretch)
            }
            Stage::Scan(s) if s.begun => Outcome::Unfilled(Unfilled::NoRecordAfter),
            _ => Outcome::Unfilled(Unfilled::NoRecordBefore),
        }
    }

    /// Walks the whole messages read so far; an outcome once the scan is over.
    fn scan_carry(&mut self) -> Option<Outcome> {
        let Stage::Scan(s) = &mut self.stage else {
            return None;
        };
        let mut carry = std::mem::take(&mut s.carry);
        let mut start = 0;
        if !s.synced {
            match sync(&self.decoder, &carry) {
                Some(at) => {
                    start = at;
                    s.synced = true;
                }
                None => {
                    // Keep the tail: a boundary may show once more bytes come.
                    let keep = carry.len().min(2 * CHAIN * 300);
                    s.carry_at += (carry.len() - keep) as u64;
                    carry.drain(..carry.len() - keep);
                    s.carry = carry;
                    return None;
                }
            }
        }
        let mut consumed = start;
        let mut outcome = None;
        let tail = self.edge == Some(Edge::Tail);
        let window = self.edge == Some(Edge::Window);
        // The stretch ends at a time: a stopped stream's tail, a window.
        let ends_by_time = (tail && self.stopped) || window;
        let mut tail_over = false;
        for raw in framed(&carry[start..]) {
            if tail_over || s.jump_to.is_some() {
                break;
            }
            let at = s.carry_at + consumed as u64;
            consumed += raw.len();
            let ts = timestamp(&mut self.decoder, raw);
            self.dated |= ts.is_some();
            if ts.is_some_and(|ts| ts > self.give_up_us) {
                s.past += 1;
            }
            if matches!(self.edge, Some(Edge::Head | Edge::Window)) && !s.begun {
                // The stream's (the window's) first record in the SD log: the first one
                // stamped since it began, or the first anchor after the dropout if that
                // comes sooner.
                let record = matches!(
                    raw[2],
                    msg_type::DATA | msg_type::LOGGING | msg_type::LOGGING_TAGGED
                );
                let since_start = self.sd_from_start || ts.is_some_and(|ts| ts >= self.start_us);
                if self.after.contains_key(raw) || (record && since_start) {
                    s.begun = true;
                    s.begun_at = at;
                    s.stop_us = self.last_us;
                }
            }
            if let Some(&i) = self.before.get(raw) {
                s.begun = true;
                s.begun_at = at;
                s.anchor = Some(i);
                s.stretch.clear();
                s.lost = 0;
                s.link_seen = 0;
                s.stop_us = self.last_us;
                s.beyond = 0;
                continue;
            }
            if let Some(&j) = self.after.get(raw) {
                self.found_after = Some(at);
                self.begun_at = s.begun.then_some(s.begun_at);
                outcome = Some(if s.begun {
                    merge(&self.site, s.anchor, Some(j), &s.stretch)
                } else {
                    Outcome::Unfilled(Unfilled::NoRecordBefore)
                });
                break;
            }
            if s.past > PAST_RECORDS && !((tail || window) && s.begun) {
                outcome = Some(Outcome::Unfilled(if s.begun {
                    Unfilled::NoRecordAfter
                } else {
                    Unfilled::NoRecordBefore
                }));
                break;
            }
            if !s.begun
                && self.edge.is_none()
                && let (Some(t), Some(resumed)) = (ts, self.site.after_us)
                && s.early.len() < EARLY_RECORDS
            {
                s.early.push(t);
                if s.early.len() == EARLY_RECORDS {
                    let mut early = s.early.clone();
                    early.sort_unstable();
                    if early[EARLY_RECORDS / 2] > resumed + PAST_MARGIN_US {
                        // The bisection overshot: the caller steps back.
                        outcome = Some(Outcome::Unfilled(Unfilled::NoRecordBefore));
                        break;
                    }
                }
            }
            if !s.begun {
                continue;
            }
            let in_stream = (tail || ends_by_time) && self.ours.contains(raw);
            // The chunks a counted dropout lost: every message after the last anchor that
            // the stream lacks, up to their bytes.
            let linked = tail && self.link_lost > 0 && !in_stream && {
                s.link_seen += raw.len() as u64;
                s.link_seen <= self.link_lost
            };
            // The SD log's samples tell each topic's pace on past the stream's records:
            // those the stop discarded and the chunks a counted dropout lost were the
            // stream's own, those after them are what is looked for.
            let past_stop = s.lost > LOST_AT_STOP;
            if tail
                && self.stopped
                && let Some(t) = ts
                && raw[2] == msg_type::DATA
            {
                let id = u16::from_le_bytes([raw[3], raw[4]]);
                // The log's clock jumped: PX4's logger was held up (the card, the CPU)
                // and resumes with a pass over its topics, as after the stop, old samples
                // among the new: read through it again.
                let held_up = t > s.clock + CHUNK_LAG_US;
                s.clock = s.clock.max(t);
                if let Some(pace) = self.paces.get_mut(&id) {
                    pace.logged(t, s.clock);
                }
                if past_stop && held_up && matches!(s.resume, Resume::Over(_)) {
                    s.resume = Resume::Pass(HashSet::from([id]), id);
                }
                if past_stop {
                    match s.resume {
                        // PX4's logger resumed after its post-flight records with a pass
                        // over its topics, writing the newest sample of each that changed
                        // meanwhile (the topics the stream never showed a pace of
                        // included): the first record written after the stop begins it.
                        Resume::Held if t > s.stop_us + CHUNK_LAG_US => {
                            s.resume = Resume::Pass(HashSet::from([id]), id);
                        }
                        Resume::Held => {}
                        // A topic written again (not right after itself: a queue's samples
                        // come together) began the next pass.
                        Resume::Pass(ref mut seen, ref mut previous) => {
                            if id != *previous && !seen.insert(id) {
                                s.resume = Resume::Over(0);
                            } else {
                                *previous = id;
                            }
                        }
                        Resume::Over(ref mut after) => {
                            *after += 1;
                            if *after >= FRESH_RECORDS {
                                match still_to_come(&self.paces, s.stop_us, s.clock) {
                                    // Nothing stamped before the stop follows (this
                                    // record, the last one that could, is taken first).
                                    None => tail_over = true,
                                    // Only steady topics' samples, far ahead: read on there.
                                    Some(Some(next))
                                        if next > s.clock + JUMP_US
                                            && self.sd_len > s.at + BISECT_STOP =>
                                    {
                                        s.jump_to = Some(next);
                                    }
                                    Some(_) => {}
                                }
                            }
                        }
                    }
                }
            }
            // A record stamped before the stream's end that the stream lacks was lost
            // before the stop (another column's dropout, or a slow topic logged late): it
            // is taken, and spends none of what the stop may have discarded.
            if ends_by_time && !in_stream && ts.is_none_or(|t| t > self.last_us) {
                let budget = if tail { LOST_AT_STOP } else { 0 };
                // A record stamped later than the newest the stream lost was written after
                // the stop (PX4's logger, held up by its post-flight records, writes a
                // burst of fresh samples when it resumes): no part of the stream's last
                // chunk, nor is anything after it. The chunks a counted dropout lost are
                // taken whatever their times.
                let newest = if self.link_lost > 0 {
                    s.stop_us
                } else {
                    self.last_us
                };
                let in_chunk = |t: u64| t <= newest + CHUNK_LAG_US;
                if linked {
                    // The stream's end follows the log's clock through them: a record stamped
                    // far ahead of the others is on a clock of its own, [`BLOCK_RUN`] of them
                    // before the clock moves on as many times are PX4's logger resuming after
                    // it was held up (its acked chunks unanswered while the link was out),
                    // with a pass over its topics (old samples among the new).
                    if let Some(t) = ts {
                        s.ahead.follow(&mut s.stop_us, t);
                    }
                } else if s.lost + raw.len() as u64 <= budget && ts.is_none_or(in_chunk) {
                    // What the chunk a STOP discards can hold: the stream's last records.
                    s.lost += raw.len() as u64;
                    if let Some(t) = ts {
                        s.stop_us = s.stop_us.max(t);
                    }
                } else {
                    // Logged after the stream stopped (the window ended): only samples
                    // stamped before its end.
                    s.lost = budget + 1;
                    match ts {
                        Some(t) if t <= s.stop_us => {}
                        Some(t) => {
                            if t > s.stop_us + TAIL_LAG_US {
                                s.beyond += 1;
                                if s.beyond > PAST_RECORDS {
                                    outcome = Some(merge(&self.site, s.anchor, None, &s.stretch));
                                    break;
                                }
                            }
                            continue;
                        }
                        None => continue,
                    }
                }
            }
            if self.filter.keeps(raw, ts) {
                s.stretch.push(raw.to_vec());
            }
        }
        if tail_over {
            outcome = Some(merge(&self.site, s.anchor, None, &s.stretch));
        }
        let consumed = consumed.min(carry.len());
        s.carry_at += consumed as u64;
        carry.drain(..consumed);
        s.carry = carry;
        outcome
    }
    /// A tail's scan that left off to read on where its log's clock is due
    /// ([`Scan::jump_to`]): it waits while a bisection from where it got to finds that.
    fn jump(&mut self) {
        let Stage::Scan(s) = &mut self.stage else {
            return;
        };
        let Some(to) = s.jump_to.take() else {
            return;
        };
        tracing::trace!(
            from = s.at,
            clock = s.clock,
            to,
            "the tail reads on where a slow topic is due"
        );
        // From the first byte not yet scanned: the message the last piece cut in two (the
        // carry, dropped by the restart) may be the slow topic's sample itself.
        let bisect = Stage::Bisect {
            lo: s.carry_at,
            hi: self.sd_len,
            probe: PROBE,
        };
        if let Stage::Scan(scan) = std::mem::replace(&mut self.stage, bisect) {
            self.left_off = Some(scan);
        }
        self.target_us = to;
    }
}

/// Whether a sample stamped at or before `stop` may still come, the log's clock at
/// `clock`: `None` if none may; else the earliest log time the first of them can be written,
/// if each such topic's cadence tells it.
fn still_to_come(paces: &HashMap<u16, Pace>, stop: u64, clock: u64) -> Option<Option<u64>> {
    let mut to_come = paces
        .values()
        .filter(|p| p.may_have_before(stop, clock, CADENCE_JITTER_US))
        .peekable();
    to_come.peek()?;
    Some(
        to_come
            .map(Pace::next_write_from)
            .try_fold(u64::MAX, |first, next| next.map(|next| first.min(next))),
    )
}
