//! What reading a DataFlash log in order knows at each message ([`LogState`]): the units
//! its definitions gave so far ([`Units`]) and its latest `TimeUS`, which stamps a message
//! of a type without one. Each message is told apart as a type defined (again), a
//! definition taken in, or data at its log time ([`Passing`]).

use crate::dataflash::format::{FMT_TYPE, Format, time_us};
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
#[derive(Debug, Default, Clone)]
pub struct LogState {
    pub units: Units,
    /// The latest `TimeUS` logged.
    pub last_us: u64,
}

impl LogState {
    /// The log's next whole message `m`, of format `f`.
    pub fn pass(&mut self, m: &[u8], f: &Format) -> Passing {
        if f.type_id == FMT_TYPE {
            return Passing::Defined(m.get(3).copied().unwrap_or(0));
        }
        if self.units.take(f, m) {
            return Passing::Definition;
        }
        let timestamp = match time_us(f, m) {
            Some(t) => {
                self.last_us = self.last_us.max(t);
                t
            }
            None => self.last_us,
        };
        Passing::Data { timestamp }
    }
}
