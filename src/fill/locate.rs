//! Finds one dropout again in the vehicle's SD log and takes what the stream lost there,
//! sans-IO: asks for byte ranges ([`Locator::next_read`]), takes what they hold
//! ([`Locator::handle_read`]), ends with an [`Outcome`].
//!
//! Both logs carry the same records in the same order (one `write_message` feeds both
//! backends), each dropping its own. So the records the stream lost at a dropout are the SD
//! log's records after the last record the stream has before the dropout and before the
//! first one it has after it. To get there without reading the whole file:
//! 1. Bisection on byte offsets: read [`PROBE`] bytes in the middle, find a message boundary
//!    (a chain of messages whose sizes and types fit, data records of known ids with their
//!    format's size), take the median timestamp there (some topics lag, some carry another
//!    clock); until the range is below [`BISECT_STOP`], with the target [`MARGIN_US`] before
//!    the median time of the anchors before the dropout (the last of them, where the
//!    stretch begins, lies past it; a lagging topic's sample among them is older). The
//!    flight's head and tail look for the log's clock itself (the third newest time of a
//!    probe), [`EDGE_MARGIN_US`] early.
//! 2. A scan from there in pieces of [`SCAN_PIECE`]: each anchor before the dropout starts
//!    the stretch anew, the first anchor after it ends it.
//! 3. The merge: the split's bytes between those two anchors (the dropouts, and what the
//!    stream has there) read as the SD log's stretch merged in order with the stream's
//!    messages: a message both have once, one only the stream has kept, the SD log's own
//!    dropouts kept (the fill is then partial).
//!
//! Most gaps of a flight are not searched for at all: [`crate::fill::walk`] reads them where
//! the gap before puts them. The locator finds the others (the flight's head and tail, an
//! event buffer's windows, and gaps where the two logs differ), and tells where its stretch
//! lay ([`Locator::span`]) for the walk to go on from.
//!
//! A scan that finds no anchor before the dropout starts again further back (a stretch of
//! lagging samples can mislead the bisection), up to [`MAX_STEP_BACKS`] times. It gives up
//! once the SD log's records run [`GIVE_UP_US`] past the anchors (a few hundred of them: one
//! stray clock is not enough).
//!
//! The edges ([`Edge`]) have anchors on one side only:
//! - The head: the stream began when its header says (the logger's start, in the SD log's
//!   clock: one boot). The SD log's records from the first one stamped at or after that
//!   time (from its first record when the SD log itself began then or later) up to the
//!   first anchor after the dropout are the stretch. Never a header time against a sample
//!   time to choose the log: samples older than a header are common (a topic's last sample
//!   is logged when it is subscribed).
//! - The tail: the stretch runs from the last anchor found to where the stream stopped.
//!   After a STOP ([`FlightScan::stopped`]) the stream lost at most the partial chunk PX4
//!   discards: the first [`LOST_AT_STOP`] bytes of records after the last anchor that the
//!   stream does not have and that are stamped after its end (across every column: one
//!   column's last records may lie before another's dropout, whose records are no part of
//!   what the stop discarded), up to the first one stamped more than [`CHUNK_LAG_US`] after
//!   it (written after the stop: PX4's logger, blocked on the acks of its post-flight
//!   records, writes a burst of fresh samples to the card when it resumes), are taken, and
//!   the newest time among them and the stream's is where it stopped; after them, only
//!   records stamped no later than that are taken (PX4 logs a slow topic's sample up to a
//!   period after its time). The tail reads on until PX4's logger resumed after the stop
//!   and made its pass over its topics, [`FRESH_RECORDS`] records more, and no topic's pace
//!   in the stream ([`Pace`]: its period, its newest sample, how late PX4 logged it) says a
//!   sample of it stamped before the stop is still to come, or at the latest
//!   [`TAIL_LAG_US`] past the stop. A slow topic PX4 logs once an interval can be written
//!   a second and more after the stop: when each topic still to come writes at a steady
//!   cadence ([`Pace::next_write_from`]) and the first is due more than [`JUMP_US`]
//!   ahead, the tail bisects to where the log's clock gets there (by the third newest time
//!   of each probe, as at both edges) and reads on from there, skipping records that can
//!   hold nothing stamped before the stop. So the flight holds every sample of the SD log
//!   stamped up to its last one, and a clean flight's tail costs tens of kilobytes of the
//!   SD log. With a dropout in the tail (the link went, and came back only
//!   for the post-flight records: [`DropoutSite::lost_end`]) whose chunks the receiver
//!   counted ([`StreamEnd::lost_chunks`]), the stream stopped that many chunks past its
//!   last records: those bytes of records are taken whatever their times (the stream's end
//!   follows the log's clock through them, across the time PX4's logger was held up waiting
//!   for acks the link did not carry: [`BLOCK_RUN`]), and the tail goes on as after any
//!   STOP. Without a STOP (the link went first), or with a dropout in
//!   the tail not counted, where the stream ended is not known, and the stretch runs to the
//!   SD log's end, read in pieces of [`TAIL_PIECE`]. The stream's post-flight records then
//!   go after it, and the SD log's own (its logger stopped too) are left out: the flight
//!   has one set.

use std::collections::HashMap;

use std::collections::HashSet;

use crate::fill::column::ColumnFilter;
use crate::fill::scan::{CADENCE_JITTER_US, DropoutSite, Edge, FlightScan, Pace};
use crate::fill::walk::timestamp;
use crate::ulog::Decoder;
use crate::ulog::message::{MSG_HEADER_LEN, framed, is_postflight, msg_type, plausible_header};

/// Bytes read per bisection step, two FTP packets (doubled up to [`MAX_PROBE`] while no
/// message boundary shows).
pub const PROBE: u64 = 2 * crate::fill::cache::PACKET;
pub const MAX_PROBE: u64 = 8192;
/// The bisection stops when the range is this small.
pub const BISECT_STOP: u64 = 4096;
/// Bytes read per scan step.
pub const SCAN_PIECE: u64 = 8192;
/// How far before the median time of the dropout's anchors the scan starts (log time).
pub const MARGIN_US: u64 = 50_000;
/// The same for the flight's edges: before the head's start, before the median time of the
/// tail's anchors (the stream's last records, where the log's clock was no more than a
/// logger loop or two ahead of them).
pub const EDGE_MARGIN_US: u64 = 10_000;
/// How far past where they belong (log time) the scan looks for the anchors.
pub const GIVE_UP_US: u64 = 3_000_000;
/// How far back the scan starts again when it finds no record before the dropout, doubled
/// each time, [`MAX_STEP_BACKS`] times at most.
pub const STEP_BACK: u64 = 32 * 1024;
pub const MAX_STEP_BACKS: u32 = 4;
/// The scan gives up after this many records stamped past the give-up time (a few stray
/// ones are a topic on another clock).
const PAST_RECORDS: u32 = 256;
/// A scan's first dated records: when most of them are stamped [`PAST_MARGIN_US`] after the
/// stream resumed past the dropout, the scan began past the anchors and goes back at once
/// (not after [`GIVE_UP_US`] of the SD log: ~700 KB of PX4's).
const EARLY_RECORDS: usize = 32;
const PAST_MARGIN_US: u64 = 250_000;
/// Messages in a row that must fit for a boundary to be taken.
const CHAIN: usize = 4;
/// Bytes of records after the last anchor that a stream ended by a STOP may have lost: the
/// partial chunk PX4 discards (a LOGGING_DATA chunk carries 249 bytes).
pub const LOST_AT_STOP: u64 = 249;
/// Most bytes read per scan step once a head or a window began (burst reads): its pieces
/// start at [`EDGE_PIECE`] and double.
pub const STRETCH_PIECE: u64 = 64 * 1024;
/// Bytes read per scan step of an edge's stretch: a stopped tail's past its last anchor
/// (the partial chunk, PX4's logger's pass when it resumes), a head's or a window's first.
pub const EDGE_PIECE: u64 = 2048;
/// Bytes read per scan step of a tail that runs to the SD log's end (burst reads).
pub const TAIL_PIECE: u64 = 256 * 1024;
/// How long after its time PX4 may log a sample (a slow topic's period, and then some):
/// how far past a stopped stream's end its tail looks for samples stamped before it, at most.
pub const TAIL_LAG_US: u64 = crate::fill::scan::LAG_US;
/// How much newer than the stream's last records those of its last chunk (the one a STOP
/// discards) can be: they were written within a loop or two of PX4's logger.
pub const CHUNK_LAG_US: u64 = 100_000;
/// Records of a counted dropout's chunks stamped more than [`CHUNK_LAG_US`] past the
/// stream's end so far, with no more records between them that move it on: the log's
/// clock jumped (PX4's logger was held up, and resumed with a pass over its topics, old
/// samples among the new), and the stream's end follows it.
pub const BLOCK_RUN: usize = 3;
/// A stopped stream's tail reads past the stop until PX4's logger resumed (after its
/// post-flight records) and made a pass over its topics, and [`FRESH_RECORDS`] records
/// more. From there only a slow topic's sample stamped before the stop may still come: its
/// pace ([`Pace`]) says whether one may, until the log's clock is past the stop by its lag
/// and [`CADENCE_JITTER_US`].
pub const FRESH_RECORDS: u32 = 16;
/// When every slow topic still to come writes at a steady cadence
/// ([`Pace::next_write_from`]) and the first of them is due this much later than the
/// log's clock where the tail is, the tail bisects to it rather than read what lies
/// between (a slow topic's next sample can be a second and a half of log away).
pub const JUMP_US: u64 = 50_000;

/// Why a dropout stays a dropout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Unfilled {
    #[error("the SD log does not hold the records before the dropout (another boot or flight?)")]
    NoRecordBefore,
    #[error("the SD log does not hold the records after the dropout")]
    NoRecordAfter,
    #[error(
        "the dropout begins or ends a split, not the flight: no record on that side of it in \
         its split to find it by"
    )]
    AtSplitEdge,
    #[error("no timestamped record on either side of the dropout to find it by")]
    NoAnchors,
}

/// What a dropout came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The split's bytes `[from, to)` (the dropouts and what the stream has between the
    /// anchors the SD log holds too) are to read as `records`: the SD log's records there
    /// merged in order with the stream's (a record either has, once). `recovered` of them
    /// came from the SD log only; `complete` unless the SD log has a dropout of its own there
    /// (kept among them).
    Filled {
        from: u64,
        to: u64,
        records: Vec<u8>,
        recovered: u64,
        /// Bytes of the `recovered` records.
        recovered_bytes: u64,
        complete: bool,
        /// The flight's head or tail (anchors on one side only), if it is one.
        edge: Option<Edge>,
    },
    Unfilled(Unfilled),
}

#[derive(Debug)]
enum Stage {
    /// `probe`: bytes to read in the middle (doubled while no boundary shows in them).
    Bisect {
        lo: u64,
        hi: u64,
        probe: u64,
    },
    Scan(Scan),
    Done(Outcome),
}

#[derive(Debug, Default)]
struct Scan {
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
    fn from(at: u64) -> Self {
        Self {
            at,
            carry_at: at,
            ..Self::default()
        }
    }
}

/// Where a stream stopped, across every column of a session: the newest time of the
/// columns' last records before their tails, and those records (each column's tail site's
/// messages). See [`Locator::with_stream_end`].
#[derive(Debug, Clone, Default)]
pub struct StreamEnd {
    pub last_us: u64,
    pub messages: HashSet<Vec<u8>>,
    /// A column's tail has a dropout in it: the stream lost its end, in every column.
    pub lost: bool,
    /// The chunks the link lost there, when the receiver counted them (the sequence numbers
    /// of the post-flight records that came after the STOP): the stream then ended that
    /// many chunks past its last record, not at the SD log's end.
    pub lost_chunks: Option<u64>,
    /// Every column's topics' paces.
    pub paces: HashMap<u16, Pace>,
}

impl StreamEnd {
    /// The end of the stream the `flights` (a session's columns) were cut from.
    pub fn of<'a>(flights: impl IntoIterator<Item = &'a FlightScan>) -> Self {
        let mut end = Self::default();
        let flights: Vec<&FlightScan> = flights.into_iter().collect();
        for flight in &flights {
            Pace::merge_all(&mut end.paces, &flight.paces);
        }
        for site in flights
            .iter()
            .flat_map(|f| &f.sites)
            .filter(|s| s.edge() == Some(Edge::Tail))
        {
            end.last_us = end.last_us.max(site.last_before_us);
            end.lost |= site.lost_end();
            end.messages
                .extend(site.messages.iter().map(|m| m.bytes.clone()));
        }
        end
    }
}

/// See the module docs.
#[derive(Debug)]
pub struct Locator {
    site: DropoutSite,
    /// Anchor bytes → index in the site's messages.
    before: HashMap<Vec<u8>, usize>,
    after: HashMap<Vec<u8>, usize>,
    target_us: u64,
    give_up_us: u64,
    edge: Option<Edge>,
    /// The stream's start (its header's time) and whether it ended with a STOP where its
    /// last records are (the STOP came, and no dropout after them, or one of a counted
    /// size).
    start_us: u64,
    stopped: bool,
    /// The stream had a STOP.
    flight_stopped: bool,
    /// Bytes of the SD log's messages after the last anchor that the chunks a counted
    /// dropout at the stream's end lost (taken whatever their times; then the partial chunk
    /// the STOP discards, [`LOST_AT_STOP`]).
    link_lost: u64,
    /// The newest time of the anchors before the site (a stopped stream's tail: the last
    /// instant it surely streamed).
    last_us: u64,
    /// The SD log began at or after the stream did: all its records are the stream's.
    sd_from_start: bool,
    /// The site's messages (a tail's records the stream has are no loss).
    ours: HashSet<Vec<u8>>,
    /// The stream's topics' paces, and a stopped tail's samples after the stop (it ends
    /// when none may still bring a sample stamped before the stop).
    paces: HashMap<u16, Pace>,
    /// What of the SD log's stretch the site's column takes.
    filter: ColumnFilter,
    sd_len: u64,
    decoder: Decoder,
    stage: Stage,
    scan_start: Option<u64>,
    /// The lower bound the caller gave, and how often the scan started further back.
    from: u64,
    step_backs: u32,
    /// Records were read that the flight's definitions date: without any, the SD log's
    /// records are not the flight's (another boot: other ids and sizes), and a scan that
    /// found nothing does not step back.
    dated: bool,
    /// The SD log's offset of its copy of the first anchor after the dropout.
    found_after: Option<u64>,
    /// Where the stretch that ended there began.
    begun_at: Option<u64>,
    /// A tail's scan waiting while a bisection finds where it reads on.
    left_off: Option<Scan>,
}

impl Locator {
    /// A locator for `site` in an SD log of `sd_len` bytes, with the flight's definitions;
    /// the records are known to lie at or after `from` (where the previous dropout's scan
    /// began: dropouts come in the SD log's order).
    pub fn new(flight: &FlightScan, site: &DropoutSite, sd_len: u64, from: u64) -> Self {
        let edge = site.edge();
        let window = site.window.filter(|_| edge == Some(Edge::Window));
        let stage = if window.is_none() && site.before.is_empty() && site.after.is_empty() {
            Stage::Done(Outcome::Unfilled(Unfilled::NoAnchors))
        } else if !site.at_flight_edge() {
            Stage::Done(Outcome::Unfilled(Unfilled::AtSplitEdge))
        } else if sd_len == 0 {
            Stage::Done(Outcome::Unfilled(Unfilled::NoRecordBefore))
        } else {
            Stage::Bisect {
                lo: from.min(sd_len),
                hi: sd_len,
                probe: PROBE,
            }
        };
        let index = |ix: &[usize]| {
            ix.iter()
                .map(|i| (site.messages[*i].bytes.clone(), *i))
                .collect()
        };
        let mut decoder = flight.decoder();
        let target_us = match (edge, window) {
            (Some(Edge::Head), _) => flight.start_us,
            (_, Some([from, _])) => from,
            // The stretch begins at the last anchor before the dropout, which lies where
            // the log's clock is past the anchors' median time: a lagging topic's old
            // sample among them would put the search seconds early.
            _ => median_time(&mut decoder, site).unwrap_or(site.before_us),
        };
        Self {
            before: index(&site.before),
            after: index(&site.after),
            target_us: target_us.saturating_sub(if by_clock(edge) {
                EDGE_MARGIN_US
            } else {
                MARGIN_US
            }),
            give_up_us: site
                .after_us
                .or(window.map(|w| w[1]))
                .unwrap_or(site.before_us)
                + GIVE_UP_US,
            edge,
            start_us: window.map_or(flight.start_us, |w| w[0]),
            stopped: flight.stopped && !site.lost_end(),
            flight_stopped: flight.stopped,
            link_lost: 0,
            last_us: window.map_or(site.last_before_us, |w| w[1]),
            sd_from_start: false,
            ours: if matches!(edge, Some(Edge::Tail | Edge::Window)) {
                site.messages.iter().map(|m| m.bytes.clone()).collect()
            } else {
                HashSet::new()
            },
            paces: flight.paces.clone(),
            filter: ColumnFilter::all(),
            site: site.clone(),
            sd_len,
            decoder,
            stage,
            scan_start: None,
            from: from.min(sd_len),
            step_backs: 0,
            dated: false,
            found_after: None,
            begun_at: None,
            left_off: None,
        }
    }

    /// A stopped stream's tail seen from one column of several: the stream stopped after
    /// every column's last records, not this column's, and the records the other columns
    /// hold are none of what the stop discarded. So the stop is looked for from `end`'s
    /// time, with `end`'s messages as the stream's; when a column lost the stream's end,
    /// every column's tail runs to the SD log's end. Other sites are unchanged.
    pub fn with_stream_end(mut self, end: &StreamEnd) -> Self {
        if self.edge == Some(Edge::Tail) {
            match end.lost_chunks.filter(|_| end.lost && self.flight_stopped) {
                // The link lost `n` chunks, then the STOP came: the stream's end lies those
                // chunks (and the partial ones around them) past its last records.
                Some(n) => {
                    self.stopped = true;
                    self.link_lost = (n + 1) * LOST_AT_STOP;
                }
                None => self.stopped &= !end.lost,
            }
            self.last_us = self.last_us.max(end.last_us);
            Pace::merge_all(&mut self.paces, &end.paces);
            self.ours.extend(end.messages.iter().cloned());
        }
        self
    }

    /// Where the filled stretch lay in the SD log, once found: from the message it began at
    /// (the last anchor before the dropout, or the head's first record) to the first anchor
    /// after it. Both are message boundaries; the stream resumed after the dropout between
    /// them.
    pub fn span(&self) -> Option<(u64, u64)> {
        match (&self.stage, self.found_after) {
            (Stage::Done(Outcome::Filled { .. }), Some(after)) => Some((self.begun_at?, after)),
            _ => None,
        }
    }

    /// The SD log's header says it began at `start_us` (log time): when that is at or
    /// after the stream's start, every record of it belongs to the stream's window (the
    /// head's stretch starts at its first record).
    pub fn with_sd_start(mut self, start_us: u64) -> Self {
        self.sd_from_start = start_us >= self.start_us;
        self
    }

    /// Takes only what `filter` keeps of the SD log's records (a session stored in
    /// columns: the site's column).
    pub fn with_filter(mut self, filter: ColumnFilter) -> Self {
        self.filter = filter;
        self
    }

    /// The byte range to read next, `None` once done.
    pub fn next_read(&self) -> Option<(u64, u64)> {
        match &self.stage {
            Stage::Bisect { lo, hi, probe } => {
                let mid = lo + (hi - lo) / 2;
                Some((mid, (*probe).min(self.sd_len - mid)))
            }
            Stage::Scan(s) if s.at < self.sd_len => {
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
            Stage::Scan(_) => None,
            Stage::Done(_) => None,
        }
    }

    /// Where the scan began, once it has.
    pub fn scan_start(&self) -> Option<u64> {
        self.scan_start
    }

    /// The outcome, once there is one.
    pub fn outcome(&self) -> Option<&Outcome> {
        match &self.stage {
            Stage::Done(o) => Some(o),
            _ => None,
        }
    }

    /// Takes the bytes of the range [`next_read`](Self::next_read) asked for (fewer at the
    /// end of the file).
    pub fn handle_read(&mut self, offset: u64, data: &[u8]) {
        match &mut self.stage {
            Stage::Bisect { lo, hi, probe } => {
                let mid = *lo + (*hi - *lo) / 2;
                if offset != mid {
                    return;
                }
                // Nothing to date in a probe that ran to the end of the file: what follows
                // the records (the post-flight data), so they are before it; in a probe
                // short of the end: the definitions, so they are after it.
                let at_end = mid + data.len() as u64 >= self.sd_len;
                let Some(start) = sync(&self.decoder, data) else {
                    if *probe < MAX_PROBE && data.len() as u64 == *probe {
                        // Long messages: no chain of them fits; look at more.
                        *probe *= 2;
                        return;
                    }
                    if at_end {
                        *hi = mid;
                    } else {
                        *lo = mid;
                    }
                    return self.bisected();
                };
                let mut decoder = std::mem::take(&mut self.decoder);
                let mut times: Vec<u64> = framed(&data[start..])
                    .filter_map(|raw| timestamp(&mut decoder, raw))
                    .filter(|t| *t > 0)
                    .collect();
                self.decoder = decoder;
                // The median: some topics carry another clock or none (0), some lag. At
                // the flight's edges, where a record (the head's first, the tail's last,
                // a slow topic's next) is looked for by the log's clock, the third newest
                // (the median if newer): the probe is before it only if (nearly) nothing in
                // it is as new, where the median of a pass PX4's logger makes over its
                // topics when it resumes, old samples among them, can lie.
                times.sort_unstable();
                let front = if by_clock(self.edge) {
                    let newest = times.len().checked_sub(1);
                    newest.map(|newest| times[newest - 2.min(newest / 2)])
                } else {
                    times.get(times.len() / 2).copied()
                };
                self.dated |= front.is_some();
                if front.is_none() && *probe < MAX_PROBE && data.len() as u64 == *probe {
                    // Messages without a time (a run of 'M' or 'P'): look further.
                    *probe *= 2;
                    return;
                }
                *probe = PROBE;
                let after = match front {
                    Some(t) => t >= self.target_us,
                    None => at_end,
                };
                if after {
                    *hi = mid;
                } else {
                    *lo = mid;
                }
                self.bisected();
            }
            Stage::Scan(s) => {
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
            Stage::Done(_) => {}
        }
    }

    /// Starts the scan once the bisection's range is small enough (or goes on with the
    /// scan that left off for it).
    fn bisected(&mut self) {
        if let Stage::Bisect { lo, hi, .. } = self.stage
            && hi - lo <= BISECT_STOP
        {
            self.stage = Stage::Scan(match self.left_off.take() {
                Some(mut scan) => {
                    scan.at = lo;
                    scan.carry_at = lo;
                    scan.carry.clear();
                    scan.synced = false;
                    scan
                }
                None => {
                    self.scan_start = Some(lo);
                    Scan::from(lo)
                }
            });
        }
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
        let bisect = Stage::Bisect {
            lo: s.at,
            hi: self.sd_len,
            probe: PROBE,
        };
        if let Stage::Scan(scan) = std::mem::replace(&mut self.stage, bisect) {
            self.left_off = Some(scan);
        }
        self.target_us = to;
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
                s.clock = s.clock.max(t);
                if let Some(pace) = self.paces.get_mut(&id) {
                    pace.logged(t, s.clock);
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
}

/// Whether a search for `edge` looks for the log's clock itself (the flight's head and
/// tail, and where a slow topic is due in the tail), not for a gap's anchors.
fn by_clock(edge: Option<Edge>) -> bool {
    matches!(edge, Some(Edge::Head | Edge::Tail))
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

/// The median time of the anchors before `site`.
fn median_time(decoder: &mut Decoder, site: &DropoutSite) -> Option<u64> {
    let mut times: Vec<u64> = site
        .before
        .iter()
        .filter_map(|i| timestamp(decoder, &site.messages[*i].bytes))
        .collect();
    times.sort_unstable();
    times.get(times.len() / 2).copied()
}

/// The site's messages between its anchors `i` and `j` merged in order with the SD log's
/// `stretch` between the same anchors: a message both have once, each one only one has in
/// its place (where neither tells, what the stream lost before what it has after it
/// resumed); the stream's dropouts left out, the SD log's kept. Without `i` (the head) the
/// site's messages from its first, without `j` (the tail) to its end. Messages of the split
/// before or after (a dropout at a split's edge) stay there: the SD log's copies of them
/// are left out.
fn merge(site: &DropoutSite, i: Option<usize>, j: Option<usize>, stretch: &[Vec<u8>]) -> Outcome {
    let lo = i.map_or(0, |i| i + 1).max(site.own.start);
    let hi = j.unwrap_or(site.messages.len()).min(site.own.end).max(lo);
    // The stream's messages, each with whether a dropout comes before it (the stream
    // resumed there).
    let mut ours: Vec<&[u8]> = Vec::new();
    let mut after_gap: Vec<bool> = Vec::new();
    let mut resumed = false;
    for m in &site.messages[lo..hi] {
        if m.bytes[2] == msg_type::DROPOUT {
            resumed = true;
        } else {
            ours.push(&m.bytes[..]);
            after_gap.push(resumed);
        }
    }
    // How often each of the stream's messages is still to come in it.
    let mut ours_ahead: HashMap<&[u8], usize> = HashMap::new();
    for m in &ours {
        *ours_ahead.entry(m).or_default() += 1;
    }
    // One set of post-flight records: the stream's, when it has them (the SD log's own,
    // of its logger's stop, left out).
    let ours_postflight = ours.iter().any(|m| is_postflight(m));
    // The other split's messages between the anchors, by how often each is there.
    let mut elsewhere: HashMap<&[u8], usize> = HashMap::new();
    let (a, b) = (i.map_or(0, |i| i + 1), j.unwrap_or(site.messages.len()));
    for (k, m) in site.messages.iter().enumerate().take(b).skip(a) {
        if !site.own.contains(&k) && m.bytes[2] != msg_type::DROPOUT {
            *elsewhere.entry(&m.bytes[..]).or_default() += 1;
        }
    }
    let stretch: Vec<&Vec<u8>> = stretch
        .iter()
        .filter(|m| !(ours_postflight && is_postflight(m) && !ours.contains(&&m[..])))
        .filter(|m| match elsewhere.get_mut(&m[..]) {
            Some(n) if *n > 0 => {
                *n -= 1;
                false
            }
            _ => true,
        })
        .collect();
    // How often each message is still to come in the SD log's stretch.
    let mut ahead: HashMap<&[u8], usize> = HashMap::new();
    for m in &stretch {
        *ahead.entry(&m[..]).or_default() += 1;
    }
    let (mut a, mut b) = (0, 0);
    let mut records = Vec::new();
    let mut recovered = 0;
    let mut recovered_bytes = 0;
    let mut complete = true;
    loop {
        let take_sd = match (stretch.get(a), ours.get(b)) {
            (None, None) => break,
            (Some(sd), Some(our)) if &sd[..] == *our => {
                if let Some(n) = ours_ahead.get_mut(our) {
                    *n -= 1;
                }
                b += 1;
                true
            }
            // Ours comes later in the SD log: the SD log's message is one the stream lost.
            // Neither has the other's: after the stream resumed, what it lost comes first.
            (Some(sd), Some(our)) => {
                ahead.get(our).is_some_and(|n| *n > 0)
                    || (after_gap[b] && ours_ahead.get(&sd[..]).is_none_or(|n| *n == 0))
            }
            (Some(_), None) => true,
            (None, Some(_)) => false,
        };
        if take_sd {
            let sd = stretch[a];
            a += 1;
            if let Some(n) = ahead.get_mut(&sd[..]) {
                *n -= 1;
            }
            records.extend_from_slice(sd);
            // (A message both have advanced `b` above.)
            if (b == 0 || ours.get(b - 1).is_none_or(|our| *our != &sd[..]))
                && sd[2] != msg_type::DROPOUT
            {
                recovered += 1;
                recovered_bytes += sd.len() as u64;
            }
            complete &= sd[2] != msg_type::DROPOUT;
        } else {
            // The stream has it, the SD log not (its own drop): kept.
            records.extend_from_slice(ours[b]);
            if let Some(n) = ours_ahead.get_mut(ours[b]) {
                *n -= 1;
            }
            b += 1;
        }
    }
    let from = match i {
        Some(i) if site.own.contains(&i) => {
            site.messages[i].offset + site.messages[i].bytes.len() as u64
        }
        _ => site
            .messages
            .get(site.own.start)
            .map_or(site.offset, |m| m.offset),
    };
    let to = match j {
        Some(j) if site.own.contains(&j) => site.messages[j].offset,
        _ => site.end,
    };
    Outcome::Filled {
        from,
        to,
        records,
        recovered,
        recovered_bytes,
        complete,
        edge: site.edge(),
    }
}

/// The first offset in `bytes` where [`CHAIN`] messages in a row fit (or fewer that end
/// exactly at its end): plausible types and sizes, data records of a known subscription
/// with its format's size.
fn sync(decoder: &Decoder, bytes: &[u8]) -> Option<usize> {
    (0..bytes.len().saturating_sub(MSG_HEADER_LEN)).find(|&start| {
        let mut at = start;
        for n in 0..CHAIN {
            let Some(head) = bytes.get(at..at + MSG_HEADER_LEN) else {
                return n >= 2 && at == bytes.len();
            };
            let size = u16::from_le_bytes([head[0], head[1]]) as usize;
            let ty = head[2];
            if !plausible_header(ty, size, false) || ty == msg_type::FLAG_BITS {
                return false;
            }
            if ty == msg_type::DATA {
                let Some(id) = bytes.get(at + 3..at + 5) else {
                    return n >= 2;
                };
                let msg_id = u16::from_le_bytes([id[0], id[1]]);
                match decoder.subscription(msg_id) {
                    Some(sub) if sub.layout.accepts_len(size - 2) => {}
                    _ => return false,
                }
            }
            at += MSG_HEADER_LEN + size;
            if at > bytes.len() {
                return n >= 2;
            }
        }
        true
    })
}
