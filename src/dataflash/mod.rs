//! The DataFlash engine (ArduPilot's log format), sans-IO: what a `.bin` log is made of and
//! how the receiver cuts, marks and replays it. Bytes in, whole messages and bytes out.
//!
//! A message is `0xA3 0x95`, a type byte, then the payload its FMT lays out; FMT (type 128,
//! 89 bytes) defines every other type. There is no index and no sync marker but the two
//! header bytes.
//!
//! - [`drops`]: [`SourceDrops`]: what the vehicle dropped at the source, from its `DMS`.
//! - [`format`](mod@format): FMT records ([`Format`]), the sizes of their field characters, and the
//!   types every reader knows by name (FMTU, UNIT, MULT, PARM, VER, MSG).
//! - [`framer`]: [`Framer`]: bytes in any pieces → whole messages, learning each type's
//!   length from its FMT; after a gap (or garbage) a header is taken only when the next one
//!   confirms it, so a torn message never passes for a whole one.
//! - [`gaps`]: [`GapMarker`]: a gap in the stream marked in the log itself, as a `MSG`
//!   record every DataFlash tool shows, whose duration the messages around it tell.
//! - [`preamble`]: [`Preamble`]: what a split needs to open alone (every FMT, FMTU, UNIT,
//!   MULT, the startup VER and MSGs, the parameters in force, the flight mode).
//! - [`state`]: [`LogState`](state::LogState): what reading a log in order knows at each
//!   message (its units, its latest `TimeUS`).
//! - [`summary`]: [`BinSummary`]: a log's vehicle, times, types, dropouts and the vehicle's
//!   own drops at the source, for `info`.
//! - [`units`]: [`Units`](units::Units): what FMTU, UNIT and MULT say of each field's unit
//!   and multiplier.
//! - [`values`]: a message's field values, scaled as ArduPilot's tools show them, and the
//!   instance field FMTU marks.

pub mod drops;
pub mod format;
pub mod framer;
pub mod gaps;
pub mod preamble;
pub mod state;
pub mod summary;
#[cfg(test)]
pub mod testing;
pub mod units;
pub mod values;

pub use drops::SourceDrops;
pub use format::{FMT_LEN, FMT_TYPE, Format, HEADER};
pub use framer::{Framer, FramerStats};
pub use gaps::{GapMarker, Resolved};
pub use preamble::Preamble;
pub use summary::{BinSummary, BinSummaryBuilder};
