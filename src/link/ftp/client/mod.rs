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
//!
//! This file holds the client's surface and its requests' timing (retries, the round trip,
//! the byte budget); `read` holds the reads (single, burst, and what is read again).

mod read;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use thiserror::Error;

use super::wire::{self, DirEntry, FtpPayload, Nak, PAYLOAD_LEN, op};

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
