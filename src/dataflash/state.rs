//! What reading a DataFlash log in order knows at each message ([`LogState`]): the units
//! its definitions gave so far ([`Units`]) and its latest `TimeUS`, which stamps a message
//! of a type without one. Each message is told apart as a type defined (again), a
//! definition taken in, or data at its log time ([`Passing`]).

use crate::dataflash::format::{FMT_TYPE, Format, leading_time_us};
use crate::dataflash::units::Units;

/// What a message is to a reader of the log's data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Passing {
    /// An FMT: the type it defines (again); what a reader found of it is found again.
    Defined(u8),
    /// A definition (FMTU, UNIT, MULT), taken into the [`Units`].
    Definition,
    /// Data, at its log time (µs): its `TimeUS`, else the latest one before it.
    Data { timestamp: u64 },
}

/// See the module docs.
#[derive(Debug, Clone)]
pub struct LogState {
    pub units: Units,
    /// The latest `TimeUS` logged.
    pub last_us: u64,
    /// What each type is, by its id, found at its first message (again after its FMT): its
    /// name and fields are not compared at every message.
    kinds: Vec<Option<Kind>>,
}

/// What a type's messages are to [`LogState`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// FMTU, UNIT or MULT.
    Definition,
    /// Data, stamped by its own `TimeUS` or not.
    Data { has_time_us: bool },
}

impl Default for LogState {
    fn default() -> Self {
        Self {
            units: Units::default(),
            last_us: 0,
            kinds: vec![None; 256],
        }
    }
}

impl LogState {
    /// The log's next whole message `m`, of format `f`.
    pub fn pass(&mut self, m: &[u8], f: &Format) -> Passing {
        if f.type_id == FMT_TYPE {
            let defined = m.get(3).copied().unwrap_or(0);
            self.kinds[usize::from(defined)] = None;
            return Passing::Defined(defined);
        }
        let kind =
            *self.kinds[usize::from(f.type_id)].get_or_insert_with(|| match Units::defines(f) {
                true => Kind::Definition,
                false => Kind::Data {
                    has_time_us: f.has_time_us(),
                },
            });
        let stamped = match kind {
            Kind::Definition => {
                self.units.take(f, m);
                return Passing::Definition;
            }
            Kind::Data { has_time_us } => has_time_us.then(|| leading_time_us(m)).flatten(),
        };
        let timestamp = match stamped {
            Some(t) => {
                self.last_us = self.last_us.max(t);
                t
            }
            None => self.last_us,
        };
        Passing::Data { timestamp }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataflash::testing::{df, df_format, padded};

    #[test]
    fn each_message_is_told_apart_and_stamped_as_its_type_is_defined_at_the_time() {
        let mut state = LogState::default();
        let fmtu = df_format(172, "FMTU", "QBNN", "TimeUS,FmtType,UnitIds,MultIds");
        let stamped = df_format(40, "BAT", "Qf", "TimeUS,Volt");
        // The same id defined again, now without a time of its own.
        let unstamped = df_format(40, "BAT", "If", "Count,Volt");
        let fmt = Format::fmt();
        assert_eq!(state.pass(&fmtu.to_bytes(), &fmt), Passing::Defined(172));
        let mut body = 5u64.to_le_bytes().to_vec();
        body.push(40);
        body.extend_from_slice(&padded::<16>("sv"));
        body.extend_from_slice(&[0; 16]);
        assert_eq!(state.pass(&df(&fmtu, &body), &fmtu), Passing::Definition);
        assert_eq!(state.units.of_type(40).0, b"sv");
        let mut volt = 1_000u64.to_le_bytes().to_vec();
        volt.extend_from_slice(&12f32.to_le_bytes());
        assert_eq!(
            state.pass(&df(&stamped, &volt), &stamped),
            Passing::Data { timestamp: 1_000 }
        );
        assert_eq!(
            state.pass(&unstamped.to_bytes(), &fmt),
            Passing::Defined(40)
        );
        let mut count = 7_000u32.to_le_bytes().to_vec();
        count.extend_from_slice(&12f32.to_le_bytes());
        assert_eq!(
            state.pass(&df(&unstamped, &count), &unstamped),
            Passing::Data { timestamp: 1_000 },
            "stamped with the latest time, not its first field"
        );
    }
}
