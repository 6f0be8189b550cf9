//! The ULog engine: an incremental reader ([`Reader`]), a format compiler and sample decoder
//! ([`Decoder`], [`Layout`], [`Sample`]), a writer ([`Writer`]), the one incremental framer
//! ([`framer::Framer`]) and the marking of gaps in a stream with dropouts
//! ([`gaps::GapMarker`]), what a whole log holds ([`summary`], the `info` command) and topic
//! name patterns ([`glob`], the syntax of `tail` and `export`). All
//! sans-IO: bytes in, messages and samples out.
//!
//! - [`reader`]: incremental. `push` any byte slices, pull [`Record`]s (offset, raw bytes,
//!   parsed message). Validates framing; unknown message types are handed out and counted; a
//!   newer file version is read with a warning; unknown incompat flag bits refuse the log;
//!   appended-data offsets are honoured; a truncated last message stays pending; impossible
//!   framing makes it search for the next sync message (resync counters in [`ReaderStats`]).
//! - [`format`](mod@format), [`layout`]: 'F' messages parsed once (the reader parses them
//!   and hands each parse on in its [`Record`]; a decoder fed records shares it) and compiled
//!   to flat layouts; leaf names, as pyulog names fields (`q[0]`, `outer.inner`), are built
//!   only when asked for; nested formats may be defined later; recursion, depth and size are
//!   bounded.
//! - [`decoder`]: follows subscriptions; a data message becomes a zero-copy [`Sample`] whose
//!   fields are read on demand (no allocation per sample or field); narrow timestamps are
//!   unwrapped. [`Sample::for_each_value`] walks all fields fastest (one type dispatch per run
//!   of same-typed fields).
//! - [`writer`]: serialises every message; reading and writing back gives the same bytes.
//! - [`framer`]: the one incremental cutter of ULog bytes into whole messages, used by the
//!   link's assembler, the store's splitter and recovery, and both live publishers (the
//!   reader shares its framing rule, [`framer::message_len`]).
//! - [`gaps`]: writes a dropout for a gap with the duration the samples around it tell, for
//!   the link's lost chunks and the store's dropped samples alike.
//!
//! The engine is the bottom of the crate: it uses no other part of it.

pub mod decoder;
pub mod format;
pub mod framer;
pub mod gaps;
pub mod glob;
pub mod layout;
pub mod message;
pub mod reader;
pub mod summary;
pub mod types;
pub mod writer;

pub use decoder::{DecodeError, Decoder, DecoderStats, Sample, Subscription};
pub use format::{FieldDef, FieldType, FormatDef, FormatError, Formats, parse_formats};
pub use layout::{Field, Layout, LayoutError, TimestampField};
pub use message::{FileHeader, FlagBits, InfoValue, KeyValue, Message, MessageError, NotULog};
pub use reader::{ReadError, Reader, ReaderStats, Record, Section};
pub use types::{BasicType, Value};
pub use writer::{ParamValue, WriteError, Writer};
