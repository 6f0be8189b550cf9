//! What the vehicle dropped at the source, read from its own `DMS` records (sans-IO).
//! ArduPilot's MAVLink backend counts the log messages it could not queue for the stream
//! (its buffer was full) in `DMS.Dp`, a running count that starts again at zero with each
//! start of the stream. [`SourceDrops`] turns those counts into drops added message by
//! message, across restarts of the stream: a dropout mark (the receiver's, see
//! [`crate::dataflash::gaps`]) or a count that goes back begins another stream.
//!
//! These are the vehicle's drops, never the link's: the link's losses are the dropouts.

use crate::dataflash::format::{Format, field_size};
use crate::dataflash::gaps::dropout_ms;

/// See the module docs.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SourceDrops {
    /// Drops of the streams before the current one.
    before: u64,
    /// The current stream's latest `DMS.Dp`.
    now: u64,
}

impl SourceDrops {
    /// Takes in message `m` of type `f`; returns how many more messages the vehicle says it
    /// dropped at the source (0 for anything but a `DMS` whose count rose).
    pub fn observe(&mut self, m: &[u8], f: &Format) -> u64 {
        match f.name.as_str() {
            "MSG" if dropout_ms(m, f).is_some() => {
                // A new stream follows: its DMS counts from zero.
                self.before += std::mem::take(&mut self.now);
                0
            }
            "DMS" => {
                let Some(dp) = f
                    .field("Dp")
                    .and_then(|(offset, c)| m.get(offset..offset + field_size(c)?))
                    .and_then(|b| <[u8; 4]>::try_from(b).ok())
                else {
                    return 0;
                };
                let dp = u64::from(u32::from_le_bytes(dp));
                let added = if dp < self.now {
                    self.before += self.now;
                    dp
                } else {
                    dp - self.now
                };
                self.now = dp;
                added
            }
            _ => 0,
        }
    }

    /// Every drop so far, over all streams.
    pub fn total(&self) -> u64 {
        self.before + self.now
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataflash::testing::{df, df_format};

    #[test]
    fn counts_rise_within_a_stream_and_start_again_after_a_restart() {
        let dms = df_format(92, "DMS", "QII", "TimeUS,N,Dp");
        let at = |t: u64, dp: u32| {
            let mut p = t.to_le_bytes().to_vec();
            p.extend(1u32.to_le_bytes());
            p.extend(dp.to_le_bytes());
            df(&dms, &p)
        };
        let mut drops = SourceDrops::default();
        assert_eq!(drops.observe(&at(1, 3), &dms), 3);
        assert_eq!(drops.observe(&at(2, 3), &dms), 0);
        assert_eq!(drops.observe(&at(3, 5), &dms), 2);
        // The vehicle dropped the client and started a stream again: its count too.
        assert_eq!(drops.observe(&at(4, 1), &dms), 1);
        assert_eq!(drops.total(), 6);
        // A DMS that lacks its Dp says nothing.
        let short = df_format(93, "DMS", "QI", "TimeUS,N");
        assert_eq!(drops.observe(&df(&short, &[0; 12]), &short), 0);
        assert_eq!(drops.total(), 6);
    }
}
