//! Completing an ArduPilot flight from the vehicle's card, sans-IO. `AP_Logger` writes every
//! message to each of its backends in the same order, byte for byte, so the card's log
//! (`/APM/LOGS/NNNNNNNN.BIN`) holds the stream's messages in the stream's order, and between
//! them what the stream lost: what the link lost (where the receiver marked a dropout) and
//! what the vehicle dropped at the source when its stream's buffer was full (unmarked: the
//! stream goes on without them). Each backend also writes its own startup records and
//! definitions where it needs them, so the card has records the stream lacks and the other
//! way round; those are never taken for lost data.
//!
//! [`BinFiller`] reads the card only where the stream says something is missing
//! ([`stream::BinStream`]): around each dropout mark, and over each second whose `DMS.Dp`
//! (the vehicle's count of messages dropped at the source) rose. It starts by finding one
//! of the stream's early samples on the card (bisecting on the card's log times): found, the
//! card is the flight's. Each stretch to read begins after the stream's last sample before
//! it, found where the last stretch's end and the stream's bytes since then put it (or
//! near: the backends' own records shift the card a little). From there it leaps: a sample
//! of the stream found, read alone, where the stream's bytes put it on the card means
//! nothing was lost before it; not found, a sample half as far is tried, down to where the
//! loss is, so a second with one drop costs a few small reads, not the second. There the
//! card is read message by message beside the stream (each read as long as what it
//! recovered so far): a card record equal to the stream's next is the same record; one the
//! stream lacks is recovered and goes before the stream's next; a stream record the card
//! has passed by (its own statistics, its startup records again after a restart) is the
//! stream's alone. The stretch ends at the stream's first sample after it. Reads ask for
//! the bytes they need and no more: ArduPilot's FTP server answers with what is asked.
//!
//! - [`stream`]: the flight as received.
//! - [`amendment`]: what was recovered as a standalone `.bin` beside the splits.

pub mod amendment;
mod leap;
pub mod stream;

use std::collections::VecDeque;

use crate::dataflash::format::{FMT_LEN, FMT_TYPE, Format, leading_time_us};
use crate::dataflash::framer::Framer;
use crate::fill::cache::ByteCache;
use stream::{BACKEND_OWN, BinStream};

/// Bytes of the card kept once fetched.
pub const CACHE_BYTES: u64 = 4 << 20;
/// How far from where the stream's bytes put it the card's copy of a sample is looked for
/// (the backends' own records shift the card a little); further (each backend wrote its
/// startup records at its own time: tens of KB), a bisection on the card's times finds it.
pub const ANCHOR_REACH: u64 = 1 << 10;
/// How far past a stretch's predicted end its walk goes before the stretch is left
/// unfilled.
pub const WALK_SLACK: u64 = 256 << 10;
/// A stream record the card passed by this far in log time is the stream's alone.
const PASSED_US: u64 = 1_000_000;
/// Bytes read at a card offset to learn its log time.
const TIME_PROBE: u64 = 256;
/// Fewest bytes the walk reads at a time.
const WALK_READ: u64 = 64;
/// A stretch over which the vehicle dropped at most this many messages at the source is
/// leapt over to where its drops are (a few small reads each); one with more is read whole,
/// in long reads (fewer round trips than leaping to each).
const LEAP_DROPS: u64 = 4;
/// Most bytes a walk reads at once.
const WALK_AHEAD: u64 = 16 << 10;
/// Stream records looked at for one of the card's.
const MAX_BESIDE: usize = 4096;
/// Stream samples tried as the probe, each later in the flight, before the card is taken
/// for another flight's.
const PROBE_TRIES: u32 = 8;

/// What a gap came to: the card's records the stream lacks there, to be read in place of
/// the split's bytes `[from, to)` (the dropout mark, or nothing where the vehicle dropped
/// messages unmarked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BinGapFill {
    /// The split (an index into the splits scanned) and its bytes replaced.
    pub split: usize,
    pub from: u64,
    pub to: u64,
    /// Whole records, back to back, in log order.
    pub records: Vec<u8>,
    pub count: u64,
    /// A receiver's dropout mark was there (else the vehicle dropped at the source).
    pub marked: bool,
    /// The log times of the first and last record that has one.
    pub first_us: Option<u64>,
    pub last_us: Option<u64>,
}

/// A stretch of the stream the card could not fill, and why: the split and offset of its
/// first gap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BinUnfilled {
    pub split: usize,
    pub offset: u64,
    pub reason: String,
}

/// What the filler hands out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BinOutcome {
    Filled(BinGapFill),
    Unfilled(BinUnfilled),
}

/// A stretch of the stream to read the card over: from its message `start` to the first
/// anchor at or after `end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stretch {
    start: usize,
    end: usize,
    /// Messages the vehicle says it dropped at the source over it.
    drops: u64,
}

#[derive(Debug, Clone)]
enum Work {
    /// Bisecting the card's times for the stream's sample `k` between the card offsets `lo`
    /// (before its time) and `hi`: the first one, to tell whether the card is the flight's
    /// (`stretch` `None`), or the one before stretch `n` (`Some(n)`) that is not near where
    /// the stream's bytes put it.
    Probe {
        k: usize,
        tries: u32,
        lo: u64,
        hi: u64,
        stretch: Option<usize>,
    },
    /// Finding the anchor before stretch `n` (the stream's message `k`) within `reach`
    /// bytes of where the last anchor puts it.
    Anchor {
        n: usize,
        k: usize,
        reach: u64,
    },
    /// Walking stretch `n`: the card from `pos` on beside the stream from its message `s`;
    /// leaping again once past the stream's message `leap_after`.
    Walk {
        n: usize,
        s: usize,
        pos: u64,
        leap_after: usize,
    },
    /// In step with the stream at `pos` (its message `s` next), looking whether the stream's
    /// sample `j` of stretch `n` is where the stream's bytes put it: then nothing was lost
    /// before it, and the walk goes on from there; else whether one half as far is.
    Leap {
        n: usize,
        s: usize,
        pos: u64,
        j: usize,
    },
    /// Reading the card's opening definitions from `pos` (a record of a type the stream
    /// never defined was met), then walking on.
    Head {
        pos: u64,
        then: Box<Work>,
    },
    Done,
}

/// See the module docs.
pub struct BinFiller<'a> {
    stream: &'a BinStream<'a>,
    stretches: Vec<Stretch>,
    cache: ByteCache,
    /// The card's log length.
    len: u64,
    /// FMT's and every type's format known so far, to read the card's records with.
    framer: Framer,
    /// The card's FMT records of types the stream never defined.
    card_formats: Vec<Vec<u8>>,
    work: Work,
    /// The last stream message found on the card, and where.
    anchor: Option<(usize, u64)>,
    /// The records recovered before the stream's message `.0`, not handed out yet.
    run: Option<(usize, BinGapFill)>,
    done: VecDeque<BinOutcome>,
    wrong_log: Option<String>,
    /// The card's opening definitions were read.
    head_read: bool,
    /// The stream's bytes per second of log time.
    bytes_per_s: f64,
}

impl<'a> BinFiller<'a> {
    /// A filler of `stream` from a card log of `len` bytes.
    pub fn new(stream: &'a BinStream<'a>, len: u64) -> Self {
        let mut framer = Framer::new();
        for record in &stream.format_records {
            framer.push(record, |_, _| {});
        }
        let first = Self::next_anchor(stream, 0);
        let mut filler = Self {
            stream,
            stretches: stretches(stream),
            cache: ByteCache::new(len, CACHE_BYTES),
            len,
            framer,
            card_formats: Vec::new(),
            work: Work::Done,
            anchor: None,
            run: None,
            done: VecDeque::new(),
            wrong_log: None,
            head_read: false,
            bytes_per_s: stream.bytes_per_s().unwrap_or(50_000.0),
        };
        match first {
            Some(k) if !filler.stretches.is_empty() => {
                filler.work = Work::Probe {
                    k,
                    tries: 0,
                    lo: 0,
                    hi: len,
                    stretch: None,
                }
            }
            Some(_) => {}
            None => filler.wrong_log = Some("the stream has no timed sample to find it by".into()),
        }
        filler
    }

    /// The first anchor (a timed sample the card has too) of the stream from message `k`.
    fn next_anchor(stream: &BinStream, k: usize) -> Option<usize> {
        (k..stream.messages.len()).find(|&k| stream.messages[k].anchor)
    }

    /// The next byte range of the card to fetch (then [`handle_read`](Self::handle_read)),
    /// or `None` when the work is over.
    pub fn next_read(&mut self) -> Option<(u64, u64)> {
        loop {
            match self.step() {
                Ok(true) => continue,
                Ok(false) => return None,
                Err((at, n)) => match self.cache.missing_exact(at, n) {
                    Some(range) => return Some(range),
                    // Held already: a step that asks again for what it has would never end.
                    None => {
                        tracing::debug!(at, n, "the card's fill asked for bytes it holds");
                        self.work = Work::Done;
                    }
                },
            }
        }
    }

    /// Takes the bytes of the card read from `offset`.
    pub fn handle_read(&mut self, offset: u64, data: &[u8]) {
        self.cache.insert(offset, data);
        if data.is_empty() {
            // Nothing more there: the card is shorter than it said.
            self.len = self.len.min(offset);
            self.cache.truncate(self.len);
        }
    }

    /// What a gap came to, once known.
    pub fn poll(&mut self) -> Option<BinOutcome> {
        self.done.pop_front()
    }

    /// Why the card is not the flight's, once known.
    pub fn wrong_log(&self) -> Option<&str> {
        self.wrong_log.as_deref()
    }

    /// The stream was found on the card: it is the flight's.
    pub fn found(&self) -> bool {
        self.anchor.is_some()
    }

    pub fn is_done(&self) -> bool {
        matches!(self.work, Work::Done)
    }

    /// The card's FMT records of the types the stream never defined, met while reading:
    /// what the recovered records of those types need.
    pub fn card_formats(&self) -> &[Vec<u8>] {
        &self.card_formats
    }

    /// The card's bytes `[at, at + n)` (cut at its end), or the range to fetch.
    fn get(&self, at: u64, n: u64) -> Result<Vec<u8>, (u64, u64)> {
        self.cache.get(at, n).ok_or((at, n))
    }

    /// One step of the work with the bytes at hand: `Ok(true)` when it moved on,
    /// `Ok(false)` when done, `Err(range)` when it needs that range of the card.
    fn step(&mut self) -> Result<bool, (u64, u64)> {
        self.work = match self.work.clone() {
            Work::Done => return Ok(false),
            Work::Probe {
                k,
                tries,
                lo,
                hi,
                stretch,
            } => self.probe(k, tries, lo, hi, stretch)?,
            Work::Anchor { n, k, reach } => self.find_anchor(n, k, reach)?,
            Work::Walk {
                n,
                s,
                pos,
                leap_after,
            } => self.walk(n, s, pos, leap_after)?,
            Work::Leap { n, s, pos, j } => self.leap(n, s, pos, j)?,
            Work::Head { pos, then } => self.head(pos, *then)?,
        };
        Ok(true)
    }

    /// The log time of the first whole timed record at or after card offset `at`.
    fn time_at(&self, at: u64) -> Result<Option<u64>, (u64, u64)> {
        let bytes = self.get(at, TIME_PROBE)?;
        let mut framer = self.framer.clone();
        framer.gap();
        let mut time = None;
        framer.push(&bytes, |m, f| {
            if time.is_none() && f.has_time_us() {
                time = leading_time_us(m);
            }
        });
        Ok(time)
    }

    fn probe(
        &mut self,
        k: usize,
        tries: u32,
        lo: u64,
        hi: u64,
        stretch: Option<usize>,
    ) -> Result<Work, (u64, u64)> {
        let target = self.stream.messages[k]
            .time_us
            .expect("an anchor has a time");
        if hi - lo > 4 * TIME_PROBE {
            let mid = lo + (hi - lo) / 2;
            return Ok(match self.time_at(mid)? {
                Some(t) if t < target => Work::Probe {
                    k,
                    tries,
                    lo: mid,
                    hi,
                    stretch,
                },
                _ => Work::Probe {
                    k,
                    tries,
                    lo,
                    hi: mid,
                    stretch,
                },
            });
        }
        // Its time is near `lo`: its exact bytes from a little before.
        let from = lo.saturating_sub(TIME_PROBE);
        let span = (hi + 2 * TIME_PROBE).min(self.len).saturating_sub(from);
        let bytes = self.get(from, span)?;
        if let Some(p) = memchr::memmem::find(&bytes, self.stream.bytes(k)) {
            self.anchor = Some((k, from + p as u64));
            return Ok(self.next_stretch(stretch.unwrap_or(0)));
        }
        if let Some(n) = stretch {
            self.left_unfilled(
                n,
                "the stream's last sample before it is not on the card where its time is",
            );
            return Ok(self.next_stretch(n + 1));
        }
        // Not there (the card began later, or is another flight's): a sample later in the
        // flight, 1 s on, then 2 s, 4 s...
        let later = target + (1_000_000u64 << tries);
        let next = (k + 1..self.stream.messages.len()).find(|&j| {
            let m = &self.stream.messages[j];
            m.anchor && m.time_us.is_some_and(|t| t >= later)
        });
        match next {
            Some(next) if tries + 1 < PROBE_TRIES => Ok(Work::Probe {
                k: next,
                tries: tries + 1,
                lo: 0,
                hi: self.len,
                stretch: None,
            }),
            _ => {
                self.wrong_log = Some(format!(
                    "none of {PROBE_TRIES} of the stream's samples is in it"
                ));
                Ok(Work::Done)
            }
        }
    }

    /// The work for the first stretch from `n` on that lies after the anchor.
    fn next_stretch(&mut self, n: usize) -> Work {
        let (a, _) = self.anchor.expect("anchored");
        let Some(n) = (n..self.stretches.len()).find(|&n| self.stretches[n].end > a) else {
            return Work::Done;
        };
        let start = self.stretches[n].start;
        // The stream's last anchor before the stretch (or the anchor itself).
        let k = (a..start.max(a + 1))
            .rev()
            .find(|&k| self.stream.messages[k].anchor)
            .unwrap_or(a);
        Work::Anchor { n, k, reach: 0 }
    }

    /// Finds stream message `k` on the card: where the last anchor puts it, else within
    /// `reach` bytes of there (widening up to [`ANCHOR_REACH`]), else by the card's times;
    /// then walks stretch `n`.
    fn find_anchor(&mut self, n: usize, k: usize, reach: u64) -> Result<Work, (u64, u64)> {
        let (a, c) = self.anchor.expect("anchored");
        let m = self.stream.messages[k];
        let predicted = c + (m.at - self.stream.messages[a].at);
        let from = predicted.saturating_sub(reach).min(self.len);
        let span = (predicted + reach + m.len).min(self.len) - from;
        let bytes = self.get(from, span)?;
        let hits: Vec<usize> = memchr::memmem::find_iter(&bytes, self.stream.bytes(k)).collect();
        // The nearest to where predicted.
        let nearest = hits
            .iter()
            .map(|&p| from + p as u64)
            .min_by_key(|&p| p.abs_diff(predicted));
        if let Some(at) = nearest {
            self.anchor = Some((k, at));
            return Ok(self.walk_or_leap(n, k + 1, at + m.len, k));
        }
        if reach >= ANCHOR_REACH {
            // Far from there: where the card's times put it.
            return Ok(Work::Probe {
                k,
                tries: 0,
                lo: c,
                hi: self.len,
                stretch: Some(n),
            });
        }
        Ok(Work::Anchor {
            n,
            k,
            reach: (reach * 4).clamp(256, ANCHOR_REACH),
        })
    }

    /// How far past where the stream's bytes put its end a stretch's walk may go: what its
    /// marks say the link lost (three times over: the card may log faster than the stream
    /// carried), and [`WALK_SLACK`] more. A mark of unknown length reaches to the card's end.
    fn reach(&self, stretch: Stretch) -> u64 {
        let mut reach = WALK_SLACK;
        for m in
            &self.stream.messages[stretch.start..=stretch.end.min(self.stream.messages.len() - 1)]
        {
            if let Some(mark) = m.mark {
                match mark.duration_ms {
                    Some(ms) => reach += (3.0 * ms as f64 / 1e3 * self.bytes_per_s) as u64,
                    None => return self.len,
                }
            }
        }
        reach
    }

    /// Stretch `n` is left as it is, for `why`.
    fn left_unfilled(&mut self, n: usize, why: &str) {
        let m = &self.stream.messages[self.stretches[n].start];
        let (split, offset) = m.mark.map_or((m.split, m.offset), |k| (k.split, k.offset));
        self.done.push_back(BinOutcome::Unfilled(BinUnfilled {
            split,
            offset,
            reason: why.to_owned(),
        }));
    }

    /// Walks stretch `n`: the card's records from `pos` beside the stream's from `s` (the
    /// first the card has not matched yet).
    fn walk(
        &mut self,
        n: usize,
        mut s: usize,
        pos: u64,
        leap_after: usize,
    ) -> Result<Work, (u64, u64)> {
        let stretch = self.stretches[n];
        let (a, c) = self.anchor.expect("anchored");
        // Where the stretch's end would be with nothing lost, and how far past it to go.
        let end_at = Self::next_anchor(self.stream, stretch.end).map_or(self.len, |e| {
            c + (self.stream.messages[e].at - self.stream.messages[a].at)
        });
        if pos > end_at + self.reach(stretch) || pos >= self.len {
            self.flush_run();
            self.left_unfilled(n, "the card's records and the stream's part there");
            return Ok(self.next_stretch(n + 1));
        }
        // While the card goes on with what the stream lost, as far again as it went so far
        // in one read (what is read past the gap's end is at most what it recovered); over
        // a stretch of many drops, as far as the stretch surely goes (where it would end
        // with nothing lost): a read is a round trip on a telemetry link.
        let recovered = self
            .run
            .as_ref()
            .map_or(0, |(_, run)| run.records.len() as u64);
        let to_end = if stretch.drops > LEAP_DROPS {
            end_at.saturating_sub(pos) + WALK_READ
        } else {
            0
        };
        let ahead = recovered.max(to_end).clamp(WALK_READ, WALK_AHEAD);
        let mut bytes = self.get(pos, ahead)?;
        if let Some(len) = self.framer.length_at(&bytes)
            && len > bytes.len()
            && pos + (len as u64) <= self.len
        {
            bytes = self.get(pos, len as u64)?;
        }
        let mut at = 0usize;
        while at < bytes.len() {
            let Some(len) = self.framer.length_at(&bytes[at..]) else {
                if bytes.len() - at < 3 {
                    break;
                }
                let unknown_type = bytes[at..at + 2] == crate::dataflash::HEADER;
                if unknown_type && !self.head_read {
                    self.head_read = true;
                    let then = Work::Walk {
                        n,
                        s,
                        pos: pos + at as u64,
                        leap_after,
                    };
                    return Ok(Work::Head {
                        pos: 0,
                        then: Box::new(then),
                    });
                }
                self.flush_run();
                self.left_unfilled(n, "the card holds something not a record there");
                return Ok(self.next_stretch(n + 1));
            };
            if at + len > bytes.len() {
                if at == 0 {
                    // Cut by the card's end.
                    self.flush_run();
                    self.left_unfilled(n, "the card ends there");
                    return Ok(Work::Done);
                }
                break;
            }
            let record = &bytes[at..at + len];
            let format = self.framer.format(record[2]).expect("a known type");
            // The card's own (its definitions, its statistics): never the stream's loss.
            let own = is_definition(format) || BACKEND_OWN.contains(&format.name.as_str());
            let time = format
                .has_time_us()
                .then(|| leading_time_us(record))
                .flatten();
            if record[2] == FMT_TYPE && self.framer.format(record[3]).is_none() {
                self.framer.push(record, |_, _| {});
                self.card_formats.push(record.to_vec());
            }
            let here = pos + at as u64;
            at += len;
            match self.beside(record, time, s) {
                Some(k) => {
                    self.flush_run();
                    s = k + 1;
                    self.anchor = Some((k, here));
                    if self.stream.messages[k].anchor && k >= stretch.end {
                        return Ok(self.next_stretch(n + 1));
                    }
                }
                None if own => {}
                None => self.recover(s, record, time),
            }
        }
        Ok(self.walk_or_leap(n, s, pos + at as u64, leap_after))
    }

    /// Reads the card's opening FMT records from `pos` on (the card's own types, `DSF`
    /// among them, are defined there); `then` once a record of another type comes.
    fn head(&mut self, pos: u64, then: Work) -> Result<Work, (u64, u64)> {
        let bytes = self.get(pos, 8 * FMT_LEN as u64)?;
        let mut at = 0;
        while let Some(record) = bytes.get(at..at + FMT_LEN) {
            if record[..2] != crate::dataflash::HEADER || record[2] != FMT_TYPE {
                return Ok(then);
            }
            if Format::parse(record).is_ok_and(|f| self.framer.format(f.type_id).is_none()) {
                self.framer.push(record, |_, _| {});
                self.card_formats.push(record.to_vec());
            }
            at += FMT_LEN;
        }
        if bytes.len() < 8 * FMT_LEN {
            return Ok(then);
        }
        Ok(Work::Head {
            pos: pos + at as u64,
            then: Box::new(then),
        })
    }

    /// The stream's message equal to card record `record` (of log time `time`, if it has
    /// one), looked for from the stream's
    /// message `s` on, over the records the card would have passed by now (the stream's
    /// texts, parameters and definitions, and samples older than the card's by
    /// [`PASSED_US`]); `None` when the stream lacks it.
    fn beside(&self, record: &[u8], time: Option<u64>, s: usize) -> Option<usize> {
        let messages = &self.stream.messages;
        for (k, m) in messages.iter().enumerate().skip(s).take(MAX_BESIDE) {
            if self.stream.bytes(k) == record {
                return Some(k);
            }
            let passed = match (m.time_us, time) {
                _ if !m.anchor => true,
                (Some(t), Some(now)) => t + PASSED_US < now,
                _ => false,
            };
            if !passed {
                return None;
            }
        }
        None
    }

    /// Card record `record` (of log time `time`) is one the stream lacks, before its
    /// message `s`.
    fn recover(&mut self, s: usize, record: &[u8], time: Option<u64>) {
        // Past the stream's own records (its statistics) right before a dropout mark: the
        // records go in place of the mark.
        let marked = (s..self.stream.messages.len())
            .find(|&k| self.stream.messages[k].mark.is_some() || self.stream.messages[k].anchor);
        let s = match marked {
            Some(k) if self.stream.messages[k].mark.is_some() => k,
            _ => s,
        };
        if self.run.as_ref().is_some_and(|(at, _)| *at != s) {
            self.flush_run();
        }
        let (_, fill) = self.run.get_or_insert_with(|| {
            let m = self.stream.messages.get(s);
            let (split, from, to, marked) = match m {
                Some(m) => match m.mark {
                    Some(k) => (k.split, k.offset, k.offset + k.len, true),
                    None => (m.split, m.offset, m.offset, false),
                },
                None => {
                    let last = self.stream.messages.last().expect("a stream");
                    (
                        last.split,
                        last.offset + last.len,
                        last.offset + last.len,
                        false,
                    )
                }
            };
            (
                s,
                BinGapFill {
                    split,
                    from,
                    to,
                    records: Vec::new(),
                    count: 0,
                    marked,
                    first_us: None,
                    last_us: None,
                },
            )
        });
        if time.is_some() {
            fill.first_us = fill.first_us.or(time);
            fill.last_us = time;
        }
        fill.records.extend_from_slice(record);
        fill.count += 1;
    }

    fn flush_run(&mut self) {
        if let Some((_, fill)) = self.run.take() {
            self.done.push_back(BinOutcome::Filled(fill));
        }
    }
}

/// A definition each backend writes where it needs it: never lost data.
fn is_definition(format: &Format) -> bool {
    matches!(format.name.as_str(), "FMT" | "FMTU" | "UNIT" | "MULT")
}

/// The stretches of `stream` to read the card over, in order, overlapping ones joined: each
/// dropout mark's, each span between two of the stream's `DMS` records over which the
/// vehicle's count of drops at the source rose (from the stream's start for the first), and
/// the stream's end after its last `DMS` if the count rose at that one.
fn stretches(stream: &BinStream) -> Vec<Stretch> {
    let mut out: Vec<Stretch> = Vec::new();
    let mut last_dms: Option<(usize, u64)> = None;
    // What the count rose by at the last `DMS`.
    let mut last_rise = 0;
    for (k, m) in stream.messages.iter().enumerate() {
        if m.mark.is_some() {
            out.push(Stretch {
                start: k,
                end: k,
                drops: 0,
            });
        }
        if let Some(total) = m.dropped_so_far {
            let (since, before) = last_dms.unwrap_or((0, 0));
            if total > before {
                out.push(Stretch {
                    start: since,
                    end: k,
                    drops: total - before,
                });
            }
            last_rise = total.saturating_sub(before);
            last_dms = Some((k, total));
        }
    }
    // The vehicle was dropping when the stream ended: what it dropped after its last `DMS`
    // no later one counts. The card is read from there to the stream's last sample.
    if let Some((k, _)) = last_dms.filter(|_| last_rise > 0)
        && let Some(end) = (k + 1..stream.messages.len())
            .rev()
            .find(|&j| stream.messages[j].anchor)
    {
        out.push(Stretch {
            start: k,
            end,
            drops: last_rise,
        });
    }
    out.sort_by_key(|s| s.start);
    let mut joined: Vec<Stretch> = Vec::new();
    for s in out {
        match joined.last_mut() {
            Some(last) if s.start <= last.end => {
                last.end = last.end.max(s.end);
                last.drops += s.drops;
            }
            _ => joined.push(s),
        }
    }
    joined
}

#[cfg(test)]
mod tests;
