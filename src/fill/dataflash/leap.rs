//! The fill's leaps over what the card and the stream hold alike (see the module above):
//! one of the stream's samples read alone where the stream's bytes put it on the card, and
//! half as far while it is not there, down to where the stream lost something.

use super::{BinFiller, LEAP_DROPS, Work};

impl BinFiller<'_> {
    /// The stream's last sample of stretch `n` at or before its message `j`, after its
    /// message `s`.
    pub(super) fn sample_before(&self, n: usize, s: usize, j: usize) -> Option<usize> {
        let end = j.min(self.stretches[n].end);
        (s + 1..=end)
            .rev()
            .find(|&k| self.stream.messages.get(k).is_some_and(|m| m.anchor))
    }

    /// Leaps over what the card and the stream hold alike: the stream's sample `j` where
    /// the stream's bytes since its message `s` (at card offset `pos`) put it, read alone,
    /// is the stream's, so nothing was lost before it; else a sample half as far is tried,
    /// down to none, and the walk reads on from `pos` record by record.
    pub(super) fn leap(
        &mut self,
        n: usize,
        s: usize,
        pos: u64,
        j: usize,
    ) -> Result<Work, (u64, u64)> {
        let walk = Work::Walk {
            n,
            s,
            pos,
            leap_after: j,
        };
        let (Some(from), Some(m)) = (self.stream.messages.get(s), self.stream.messages.get(j))
        else {
            return Ok(walk);
        };
        let at = pos + (m.at - from.at);
        if at + m.len > self.len {
            return Ok(walk);
        }
        if self.get(at, m.len)? == self.stream.bytes(j) {
            self.anchor = Some((j, at));
            if j >= self.stretches[n].end {
                return Ok(self.next_stretch(n + 1));
            }
            return Ok(self.walk_or_leap(n, j + 1, at + m.len, j));
        }
        Ok(match self.sample_before(n, s, s + (j - s) / 2) {
            Some(half) => Work::Leap { n, s, pos, j: half },
            None => walk,
        })
    }

    /// Where the walk goes on from the stream's message `s` at card offset `pos`: a leap to
    /// the stretch's end when in step (nothing recovered waits), past `leap_after` and the
    /// stretch's drops few, else on record by record.
    pub(super) fn walk_or_leap(&self, n: usize, s: usize, pos: u64, leap_after: usize) -> Work {
        let end =
            Self::next_anchor(self.stream, self.stretches[n].end).unwrap_or(self.stretches[n].end);
        let sparse = self.stretches[n].drops <= LEAP_DROPS;
        match self
            .sample_before(n, s, end)
            .filter(|_| sparse && self.run.is_none() && s > leap_after)
        {
            Some(j) => Work::Leap { n, s, pos, j },
            None => Work::Walk {
                n,
                s,
                pos,
                leap_after,
            },
        }
    }
}
