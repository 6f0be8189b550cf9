//! A whole flight filled from one SD log, sans-IO: asks for byte ranges of the SD log
//! ([`Filler::next_read`]), takes what they hold ([`Filler::handle_read`]) and hands out what
//! each dropout came to ([`Filler::poll`]). The shell moves the bytes (over MAVLink FTP) and
//! writes the amendments; the tests run it on an SD log in memory.
//!
//! The flight's dropouts are taken in the order of its gaps
//! ([`Gaps`](crate::fill::walk::Gaps)), every column's at once:
//! 0. When a column of the session names no subscription (it lost its splits), the SD log's
//!    own definitions first ([`SdDefinitions`]): the records of that column's topics are
//!    told apart by them, and go to no column but the one the session's column patterns
//!    give them.
//! 1. First the probe, one dropout with records on both sides: found in this SD log, the log
//!    is the flight's ([`Filler::wrong_log`] otherwise).
//! 2. Then each group of dropouts that share gaps (a column's dropout can span several gaps
//!    of another's). Where the gap before was found, the group is read straight from there
//!    ([`GapRead::fill`]): a few hundred bytes per gap. Otherwise, or when the SD log is not
//!    as the walk predicts, each dropout is searched for by time ([`Locator`]), and the walk
//!    picks up again from where the search found the stream resuming ([`GapRead::find`]).
//! 3. The flight's head and tail, and an event buffer's windows, are always searched for
//!    (records on one side only, or samples written late).

use std::collections::VecDeque;

use crate::fill::cache::ByteCache;
use crate::fill::column::ColumnFilter;
use crate::fill::definitions::SdDefinitions;
use crate::fill::flight::Flight;
use crate::fill::locate::{Locator, Outcome, Unfilled};
use crate::fill::scan::Edge;
use crate::fill::walk::{GapRead, Walked};
use crate::ulog::Decoder;
use crate::ulog::format::FormatDef;
use crate::ulog::message::{Message, msg_type};

/// Bytes of the SD log kept once fetched (dropouts close together read the same stretch).
pub const CACHE_BYTES: u64 = 4 << 20;

/// What one dropout of the flight came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteFill {
    /// The column and the site (its index among the column's
    /// [`FlightScan::sites`](crate::fill::FlightScan::sites)).
    pub column: usize,
    pub site: usize,
    pub outcome: Outcome,
    /// Read where the gap before put it (not searched for).
    pub walked: bool,
}

/// Dropouts taken together: those that share gaps, in the order of the gaps.
#[derive(Debug, Clone)]
struct Step {
    /// The first and last gap, if the sites have any.
    gaps: Option<(usize, usize)>,
    sites: Vec<(usize, usize)>,
}

/// A searched site's result kept for when its step comes (the probe's).
#[derive(Debug)]
struct Searched {
    outcome: Outcome,
    span: Option<(u64, u64)>,
    scan_start: Option<u64>,
}

#[derive(Debug)]
enum Work {
    Idle,
    Probe(Box<Locator>),
    Walk {
        step: Step,
        read: GapRead,
        walked: Vec<Walked>,
    },
    Search {
        step: Step,
        /// The next of the step's sites to search for.
        next: usize,
        current: Option<((usize, usize), Box<Locator>)>,
        /// Where a searched site that ends with the step's last gap lay in the SD log.
        span: Option<(u64, u64)>,
    },
    Resync(GapRead),
    /// The SD log's own definitions, before the probe (see the module docs).
    Definitions(SdDefinitions),
    Done,
}

/// See the module docs.
#[derive(Debug)]
pub struct Filler<'a> {
    flight: &'a Flight,
    /// The sites a fill before this one filled, per column.
    filled: Vec<Vec<bool>>,
    sd_len: u64,
    sd_start: u64,
    cache: ByteCache,
    /// The flight's definitions (with those the SD log added): each search starts from them.
    definitions: Decoder,
    /// The walks' decoder.
    decoder: Decoder,
    /// What of the SD log each column takes.
    filters: Vec<ColumnFilter>,
    steps: VecDeque<Step>,
    /// Per column: where its records lie at or after in the SD log.
    from: Vec<u64>,
    /// The last gap found, and where in the SD log the stream resumed after it.
    resumed: Option<(usize, u64)>,
    work: Work,
    done: VecDeque<SiteFill>,
    probe: Option<(usize, usize)>,
    probed: Option<Searched>,
    /// The probe was found (its result may since have been taken by its step).
    log_found: bool,
    wrong_log: Option<Unfilled>,
    /// The range the shell was last asked to read.
    asked: Option<(u64, u64)>,
}

impl<'a> Filler<'a> {
    /// Fills `flight` from an SD log of `sd_len` bytes whose header says it began at
    /// `sd_start` (log time, µs); `filled` says which sites (per column) an earlier fill
    /// filled; `probe` is the site that tells whether the SD log is the flight's (found first).
    pub fn new(
        flight: &'a Flight,
        filled: Vec<Vec<bool>>,
        probe: Option<(usize, usize)>,
        sd_len: u64,
        sd_start: u64,
    ) -> Self {
        let decoder = flight
            .columns
            .first()
            .map(|c| c.flight.decoder())
            .unwrap_or_default();
        let mut filler = Self {
            flight,
            filled,
            sd_len,
            sd_start,
            cache: ByteCache::new(sd_len, CACHE_BYTES),
            definitions: decoder.clone(),
            decoder,
            filters: flight.columns.iter().map(|c| c.filter.clone()).collect(),
            steps: steps(flight),
            from: vec![0; flight.columns.len()],
            resumed: None,
            work: Work::Idle,
            done: VecDeque::new(),
            probe,
            probed: None,
            log_found: false,
            wrong_log: None,
            asked: None,
        };
        if flight.lacks_definitions() {
            filler.work = Work::Definitions(SdDefinitions::new(sd_len));
        } else if let Some(site) = probe {
            filler.work = Work::Probe(Box::new(filler.locator(site)));
        }
        filler.advance();
        filler
    }

    /// What the filler reads for now, for logs: `probe`, `walk`, `check`, `search`, `head`,
    /// `tail`, `window`, `resync`, or `-` between two works.
    pub fn doing(&self) -> &'static str {
        match &self.work {
            Work::Probe(_) => "probe",
            Work::Walk { read, .. } if read.is_check() => "check",
            Work::Walk { .. } => "walk",
            Work::Search {
                current: Some((site, _)),
                ..
            } => match self.flight.site(*site).edge() {
                Some(Edge::Head) => "head",
                Some(Edge::Tail) => "tail",
                Some(Edge::Window) => "window",
                None => "search",
            },
            Work::Resync(_) => "resync",
            Work::Definitions(_) => "definitions",
            Work::Idle | Work::Search { .. } | Work::Done => "-",
        }
    }

    /// The site whose search the next read is for (the probe's included), as `(column,
    /// site)`: what the read costs is that site's.
    pub fn searching(&self) -> Option<(usize, usize)> {
        match &self.work {
            Work::Probe(_) | Work::Definitions(_) => self.probe,
            Work::Search {
                current: Some((site, _)),
                ..
            } => Some(*site),
            _ => None,
        }
    }

    /// The next byte range of the SD log to read (whole packets), `None` once done.
    pub fn next_read(&mut self) -> Option<(u64, u64)> {
        let (at, n) = self.wanted()?;
        self.asked = self.cache.missing(at, n);
        self.asked
    }

    /// Takes the bytes of the range [`next_read`](Self::next_read) gave (fewer: the file
    /// ends there).
    pub fn handle_read(&mut self, offset: u64, data: &[u8]) {
        let Some((at, n)) = self.asked.take() else {
            return;
        };
        if offset != at {
            return;
        }
        if (data.len() as u64) < n {
            // The file is shorter than it was listed.
            self.sd_len = offset + data.len() as u64;
            self.cache.truncate(self.sd_len);
        }
        self.cache.insert(offset, data);
        self.advance();
    }

    /// What the next dropout came to, as soon as it is known.
    pub fn poll(&mut self) -> Option<SiteFill> {
        self.done.pop_front()
    }

    /// The probe was not found in this SD log: it is not the flight's, and why.
    pub fn wrong_log(&self) -> Option<Unfilled> {
        self.wrong_log
    }

    /// The probe was found: the SD log is the flight's.
    pub fn probed(&self) -> bool {
        self.log_found
    }

    /// Nothing more to read.
    pub fn is_done(&self) -> bool {
        matches!(self.work, Work::Done)
    }

    fn locator(&self, (c, k): (usize, usize)) -> Locator {
        let column = &self.flight.columns[c];
        Locator::new(
            &column.flight,
            &column.flight.sites[k],
            self.sd_len,
            self.from[c],
        )
        .with_sd_start(self.sd_start)
        .with_definitions(self.definitions.clone())
        .with_filter(self.filters[c].clone())
        .with_stream_end(&self.flight.stream_end)
    }

    /// The range the work under way needs.
    fn wanted(&self) -> Option<(u64, u64)> {
        match &self.work {
            Work::Probe(l) => l.next_read(),
            Work::Search {
                current: Some((_, l)),
                ..
            } => l.next_read(),
            Work::Walk { read, .. } | Work::Resync(read) => read.next_read(),
            Work::Definitions(d) => d.next_read(),
            _ => None,
        }
    }

    /// Runs the work on what the cache holds, as far as it goes.
    fn advance(&mut self) {
        loop {
            match self.wanted() {
                Some((at, n)) => {
                    let Some(bytes) = self.cache.get(at, n) else {
                        return;
                    };
                    self.feed(at, &bytes);
                }
                None => {
                    if !self.next_work() {
                        return;
                    }
                }
            }
        }
    }

    fn feed(&mut self, at: u64, bytes: &[u8]) {
        let gaps = self.flight.gaps.as_ref();
        match &mut self.work {
            Work::Probe(l)
            | Work::Search {
                current: Some((_, l)),
                ..
            } => l.handle_read(at, bytes),
            Work::Walk { read, .. } | Work::Resync(read) => {
                if let Some(gaps) = gaps {
                    read.handle_read(gaps, &mut self.decoder, at, bytes);
                }
            }
            Work::Definitions(d) => d.handle_read(at, bytes),
            _ => {}
        }
    }

    /// Takes the SD log's formats and subscriptions the flight's definitions lack; each
    /// subscription goes to the column the store would have routed its topic to, and the
    /// records of one that no definition names go to none.
    fn adopt(&mut self, sd: &SdDefinitions) {
        for message in sd.messages().filter_map(Message::parse_framed) {
            match &message {
                Message::Format(text) => {
                    let known = FormatDef::parse(text)
                        .is_ok_and(|def| self.definitions.formats().contains_key(&def.name));
                    if !known {
                        let _ = self.definitions.handle(&message);
                    }
                }
                Message::AddLogged { msg_id, name, .. } => {
                    if self.definitions.subscription(*msg_id).is_some()
                        || self.definitions.handle(&message).is_err()
                    {
                        continue;
                    }
                    let column = self.flight.column_of(name);
                    for (k, filter) in self.filters.iter_mut().enumerate() {
                        filter.adopt(*msg_id, k == column);
                    }
                }
                _ => {}
            }
        }
        for filter in &mut self.filters {
            filter.named_only();
        }
        self.decoder = self.definitions.clone();
    }

    /// The work under way needs no more bytes: takes its result and starts what comes
    /// next; `false` once there is nothing left.
    fn next_work(&mut self) -> bool {
        match std::mem::replace(&mut self.work, Work::Idle) {
            Work::Idle => match self.steps.pop_front() {
                Some(step) => self.start(step),
                None => {
                    self.work = Work::Done;
                    return false;
                }
            },
            Work::Probe(l) => match l.outcome() {
                Some(Outcome::Filled { .. }) => {
                    self.log_found = true;
                    self.probed = Some(Searched {
                        outcome: l.outcome().cloned().expect("filled"),
                        span: l.span(),
                        scan_start: l.scan_start(),
                    });
                }
                other => {
                    self.wrong_log = Some(match other {
                        Some(Outcome::Unfilled(why)) => *why,
                        _ => Unfilled::NoRecordBefore,
                    });
                    self.work = Work::Done;
                    return false;
                }
            },
            Work::Walk {
                step,
                read,
                mut walked,
            } => self.walked(step, read, &mut walked),
            Work::Search {
                step,
                next,
                current,
                mut span,
            } => {
                if let Some((site, l)) = current {
                    let ends_step = step.gaps.is_some_and(|(_, last)| {
                        self.site_gaps(site).is_some_and(|(_, l)| l == last)
                    });
                    self.searched(
                        site,
                        Searched {
                            outcome: l
                                .outcome()
                                .cloned()
                                .unwrap_or(Outcome::Unfilled(Unfilled::NoRecordAfter)),
                            span: l.span(),
                            scan_start: l.scan_start(),
                        },
                        ends_step.then_some(&mut span),
                    );
                }
                self.search(step, next, span);
            }
            Work::Resync(read) => {
                self.resumed = match read.result() {
                    Some(Ok(w)) => Some((read.gap(), w.resumed)),
                    _ => None,
                };
            }
            Work::Definitions(d) => {
                self.adopt(&d);
                if let Some(site) = self.probe {
                    self.work = Work::Probe(Box::new(self.locator(site)));
                }
            }
            Work::Done => {
                self.work = Work::Done;
                return false;
            }
        }
        true
    }

    /// Starts `step`: read straight from the gap before when it was found, else searched.
    fn start(&mut self, step: Step) {
        let left = step
            .sites
            .iter()
            .filter(|(c, k)| !self.filled[*c][*k])
            .count();
        if left == 0 {
            // Filled before: where the stream resumed after it is not known here.
            self.resumed = None;
            return;
        }
        let walkable = left == step.sites.len()
            && step.sites.iter().all(|s| {
                let site = self.flight.site(*s);
                Some(*s) != self.probe
                    && site.window.is_none()
                    && !(site.starts_flight && site.before.is_empty())
                    && !(site.ends_flight && site.after.is_empty())
            });
        match (&self.flight.gaps, step.gaps, self.resumed) {
            (Some(gaps), Some((first, _)), Some((g, resumed))) if walkable && g + 1 == first => {
                let start = resumed + gaps.stretches[first].bytes;
                let read = GapRead::fill(gaps, first, start, self.sd_len, &mut self.decoder);
                self.work = Work::Walk {
                    step,
                    read,
                    walked: Vec::new(),
                };
            }
            _ => {
                self.resumed = None;
                self.search(step, 0, None);
            }
        }
    }

    /// A walk's read is over: the next gap of the step, then the check that the stretch
    /// after its last gap ends where its bytes say, then the step's sites filled; a miss
    /// turns the step into a search.
    fn walked(&mut self, step: Step, read: GapRead, walked: &mut Vec<Walked>) {
        let flight = self.flight;
        let gaps = flight.gaps.as_ref().expect("a walk has gaps");
        let (first, last) = step.gaps.expect("a walk has gaps");
        match read.result() {
            Some(Ok(w)) if !read.is_check() => {
                walked.push(w.clone());
                let g = read.gap();
                let start = w.resumed + gaps.stretches[g + 1].bytes;
                let read = if g < last {
                    GapRead::fill(gaps, g + 1, start, self.sd_len, &mut self.decoder)
                } else {
                    GapRead::check(gaps, g + 1, start, self.sd_len)
                };
                self.work = Work::Walk {
                    step,
                    read,
                    walked: std::mem::take(walked),
                };
            }
            Some(Ok(_)) => {
                let resumed = walked.last().expect("a gap walked").resumed;
                for site in &step.sites {
                    let outcome = self.walked_outcome(*site, first, walked);
                    self.done.push_back(SiteFill {
                        column: site.0,
                        site: site.1,
                        outcome,
                        walked: true,
                    });
                }
                self.resumed = Some((last, resumed));
                for from in &mut self.from {
                    *from = (*from).max(resumed);
                }
            }
            Some(Err(miss)) => {
                tracing::debug!(gap = read.gap(), "not where the gap before put it: {miss}");
                self.search(step, 0, None);
            }
            None => self.search(step, 0, None),
        }
    }

    /// The walked step's outcome for one of its sites: its dropouts, in its split, read as
    /// the column's share of the runs the stream lost there (each gap's run at its first
    /// dropout in the column), the column's own messages between them kept.
    fn walked_outcome(
        &self,
        (c, k): (usize, usize),
        first_gap: usize,
        walked: &[Walked],
    ) -> Outcome {
        let gaps = self.flight.gaps.as_ref().expect("a walk has gaps");
        let column = &self.flight.columns[c];
        let site = &column.flight.sites[k];
        let own = &site.messages[site.own.clone()];
        let is_dropout = |m: &&crate::fill::scan::Placed| m.bytes[2] == msg_type::DROPOUT;
        let (Some(a), Some(b)) = (
            own.iter().position(|m| is_dropout(&m)),
            own.iter().rposition(|m| is_dropout(&m)),
        ) else {
            return Outcome::Unfilled(Unfilled::NoAnchors);
        };
        let mut records = Vec::new();
        let (mut recovered, mut recovered_bytes, mut complete) = (0, 0, true);
        for m in &own[a..=b] {
            if m.bytes[2] != msg_type::DROPOUT {
                records.extend_from_slice(&m.bytes);
                continue;
            }
            let Some((g, 0)) = gaps.gap_of(c, &site.split, m.offset) else {
                continue;
            };
            for raw in &walked[g - first_gap].run {
                if !self.filters[c].keeps(raw, None) {
                    continue;
                }
                records.extend_from_slice(raw);
                if raw[2] == msg_type::DROPOUT {
                    complete = false;
                } else {
                    recovered += 1;
                    recovered_bytes += raw.len() as u64;
                }
            }
        }
        Outcome::Filled {
            from: own[a].offset,
            to: own[b].offset + own[b].bytes.len() as u64,
            records,
            recovered,
            recovered_bytes,
            complete,
            edge: None,
        }
    }

    /// Searches for the step's sites from its `next` on (the probe's result taken as it
    /// is); then picks the walk up again from where the stream resumed after the step's last
    /// gap, if a search found that stretch.
    fn search(&mut self, step: Step, mut next: usize, mut span: Option<(u64, u64)>) {
        while let Some(&site) = step.sites.get(next) {
            next += 1;
            if self.filled[site.0][site.1] {
                continue;
            }
            let ends_step = step
                .gaps
                .is_some_and(|(_, last)| self.site_gaps(site).is_some_and(|(_, l)| l == last));
            if Some(site) == self.probe
                && let Some(probed) = self.probed.take()
            {
                self.searched(site, probed, ends_step.then_some(&mut span));
                continue;
            }
            let locator = Box::new(self.locator(site));
            self.work = Work::Search {
                step,
                next,
                current: Some((site, locator)),
                span,
            };
            return;
        }
        if let (Some(gaps), Some((_, last)), Some((from, _))) = (&self.flight.gaps, step.gaps, span)
        {
            self.work = Work::Resync(GapRead::find(
                gaps,
                last,
                from,
                self.sd_len,
                &mut self.decoder,
            ));
        }
    }

    /// A searched site's result: handed out; its column's search goes on from where it began.
    fn searched(
        &mut self,
        (c, k): (usize, usize),
        searched: Searched,
        span: Option<&mut Option<(u64, u64)>>,
    ) {
        if let Some(start) = searched.scan_start {
            self.from[c] = start;
        }
        if let (Some(span), Some(found)) = (span, searched.span) {
            span.get_or_insert(found);
        }
        self.done.push_back(SiteFill {
            column: c,
            site: k,
            outcome: searched.outcome,
            walked: false,
        });
    }

    /// The first and last gap of a site's dropouts.
    fn site_gaps(&self, (c, k): (usize, usize)) -> Option<(usize, usize)> {
        site_gaps(self.flight, c, k)
    }
}

/// The first and last gap of column `c`'s site `k`.
fn site_gaps(flight: &Flight, c: usize, k: usize) -> Option<(usize, usize)> {
    let gaps = flight.gaps.as_ref()?;
    let site = flight.site((c, k));
    let mut found = site.messages[site.own.clone()]
        .iter()
        .filter(|m| m.bytes[2] == msg_type::DROPOUT)
        .filter_map(|m| gaps.gap_of(c, &site.split, m.offset))
        .map(|(g, _)| g);
    let first = found.next()?;
    let last = found.fold(first, |last, g| last.max(g));
    Some((first, last))
}

/// The flight's dropouts as steps: those that share gaps together, in the order of the gaps;
/// then those with no gap (the flight's tail after its last records). Without gaps, one
/// step per site, column by column.
fn steps(flight: &Flight) -> VecDeque<Step> {
    let all = flight
        .columns
        .iter()
        .enumerate()
        .flat_map(|(c, col)| (0..col.flight.sites.len()).map(move |k| (c, k)));
    let mut ranged: Vec<((usize, usize), (usize, usize))> = Vec::new();
    let mut gapless = Vec::new();
    for (c, k) in all {
        match site_gaps(flight, c, k) {
            Some(range) => ranged.push((range, (c, k))),
            None => gapless.push((c, k)),
        }
    }
    ranged.sort_by_key(|((first, _), site)| (*first, *site));
    let mut steps: VecDeque<Step> = VecDeque::new();
    for ((first, last), site) in ranged {
        match steps.back_mut() {
            Some(Step {
                gaps: Some((_, end)),
                sites,
            }) if first <= *end => {
                *end = (*end).max(last);
                sites.push(site);
            }
            _ => steps.push_back(Step {
                gaps: Some((first, last)),
                sites: vec![site],
            }),
        }
    }
    steps.extend(gapless.into_iter().map(|site| Step {
        gaps: None,
        sites: vec![site],
    }));
    steps
}
