//! The stream's gaps read straight from the SD log, one after the other, sans-IO.
//!
//! Between two gaps the stream lost nothing, and PX4 wrote the same records to both logs in
//! the same order (one `write_message` feeds both backends): the SD log holds the stream's
//! bytes between two gaps byte for byte. So once the SD log's offset where the stream resumed
//! after one gap is known, the next gap starts exactly the stream's bytes between them
//! further on, and the SD log's messages from there up to where the stream resumes again are
//! what the stream lost: a read of a few hundred bytes per gap, with no search.
//!
//! A session stored in columns splits the stream's messages among its columns, but every
//! column holds every dropout (the column router copies them to each), so the bytes between
//! two gaps are the sum of every column's between its two dropouts (the messages every
//! column holds a copy of counted once, from the main column).
//!
//! - [`Gaps`]: the flight's gaps in order, each with its dropout in every column, and what the
//!   stream holds between two gaps: its bytes, each column's first and last messages there.
//! - [`GapRead`]: one gap read from where the gap before predicts it ([`GapRead::fill`]),
//!   the place where the stream resumed after a gap found by walking the SD log from an
//!   earlier message ([`GapRead::find`]), or the end of a stretch checked
//!   ([`GapRead::check`]); a [`Miss`] when the SD log is not as predicted (it dropped
//!   records of its own there, the stream carried messages the SD log does not have, or
//!   lost some where no dropout says so): the gap is then searched for by time
//!   ([`crate::fill::Locator`]).
//!
//! What is checked before a run of the SD log's messages is taken as lost: the bytes that
//! end right where the gap should start are the end of the last message some column holds
//! before it (enough of it to tell places apart: [`CHECK_BYTES`]); none
//! of the run is among the last messages the columns hold before the gap; where the run ends,
//! the SD log's next messages are the first ones the columns hold after the gap, in an order
//! the columns allow (up to the first distinct one, [`CONFIRM`] at most); no message of the run is one of those; and the
//! stretch after the gap ends where its bytes say, with its last message (checked by the
//! caller, with the next gap or [`GapRead::check`]). A stretch proven so holds nothing the
//! stream lost: a loss no dropout marks (a receiver that folded two gaps into one dropout)
//! shows as a stretch that does not end where it should.

use std::collections::{HashMap, HashSet, VecDeque};

use crate::fill::cache::PACKET;
use crate::ulog::message::{FILE_HEADER_LEN, MSG_HEADER_LEN, framed, msg_type, plausible_header};
use crate::ulog::{Decoder, Message};

/// First messages of each column kept per stretch between gaps: where the stream resumed.
pub const HEADS: usize = 4;
/// Last messages of each column kept per stretch: where it stopped, and what a run must
/// not hold.
pub const TAILS: usize = 4;
/// Most messages in a row that must be the stream's first ones after a gap for the run to
/// end there: up to and including the first that tells records apart (a sync message is the
/// same bytes every time), fewer when the stream has fewer there. One record, its topic and
/// timestamp, is enough: the same bytes earlier in the run would be a record PX4 logged
/// twice, and the stretch after the gap, which then would not end where its bytes say, is
/// checked by the next gap's read.
pub const CONFIRM: usize = 3;
/// Bytes of the stream's last message before a gap checked where the gap should start (see
/// `telling_end`), and the byte values they must hold at least.
pub const CHECK_BYTES: usize = 32;
pub const CHECK_DISTINCT: usize = 8;
/// Bytes read at first for a gap, from the end of the stream's last message before it: two
/// packets, room for that end, a lost chunk (249 bytes) and most often the message that
/// confirms where the stream resumed; more comes a packet at a time.
pub const AHEAD: u64 = 2 * PACKET;
/// Most bytes asked for at once as a run goes on (from one packet, doubling).
pub const MAX_PIECE: u64 = 64 * 1024;
/// A walk gives up once it has seen this many records stamped [`GIVE_UP_US`] past the
/// stream's first ones after the gap.
pub const PAST_RECORDS: u32 = 256;
pub const GIVE_UP_US: u64 = 3_000_000;

/// Where a message stands in the ULog byte stream: only the messages a column holds of the
/// stream count for it (a column's copies of every column's messages count in the main
/// column only; dropouts are ours, not the stream's).
fn counts(column: usize, ty: u8) -> bool {
    if column == 0 {
        ty != msg_type::DROPOUT
    } else {
        matches!(
            ty,
            msg_type::DATA | msg_type::ADD_LOGGED | msg_type::REMOVE_LOGGED
        )
    }
}

/// What the stream holds between two gaps (or before the first, or after the last).
#[derive(Debug, Clone, Default)]
pub struct Stretch {
    /// The stream's bytes in it, every column's together.
    pub bytes: u64,
    /// Per column: its first [`HEADS`] messages in it.
    heads: Vec<Vec<Vec<u8>>>,
    /// Per column: its last [`TAILS`] messages in it.
    tails: Vec<VecDeque<Vec<u8>>>,
}

impl Stretch {
    fn new(columns: usize) -> Self {
        Self {
            bytes: 0,
            heads: vec![Vec::new(); columns],
            tails: vec![VecDeque::new(); columns],
        }
    }

    fn push(&mut self, column: usize, raw: &[u8]) {
        self.bytes += raw.len() as u64;
        if self.heads[column].len() < HEADS {
            self.heads[column].push(raw.to_vec());
        }
        let tails = &mut self.tails[column];
        if tails.len() == TAILS {
            tails.pop_front();
        }
        tails.push_back(raw.to_vec());
    }

    fn is_empty(&self) -> bool {
        self.bytes == 0
    }
}

/// The flight's gaps in order, found in every column (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct Gaps {
    /// Per gap, per column: its dropouts there, `(split, offset)` each (several when the
    /// stream lost everything between them).
    pub dropouts: Vec<Vec<Vec<(String, u64)>>>,
    /// `stretches[g]`: what the stream holds before gap `g` and after gap `g - 1` (the last:
    /// after the last gap).
    pub stretches: Vec<Stretch>,
    /// Per column: `(split, offset)` of a dropout → its gap and its place among the gap's
    /// dropouts in that column.
    index: Vec<HashMap<(String, u64), (usize, usize)>>,
}

impl Gaps {
    /// The gaps of a session's columns, each column's splits as
    /// `(file, bytes, preamble bytes to skip)` (the first split's definitions are read
    /// whole). `None` when the columns do not hold the same dropouts (a column that is not
    /// the stream's: an event buffer writes what it held late, and leaves out what it did
    /// not keep).
    pub fn scan<'a, S>(columns: &[S]) -> Option<Self>
    where
        S: AsRef<[(&'a str, &'a [u8], usize)]>,
    {
        let n = columns.len();
        // Per column: its dropouts in order, and after each the stretch up to the next.
        let mut dropouts: Vec<Vec<(String, u64)>> = vec![Vec::new(); n];
        let mut stretches: Vec<Vec<Stretch>> = Vec::new();
        for (c, splits) in columns.iter().enumerate() {
            let mut own = vec![Stretch::new(n)];
            for (k, (name, bytes, skip)) in splits.as_ref().iter().enumerate() {
                let start = if k == 0 { FILE_HEADER_LEN } else { *skip };
                let Some(body) = bytes.get(start..) else {
                    continue;
                };
                let mut at = start as u64;
                for raw in framed(body) {
                    if raw[2] == msg_type::DROPOUT {
                        dropouts[c].push((name.to_string(), at));
                        own.push(Stretch::new(n));
                    } else if counts(c, raw[2]) {
                        own.last_mut().expect("one at least").push(c, raw);
                    }
                    at += raw.len() as u64;
                }
            }
            stretches.push(own);
        }
        let count = dropouts.first().map_or(0, Vec::len);
        if dropouts.iter().any(|d| d.len() != count) {
            return None;
        }
        // Every column's stretches merged: stretch j of the flight.
        let mut merged: Vec<Stretch> = (0..=count).map(|_| Stretch::new(n)).collect();
        for (c, own) in stretches.into_iter().enumerate() {
            for (j, stretch) in own.into_iter().enumerate() {
                merged[j].bytes += stretch.bytes;
                merged[j].heads[c] = stretch.heads[c].clone();
                merged[j].tails[c] = stretch.tails[c].clone();
            }
        }
        // Dropouts with nothing of the stream between them in any column: one gap.
        let mut gaps = Self {
            dropouts: Vec::new(),
            stretches: Vec::new(),
            index: vec![HashMap::new(); n],
        };
        let mut merged = merged.into_iter();
        gaps.stretches
            .push(merged.next().expect("count + 1 stretches"));
        for (j, after) in merged.enumerate() {
            let joins =
                !gaps.dropouts.is_empty() && gaps.stretches.last().is_some_and(|s| s.is_empty());
            if joins {
                for (c, d) in dropouts.iter().enumerate() {
                    gaps.dropouts.last_mut().expect("a gap")[c].push(d[j].clone());
                }
                *gaps.stretches.last_mut().expect("a stretch") = after;
            } else {
                gaps.dropouts
                    .push(dropouts.iter().map(|d| vec![d[j].clone()]).collect());
                gaps.stretches.push(after);
            }
        }
        for (g, gap) in gaps.dropouts.iter().enumerate() {
            for (c, places) in gap.iter().enumerate() {
                for (i, place) in places.iter().enumerate() {
                    gaps.index[c].insert(place.clone(), (g, i));
                }
            }
        }
        Some(gaps)
    }

    /// How many gaps.
    pub fn len(&self) -> usize {
        self.dropouts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.dropouts.is_empty()
    }

    /// The gap of column `column`'s dropout at `offset` of `split`, and its place among the
    /// gap's dropouts in that column.
    pub fn gap_of(&self, column: usize, split: &str, offset: u64) -> Option<(usize, usize)> {
        self.index
            .get(column)?
            .get(&(split.to_string(), offset))
            .copied()
    }

    /// Each column's first message after gap `g` (a run must hold none).
    fn firsts_after(&self, g: usize) -> HashSet<&[u8]> {
        self.stretches[g + 1]
            .heads
            .iter()
            .filter_map(|h| h.first())
            .map(|m| &m[..])
            .collect()
    }
}

/// Why a gap is not where its predecessor put it (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Miss {
    #[error("the stream's last message before the gap does not end where predicted")]
    NotThere,
    #[error("a message the stream holds before the gap is among the SD log's after it")]
    StreamInRun,
    #[error("a message the stream holds after the gap comes out of the order it has there")]
    OutOfOrder,
    #[error("the SD log's messages do not frame")]
    Unframed,
    #[error("the stream's messages after the gap are not in the SD log where they belong")]
    TooFar,
    #[error("the SD log ends before the stream's messages after the gap")]
    EndOfFile,
    #[error("nothing of the stream after the gap to recognise it by")]
    NoStreamAfter,
}

/// A gap read: the SD log's messages the stream lost there, and where it resumed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Walked {
    /// The SD log's offset of the stream's first message after the gap.
    pub resumed: u64,
    /// The messages the stream lost, whole, in order ([`GapRead::find`]: none).
    pub run: Vec<Vec<u8>>,
}

#[derive(Debug)]
enum Mode {
    /// The gap starts at `start` (the stream's bytes before it end there): take the run.
    Fill { start: u64, checked: bool },
    /// Walk from a message boundary to where the stream resumed after the gap.
    Find,
    /// Only check that the stretch before the gap ends at `start`.
    Check { start: u64 },
}

/// See the module docs.
#[derive(Debug)]
pub struct GapRead {
    gap: usize,
    mode: Mode,
    sd_len: u64,
    /// Bytes read, from `buf_at` on; the walk stands at `pos`.
    buf: Vec<u8>,
    buf_at: u64,
    pos: u64,
    /// The next read: from where the bytes end, this many; reads so far.
    piece: u64,
    reads: u32,
    run: Vec<Vec<u8>>,
    /// The newest time among the stream's first records after the gap.
    after_us: Option<u64>,
    past: u32,
    result: Option<Result<Walked, Miss>>,
}

impl GapRead {
    /// Gap `g` of `gaps`, predicted to start at `start` of an SD log of `sd_len` bytes (the
    /// gap before it ended there less the stream's bytes between them).
    pub fn fill(gaps: &Gaps, g: usize, start: u64, sd_len: u64, decoder: &mut Decoder) -> Self {
        let from = start - back(gaps, g, start);
        let checked = from == start;
        Self::new(
            gaps,
            g,
            Mode::Fill { start, checked },
            from,
            start,
            AHEAD,
            sd_len,
            decoder,
        )
    }

    /// Checks that the stream's stretch before gap `g` ends at `start` with its last
    /// message (`g` = the number of gaps: the stream's end). It reads what a
    /// [`fill`](Self::fill) of the gap would read first: the gap is most often walked next,
    /// from the same bytes, and one read of them asks for their packets together.
    pub fn check(gaps: &Gaps, g: usize, start: u64, sd_len: u64) -> Self {
        let from = start - back(gaps, g, start);
        let mut read = Self::new(
            gaps,
            g,
            Mode::Check { start },
            from,
            start,
            AHEAD.max(start - from),
            sd_len,
            &mut Decoder::new(),
        );
        if from == start {
            // Nothing before it to check.
            read.result = Some(Ok(Walked {
                resumed: start,
                run: Vec::new(),
            }));
        }
        read
    }

    /// Where the stream resumed after gap `g` of `gaps`, walking the SD log from `from` (a
    /// message boundary at or before it).
    pub fn find(gaps: &Gaps, g: usize, from: u64, sd_len: u64, decoder: &mut Decoder) -> Self {
        Self::new(gaps, g, Mode::Find, from, from, 8 * PACKET, sd_len, decoder)
    }

    #[allow(clippy::too_many_arguments)]
    fn new(
        gaps: &Gaps,
        g: usize,
        mode: Mode,
        from: u64,
        pos: u64,
        first: u64,
        sd_len: u64,
        decoder: &mut Decoder,
    ) -> Self {
        let check = matches!(mode, Mode::Check { .. });
        let heads = gaps.stretches.get(g + 1).map_or(&[][..], |s| &s.heads[..]);
        let after_us = heads
            .iter()
            .filter_map(|h| h.first())
            .filter_map(|raw| timestamp(decoder, raw))
            .max();
        let result = if !check && heads.iter().all(Vec::is_empty) {
            Some(Err(Miss::NoStreamAfter))
        } else if from >= sd_len {
            Some(Err(Miss::EndOfFile))
        } else {
            None
        };
        Self {
            gap: g,
            mode,
            sd_len,
            buf: Vec::new(),
            buf_at: from,
            pos,
            piece: first,
            reads: 0,
            run: Vec::new(),
            after_us,
            past: 0,
            result,
        }
    }

    /// The gap it reads.
    pub fn gap(&self) -> usize {
        self.gap
    }

    /// Only a check of where a stretch ends ([`GapRead::check`]).
    pub fn is_check(&self) -> bool {
        matches!(self.mode, Mode::Check { .. })
    }

    /// The byte range to read next, `None` once done.
    pub fn next_read(&self) -> Option<(u64, u64)> {
        if self.result.is_some() {
            return None;
        }
        let at = self.buf_at + self.buf.len() as u64;
        Some((at, self.piece.min(self.sd_len.saturating_sub(at))))
    }

    /// The outcome, once there is one.
    pub fn result(&self) -> Option<&Result<Walked, Miss>> {
        self.result.as_ref()
    }

    /// Takes the bytes of the range [`next_read`](Self::next_read) asked for (fewer at the
    /// end of the file).
    pub fn handle_read(&mut self, gaps: &Gaps, decoder: &mut Decoder, offset: u64, data: &[u8]) {
        let Some((at, asked)) = self.next_read() else {
            return;
        };
        if offset != at {
            return;
        }
        self.buf.extend_from_slice(data);
        let ended = (data.len() as u64) < asked || at + data.len() as u64 >= self.sd_len;
        if let Some(result) = self.walk(gaps, decoder) {
            self.result = Some(result);
        } else if ended {
            self.result = Some(Err(Miss::EndOfFile));
        } else {
            // A packet more, then twice as much each time (a long outage's run).
            self.reads += 1;
            self.piece = (PACKET << (self.reads - 1).min(16)).min(MAX_PIECE);
        }
    }

    /// Walks the messages read so far; an outcome once the walk is over, `None` while it
    /// needs more bytes.
    fn walk(&mut self, gaps: &Gaps, decoder: &mut Decoder) -> Option<Result<Walked, Miss>> {
        let before = &gaps.stretches[self.gap];
        let (start, checked) = match &mut self.mode {
            Mode::Fill { start, checked } => (*start, checked),
            Mode::Check { start } => (*start, &mut false),
            Mode::Find => (0, &mut true),
        };
        if !*checked {
            let read = &self.buf[..];
            let ends_there = before.tails.iter().filter_map(|t| t.back()).any(|last| {
                let last = telling_end(last);
                let from = start.checked_sub(last.len() as u64 + self.buf_at);
                from.is_some_and(|f| {
                    read.get(f as usize..(start - self.buf_at) as usize) == Some(last)
                })
            });
            if !ends_there {
                return Some(Err(Miss::NotThere));
            }
            *checked = true;
        }
        if matches!(self.mode, Mode::Check { .. }) {
            return Some(Ok(Walked {
                resumed: start,
                run: Vec::new(),
            }));
        }
        let fill = matches!(self.mode, Mode::Fill { .. });
        // A run that holds a column's last message before the gap began too soon; one that
        // holds a column's first message after it ran past where the stream resumed. (Only
        // those: a record PX4 logged twice, the same bytes, may stand in the run and among
        // the stream's other messages around it.)
        let stream_before: HashSet<&[u8]> = if fill {
            before
                .tails
                .iter()
                .filter_map(|t| t.back())
                .map(|m| &m[..])
                .collect()
        } else {
            HashSet::new()
        };
        let heads = gaps.firsts_after(self.gap);
        loop {
            let rest =
                &self.buf[(self.pos.saturating_sub(self.buf_at) as usize).min(self.buf.len())..];
            let Some(raw) = framed(rest).next() else {
                if rest.len() >= MSG_HEADER_LEN {
                    let size = u16::from_le_bytes([rest[0], rest[1]]) as usize;
                    if !plausible_header(rest[2], size, false) {
                        return Some(Err(Miss::Unframed));
                    }
                }
                return None;
            };
            if !plausible_header(raw[2], raw.len() - MSG_HEADER_LEN, false) {
                return Some(Err(Miss::Unframed));
            }
            match resumes(gaps, self.gap, rest) {
                Some(true) => {
                    return Some(Ok(Walked {
                        resumed: self.pos,
                        run: std::mem::take(&mut self.run),
                    }));
                }
                // More bytes to tell.
                None => return None,
                Some(false) => {}
            }
            // Sync messages are the same bytes every time: they tell nothing apart.
            let distinct = raw[2] != msg_type::SYNC;
            if distinct && heads.contains(raw) {
                return Some(Err(Miss::OutOfOrder));
            }
            if distinct && stream_before.contains(raw) {
                return Some(Err(Miss::StreamInRun));
            }
            if let (Some(t), Some(after)) = (timestamp(decoder, raw), self.after_us)
                && t > after + GIVE_UP_US
            {
                self.past += 1;
                if self.past > PAST_RECORDS {
                    return Some(Err(Miss::TooFar));
                }
            }
            if fill {
                self.run.push(raw.to_vec());
            }
            self.pos += raw.len() as u64;
        }
    }
}

/// How far before `start` a read begins to check the message that ends there: the longest
/// of the columns' last messages' [`telling_end`]s before gap `g`.
fn back(gaps: &Gaps, g: usize, start: u64) -> u64 {
    gaps.stretches[g]
        .tails
        .iter()
        .filter_map(|t| t.back())
        .map(|m| telling_end(m).len() as u64)
        .max()
        .unwrap_or(0)
        .min(start)
}

/// The end of a message that is checked where it should end in the SD log: its last
/// [`CHECK_BYTES`], and as many more as it takes to hold [`CHECK_DISTINCT`] byte values (a
/// run of zeros tells no place from another), up to the whole message. A record's last
/// bytes are its newest fields; the rest of it costs a read's worth of bytes per gap.
fn telling_end(message: &[u8]) -> &[u8] {
    let mut seen = [false; 256];
    let mut distinct = 0;
    for (k, byte) in message.iter().rev().enumerate() {
        if !std::mem::replace(&mut seen[*byte as usize], true) {
            distinct += 1;
        }
        if k + 1 >= CHECK_BYTES && distinct >= CHECK_DISTINCT {
            return &message[message.len() - k - 1..];
        }
    }
    message
}

/// Whether the stream resumes after gap `g` at the start of `bytes`: its next messages
/// (see [`CONFIRM`]; fewer when the stream holds fewer after the gap) are the columns'
/// first ones there, each column's in its order. `None` when more bytes are needed to tell.
fn resumes(gaps: &Gaps, g: usize, bytes: &[u8]) -> Option<bool> {
    let heads = &gaps.stretches[g + 1].heads;
    let need = CONFIRM.min(heads.iter().map(Vec::len).sum());
    let mut next = vec![0usize; heads.len()];
    let mut messages = framed(bytes);
    for _ in 0..need {
        let raw = messages.next()?;
        let column =
            (0..heads.len()).find(|c| heads[*c].get(next[*c]).is_some_and(|h| h[..] == *raw));
        match column {
            Some(_) if raw[2] != msg_type::SYNC => return Some(true),
            Some(c) => next[c] += 1,
            None => return Some(false),
        }
    }
    Some(true)
}

/// The timestamp of a data record (or a logged string) the decoder can read.
pub(crate) fn timestamp(decoder: &mut Decoder, raw: &[u8]) -> Option<u64> {
    match Message::parse_framed(raw)? {
        m @ Message::Data { .. } => decoder.timestamp_of(Some(&m)),
        Message::Logging { timestamp, .. } | Message::LoggingTagged { timestamp, .. } => {
            Some(timestamp)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A data message of id `id`, its payload `n` bytes of `fill`.
    fn data(id: u16, fill: u8, n: usize) -> Vec<u8> {
        let mut m = ((n + 2) as u16).to_le_bytes().to_vec();
        m.push(msg_type::DATA);
        m.extend_from_slice(&id.to_le_bytes());
        m.extend(std::iter::repeat_n(fill, n));
        m
    }

    const DROPOUT: [u8; 5] = [2, 0, msg_type::DROPOUT, 10, 0];

    fn log(messages: &[Vec<u8>]) -> Vec<u8> {
        let mut out = vec![0u8; FILE_HEADER_LEN];
        for m in messages {
            out.extend_from_slice(m);
        }
        out
    }

    /// Runs a read to its end against `sd`.
    fn run(mut read: GapRead, gaps: &Gaps, sd: &[u8]) -> Result<Walked, Miss> {
        let mut decoder = Decoder::new();
        while let Some((at, n)) = read.next_read() {
            let end = ((at + n) as usize).min(sd.len());
            read.handle_read(gaps, &mut decoder, at, &sd[at as usize..end]);
        }
        read.result().cloned().expect("an outcome")
    }

    #[test]
    fn a_gap_is_read_where_the_columns_bytes_put_it_and_not_where_they_do_not() {
        // The stream: a1 b1 a2 | lost: b2 a3 | b3 a4 | lost: a5 | b4 a6 b5 (an `a` is 25 bytes,
        // a `b` 35).
        let (a, b) = (|k| data(1, k, 20), |k| data(2, k, 30));
        let sd = log(&[
            a(1),
            b(1),
            a(2),
            b(2),
            a(3),
            b(3),
            a(4),
            a(5),
            b(4),
            a(6),
            b(5),
        ]);
        // Column 0 holds a, column 1 holds b; each has both dropouts.
        let main = log(&[a(1), a(2), DROPOUT.to_vec(), a(4), DROPOUT.to_vec(), a(6)]);
        let imu = log(&[b(1), DROPOUT.to_vec(), b(3), DROPOUT.to_vec(), b(4), b(5)]);
        let gaps = Gaps::scan(&[vec![("m", &main[..], 0)], vec![("i", &imu[..], 0)]]).unwrap();
        assert_eq!(gaps.len(), 2);
        assert_eq!(gaps.stretches[1].bytes, (25 + 35) as u64);
        assert_eq!(
            gaps.gap_of(1, "i", FILE_HEADER_LEN as u64 + 35),
            Some((0, 0))
        );
        // Gap 1 follows gap 0, which the stream resumed after at b3.
        let b3 = (FILE_HEADER_LEN + 2 * 25 + 2 * 35 + 25) as u64;
        let start = b3 + gaps.stretches[1].bytes;
        let read = GapRead::fill(&gaps, 1, start, sd.len() as u64, &mut Decoder::new());
        let walked = run(read, &gaps, &sd).unwrap();
        assert_eq!(walked.run, vec![a(5)]);
        assert_eq!(walked.resumed, start + 25);
        // One byte off either way: refused.
        for start in [start - 1, start + 1, start - 25] {
            let read = GapRead::fill(&gaps, 1, start, sd.len() as u64, &mut Decoder::new());
            assert!(run(read, &gaps, &sd).is_err(), "from {start}");
        }
        // Found by walking from the log's first message.
        let read = GapRead::find(
            &gaps,
            0,
            FILE_HEADER_LEN as u64,
            sd.len() as u64,
            &mut Decoder::new(),
        );
        assert_eq!(run(read, &gaps, &sd).unwrap().resumed, b3);
    }

    #[test]
    fn columns_without_the_same_dropouts_have_no_gaps() {
        let main = log(&[data(1, 1, 4), DROPOUT.to_vec()]);
        let other = log(&[data(2, 1, 4)]);
        assert!(Gaps::scan(&[vec![("m", &main[..], 0)], vec![("o", &other[..], 0)]]).is_none());
    }

    #[test]
    fn the_end_of_a_message_checked_holds_enough_distinct_bytes_to_tell_places_apart() {
        let varied: Vec<u8> = (0..100u8).collect();
        assert_eq!(telling_end(&varied), &varied[100 - CHECK_BYTES..]);
        // Zeros at the end tell nothing: the check reaches back to the values before them.
        let mut padded: Vec<u8> = (0..40u8).collect();
        padded.extend([0u8; 60]);
        assert_eq!(telling_end(&padded).len(), 60 + CHECK_DISTINCT - 1);
        let short = [7u8; 10];
        assert_eq!(
            telling_end(&short),
            &short[..],
            "a short message is checked whole"
        );
    }

    #[test]
    fn dropouts_with_nothing_between_them_are_one_gap() {
        let main = log(&[
            data(1, 1, 4),
            DROPOUT.to_vec(),
            DROPOUT.to_vec(),
            data(1, 2, 4),
        ]);
        let gaps = Gaps::scan(&[vec![("m", &main[..], 0)]]).unwrap();
        assert_eq!(gaps.len(), 1);
        assert_eq!(gaps.dropouts[0][0].len(), 2);
        assert_eq!(
            gaps.gap_of(0, "m", FILE_HEADER_LEN as u64 + 9 + 5),
            Some((0, 1))
        );
    }
}
