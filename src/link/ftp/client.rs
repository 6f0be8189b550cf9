//! The MAVLink FTP client, sans-IO: one operation at a time (list a directory, open a file
//! read-only, read a byte range of it, its checksum, close), each request retried with the
//! same sequence number until its reply (the server then resends its last reply), NAKs as
//! typed errors, reads of [`BURST_MIN`] bytes or more as burst reads that go on from the last
//! offset received (PX4 ends a burst after ~35 KB and ignores the size asked for); a packet a
//! burst lost is read alone (the packets after it are kept), never with a new burst. The file
//! is read-only, so a reply of a burst asked for earlier is as good as one of this burst:
//! only its offset matters (a single read whose bytes came that way asks on for the rest). An optional byte budget paces the requests (the link is shared
//! with telemetry).
//!
//! Payloads in ([`FtpClient::handle_reply`]), payloads out ([`FtpClient::poll_request`]),
//! results out ([`FtpClient::poll_result`]); [`crate::link::Session`] frames them.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use thiserror::Error;

use super::wire::{self, DirEntry, FtpPayload, MAX_DATA, Nak, PAYLOAD_LEN, op};

/// Reads of at least this many bytes go as bursts; shorter ones as single reads (PX4 sends
/// ~35 KB per burst whatever is asked: on a slow link a short burst read would wait for it).
pub const BURST_MIN: u64 = 32 * 1024;

/// Requests of one short read in flight at once, the one in hand included: a read of a few
/// packets costs one round trip, not one per packet. Few, so that a lossy link does not
/// multiply what is asked again.
pub const READ_WINDOW: usize = 4;

/// How many round trips old the request in hand is when a later one's answer comes first
/// and it is taken for lost (some slack for a reply overtaken on the way).
pub const LOST_AFTER_RTT: f64 = 1.125;
/// ... and at least this old (a round trip measured on a fast link says little of its
/// jitter).
pub const LOST_AFTER_MIN: Duration = Duration::from_millis(5);

/// The shortest wait for a reply, however fast the link.
pub const MIN_TIMEOUT: Duration = Duration::from_millis(50);
/// The shortest wait for the answer to a short read's request: the server answers a read at
/// once, and a request resent early costs one packet (a burst's silence, a directory's
/// listing or an open file keep [`MIN_TIMEOUT`]).
pub const MIN_READ_TIMEOUT: Duration = Duration::from_millis(20);

/// How the client waits and paces.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FtpConfig {
    /// The longest wait for a reply before the request is sent again (in a burst: no new
    /// packet for this long asks again from the next offset). The wait adapts to the round
    /// trips measured (smoothed, plus four deviations, at least [`MIN_TIMEOUT`]) and
    /// doubles with each resend, up to this.
    pub reply_timeout: Duration,
    /// Sends of one request, the first included, before the operation fails. Ten, with the
    /// waits doubling to [`FtpConfig::reply_timeout`]: about 5 s of silence; a radio at the
    /// edge of its range that loses a fifth of the datagrams each way fails a request once
    /// in ~30,000 (six tries: once in ~400, a fill of thousands of reads cut short).
    pub max_tries: u32,
    /// Average bytes per second read at most; `None`: as fast as the server sends.
    pub rate: Option<u64>,
}

impl Default for FtpConfig {
    fn default() -> Self {
        Self {
            reply_timeout: Duration::from_millis(1000),
            max_tries: 10,
            rate: None,
        }
    }
}

/// One operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FtpOp {
    /// The entries of a directory.
    List { path: String },
    /// Opens a file read-only (closing the one open).
    Open { path: String },
    /// `len` bytes of the open file from `offset` (fewer at its end).
    Read { offset: u64, len: u64 },
    /// The checksum of a file ([`wire::crc32_part`]).
    Crc32 { path: String },
    /// Closes the open file.
    Close,
}

/// What an operation gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FtpReply {
    Listed(Vec<DirEntry>),
    Opened { size: u64 },
    Read { offset: u64, data: Vec<u8> },
    Crc32(u32),
    Closed,
}

impl FtpReply {
    /// A line for logs.
    pub fn summary(&self) -> String {
        match self {
            FtpReply::Listed(e) => format!("{} entries", e.len()),
            FtpReply::Opened { size } => format!("opened, {size} bytes"),
            FtpReply::Read { offset, data } => format!("{} bytes at {offset}", data.len()),
            FtpReply::Crc32(crc) => format!("crc32 {crc:08x}"),
            FtpReply::Closed => "closed".into(),
        }
    }
}

/// Why an operation failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FtpError {
    #[error("{request} refused: {nak}")]
    Refused { request: &'static str, nak: Nak },
    #[error("{request}: no answer from the vehicle after {tries} tries")]
    Timeout { request: &'static str, tries: u32 },
    #[error("no file is open")]
    NotOpen,
    #[error("no vehicle heard yet")]
    NoVehicle,
    #[error("an FTP operation is already under way")]
    Busy,
    #[error("the vehicle answered {request} with an invalid reply")]
    BadReply { request: &'static str },
}

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FtpStats {
    pub requests: u64,
    pub resends: u64,
    /// File bytes received (duplicates included).
    pub bytes_received: u64,
    /// File bytes used.
    pub bytes_read: u64,
}

/// The operation in hand.
#[derive(Debug)]
enum Pending {
    List {
        path: String,
        entries: Vec<DirEntry>,
        index: u32,
    },
    Open {
        path: String,
        reset: bool,
    },
    /// The server is asked to drop every session; then `path` is opened again.
    Reset {
        path: String,
    },
    /// Our open file is closed first; then `path` is opened.
    CloseThenOpen {
        path: String,
    },
    Read {
        start: u64,
        len: u64,
        data: Vec<u8>,
        burst: bool,
        /// Burst packets that came after a lost one, by offset, until it is filled.
        ahead: BTreeMap<u64, Vec<u8>>,
        /// Where the file ends, once the server said so.
        eof_at: Option<u64>,
        /// A short read's (under [`BURST_MIN`] bytes) next packets asked for before the one
        /// in hand is answered ([`READ_WINDOW`]), by offset, with when they went out: the
        /// one for the read's next byte becomes the request in hand when the one before is
        /// answered.
        prefetched: BTreeMap<u64, (FtpPayload, Instant)>,
    },
    Crc32,
    Close,
}

impl Pending {
    fn name(&self) -> &'static str {
        match self {
            Pending::List { .. } => "ListDirectory",
            Pending::Open { .. } => "OpenFileRO",
            Pending::Reset { .. } => "ResetSessions",
            Pending::CloseThenOpen { .. } => "TerminateSession",
            Pending::Read { burst: true, .. } => "BurstReadFile",
            Pending::Read { .. } => "ReadFile",
            Pending::Crc32 => "CalcFileCRC32",
            Pending::Close => "TerminateSession",
        }
    }
}

/// See the module docs.
#[derive(Debug)]
pub struct FtpClient {
    config: FtpConfig,
    seq: u16,
    session: Option<u8>,
    pending: Option<Pending>,
    /// The request in hand, when it went (or may go) out, and how often it was sent.
    request: Option<FtpPayload>,
    send_at: Option<Instant>,
    deadline: Option<Instant>,
    tries: u32,
    /// The byte budget lets the next request go then.
    budget_at: Option<Instant>,
    /// When the request in hand first went out (`None` once resent: its reply would not
    /// tell which send it answers).
    sent_at: Option<Instant>,
    /// Smoothed round trip and its deviation, once measured.
    srtt: Option<Duration>,
    rttvar: Duration,
    out: VecDeque<FtpPayload>,
    results: VecDeque<Result<FtpReply, FtpError>>,
    stats: FtpStats,
}

impl FtpClient {
    pub fn new(config: FtpConfig) -> Self {
        Self {
            config,
            seq: 0,
            session: None,
            pending: None,
            request: None,
            send_at: None,
            deadline: None,
            tries: 0,
            budget_at: None,
            sent_at: None,
            srtt: None,
            rttvar: Duration::ZERO,
            out: VecDeque::new(),
            results: VecDeque::new(),
            stats: FtpStats::default(),
        }
    }

    pub fn stats(&self) -> FtpStats {
        self.stats
    }

    /// True while an operation is under way.
    pub fn is_busy(&self) -> bool {
        self.pending.is_some()
    }

    /// Starts `op`; its result comes from [`poll_result`](Self::poll_result).
    pub fn start(&mut self, op: FtpOp, now: Instant) -> Result<(), FtpError> {
        if self.pending.is_some() {
            return Err(FtpError::Busy);
        }
        let (pending, request) = match op {
            FtpOp::List { path } => {
                let r = self.new_request(op::LIST_DIRECTORY, 0, 0, path.as_bytes());
                (
                    Pending::List {
                        path,
                        entries: Vec::new(),
                        index: 0,
                    },
                    r,
                )
            }
            FtpOp::Open { path } => match self.session {
                Some(session) => {
                    let r = self.new_request(op::TERMINATE_SESSION, session, 0, &[]);
                    (Pending::CloseThenOpen { path }, r)
                }
                None => {
                    let r = self.new_request(op::OPEN_FILE_RO, 0, 0, path.as_bytes());
                    (Pending::Open { path, reset: false }, r)
                }
            },
            FtpOp::Read { offset, len } => {
                let Some(session) = self.session else {
                    return Err(FtpError::NotOpen);
                };
                self.pending = Some(Pending::Read {
                    start: offset,
                    len,
                    data: Vec::new(),
                    burst: false,
                    ahead: BTreeMap::new(),
                    eof_at: None,
                    prefetched: BTreeMap::new(),
                });
                let r = self.read_request(session);
                self.send(r, now);
                self.prefetch(now);
                return Ok(());
            }
            FtpOp::Crc32 { path } => {
                let r = self.new_request(op::CALC_FILE_CRC32, 0, 0, path.as_bytes());
                (Pending::Crc32, r)
            }
            FtpOp::Close => {
                let Some(session) = self.session else {
                    self.results.push_back(Ok(FtpReply::Closed));
                    return Ok(());
                };
                let r = self.new_request(op::TERMINATE_SESSION, session, 0, &[]);
                (Pending::Close, r)
            }
        };
        self.pending = Some(pending);
        self.send(request, now);
        Ok(())
    }

    /// The next payload to send, if any.
    pub fn poll_request(&mut self) -> Option<FtpPayload> {
        self.out.pop_front()
    }

    /// The next finished operation, if any.
    pub fn poll_result(&mut self) -> Option<Result<FtpReply, FtpError>> {
        self.results.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) next has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.send_at.or(self.deadline)
    }

    /// Sends what the budget held back; resends what went unanswered; fails after
    /// [`FtpConfig::max_tries`].
    pub fn handle_timeout(&mut self, now: Instant) {
        if let Some(at) = self.send_at
            && at <= now
        {
            self.send_at = None;
            self.transmit(now);
            return;
        }
        if self.deadline.is_none_or(|d| d > now) {
            return;
        }
        let Some(pending) = &self.pending else {
            self.deadline = None;
            return;
        };
        if self.tries >= self.config.max_tries {
            let error = FtpError::Timeout {
                request: pending.name(),
                tries: self.tries,
            };
            self.fail(error);
            return;
        }
        // A burst that went quiet asks again from where it stands, as a new request.
        if let Some(Pending::Read { burst: true, .. }) = &self.pending
            && let Some(session) = self.session
        {
            let request = self.read_request(session);
            self.stats.resends += 1;
            self.tries += 1;
            self.request = Some(request);
            self.transmit(now);
            return;
        }
        self.stats.resends += 1;
        self.transmit(now);
    }

    /// Takes one FILE_TRANSFER_PROTOCOL payload addressed to us.
    pub fn handle_reply(&mut self, raw: &[u8; PAYLOAD_LEN], now: Instant) {
        let Ok(reply) = FtpPayload::parse(raw) else {
            return;
        };
        tracing::trace!(
            seq = reply.seq,
            opcode = reply.opcode,
            req_opcode = reply.req_opcode,
            offset = reply.offset,
            size = reply.data.len(),
            burst_complete = reply.burst_complete,
            "FTP reply"
        );
        if reply.opcode != op::ACK && reply.opcode != op::NAK {
            return;
        }
        let Some(request) = &self.request else { return };
        let is_read = matches!(reply.req_opcode, op::READ_FILE | op::BURST_READ_FILE);
        if is_read {
            if matches!(self.pending, Some(Pending::Read { .. }))
                && Some(reply.session) == self.session
            {
                self.on_read_reply(reply, now);
            }
            return;
        }
        if reply.req_opcode != request.opcode || reply.seq != request.seq.wrapping_add(1) {
            return;
        }
        self.seq = reply.seq;
        self.measured(now);
        let name = self.pending.as_ref().map_or("FTP", Pending::name);
        let pending = self.pending.take();
        match (pending, reply.nak()) {
            (
                Some(Pending::List {
                    path,
                    mut entries,
                    index,
                }),
                None,
            ) => {
                let (mut more, counted) = wire::parse_entries(&reply.data);
                entries.append(&mut more);
                if counted == 0 {
                    self.finish(Ok(FtpReply::Listed(entries)));
                } else {
                    let index = index + counted;
                    let r = self.new_request(op::LIST_DIRECTORY, 0, index, path.as_bytes());
                    self.pending = Some(Pending::List {
                        path,
                        entries,
                        index,
                    });
                    self.send(r, now);
                }
            }
            (Some(Pending::List { entries, .. }), Some(Nak::Eof)) => {
                self.finish(Ok(FtpReply::Listed(entries)))
            }
            (Some(Pending::Open { .. }), None) => {
                let Some(size) = reply.data.get(..4) else {
                    return self.finish(Err(FtpError::BadReply { request: name }));
                };
                self.session = Some(reply.session);
                let size = u32::from_le_bytes(size.try_into().expect("4 bytes"));
                self.finish(Ok(FtpReply::Opened { size: size as u64 }));
            }
            (Some(Pending::Open { path, reset: false }), Some(Nak::NoSessionsAvailable)) => {
                // Most often our own session, left open by a run that was cut short.
                tracing::warn!("the vehicle's FTP session is taken: resetting its sessions");
                let r = self.new_request(op::RESET_SESSIONS, 0, 0, &[]);
                self.pending = Some(Pending::Reset { path });
                self.send(r, now);
            }
            (Some(Pending::Reset { path } | Pending::CloseThenOpen { path }), _) => {
                self.session = None;
                let r = self.new_request(op::OPEN_FILE_RO, 0, 0, path.as_bytes());
                self.pending = Some(Pending::Open { path, reset: true });
                self.send(r, now);
            }
            (Some(Pending::Crc32), None) => match reply.data.get(..4) {
                Some(crc) => self.finish(Ok(FtpReply::Crc32(u32::from_le_bytes(
                    crc.try_into().expect("4 bytes"),
                )))),
                None => self.finish(Err(FtpError::BadReply { request: name })),
            },
            (Some(Pending::Close), _) => {
                self.session = None;
                self.finish(Ok(FtpReply::Closed));
            }
            (Some(_), Some(nak)) => self.finish(Err(FtpError::Refused { request: name, nak })),
            (other, _) => self.pending = other,
        }
    }

    fn on_read_reply(&mut self, reply: FtpPayload, now: Instant) {
        // The answer to the request in hand (not a packet of an earlier burst).
        let own_request = self.request.as_ref().is_some_and(|r| {
            reply.seq == r.seq.wrapping_add(1)
                && reply.req_opcode == r.opcode
                && (reply.offset == r.offset || r.opcode == op::BURST_READ_FILE)
        });
        let of_burst = own_burst(self.request.as_ref(), &reply);
        self.note_seq(reply.seq);
        if own_request {
            self.measured(now);
        }
        let Some(Pending::Read {
            start,
            len,
            data,
            burst,
            ahead,
            eof_at,
            prefetched,
            ..
        }) = &mut self.pending
        else {
            return;
        };
        let (start, len, burst) = (*start, *len, *burst);
        let end = start.saturating_add(len);
        let mut expected = start + data.len() as u64;
        let mut progressed = false;
        // The answer to one of the requests sent ahead of the one in hand.
        let at = reply.offset as u64;
        let asked_ahead = prefetched
            .get(&at)
            .filter(|(r, _)| !own_request && reply.seq == r.seq.wrapping_add(1))
            .map(|(r, _)| r.size);
        let of_prefetch = asked_ahead.is_some();
        if of_prefetch {
            prefetched.remove(&at);
        }
        match reply.nak() {
            // The end of the file: where the burst (or the single read) ran out.
            Some(Nak::Eof) if own_request || of_burst => {
                *eof_at = Some(if burst { at } else { expected });
            }
            // A request sent ahead asked past the end: the file ends there or sooner.
            Some(Nak::Eof) if of_prefetch => {
                *eof_at = Some(eof_at.map_or(at, |e| e.min(at)));
            }
            Some(nak) if own_request => {
                let request = if burst { "BurstReadFile" } else { "ReadFile" };
                return self.finish(Err(FtpError::Refused { request, nak }));
            }
            Some(_) => return,
            None => {
                self.stats.bytes_received += reply.data.len() as u64;
                if reply.data.is_empty() && at == expected && own_request {
                    *eof_at = Some(expected);
                } else if asked_ahead.is_some_and(|size| reply.data.len() < size as usize) {
                    // Fewer bytes than asked for ahead: the file ends with them.
                    let ends = at + reply.data.len() as u64;
                    *eof_at = Some(eof_at.map_or(ends, |e| e.min(ends)));
                }
                if at > expected && at < end && !reply.data.is_empty() {
                    progressed = ahead.insert(at, reply.data.clone()).is_none();
                } else if at <= expected && at + reply.data.len() as u64 > expected {
                    let from = (expected - at) as usize;
                    let want = (end - expected).min((reply.data.len() - from) as u64) as usize;
                    data.extend_from_slice(&reply.data[from..from + want]);
                    progressed = want > 0;
                }
                // Packets that came ahead of a lost one now join (or are behind the read).
                while let Some((&at, _)) = ahead.range(..=start + data.len() as u64).next() {
                    let next = ahead.remove(&at).expect("just found");
                    let got = start + data.len() as u64;
                    if at + next.len() as u64 > got {
                        let from = (got - at) as usize;
                        let want = (end - got).min((next.len() - from) as u64) as usize;
                        data.extend_from_slice(&next[from..from + want]);
                    }
                }
            }
        }
        let got = start + data.len() as u64;
        let at_eof = eof_at.is_some_and(|e| got >= e);
        if got > expected {
            let used = got - expected;
            self.stats.bytes_read += used;
            self.charge(used as usize, now);
            expected = got;
        }
        if expected >= end || at_eof {
            return self.finish_read();
        }
        if !burst {
            // Our reply came: ask for the rest from where the read stands (a burst's
            // packets may have filled part of it since, making this reply stale).
            if own_request {
                self.next_read(now);
            } else if of_prefetch {
                self.answered_out_of_turn(now);
                self.prefetch(now);
            }
        } else if reply.burst_complete && (of_burst || own_request) {
            // The burst is over, short of the end: ask again from the first missing byte.
            self.next_read(now);
        } else if progressed {
            // Still coming: wait for the next packet as long again.
            self.deadline = Some(now + self.timeout());
            self.tries = 1;
        }
    }

    /// Asks for the rest of the read in hand: the request already sent ahead for its next
    /// byte becomes the one in hand (waited for from when it went out), or a new one goes.
    fn next_read(&mut self, now: Instant) {
        let Some(session) = self.session else { return };
        let adopted = match &mut self.pending {
            Some(Pending::Read {
                start,
                data,
                prefetched,
                ..
            }) => {
                let expected = *start + data.len() as u64;
                // Those behind the read are answered or no longer needed.
                prefetched.retain(|at, _| *at >= expected);
                prefetched.remove(&expected)
            }
            _ => None,
        };
        match adopted {
            Some((request, sent)) => {
                self.request = Some(request);
                self.tries = 1;
                self.sent_at = Some(sent);
                self.send_at = None;
                self.deadline = Some(sent + self.timeout());
            }
            None => {
                let r = self.read_request(session);
                self.send(r, now);
            }
        }
        self.prefetch(now);
    }

    /// A request sent after the one in hand was answered first. The server answers in turn,
    /// so the one in hand or its answer is most likely lost: it is asked again once it is
    /// [`LOST_AFTER_RTT`] round trips old, [`LOST_AFTER_MIN`] at least (as QUIC declares a packet lost), not after the
    /// whole reply timeout.
    fn answered_out_of_turn(&mut self, now: Instant) {
        let (Some(sent), Some(srtt)) = (self.sent_at, self.srtt) else {
            return;
        };
        let lost_at = sent + srtt.mul_f64(LOST_AFTER_RTT).max(LOST_AFTER_MIN);
        if now >= lost_at {
            self.stats.resends += 1;
            self.transmit(now);
        } else if self.deadline.is_none_or(|d| d > lost_at) {
            self.deadline = Some(lost_at);
        }
    }

    /// Sends the next packets' requests of a short read ahead of the answer to the one in
    /// hand, up to [`READ_WINDOW`] in flight; none while a byte budget paces the requests.
    fn prefetch(&mut self, now: Instant) {
        let (Some(session), None) = (self.session, self.config.rate) else {
            return;
        };
        let Some(in_hand) = self.request.as_ref().map(|r| r.offset as u64) else {
            return;
        };
        let mut wanted = Vec::new();
        if let Some(Pending::Read {
            start,
            len,
            burst: false,
            ahead,
            eof_at,
            prefetched,
            ..
        }) = &self.pending
            && *len < BURST_MIN
        {
            let end = (*start + *len).min(eof_at.unwrap_or(u64::MAX));
            let mut at = in_hand + MAX_DATA as u64;
            while prefetched.len() + wanted.len() + 1 < READ_WINDOW && at < end {
                if !ahead.contains_key(&at) && !prefetched.contains_key(&at) {
                    wanted.push((at, (end - at).min(MAX_DATA as u64) as u8));
                }
                at += MAX_DATA as u64;
            }
        }
        for (at, size) in wanted {
            let mut r = self.new_request(op::READ_FILE, session, at as u32, &[]);
            r.size = size;
            tracing::trace!(seq = r.seq, offset = r.offset, "FTP request ahead");
            self.out.push_back(r.clone());
            self.stats.requests += 1;
            if let Some(Pending::Read { prefetched, .. }) = &mut self.pending {
                prefetched.insert(at, (r, now));
            }
        }
    }

    fn finish_read(&mut self) {
        if let Some(Pending::Read { start, data, .. }) = self.pending.take() {
            self.finish(Ok(FtpReply::Read {
                offset: start,
                data,
            }));
        }
    }

    /// The request for the rest of the read in hand.
    /// A burst while [`BURST_MIN`] bytes or more are left and none of them came yet; a
    /// single read for a hole a burst left (its packets after the hole are kept: the next
    /// burst would send them all again, ~35 KB for one lost packet).
    fn read_request(&mut self, session: u8) -> FtpPayload {
        let Some(Pending::Read {
            start,
            len,
            data,
            burst,
            ahead,
            ..
        }) = &mut self.pending
        else {
            unreachable!("read_request with a read in hand")
        };
        let at = *start + data.len() as u64;
        let left = *len - data.len() as u64;
        *burst = left >= BURST_MIN && ahead.is_empty();
        let opcode = if *burst {
            op::BURST_READ_FILE
        } else {
            op::READ_FILE
        };
        let mut r = self.new_request(opcode, session, at.min(u32::MAX as u64) as u32, &[]);
        r.size = left.min(MAX_DATA as u64) as u8;
        r
    }

    /// Our sequence numbers go on after the newest reply's (a burst counts on from a
    /// request's), so that no request of ours looks like one the server already answered.
    fn note_seq(&mut self, seq: u16) {
        if seq.wrapping_sub(self.seq) < 0x8000 {
            self.seq = seq;
        }
    }

    fn new_request(&mut self, opcode: u8, session: u8, offset: u32, data: &[u8]) -> FtpPayload {
        self.seq = self.seq.wrapping_add(1);
        FtpPayload::request(self.seq, session, opcode, offset, data)
    }

    /// Makes `request` the one in hand and sends it now, or when the budget allows.
    fn send(&mut self, request: FtpPayload, now: Instant) {
        self.request = Some(request);
        self.tries = 0;
        self.stats.requests += 1;
        match self.budget_at {
            Some(at) if at > now => {
                self.send_at = Some(at);
                self.deadline = None;
            }
            _ => self.transmit(now),
        }
    }

    /// Puts the request in hand on the wire and arms its reply timeout.
    fn transmit(&mut self, now: Instant) {
        if let Some(r) = &self.request {
            tracing::trace!(
                seq = r.seq,
                opcode = r.opcode,
                offset = r.offset,
                try_ = self.tries + 1,
                "FTP request"
            );
            self.out.push_back(r.clone());
            self.tries += 1;
            self.sent_at = (self.tries == 1).then_some(now);
            self.deadline = Some(now + self.timeout());
        }
    }

    /// How long to wait for a reply now: the measured round trip's bound, doubled per
    /// resend, within [`MIN_TIMEOUT`] ([`MIN_READ_TIMEOUT`] for a short read) and
    /// [`FtpConfig::reply_timeout`].
    fn timeout(&self) -> Duration {
        let max = self.config.reply_timeout;
        let Some(srtt) = self.srtt else { return max };
        let floor = match &self.pending {
            Some(Pending::Read {
                len, burst: false, ..
            }) if *len < BURST_MIN => MIN_READ_TIMEOUT,
            _ => MIN_TIMEOUT,
        };
        let base = (srtt + 4 * self.rttvar).max(floor);
        let doubled = base.saturating_mul(1 << self.tries.saturating_sub(1).min(8));
        doubled.min(max)
    }

    /// A reply answered the request in hand at `now`: one more round trip measured.
    fn measured(&mut self, now: Instant) {
        let Some(sent) = self.sent_at.take() else {
            return;
        };
        let sample = now.saturating_duration_since(sent);
        match self.srtt {
            None => {
                self.srtt = Some(sample);
                self.rttvar = sample / 2;
            }
            Some(srtt) => {
                let delta = srtt.abs_diff(sample);
                self.rttvar = (self.rttvar * 3 + delta) / 4;
                self.srtt = Some((srtt * 7 + sample) / 8);
            }
        }
    }

    /// Spends `bytes` of the budget.
    fn charge(&mut self, bytes: usize, now: Instant) {
        if let Some(rate) = self.config.rate.filter(|r| *r > 0) {
            let from = self.budget_at.map_or(now, |t| t.max(now));
            self.budget_at = Some(from + Duration::from_secs_f64(bytes as f64 / rate as f64));
        }
    }

    fn finish(&mut self, result: Result<FtpReply, FtpError>) {
        self.pending = None;
        self.request = None;
        self.deadline = None;
        self.send_at = None;
        self.results.push_back(result);
    }

    fn fail(&mut self, error: FtpError) {
        self.finish(Err(error));
    }
}

/// True when `reply` belongs to the burst `request` asked for.
fn own_burst(request: Option<&FtpPayload>, reply: &FtpPayload) -> bool {
    request.is_some_and(|r| {
        r.opcode == op::BURST_READ_FILE
            && reply.seq.wrapping_sub(r.seq) < 0x8000
            && reply.seq != r.seq
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The file the server holds: byte `i` is `i as u8`.
    fn bytes(at: u64, n: u64) -> Vec<u8> {
        (at..at + n).map(|i| i as u8).collect()
    }

    /// A client with `path` open (session 0), and the time.
    fn opened() -> (FtpClient, Instant) {
        let now = Instant::now();
        let mut client = FtpClient::new(FtpConfig::default());
        client
            .start(
                FtpOp::Open {
                    path: "/log/a.ulg".into(),
                },
                now,
            )
            .unwrap();
        let open = client.poll_request().unwrap();
        let reply = FtpPayload::ack(&open, 1_000_000u32.to_le_bytes().to_vec());
        client.handle_reply(&reply.encode(), now);
        assert!(matches!(
            client.poll_result(),
            Some(Ok(FtpReply::Opened { .. }))
        ));
        (client, now)
    }

    /// The server's answer to a single read `request`.
    fn answer(request: &FtpPayload) -> FtpPayload {
        FtpPayload::ack(request, bytes(request.offset as u64, MAX_DATA as u64))
    }

    /// Packet `k` of a burst asked for by `request`.
    fn burst_packet(request: &FtpPayload, k: u16, complete: bool) -> FtpPayload {
        let offset = request.offset + k as u32 * MAX_DATA as u32;
        let mut p = FtpPayload::ack(request, bytes(offset as u64, MAX_DATA as u64));
        p.seq = request.seq.wrapping_add(1 + k);
        p.offset = offset;
        p.burst_complete = complete;
        p
    }

    #[test]
    fn a_single_read_whose_reply_a_burst_made_stale_asks_for_the_rest() {
        let (mut client, now) = opened();
        // A burst of an earlier read is still streaming: its packets cover the start of
        // this read before our own reply comes.
        let earlier = FtpPayload::request(40, 0, op::BURST_READ_FILE, 0, &[]);
        client
            .start(
                FtpOp::Read {
                    offset: 0,
                    len: 478,
                },
                now,
            )
            .unwrap();
        let first = client.poll_request().unwrap();
        assert_eq!((first.opcode, first.offset), (op::READ_FILE, 0));
        client.handle_reply(&burst_packet(&earlier, 0, false).encode(), now);
        // Our reply, for bytes the read holds already.
        client.handle_reply(&answer(&first).encode(), now);
        let rest = client
            .poll_request()
            .expect("the rest asked for at once, not the stale request resent");
        assert_eq!((rest.opcode, rest.offset), (op::READ_FILE, 239));
        client.handle_reply(&answer(&rest).encode(), now);
        let Some(Ok(FtpReply::Read { offset: 0, data })) = client.poll_result() else {
            panic!("the read ends")
        };
        assert_eq!(data, bytes(0, 478));
    }

    #[test]
    fn a_short_read_asks_for_its_packets_at_once_and_asks_again_only_for_a_lost_one() {
        let (mut client, now) = opened();
        let len = 3 * MAX_DATA as u64 + 10;
        client.start(FtpOp::Read { offset: 100, len }, now).unwrap();
        let sent: Vec<FtpPayload> = std::iter::from_fn(|| client.poll_request()).collect();
        let offsets: Vec<u32> = sent.iter().map(|r| r.offset).collect();
        assert_eq!(
            offsets,
            [100, 339, 578, 817],
            "the read's packets asked for at once"
        );
        assert_eq!(
            sent[3].size, 10,
            "the last one asks for what the read needs"
        );
        let seqs: std::collections::HashSet<u16> = sent.iter().map(|r| r.seq).collect();
        assert_eq!(seqs.len(), 4, "each request its own sequence number");
        // The first answer lost; the others come, out of order.
        for r in [&sent[2], &sent[3], &sent[1]] {
            client.handle_reply(&answer(r).encode(), now);
        }
        assert!(client.poll_result().is_none());
        assert!(
            client.poll_request().is_none(),
            "nothing asked twice before its wait ends"
        );
        client.handle_timeout(client.poll_timeout().expect("a reply waited for"));
        let again = client.poll_request().expect("the lost one asked again");
        assert_eq!((again.seq, again.offset), (sent[0].seq, 100));
        client.handle_reply(&answer(&again).encode(), now);
        let Some(Ok(FtpReply::Read { offset: 100, data })) = client.poll_result() else {
            panic!("the read ends")
        };
        assert_eq!(data, bytes(100, len));
        assert!(client.poll_request().is_none());
    }

    #[test]
    fn a_request_whose_later_one_is_answered_first_is_asked_again_after_a_round_trip() {
        let (mut client, t0) = opened();
        let rtt = Duration::from_millis(10);
        // One read measures the round trip.
        client
            .start(FtpOp::Read { offset: 0, len: 10 }, t0)
            .unwrap();
        let first = client.poll_request().unwrap();
        client.handle_reply(&answer(&first).encode(), t0 + rtt);
        assert!(matches!(
            client.poll_result(),
            Some(Ok(FtpReply::Read { .. }))
        ));
        let t1 = t0 + 2 * rtt;
        client
            .start(
                FtpOp::Read {
                    offset: 0,
                    len: 478,
                },
                t1,
            )
            .unwrap();
        let sent: Vec<FtpPayload> = std::iter::from_fn(|| client.poll_request()).collect();
        assert_eq!(sent.len(), 2);
        // The second answered within the round trip: the first may still come.
        client.handle_reply(&answer(&sent[1]).encode(), t1 + rtt / 4);
        assert!(client.poll_request().is_none());
        let wait = client.poll_timeout().expect("a wait") - t1;
        assert!(
            wait < 2 * rtt,
            "the first taken for lost about a round trip after it went, not after {wait:?}"
        );
        client.handle_timeout(t1 + wait);
        let again = client.poll_request().expect("the first asked again");
        assert_eq!((again.seq, again.offset), (sent[0].seq, 0));
        client.handle_reply(&answer(&again).encode(), t1 + wait + rtt);
        let Some(Ok(FtpReply::Read { data, .. })) = client.poll_result() else {
            panic!("the read ends")
        };
        assert_eq!(data, bytes(0, 478));
    }

    #[test]
    fn a_request_sent_ahead_past_the_end_of_the_file_ends_the_read_there() {
        let (mut client, now) = opened();
        client
            .start(
                FtpOp::Read {
                    offset: 0,
                    len: 600,
                },
                now,
            )
            .unwrap();
        let sent: Vec<FtpPayload> = std::iter::from_fn(|| client.poll_request()).collect();
        assert_eq!(sent.len(), 3);
        // The file is 300 bytes long.
        client.handle_reply(&FtpPayload::nak_of(&sent[2], Nak::Eof).encode(), now);
        let mut second = FtpPayload::ack(&sent[1], bytes(239, 61));
        second.offset = 239;
        client.handle_reply(&second.encode(), now);
        client.handle_reply(&answer(&sent[0]).encode(), now);
        let Some(Ok(FtpReply::Read { offset: 0, data })) = client.poll_result() else {
            panic!("the read ends at the end of the file, with no wait")
        };
        assert_eq!(data, bytes(0, 300));
    }

    #[test]
    fn a_packet_a_burst_lost_is_read_alone_not_in_a_new_burst() {
        let (mut client, now) = opened();
        let len = 10 * MAX_DATA as u64;
        client
            .start(
                FtpOp::Read {
                    offset: 0,
                    len: BURST_MIN + len,
                },
                now,
            )
            .unwrap();
        let burst = client.poll_request().unwrap();
        assert_eq!(burst.opcode, op::BURST_READ_FILE);
        // Packet 1 of the burst lost; the burst ends after packet 9.
        for k in (0..10).filter(|k| *k != 1) {
            client.handle_reply(&burst_packet(&burst, k, k == 9).encode(), now);
        }
        let hole = client.poll_request().expect("the hole asked for");
        assert_eq!((hole.opcode, hole.offset), (op::READ_FILE, 239));
        client.handle_reply(&answer(&hole).encode(), now);
        // Then the rest (BURST_MIN bytes and more) as a burst from after what came.
        let next = client.poll_request().expect("the rest asked for");
        assert_eq!(
            (next.opcode, next.offset),
            (op::BURST_READ_FILE, len as u32)
        );
    }
}
