//! A DataFlash log summarised as it passes (sans-IO): its vehicle, log time, messages per
//! type and their rates, parameters, the dropouts the receiver marked, and what the vehicle
//! itself dropped at the source (its `DMS.Dp`, counted per stream: the count starts again
//! with each start of the stream). What `ulog-recv info` prints of a `.bin` or an ArduPilot
//! session.

use std::collections::{BTreeMap, HashSet};

use crate::dataflash::drops::SourceDrops;
use crate::dataflash::format::{Format, field_size, text, time_us};
use crate::dataflash::framer::Framer;
use crate::dataflash::gaps::dropout_ms;
use crate::dataflash::preamble::is_replayed;

/// One message type: how many, and how often over the log's time.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TypeCount {
    pub name: String,
    pub messages: u64,
    pub rate_hz: f64,
}

/// A dropout mark in the log.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Dropout {
    pub at_us: u64,
    /// `None`: of unknown length.
    pub duration_ms: Option<u64>,
}

/// See the module docs.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct BinSummary {
    /// The firmware's own words (its first startup text: `ArduCopter V4.6.0 (…)`).
    pub vehicle: Option<String>,
    pub first_us: Option<u64>,
    pub last_us: Option<u64>,
    pub messages: u64,
    pub types: Vec<TypeCount>,
    /// Distinct parameters logged.
    pub parameters: usize,
    pub dropouts: Vec<Dropout>,
    /// Messages the vehicle dropped before they reached its stream (DMS.Dp).
    pub dropped_at_source: u64,
    /// Bytes that were not whole messages.
    pub skipped_bytes: u64,
}

/// Builds a [`BinSummary`] from bytes in any pieces.
#[derive(Debug, Default)]
pub struct BinSummaryBuilder {
    framer: Framer,
    vehicle: Option<String>,
    first_us: Option<u64>,
    last_us: Option<u64>,
    messages: u64,
    counts: BTreeMap<String, u64>,
    parameters: HashSet<Vec<u8>>,
    dropouts: Vec<Dropout>,
    drops: SourceDrops,
    /// At the start of a split after the first: its opening records replay the log's state.
    in_preamble: bool,
}

impl BinSummaryBuilder {
    /// The next bytes are another split of the same log: its preamble is not counted again.
    pub fn next_split(&mut self) {
        self.in_preamble = true;
    }

    pub fn push(&mut self, bytes: &[u8]) {
        let mut framer = std::mem::take(&mut self.framer);
        framer.push(bytes, |m, f| self.message(m, f));
        self.framer = framer;
    }

    fn message(&mut self, m: &[u8], f: &Format) {
        // A split that begins at a gap opens with its mark, right after the preamble.
        let mark = dropout_ms(m, f);
        self.in_preamble &= is_replayed(&f.name) && mark.is_none();
        if self.in_preamble {
            return;
        }
        self.messages += 1;
        *self.counts.entry(f.name.clone()).or_default() += 1;
        let time = time_us(f, m);
        if let Some(t) = time
            && !matches!(f.name.as_str(), "PARM" | "FMTU" | "UNIT" | "MULT")
        {
            self.first_us = Some(self.first_us.map_or(t, |x| x.min(t)));
            self.last_us = Some(self.last_us.map_or(t, |x| x.max(t)));
        }
        self.drops.observe(m, f);
        let field = |label: &str| {
            let (offset, c) = f.field(label)?;
            m.get(offset..offset + field_size(c)?)
        };
        match f.name.as_str() {
            "MSG" => {
                if let Some(d) = mark {
                    self.dropouts.push(Dropout {
                        at_us: time.unwrap_or(0),
                        duration_ms: d,
                    });
                } else if self.vehicle.is_none()
                    && let Some(words) = field("Message")
                {
                    self.vehicle = Some(text(words));
                }
            }
            "PARM" => {
                if let Some(name) = field("Name") {
                    self.parameters.insert(name.to_vec());
                }
            }
            _ => {}
        }
    }

    pub fn finish(mut self) -> BinSummary {
        let mut framer = std::mem::take(&mut self.framer);
        framer.finish(|m, f| self.message(m, f));
        let seconds = match (self.first_us, self.last_us) {
            (Some(a), Some(b)) if b > a => (b - a) as f64 / 1e6,
            _ => 0.0,
        };
        BinSummary {
            vehicle: self.vehicle,
            first_us: self.first_us,
            last_us: self.last_us,
            messages: self.messages,
            types: (self.counts.into_iter())
                .map(|(name, messages)| TypeCount {
                    rate_hz: if seconds > 0.0 {
                        messages as f64 / seconds
                    } else {
                        0.0
                    },
                    name,
                    messages,
                })
                .collect(),
            parameters: self.parameters.len(),
            dropouts: self.dropouts,
            dropped_at_source: self.drops.total(),
            skipped_bytes: framer.stats().skipped_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataflash::format::put_text;

    #[test]
    fn a_log_says_its_vehicle_times_types_dropouts_and_drops_at_the_source() {
        let def = |t: u8, name: &str, fmt: &str, labels: &str, len: u8| Format {
            type_id: t,
            length: len,
            name: name.into(),
            format: fmt.into(),
            labels: labels.split(',').map(String::from).collect(),
        };
        let msg = def(91, "MSG", "QZ", "TimeUS,Message", 75);
        let dms = def(92, "DMS", "QII", "TimeUS,N,Dp", 19);
        let mut log: Vec<u8> = [Format::fmt(), msg.clone(), dms.clone()]
            .iter()
            .flat_map(Format::to_bytes)
            .collect();
        let text_at = |t: u64, s: &str| {
            let mut m = vec![0u8; 75];
            m[..3].copy_from_slice(&[0xA3, 0x95, 91]);
            m[3..11].copy_from_slice(&t.to_le_bytes());
            put_text(&mut m[11..], s);
            m
        };
        let dms_at = |t: u64, dp: u32| {
            let mut m = vec![0xA3, 0x95, 92];
            m.extend_from_slice(&t.to_le_bytes());
            m.extend_from_slice(&0u32.to_le_bytes());
            m.extend_from_slice(&dp.to_le_bytes());
            m
        };
        log.extend(text_at(1_000_000, "ArduCopter V4.6.0"));
        log.extend(dms_at(2_000_000, 3));
        log.extend(dms_at(3_000_000, 5));
        log.extend(text_at(20_000_000, "ulog-recv: dropout of 16000 ms"));
        log.extend(dms_at(21_000_000, 2));
        let mut b = BinSummaryBuilder::default();
        for piece in log.chunks(7) {
            b.push(piece);
        }
        let s = b.finish();
        assert_eq!(s.vehicle.as_deref(), Some("ArduCopter V4.6.0"));
        assert_eq!((s.first_us, s.last_us), (Some(1_000_000), Some(21_000_000)));
        assert_eq!(s.messages, 8);
        assert_eq!(
            s.dropouts,
            [Dropout {
                at_us: 20_000_000,
                duration_ms: Some(16_000)
            }]
        );
        assert_eq!(s.dropped_at_source, 7);
        assert_eq!(
            s.types.iter().find(|t| t.name == "DMS").unwrap().messages,
            3
        );
        assert_eq!(s.skipped_bytes, 0);

        // The same log cut where the gap is: the second split opens with the preamble (the
        // definitions and the startup text again), then the mark.
        let at_gap = log.len() - 2 * 75 - 19 + 75;
        let definitions = 3 * 89;
        let mut b = BinSummaryBuilder::default();
        b.push(&log[..at_gap]);
        b.next_split();
        b.push(&log[..definitions + 75]);
        b.push(&log[at_gap..]);
        let again = b.finish();
        assert_eq!(again.dropouts, s.dropouts);
        assert_eq!(again.messages, s.messages);
    }
}
