//! The ULog engine: an incremental reader ([`Reader`]), a format compiler and sample decoder
//! ([`Decoder`], [`Layout`], [`Sample`]), a writer ([`Writer`]), the one incremental framer
//! ([`framer::Framer`]) and the marking of gaps in a stream with dropouts
//! ([`gaps::GapMarker`]). All sans-IO: bytes in,
//! messages and samples out.

pub mod decoder;
pub mod format;
pub mod framer;
pub mod gaps;
pub mod layout;
pub mod message;
pub mod reader;
pub mod types;
pub mod writer;

pub use decoder::{DecodeError, Decoder, DecoderStats, Sample, Subscription};
pub use format::{FieldDef, FieldType, FormatDef, FormatError};
pub use layout::{Field, Layout, LayoutError, TimestampField};
pub use message::{FileHeader, FlagBits, InfoValue, KeyValue, Message, MessageError};
pub use reader::{ReadError, Reader, ReaderStats, Record, Section};
pub use types::{BasicType, Value};
pub use writer::{ParamValue, WriteError, Writer};
