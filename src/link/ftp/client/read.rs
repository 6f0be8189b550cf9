//! The client's reads of a file: a single read, or a burst that goes on from the last offset
//! received; the packets a burst lost read alone, requests sent ahead while the link allows,
//! and replies of an earlier burst taken for their offset.

use std::time::Instant;

use super::{
    BURST_MIN, FtpClient, FtpError, FtpReply, LOST_AFTER_MIN, LOST_AFTER_RTT, Pending, READ_WINDOW,
};
use crate::link::ftp::wire::{FtpPayload, MAX_DATA, Nak, op};

impl FtpClient {
    pub(super) fn on_read_reply(&mut self, reply: FtpPayload, now: Instant) {
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
    pub(super) fn prefetch(&mut self, now: Instant) {
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
    pub(super) fn read_request(&mut self, session: u8) -> FtpPayload {
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
}

/// True when `reply` belongs to the burst `request` asked for.
fn own_burst(request: Option<&FtpPayload>, reply: &FtpPayload) -> bool {
    request.is_some_and(|r| {
        r.opcode == op::BURST_READ_FILE
            && reply.seq.wrapping_sub(r.seq) < 0x8000
            && reply.seq != r.seq
    })
}
