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
//!   records stamped no later than that are taken (PX4 logs a slow topic's sample up to an
//!   interval after its time). The tail reads on until PX4's logger resumed after the stop
//!   and made its pass over its topics, [`FRESH_RECORDS`] records more, and no topic's pace
//!   in the stream ([`Pace`]: its newest sample, its writes' interval, how late PX4 logged
//!   it) says a sample of it stamped before the stop is still to come
//!   ([`Pace::due_by`]: a topic logged once an interval may bring one until its next write,
//!   however early its samples were written so far), or at the latest [`TAIL_LAG_US`] past
//!   the stop. A slow topic PX4 logs once an interval can be written
//!   a second and more after the stop: when each topic still to come writes at a steady
//!   cadence ([`Pace::next_write_from`]) and the first is due more than [`JUMP_US`]
//!   ahead, the tail bisects to where the log's clock gets there (by the third newest time
//!   of each probe, as at both edges) and reads on from there, skipping records that can
//!   hold nothing stamped before the stop. So the flight holds every sample of the SD log
//!   stamped up to its last one (tested at a hundred stops of every real log, and each
//!   time against PX4 behind mavlink-router), and a clean flight's tail costs tens of
//!   kilobytes of the SD log. With a dropout in the tail (the link went, and came back only
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
//!
//! This file holds the locator's surface (what it is given, what it asks for and ends
//! with) and its stages; `bisect` narrows the SD log down to where the stretch begins,
//! `stretch` scans from there and tells where the stretch begins and ends, `merge` puts the
//! SD log's stretch and the stream's messages together, and `boundary` finds where whole
//! messages begin in a piece read from anywhere.

mod bisect;
mod boundary;
mod merge;
mod stretch;

use std::collections::HashMap;
use std::collections::HashSet;

use self::bisect::{by_clock, median_time};
use self::stretch::Scan;
use crate::fill::column::ColumnFilter;
use crate::fill::pace::Pace;
use crate::fill::scan::{DropoutSite, Edge, FlightScan};
use crate::ulog::Decoder;

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
/// How far past a stopped stream's end its tail looks for samples stamped before it, at
/// most: the latest PX4 logs a sample after its time.
pub const TAIL_LAG_US: u64 = crate::fill::pace::MAX_LAG_US;
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
/// pace ([`Pace`]) says whether one may, until the log's clock is past the time it is due
/// by ([`Pace::due_by`]) and [`CADENCE_JITTER_US`](crate::fill::pace::CADENCE_JITTER_US).
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

    /// Reads the SD log with `decoder`'s definitions (the flight's, with those the SD log
    /// added that the flight lacks) rather than the site's flight's alone.
    pub fn with_definitions(mut self, decoder: Decoder) -> Self {
        self.decoder = decoder;
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
            Stage::Scan(s) => self.next_piece(s),
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
        match self.stage {
            Stage::Bisect { .. } => self.handle_probe(offset, data),
            Stage::Scan(_) => self.handle_scan_read(offset, data),
            Stage::Done(_) => {}
        }
    }
}
