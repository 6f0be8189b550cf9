//! The incremental ULog reader (sans-IO): push byte slices of any size, pull complete
//! messages as [`Record`]s.
//!
//! It validates the framing as it goes: the file header, the size and type of every message,
//! the position of the flag bits, the incompat flags, and the message ids of data messages.
//! Framing that cannot be right (a type that is not an upper-case letter, a size impossible for
//! its type, flag bits after the first message) makes it search for the next sync message and
//! resume after it, counting the bytes it skipped. A data message of an id never subscribed, or
//! whose size does not fit its subscription's format, is kept only when the next few headers
//! chain plausibly (a corrupted region may have swallowed its 'A'); the wrong-sized one is then
//! reported as malformed. Call [`Reader::finish`] at the end of the stream. Once the
//! stream has shown a sync message, a message whose payload does not parse is taken
//! as a sign of broken framing too (reported, then the same search); in a log without sync
//! messages the reader keeps the framing and goes on, so that nothing good is thrown away. Appended-data offsets from the flag bits are
//! honoured: a message that would run across one is dropped and reading resumes at the offset.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crate::ulog::format::{FormatDef, Formats};
use crate::ulog::framer::message_len;
use crate::ulog::layout::Layout;

use crate::ulog::message::{
    FILE_HEADER_LEN, FileHeader, MSG_HEADER_LEN, Message, MessageError, NotULog, SUPPORTED_VERSION,
    SYNC_MAGIC, msg_type, plausible_header,
};

/// Bytes before the read position a resync searches for a sync magic.
const LOOKBACK: usize = SYNC_MAGIC.len() - 1;
/// Headers checked ahead before a data message of a doubtful id or size is trusted.
const LOOKAHEAD_HEADERS: usize = 4;

/// Which part of the log a message belongs to. The definitions end at the first 'A', 'L' or
/// 'C' message; a 'P' there is an initial value, in the data section a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    Definitions,
    Data,
}

/// One complete message as it came out of the stream.
#[derive(Debug, Clone, PartialEq)]
pub struct Record<'a> {
    /// Offset of the first byte of this message (its header) in the stream.
    pub offset: u64,
    /// The message's bytes on the wire, header included (the 16-byte file header for
    /// [`Message::Header`]). Writing these back reproduces the stream.
    pub raw: &'a [u8],
    /// The section this message belongs to.
    pub section: Section,
    pub message: Message<'a>,
    /// For an 'F' message that parses, the reader's parse of it: a
    /// [`Decoder`](crate::ulog::Decoder) fed the record
    /// ([`handle_record`](crate::ulog::Decoder::handle_record)) shares it instead of parsing
    /// the text again. `None` for every other message. (A reference, so that a record stays
    /// small: records are moved once per message.)
    pub format: Option<&'a Arc<FormatDef>>,
}

/// Counters of what the reader met. All monotonic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReaderStats {
    /// Bytes pushed in.
    pub bytes_in: u64,
    /// Records handed out (the file header included).
    pub messages: u64,
    /// Messages of a type this reader does not know, handed out as [`Message::Unknown`].
    pub unknown_messages: u64,
    /// Messages whose payload did not match their type (reported as errors, framing intact).
    pub malformed_messages: u64,
    /// Times impossible framing made the reader search for a sync message.
    pub resyncs: u64,
    /// Bytes thrown away while searching for a sync message.
    pub skipped_bytes: u64,
    /// Bytes passed over to reach an appended-data offset.
    pub appended_gap_bytes: u64,
}

/// What [`Reader::next_record`] reports besides records.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    /// The stream does not start with the ULog magic. Fatal.
    #[error("not a ULog stream: the file header magic is wrong")]
    BadMagic,
    /// The flag bits set incompat bits this reader does not know. Fatal: reading on could
    /// misinterpret the data.
    #[error(
        "the log sets unknown incompatible flag bits {bits:02x?}: it needs a newer reader, refusing to read it"
    )]
    IncompatibleFlags { bits: [u8; 8] },
    /// One message's payload does not fit its type; reading goes on with the next message.
    #[error("malformed '{}' message at offset {offset}: {source}", char::from(*.msg_type))]
    Malformed {
        offset: u64,
        msg_type: u8,
        source: MessageError,
    },
}

impl ReadError {
    /// True when the reader has stopped for good.
    pub fn is_fatal(&self) -> bool {
        matches!(self, Self::BadMagic | Self::IncompatibleFlags { .. })
    }
}

/// What the reader knows of the data messages of one id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DataSize {
    /// No 'A' for this id: a data message with it is broken framing.
    Unsubscribed,
    /// Subscribed, but its format could not be compiled: any size.
    Any,
    /// Subscribed: the sample size lies in this range (trailing padding optional).
    Range { min: usize, max: usize },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Header,
    Messages,
    /// Searching for the sync magic after impossible framing.
    Resync,
    /// Passing over bytes up to an appended-data offset.
    SkipTo(u64),
    Failed,
}

/// Incremental, allocation-reusing ULog reader. See the module docs.
pub struct Reader {
    buf: Vec<u8>,
    /// Start of the unconsumed bytes in `buf`.
    pos: usize,
    /// Stream offset of `buf[0]`.
    base: u64,
    state: State,
    section: Section,
    header: Option<FileHeader>,
    /// Formats seen so far, to know the size of each subscription's samples.
    formats: Formats,
    /// The format parsed from the last message handed out, if it was an 'F'.
    parsed: Option<Arc<FormatDef>>,
    /// What a data message of each id may be, indexed by message id.
    data_sizes: Vec<DataSize>,
    /// Largest sample any subscription allows.
    max_data_size: usize,
    /// Largest sample any known format describes, computed when first needed after a
    /// change of `formats`: the bound for data of ids whose subscription was never seen.
    largest_format: Option<usize>,
    /// Appended-data offsets not yet reached, ascending.
    appended: VecDeque<u64>,
    /// A sync message has been read: resynchronising is cheap, so suspicious payloads
    /// trigger it.
    seen_sync: bool,
    /// [`finish`](Reader::finish) was called: no more bytes will come.
    finished: bool,
    stats: ReaderStats,
}

impl Default for Reader {
    fn default() -> Self {
        Self::new()
    }
}

impl Reader {
    pub fn new() -> Self {
        Self {
            buf: Vec::new(),
            pos: 0,
            base: 0,
            state: State::Header,
            section: Section::Definitions,
            header: None,
            formats: HashMap::new(),
            parsed: None,
            data_sizes: Vec::new(),
            max_data_size: 0,
            largest_format: None,
            appended: VecDeque::new(),
            seen_sync: false,
            finished: false,
            stats: ReaderStats::default(),
        }
    }

    /// Appends bytes of the stream. Any split is fine; nothing is parsed until
    /// [`next_record`](Self::next_record).
    pub fn push(&mut self, bytes: &[u8]) {
        // Keep the last few consumed bytes: a resync looks back that far for a sync magic
        // that a misframed message swallowed in part.
        if self.pos > LOOKBACK {
            let drop = self.pos - LOOKBACK;
            self.buf.drain(..drop);
            self.base += drop as u64;
            self.pos = LOOKBACK;
        }
        self.buf.extend_from_slice(bytes);
        self.stats.bytes_in += bytes.len() as u64;
    }

    /// Says that the stream has ended. A data message whose id or size is in doubt waits for
    /// the headers after it before it is trusted; at the end of the stream there are none, so
    /// call this before pulling the last records. Pushing more bytes afterwards is a
    /// contract violation (they are still read).
    pub fn finish(&mut self) {
        self.finished = true;
    }

    /// The file header, once read.
    pub fn header(&self) -> Option<FileHeader> {
        self.header
    }

    /// The section the next message will belong to.
    pub fn section(&self) -> Section {
        self.section
    }

    pub fn stats(&self) -> ReaderStats {
        self.stats
    }

    /// Stream offset of the next byte to be parsed.
    pub fn position(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// Bytes pushed but not yet handed out: at the end of a stream, the truncated last
    /// message (or the tail searched for a sync message).
    pub fn pending_bytes(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// True once a fatal error has stopped the reader.
    pub fn has_failed(&self) -> bool {
        self.state == State::Failed
    }

    fn data_size(&self, msg_id: u16) -> DataSize {
        self.data_sizes
            .get(msg_id as usize)
            .copied()
            .unwrap_or(DataSize::Unsubscribed)
    }

    fn skip(&mut self, n: usize) {
        self.pos += n;
        self.stats.skipped_bytes += n as u64;
    }

    /// At the end of the stream, a message that runs past it with a sync magic in the bytes
    /// it would take was never a message: a header misread in corrupted bytes swallowed what
    /// follows. Resumes after the magic and says so; false when the stream goes on (the
    /// message may still come whole) or no magic is there (a truncated last message).
    fn resync_in_truncated(&mut self, here: u64) -> bool {
        if !self.finished {
            return false;
        }
        let Some(i) = find_sync(&self.buf[self.pos + MSG_HEADER_LEN..]) else {
            return false;
        };
        self.stats.resyncs += 1;
        tracing::warn!(
            offset = here,
            "sync magic inside a message cut off by the end of the stream; resynchronised"
        );
        self.skip(MSG_HEADER_LEN + i + SYNC_MAGIC.len());
        true
    }

    fn start_resync(&mut self) {
        self.stats.resyncs += 1;
        tracing::warn!(
            offset = self.position(),
            "impossible ULog framing; searching for the next sync message"
        );
        self.skip(1);
        self.state = State::Resync;
    }

    /// The next complete message, an error, or `None` when more bytes are needed (or the
    /// reader has failed). Non-fatal errors leave the reader ready for the next call.
    ///
    /// In a hot loop, bind the result by reference, `while let Some(item) =
    /// &reader.next_record()`: moving the record out of the `Option` copies it, and that copy
    /// of a record just built cost a third of the decoding time of a whole log.
    #[allow(clippy::should_implement_trait)]
    #[inline]
    pub fn next_record(&mut self) -> Option<Result<Record<'_>, ReadError>> {
        match self.take_plain_data() {
            Some(start) => Some(Ok(self.data_record(start))),
            None => self.next_record_slow(),
        }
    }

    /// The fast path, small enough to inline: a complete data message of a subscribed id
    /// whose size fits, away from any appended-data offset, is consumed and its start in
    /// `buf` returned (its record is [`data_record`](Self::data_record)). Everything else
    /// (and every doubt) is left to the full state machine, which checks the same things.
    #[inline(always)]
    fn take_plain_data(&mut self) -> Option<usize> {
        if self.state != State::Messages {
            return None;
        }
        let here = self.position();
        let b = &self.buf[self.pos..];
        if b.len() < MSG_HEADER_LEN + 2 || b[2] != msg_type::DATA {
            return None;
        }
        let total = message_len(b).expect("a whole message header");
        let msg_id = u16::from_le_bytes([b[3], b[4]]);
        let fits = total >= MSG_HEADER_LEN + 2
            && match self.data_size(msg_id) {
                DataSize::Range { min, max } => (min..=max).contains(&(total - MSG_HEADER_LEN - 2)),
                _ => false,
            };
        let clear = self
            .appended
            .front()
            .is_none_or(|&o| here + total as u64 <= o);
        if !(fits && clear && b.len() >= total) {
            return None;
        }
        let start = self.pos;
        self.pos += total;
        self.stats.messages += 1;
        Some(start)
    }

    /// The record of the data message [`take_plain_data`](Self::take_plain_data) consumed at
    /// `start` (it ends at the read position).
    #[inline(always)]
    fn data_record(&self, start: usize) -> Record<'_> {
        let raw = &self.buf[start..self.pos];
        Record {
            offset: self.base + start as u64,
            raw,
            section: self.section,
            message: Message::Data {
                msg_id: u16::from_le_bytes([raw[3], raw[4]]),
                data: &raw[MSG_HEADER_LEN + 2..],
            },
            format: None,
        }
    }

    /// The full state machine behind [`next_record`](Self::next_record).
    fn next_record_slow(&mut self) -> Option<Result<Record<'_>, ReadError>> {
        loop {
            let avail = self.buf.len() - self.pos;
            match self.state {
                State::Failed => return None,
                State::Header => {
                    if avail < FILE_HEADER_LEN {
                        // A wrong start is wrong however the header ends.
                        if let Err(NotULog::Magic { .. }) =
                            FileHeader::check_file_start(&self.buf[self.pos..])
                        {
                            self.state = State::Failed;
                            return Some(Err(ReadError::BadMagic));
                        }
                        return None;
                    }
                    let bytes: &[u8; FILE_HEADER_LEN] = self.buf[self.pos..][..FILE_HEADER_LEN]
                        .try_into()
                        .expect("16 bytes");
                    let Some(header) = FileHeader::parse(bytes) else {
                        self.state = State::Failed;
                        return Some(Err(ReadError::BadMagic));
                    };
                    if header.version > SUPPORTED_VERSION {
                        tracing::warn!(
                            version = header.version,
                            "ULog file version is newer than this reader knows; reading it anyway"
                        );
                    }
                    self.header = Some(header);
                    self.state = State::Messages;
                    return Some(Ok(self.emit(FILE_HEADER_LEN, Message::Header(header))));
                }
                State::Resync => {
                    // The search stops at the next appended-data offset: data resumes there.
                    let limit = match self.appended.front() {
                        Some(&o) => avail.min(o.saturating_sub(self.position()) as usize),
                        None => avail,
                    };
                    // Look back a little: the magic may have begun inside the message
                    // read just before the broken header.
                    let from = self.pos.saturating_sub(SYNC_MAGIC.len());
                    match find_sync(&self.buf[from..self.pos + limit]) {
                        Some(at) => {
                            let resume = from + at + SYNC_MAGIC.len();
                            self.skip(resume.saturating_sub(self.pos));
                            self.state = State::Messages;
                        }
                        None if limit < avail => {
                            self.skip(limit);
                            self.state = State::Messages;
                        }
                        None => {
                            // The lookback covers a magic split across pushes.
                            self.skip(avail);
                            return None;
                        }
                    }
                }
                State::SkipTo(target) => {
                    let need = (target - self.position()) as usize;
                    let n = need.min(avail);
                    self.pos += n;
                    self.stats.appended_gap_bytes += n as u64;
                    if n < need {
                        return None;
                    }
                    self.state = State::Messages;
                }
                State::Messages => {
                    let here = self.position();
                    if let Some(&next_offset) = self.appended.front()
                        && here >= next_offset
                    {
                        if here > next_offset {
                            tracing::warn!(
                                offset = next_offset,
                                "appended-data offset points behind the read position; ignored"
                            );
                        }
                        self.appended.pop_front();
                        continue;
                    }
                    if avail < MSG_HEADER_LEN {
                        return None;
                    }
                    let b = &self.buf[self.pos..];
                    let size = u16::from_le_bytes([b[0], b[1]]) as usize;
                    let ty = b[2];
                    let total = MSG_HEADER_LEN + size;
                    if !plausible_header(ty, size, self.stats.messages == 1) {
                        self.start_resync();
                        continue;
                    }
                    if ty == msg_type::DATA {
                        if let Some(&next_offset) = self.appended.front()
                            && here + (MSG_HEADER_LEN + 2) as u64 > next_offset
                        {
                            // Cut off before its message id: the end of the normal data.
                            self.state = State::SkipTo(next_offset);
                            continue;
                        }
                        if avail < MSG_HEADER_LEN + 2 {
                            return None;
                        }
                        let msg_id = u16::from_le_bytes([b[3], b[4]]);
                        match self.data_size(msg_id) {
                            DataSize::Unsubscribed => {
                                // Usually broken framing; but the subscription may have been
                                // lost to corruption earlier. Keep the message when it is no
                                // larger than the largest subscribed sample and the header
                                // after it is sound, so one lost 'A' does not cost the framing.
                                let limit = self.sample_size_limit();
                                if size - 2 > limit {
                                    self.start_resync();
                                    continue;
                                }
                                match self.header_sound_at(self.pos + total, limit) {
                                    None => return None,
                                    Some(true) => {}
                                    Some(false) => {
                                        self.start_resync();
                                        continue;
                                    }
                                }
                            }
                            DataSize::Range { min, max } if size - 2 < min || size - 2 > max => {
                                // Broken framing, or a subscription redefined by corruption:
                                // keep the framing when the header after it is sound.
                                let limit = self.sample_size_limit();
                                let sound = if size - 2 > limit {
                                    Some(false)
                                } else {
                                    self.header_sound_at(self.pos + total, limit)
                                };
                                match sound {
                                    None => return None,
                                    Some(false) if self.seen_sync => {
                                        self.start_resync();
                                        continue;
                                    }
                                    Some(_) => {}
                                }
                                if avail < total {
                                    if self.resync_in_truncated(here) {
                                        continue;
                                    }
                                    // Wait for the whole message (at the end of the stream it
                                    // stays pending, as a truncated message does).
                                    return None;
                                }
                                self.stats.malformed_messages += 1;
                                self.pos += total;
                                return Some(Err(ReadError::Malformed {
                                    offset: here,
                                    msg_type: ty,
                                    source: MessageError::DataSize {
                                        need: min,
                                        got: size - 2,
                                    },
                                }));
                            }
                            _ => {}
                        }
                    }
                    if let Some(&next_offset) = self.appended.front()
                        && here + total as u64 > next_offset
                    {
                        if ty == msg_type::DATA {
                            // A sound sample cut off by the appended data: what remains
                            // before the offset is the unfinished tail of the normal data.
                            self.state = State::SkipTo(next_offset);
                        } else {
                            // Anything else running into it is misframed: search for a sync
                            // message before the offset, or resume at it.
                            self.start_resync();
                        }
                        continue;
                    }
                    if avail < total {
                        if self.resync_in_truncated(here) {
                            continue;
                        }
                        return None;
                    }
                    let payload = &self.buf[self.pos + MSG_HEADER_LEN..self.pos + total];
                    // A sync magic inside any payload but a data sample's means this header
                    // was not a real one: resume after the magic. (Data payloads are left
                    // out: their ids are checked, and scanning them would slow framing.)
                    if ty != msg_type::DATA
                        && ty != msg_type::SYNC
                        && let Some(i) = find_sync(payload)
                    {
                        self.stats.resyncs += 1;
                        tracing::warn!(
                            offset = here,
                            "sync magic inside a message; resynchronised"
                        );
                        self.skip(MSG_HEADER_LEN + i + SYNC_MAGIC.len());
                        continue;
                    }
                    match ty {
                        msg_type::FLAG_BITS => {
                            if let Err(e) = self.apply_flag_bits(here + total as u64) {
                                return Some(Err(e));
                            }
                        }
                        msg_type::ADD_LOGGED | msg_type::LOGGING | msg_type::LOGGING_TAGGED => {
                            self.section = Section::Data;
                        }
                        _ => {}
                    }
                    let start = self.pos;
                    let payload_range = start + MSG_HEADER_LEN..start + total;
                    // Data messages always parse once their size is plausible; the others
                    // are checked first, so that a failure can change the state without
                    // holding a borrow of the buffer.
                    if ty != msg_type::DATA
                        && let Err(source) = Message::parse(ty, &self.buf[payload_range.clone()])
                    {
                        self.stats.malformed_messages += 1;
                        if self.seen_sync {
                            self.start_resync();
                        } else {
                            self.pos += total;
                        }
                        return Some(Err(ReadError::Malformed {
                            offset: here,
                            msg_type: ty,
                            source,
                        }));
                    }
                    let message = match Message::parse(ty, &self.buf[payload_range]) {
                        Ok(message) => message,
                        Err(source) => {
                            // Unreachable: checked above. Reported rather than panicking.
                            self.pos += total;
                            return Some(Err(ReadError::Malformed {
                                offset: here,
                                msg_type: ty,
                                source,
                            }));
                        }
                    };
                    self.parsed = None;
                    match message {
                        Message::Unknown { .. } => self.stats.unknown_messages += 1,
                        Message::Sync => self.seen_sync = true,
                        Message::Format(text) => {
                            if let Ok(def) = FormatDef::parse(text) {
                                let def = Arc::new(def);
                                self.formats.insert(def.name.clone(), def.clone());
                                self.largest_format = None;
                                self.parsed = Some(def);
                            }
                        }
                        Message::AddLogged { msg_id, name, .. } => {
                            let size = match Layout::sample_sizes(name, &self.formats) {
                                Ok((size, full_size)) => DataSize::Range {
                                    min: size,
                                    max: full_size.max(size),
                                },
                                Err(_) => DataSize::Any,
                            };
                            self.max_data_size = self.max_data_size.max(match size {
                                DataSize::Range { max, .. } => max,
                                _ => u16::MAX as usize,
                            });
                            let i = msg_id as usize;
                            if self.data_sizes.len() <= i {
                                self.data_sizes.resize(i + 1, DataSize::Unsubscribed);
                            }
                            self.data_sizes[i] = size;
                        }
                        _ => {}
                    }
                    self.pos += total;
                    self.stats.messages += 1;
                    return Some(Ok(Record {
                        offset: here,
                        raw: &self.buf[start..start + total],
                        section: self.section,
                        message,
                        format: self.parsed.as_ref(),
                    }));
                }
            }
        }
    }

    /// Whether the message headers starting at buffer index `at` look real: the next
    /// [`LOOKAHEAD_HEADERS`] headers (or as many as come before the next appended-data offset)
    /// are plausible, and every data message among them has a size some subscription allows
    /// (its own, when its id is subscribed). Ids never subscribed pass: their 'A' may have been
    /// lost to corruption, and they chain correctly if the framing is right; their samples
    /// must not exceed `limit` ([`sample_size_limit`](Self::sample_size_limit)). `None` when
    /// the bytes are not there yet.
    fn header_sound_at(&self, mut at: usize, limit: usize) -> Option<bool> {
        let stop = self
            .appended
            .front()
            .map(|&o| o.saturating_sub(self.base) as usize);
        for _ in 0..LOOKAHEAD_HEADERS {
            if stop.is_some_and(|s| at >= s) {
                return Some(true);
            }
            let Some(b) = self.buf.get(at..at + MSG_HEADER_LEN + 2) else {
                // Nothing follows at the end of the stream: what came before chained fine.
                return self.finished.then_some(true);
            };
            let size = u16::from_le_bytes([b[0], b[1]]) as usize;
            let ty = b[2];
            if !plausible_header(ty, size, false) {
                return Some(false);
            }
            if ty == msg_type::DATA {
                let sample = size - 2;
                let fits = match self.data_size(u16::from_le_bytes([b[3], b[4]])) {
                    DataSize::Range { min, max } => (min..=max).contains(&sample),
                    DataSize::Any => true,
                    DataSize::Unsubscribed => sample <= limit,
                };
                if !fits {
                    return Some(false);
                }
            }
            at += MSG_HEADER_LEN + size;
        }
        Some(true)
    }

    /// The largest sample a data message can carry: what any subscription allows, or any
    /// known format describes (subscriptions may have been lost to corruption).
    fn sample_size_limit(&mut self) -> usize {
        let formats = &self.formats;
        let largest = *self.largest_format.get_or_insert_with(|| {
            formats
                .keys()
                .filter_map(|name| Layout::sample_sizes(name, formats).ok())
                .map(|(size, full_size)| full_size.max(size))
                .max()
                .unwrap_or(0)
        });
        self.max_data_size.max(largest)
    }

    /// Checks the incompat bits of the flag-bits message at `self.pos` and takes note of its
    /// appended-data offsets. `end` is the stream offset just past the message.
    fn apply_flag_bits(&mut self, end: u64) -> Result<(), ReadError> {
        let payload = &self.buf[self.pos + MSG_HEADER_LEN..];
        let mut incompat: [u8; 8] = payload[8..16].try_into().expect("8 bytes");
        let appended_data = incompat[0] & crate::ulog::message::INCOMPAT_DATA_APPENDED != 0;
        incompat[0] &= !crate::ulog::message::INCOMPAT_DATA_APPENDED;
        if incompat != [0; 8] {
            self.state = State::Failed;
            return Err(ReadError::IncompatibleFlags { bits: incompat });
        }
        if appended_data {
            let mut offsets: Vec<u64> = (0..3)
                .map(|i| u64::from_le_bytes(payload[16 + 8 * i..24 + 8 * i].try_into().expect("8")))
                .filter(|&o| o != 0)
                .collect();
            offsets.sort_unstable();
            for o in offsets {
                if o < end {
                    tracing::warn!(
                        offset = o,
                        "appended-data offset inside the definitions; ignored"
                    );
                } else {
                    self.appended.push_back(o);
                }
            }
        }
        Ok(())
    }

    fn emit(&mut self, len: usize, message: Message<'static>) -> Record<'_> {
        let start = self.pos;
        let offset = self.position();
        self.pos += len;
        self.stats.messages += 1;
        Record {
            offset,
            raw: &self.buf[start..start + len],
            section: self.section,
            message,
            format: None,
        }
    }
}

/// The first sync magic in `hay` (SIMD search: payloads of text are full of the magic's first
/// byte, `/`), with a searcher built once: every message but a sample is searched, and most
/// are a few dozen bytes, where building the searcher would cost more than the search.
fn find_sync(hay: &[u8]) -> Option<usize> {
    static FINDER: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(&SYNC_MAGIC));
    FINDER.find(hay)
}
