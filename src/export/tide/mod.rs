//! TIDE ("Time-Indexed Data Entries", RD 1: the draft RRFC by Biggs and Lütkebohle, one of the
//! formats the project was created from), version 2.0: a flight as TIDE blocks, and a reader
//! of them for `ulog-recv info`.
//!
//! Every block is a 4-byte tag, a u64 size (of the data after it) and the data, little-endian.
//! A reader continues `size` bytes after the size field whatever it expected there: a later
//! minor version may append fields, and a block of an unknown tag is skipped
//! ([`read`] follows this rule).
//!
//! What our files hold ([`mod@write`]):
//! - `TIDE` (2.0) first;
//! - before the chunk that first uses them, a `TYPE` block per ROS 2 message type (the types
//!   the MCAP export uses, [`crate::ros::ros2`]): one block per type, its dependencies
//!   (nested formats, `builtin_interfaces/msg/Time` of `/log`) as `TYPE` blocks of their
//!   own, written before their users, each once; then a `CHAN` block per topic instance;
//! - `CHNK` blocks of entries, each entry a sample as CDR; the entries of a chunk compressed as
//!   one stream (gzip by default, bzip2, or none), about 1/200 of the log per chunk (256 KB to
//!   1 MB of entries, as the MCAP export's chunks);
//! - after each chunk, an `INDX` block per channel with entries in it, one index entry per
//!   entry: together the `INDX` blocks of a channel point at every one of its entries, and a
//!   writer never holds more than a chunk's index;
//! - a `META` block at the end.
//!
//! The decisions the draft leaves open:
//! - **Type hash**: SHA-1 (the function the draft's TODO names; RD 8, which would say, is not
//!   available) over the syntax name, one NUL byte, then the definition text, as stored in the
//!   `TYPE` block ([`type_hash`]). Readers should treat it as an opaque key.
//! - **Syntax**: [`SYNTAX`], ROS 2's message description (`.msg`, as of ROS 2 Humble): fields
//!   `TYPE NAME`, `TYPE[N]`, `string`, nested types as `package/Name`; the definition is the
//!   type's own lines, without its dependencies'. The version field is empty: the definition
//!   and its hash identify the type.
//! - **Times**: ns since the Unix epoch. A log with a UTC reference (a GPS sample with
//!   `time_utc_usec`, see [`crate::export::utc_offset_us`]) gets its log times moved by that
//!   offset; a log without one keeps its log time (ns since the vehicle booted), which the
//!   `META` block says (`dc:Description`, and `ulog-recv:time_offset_ns`: what was added, 0
//!   without a reference). `META` has `dc:Title`, `dc:Date` (the first entry's UTC date and time,
//!   only with a reference), `dc:Source` (the vehicle and its software version), and the ULog
//!   info as `ulog:info:NAME`.
//! - **Compression**: the entries section of a chunk, as one stream: index offsets count in
//!   that stream once uncompressed, from its first entry's channel ID.
//! - **Positions**: an index entry's chunk start is the file offset of the `CHNK` block's tag.
//! - **Channels**: the Foxglove server's topic names (`/NAME`, `/NAME/N`, `/log`); source
//!   name `uORB NAME, instance N`; source config the ULog format text of the topic and of each
//!   format it nests, one per line.

pub mod read;
pub mod write;

use sha1::Digest;

/// The version our files have; a reader takes any file of [`MAJOR`].
pub const MAJOR: u8 = 2;
pub const MINOR: u8 = 0;

/// The syntax name of our `TYPE` blocks (see the module docs).
pub const SYNTAX: &str = "ros2msg (ROS 2 message description, Humble)";

/// Block tags.
pub mod tag {
    pub const TIDE: [u8; 4] = *b"TIDE";
    pub const META: [u8; 4] = *b"META";
    pub const TYPE: [u8; 4] = *b"TYPE";
    pub const CHAN: [u8; 4] = *b"CHAN";
    pub const INDX: [u8; 4] = *b"INDX";
    pub const CHNK: [u8; 4] = *b"CHNK";
}

/// Bytes of a block's tag and size.
pub const BLOCK_HEADER: usize = 12;
/// Bytes of a `CHNK` block's fixed part: id, count, start, end, compression.
pub const CHUNK_FIXED: usize = 4 + 4 + 8 + 8 + 1;
/// Bytes of an entry's header in a chunk: channel id, time stamp, size.
pub const ENTRY_HEADER: usize = 4 + 8 + 4;
/// Bytes of one `INDX` entry: chunk start, time stamp, offset.
pub const INDEX_ENTRY: usize = 8 + 8 + 4;

/// How a chunk's entries are compressed (the `CHNK` block's compression byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Compression {
    None = 0,
    Gzip = 1,
    Bzip2 = 2,
}

impl Compression {
    /// The compression of a `CHNK` block's byte.
    pub fn from_byte(byte: u8) -> Option<Self> {
        match byte {
            0 => Some(Self::None),
            1 => Some(Self::Gzip),
            2 => Some(Self::Bzip2),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Gzip => "gzip",
            Self::Bzip2 => "bzip2",
        }
    }
}

impl std::str::FromStr for Compression {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(Self::None),
            "gzip" => Ok(Self::Gzip),
            "bzip2" => Ok(Self::Bzip2),
            other => Err(format!(
                "not a TIDE compression: {other} (none, gzip, bzip2)"
            )),
        }
    }
}

/// The hash of a type: SHA-1 over `syntax`, a NUL byte and `definition` (see the module docs).
pub fn type_hash(syntax: &str, definition: &str) -> [u8; 20] {
    let mut hasher = sha1::Sha1::new();
    hasher.update(syntax.as_bytes());
    hasher.update([0]);
    hasher.update(definition.as_bytes());
    hasher.finalize().into()
}
