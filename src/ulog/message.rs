//! The ULog message model: the 16-byte file header and every message type of the spec, as
//! borrowed views over the bytes they came from, with the parsing of one message's payload.
//!
//! Parsing here checks only structure (lengths, UTF-8 where the spec requires text). What a
//! message means for decoding (formats, subscriptions) is [`crate::ulog::Decoder`]'s business.

use crate::ulog::types::BasicType;

/// The magic that opens every ULog file: "ULog" 01 12 35.
pub const FILE_MAGIC: [u8; 7] = [0x55, 0x4c, 0x6f, 0x67, 0x01, 0x12, 0x35];
/// Payload of an 'S' sync message, used to find the message boundaries again after corruption.
pub const SYNC_MAGIC: [u8; 8] = [0x2f, 0x73, 0x13, 0x20, 0x25, 0x0c, 0xbb, 0x12];
/// Size of the file header.
pub const FILE_HEADER_LEN: usize = 16;
/// Size of every message header: `u16` payload size, `u8` type.
pub const MSG_HEADER_LEN: usize = 3;
/// The file version this crate writes and fully understands.
pub const SUPPORTED_VERSION: u8 = 1;
/// Size of the flag-bits payload defined by the spec (longer ones are accepted).
pub const FLAG_BITS_LEN: usize = 40;
/// Incompatible-flags bit 0 of byte 0: the log has appended data at the offsets in 'B'.
pub const INCOMPAT_DATA_APPENDED: u8 = 0x01;
/// Compatible-flags bit 0 of byte 0: the log holds default parameters ('Q').
pub const COMPAT_DEFAULT_PARAMETERS: u8 = 0x01;

/// The one-byte message type codes.
pub mod msg_type {
    pub const FLAG_BITS: u8 = b'B';
    pub const FORMAT: u8 = b'F';
    pub const INFO: u8 = b'I';
    pub const INFO_MULTIPLE: u8 = b'M';
    pub const PARAMETER: u8 = b'P';
    pub const PARAMETER_DEFAULT: u8 = b'Q';
    pub const ADD_LOGGED: u8 = b'A';
    pub const REMOVE_LOGGED: u8 = b'R';
    pub const DATA: u8 = b'D';
    pub const LOGGING: u8 = b'L';
    pub const LOGGING_TAGGED: u8 = b'C';
    pub const SYNC: u8 = b'S';
    pub const DROPOUT: u8 = b'O';
}

/// The smallest payload a known message type can have; `None` for unknown types.
pub fn min_payload_len(ty: u8) -> Option<usize> {
    use msg_type::*;
    Some(match ty {
        FLAG_BITS => FLAG_BITS_LEN,
        FORMAT => 2,            // "n:"
        INFO | PARAMETER => 2,  // key length + at least one key byte
        INFO_MULTIPLE => 3,     // is_continued + key length + a key byte
        PARAMETER_DEFAULT => 3, // default types + key length + a key byte
        ADD_LOGGED => 4,        // multi id, msg id, a name byte
        REMOVE_LOGGED => 2,
        DATA => 3, // msg id + at least one byte of data
        LOGGING => 9,
        LOGGING_TAGGED => 11,
        SYNC => SYNC_MAGIC.len(),
        DROPOUT => 2,
        _ => return None,
    })
}

/// The syslog level (0 emergency … 7 debug) of a logged string's ULog `level`: the ASCII
/// digit PX4 writes, or (from a writer that does not) the value itself.
pub fn syslog_level(ulog_level: u8) -> u8 {
    match ulog_level {
        b'0'..=b'7' => ulog_level - b'0',
        other => other,
    }
}

/// Whether a message of type `ty` belongs to a log's definitions section (flag bits,
/// formats, info, parameters and their defaults; not the 'A' messages PX4 sends there too).
pub fn is_definition(ty: u8) -> bool {
    matches!(
        ty,
        msg_type::FLAG_BITS
            | msg_type::FORMAT
            | msg_type::INFO
            | msg_type::INFO_MULTIPLE
            | msg_type::PARAMETER
            | msg_type::PARAMETER_DEFAULT
    )
}

/// Whether a message of type `ty` speaks of the whole log rather than of one topic (flag
/// bits, info, parameters, syncs, dropouts): every file cut from a log by topic carries it.
pub fn is_whole_log(ty: u8) -> bool {
    matches!(
        ty,
        msg_type::FLAG_BITS
            | msg_type::INFO
            | msg_type::INFO_MULTIPLE
            | msg_type::PARAMETER
            | msg_type::PARAMETER_DEFAULT
            | msg_type::SYNC
            | msg_type::DROPOUT
    )
}

/// Whether `raw` (one framed message) is an 'M' message of PX4's post-flight perf counters
/// (`perf_counter_postflight`, `perf_top_postflight`), which its logger writes when stopped.
pub fn is_postflight(raw: &[u8]) -> bool {
    raw.len() > MSG_HEADER_LEN
        && raw[2] == msg_type::INFO_MULTIPLE
        && matches!(Message::parse_framed(raw), Some(Message::InfoMultiple { kv, .. })
            if kv.name.ends_with("_postflight"))
}

pub const MAX_UNKNOWN_MESSAGE_LEN: usize = 10_000;
/// Largest plausible 'A' payload: multi id, message id and a topic name under 256 bytes.
const MAX_ADD_LOGGED_LEN: usize = 3 + 255;
/// Largest plausible 'P' payload: key length, key, an 8-byte value at most.
const MAX_PARAMETER_LEN: usize = 1 + 255 + 8;

/// Whether a message header could be real: what the reader resynchronises on and crash
/// recovery cuts at. Types are upper-case letters; flag bits come only first; fixed-size
/// types have their size; variable ones their minimum (and a maximum where the content
/// bounds it); unknown types up to [`MAX_UNKNOWN_MESSAGE_LEN`] bytes.
pub fn plausible_header(ty: u8, size: usize, first_message: bool) -> bool {
    if !ty.is_ascii_uppercase() {
        return false;
    }
    match ty {
        msg_type::FLAG_BITS => first_message && size >= FLAG_BITS_LEN,
        msg_type::REMOVE_LOGGED | msg_type::DROPOUT => size == 2,
        msg_type::SYNC => size == SYNC_MAGIC.len(),
        msg_type::ADD_LOGGED => (4..=MAX_ADD_LOGGED_LEN).contains(&size),
        msg_type::PARAMETER => (2..=MAX_PARAMETER_LEN).contains(&size),
        msg_type::PARAMETER_DEFAULT => (3..=MAX_PARAMETER_LEN + 1).contains(&size),
        _ => match min_payload_len(ty) {
            Some(min) => size >= min,
            None => size > 0 && size <= MAX_UNKNOWN_MESSAGE_LEN,
        },
    }
}

/// Whole messages (3-byte header, then the payload) back to back in `bytes`, as a framing
/// layer hands them out. Iteration stops before an incomplete message, which
/// [`Framed::rest`] then holds.
pub fn framed(bytes: &[u8]) -> Framed<'_> {
    Framed { rest: bytes }
}

/// See [`framed`].
#[derive(Debug, Clone)]
pub struct Framed<'a> {
    rest: &'a [u8],
}

impl<'a> Framed<'a> {
    /// The bytes not handed out: an incomplete last message, or nothing.
    pub fn rest(&self) -> &'a [u8] {
        self.rest
    }
}

impl<'a> Iterator for Framed<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let size = u16::from_le_bytes([*self.rest.first()?, *self.rest.get(1)?]) as usize;
        let (message, rest) = self.rest.split_at_checked(MSG_HEADER_LEN + size)?;
        self.rest = rest;
        Some(message)
    }
}

/// `bytes` (whole messages, after `header_left` bytes of file header) less its data
/// messages, and how many were taken out: what a consumer that cannot keep up still needs
/// (definitions, parameters, logged strings, dropouts).
pub fn strip_samples(bytes: &bytes::Bytes, header_left: usize) -> (bytes::Bytes, u64) {
    let head = header_left.min(bytes.len());
    let mut kept = Vec::with_capacity(bytes.len() / 8);
    kept.extend_from_slice(&bytes[..head]);
    let mut messages = framed(&bytes[head..]);
    let mut skipped = 0;
    for m in messages.by_ref() {
        if m[2] == msg_type::DATA {
            skipped += 1;
        } else {
            kept.extend_from_slice(m);
        }
    }
    kept.extend_from_slice(messages.rest());
    // What is kept waits in a queue that counts its length: no spare capacity.
    kept.shrink_to_fit();
    (kept.into(), skipped)
}

/// The 16-byte file header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileHeader {
    pub version: u8,
    /// Log start, microseconds since boot (the clock of the data timestamps).
    pub timestamp: u64,
}

impl FileHeader {
    /// Parses the 16 header bytes; `None` when the magic is wrong.
    pub fn parse(bytes: &[u8; FILE_HEADER_LEN]) -> Option<Self> {
        if bytes[..7] != FILE_MAGIC {
            return None;
        }
        Some(Self {
            version: bytes[7],
            timestamp: u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes")),
        })
    }

    /// Checks a file's first bytes (at most [`FILE_HEADER_LEN`]; fewer only when the file
    /// has no more) and returns its header, or why the file is not a ULog log.
    pub fn check_file_start(first: &[u8]) -> Result<Self, NotULog> {
        let magic_len = first.len().min(FILE_MAGIC.len());
        if first.is_empty() {
            return Err(NotULog::Empty);
        }
        if first[..magic_len] != FILE_MAGIC[..magic_len] {
            return Err(NotULog::Magic {
                start: first[..first.len().min(8)].to_vec(),
            });
        }
        let Ok(bytes) =
            <&[u8; FILE_HEADER_LEN]>::try_from(&first[..first.len().min(FILE_HEADER_LEN)])
        else {
            return Err(NotULog::Short { len: first.len() });
        };
        Ok(Self::parse(bytes).expect("the magic was checked"))
    }
}

/// Why a file is not a ULog log, judged from its first bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotULog {
    #[error("the file is empty")]
    Empty,
    #[error(
        "it does not begin with the ULog magic ('ULog' 01 12 35) but with {}",
        show_bytes(start)
    )]
    Magic { start: Vec<u8> },
    #[error("it holds {len} bytes, fewer than the {FILE_HEADER_LEN} of a ULog file header")]
    Short { len: usize },
}

/// Bytes as a reader recognises them: hex, and the text when it is printable ASCII.
fn show_bytes(bytes: &[u8]) -> String {
    let hex: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let hex = hex.join(" ");
    if bytes.iter().all(|b| b.is_ascii_graphic() || *b == b' ') {
        format!("{hex} (\"{}\")", String::from_utf8_lossy(bytes))
    } else {
        hex
    }
}

/// 'B': compatibility flags and appended-data offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlagBits<'a> {
    pub compat: [u8; 8],
    pub incompat: [u8; 8],
    pub appended_offsets: [u64; 3],
    /// Bytes beyond the 40 the spec defines (a newer writer's fields), kept for round trips.
    pub extra: &'a [u8],
}

impl FlagBits<'_> {
    /// True when the log declares appended data (incompat bit 0).
    pub fn has_appended_data(&self) -> bool {
        self.incompat[0] & INCOMPAT_DATA_APPENDED != 0
    }

    /// Incompat bits this reader does not know; non-zero means the log cannot be read safely.
    pub fn unknown_incompat_bits(&self) -> [u8; 8] {
        let mut bits = self.incompat;
        bits[0] &= !INCOMPAT_DATA_APPENDED;
        bits
    }
}

/// The key and value of an 'I', 'M', 'P' or 'Q' message: key is `"<type> <name>"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyValue<'a> {
    /// Type part of the key, e.g. `char[12]`, `int32_t`, `uint8_t[16]`.
    pub type_name: &'a str,
    /// Name part of the key, e.g. `sys_name`.
    pub name: &'a str,
    /// The raw value bytes, interpreted according to `type_name` by [`KeyValue::value`].
    pub raw_value: &'a [u8],
}

/// The typed value of an info or parameter message.
#[derive(Debug, Clone, PartialEq)]
pub enum InfoValue<'a> {
    /// `char[n]`: text (invalid UTF-8 replaced).
    Str(std::borrow::Cow<'a, str>),
    Int(i64),
    UInt(u64),
    Float(f64),
    /// Any other type (arrays such as `uint8_t[16]`): the raw bytes.
    Bytes(&'a [u8]),
}

impl<'a> KeyValue<'a> {
    /// Parses `key_len u8, key, value` (the payload of 'I' and 'P').
    fn parse(payload: &'a [u8]) -> Result<Self, MessageError> {
        let (&key_len, rest) = payload.split_first().ok_or(MessageError::TooShort)?;
        let key_len = key_len as usize;
        if rest.len() < key_len {
            return Err(MessageError::KeyOverrun);
        }
        let key = std::str::from_utf8(&rest[..key_len]).map_err(|_| MessageError::NotUtf8)?;
        let (type_name, name) = key.split_once(' ').ok_or(MessageError::BadKey)?;
        if type_name.is_empty() || name.is_empty() {
            return Err(MessageError::BadKey);
        }
        Ok(Self {
            type_name,
            name,
            raw_value: &rest[key_len..],
        })
    }

    /// The value decoded according to the key's type. A basic type whose value has the wrong
    /// length, or any array other than `char[n]`, comes back as [`InfoValue::Bytes`].
    pub fn value(&self) -> InfoValue<'a> {
        if self.type_name.starts_with("char[") {
            return InfoValue::Str(String::from_utf8_lossy(self.raw_value));
        }
        match BasicType::from_name(self.type_name) {
            Some(ty) if ty.size() == self.raw_value.len() => {
                use crate::ulog::types::Value as V;
                match ty.read(self.raw_value) {
                    V::F32(v) => InfoValue::Float(v as f64),
                    V::F64(v) => InfoValue::Float(v),
                    V::I8(v) => InfoValue::Int(v as i64),
                    V::I16(v) => InfoValue::Int(v as i64),
                    V::I32(v) => InfoValue::Int(v as i64),
                    V::I64(v) => InfoValue::Int(v),
                    V::U8(v) | V::Bool(v) | V::Char(v) => InfoValue::UInt(v as u64),
                    V::U16(v) => InfoValue::UInt(v as u64),
                    V::U32(v) => InfoValue::UInt(v as u64),
                    V::U64(v) => InfoValue::UInt(v),
                }
            }
            _ => InfoValue::Bytes(self.raw_value),
        }
    }
}

/// One parsed ULog message (or the file header), borrowing its bytes.
#[derive(Debug, Clone, PartialEq)]
pub enum Message<'a> {
    /// The 16-byte file header (always the first record of a stream).
    Header(FileHeader),
    /// 'B'
    FlagBits(FlagBits<'a>),
    /// 'F': `name:type field;type field;…`, see [`crate::ulog::FormatDef::parse`].
    Format(&'a str),
    /// 'I'
    Info(KeyValue<'a>),
    /// 'M': one part of a multi-part info value; `is_continued` joins it to the previous part.
    InfoMultiple {
        is_continued: bool,
        kv: KeyValue<'a>,
    },
    /// 'P': initial value in the definitions section, a change in the data section.
    Parameter(KeyValue<'a>),
    /// 'Q': `default_types` bit 0 = system default, bit 1 = current setup default.
    ParameterDefault { default_types: u8, kv: KeyValue<'a> },
    /// 'A': subscribe `msg_id` to the format `name`, instance `multi_id`.
    AddLogged {
        multi_id: u8,
        msg_id: u16,
        name: &'a str,
    },
    /// 'R'
    RemoveLogged { msg_id: u16 },
    /// 'D': one sample of subscription `msg_id`; decode with [`crate::ulog::Decoder`].
    Data { msg_id: u16, data: &'a [u8] },
    /// 'L': a logged string; `level` is the ASCII syslog digit ('0' emergency … '7' debug).
    Logging {
        level: u8,
        timestamp: u64,
        text: &'a [u8],
    },
    /// 'C': a tagged logged string.
    LoggingTagged {
        level: u8,
        tag: u16,
        timestamp: u64,
        text: &'a [u8],
    },
    /// 'S'
    Sync,
    /// 'O': the logger lost data for `duration_ms` milliseconds.
    Dropout { duration_ms: u16 },
    /// A message type this crate does not know (skipped by the decoder, kept by the writer).
    Unknown { msg_type: u8, payload: &'a [u8] },
}

/// Why one message's payload does not match its type. The framing around it is intact, so
/// the reader reports the error and goes on with the next message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    #[error("payload too short for its type")]
    TooShort,
    #[error("key length runs past the end of the message")]
    KeyOverrun,
    #[error("text is not valid UTF-8")]
    NotUtf8,
    #[error("key is not of the form '<type> <name>'")]
    BadKey,
    #[error("sync message does not hold the sync magic")]
    BadSyncMagic,
    #[error("data sample of {got} bytes, its format needs {need}")]
    DataSize { need: usize, got: usize },
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl<'a> Message<'a> {
    /// Parses one whole framed message (3-byte header, then the payload) as a framing layer
    /// hands it out; `None` when the payload is too short for its type or does not parse.
    pub fn parse_framed(message: &'a [u8]) -> Option<Self> {
        let (header, payload) = message.split_at_checked(MSG_HEADER_LEN)?;
        let ty = header[2];
        if min_payload_len(ty).is_some_and(|min| payload.len() < min) {
            return None;
        }
        Self::parse(ty, payload).ok()
    }

    /// Parses the payload of a message of type `ty`.
    ///
    /// Contract: the caller has checked `payload.len() >= min_payload_len(ty)` for known types
    /// (the reader treats a shorter payload as broken framing, not as a bad message).
    pub fn parse(ty: u8, payload: &'a [u8]) -> Result<Self, MessageError> {
        use msg_type::*;
        if let Some(min) = min_payload_len(ty)
            && payload.len() < min
        {
            return Err(MessageError::TooShort);
        }
        Ok(match ty {
            DATA => Message::Data {
                msg_id: u16_at(payload, 0),
                data: &payload[2..],
            },
            FLAG_BITS => Message::FlagBits(FlagBits {
                compat: payload[0..8].try_into().expect("8 bytes"),
                incompat: payload[8..16].try_into().expect("8 bytes"),
                appended_offsets: [
                    u64_at(payload, 16),
                    u64_at(payload, 24),
                    u64_at(payload, 32),
                ],
                extra: &payload[FLAG_BITS_LEN..],
            }),
            FORMAT => {
                Message::Format(std::str::from_utf8(payload).map_err(|_| MessageError::NotUtf8)?)
            }
            INFO => Message::Info(KeyValue::parse(payload)?),
            INFO_MULTIPLE => Message::InfoMultiple {
                is_continued: payload[0] != 0,
                kv: KeyValue::parse(&payload[1..])?,
            },
            PARAMETER => Message::Parameter(KeyValue::parse(payload)?),
            PARAMETER_DEFAULT => Message::ParameterDefault {
                default_types: payload[0],
                kv: KeyValue::parse(&payload[1..])?,
            },
            ADD_LOGGED => Message::AddLogged {
                multi_id: payload[0],
                msg_id: u16_at(payload, 1),
                name: std::str::from_utf8(&payload[3..]).map_err(|_| MessageError::NotUtf8)?,
            },
            REMOVE_LOGGED => Message::RemoveLogged {
                msg_id: u16_at(payload, 0),
            },
            LOGGING => Message::Logging {
                level: payload[0],
                timestamp: u64_at(payload, 1),
                text: &payload[9..],
            },
            LOGGING_TAGGED => Message::LoggingTagged {
                level: payload[0],
                tag: u16_at(payload, 1),
                timestamp: u64_at(payload, 3),
                text: &payload[11..],
            },
            SYNC => {
                if payload[..8] != SYNC_MAGIC {
                    return Err(MessageError::BadSyncMagic);
                }
                Message::Sync
            }
            DROPOUT => Message::Dropout {
                duration_ms: u16_at(payload, 0),
            },
            _ => Message::Unknown {
                msg_type: ty,
                payload,
            },
        })
    }

    /// The type code of this message (`None` for the file header).
    pub fn msg_type(&self) -> Option<u8> {
        use msg_type::*;
        Some(match self {
            Message::Header(_) => return None,
            Message::FlagBits(_) => FLAG_BITS,
            Message::Format(_) => FORMAT,
            Message::Info(_) => INFO,
            Message::InfoMultiple { .. } => INFO_MULTIPLE,
            Message::Parameter(_) => PARAMETER,
            Message::ParameterDefault { .. } => PARAMETER_DEFAULT,
            Message::AddLogged { .. } => ADD_LOGGED,
            Message::RemoveLogged { .. } => REMOVE_LOGGED,
            Message::Data { .. } => DATA,
            Message::Logging { .. } => LOGGING,
            Message::LoggingTagged { .. } => LOGGING_TAGGED,
            Message::Sync => SYNC,
            Message::Dropout { .. } => DROPOUT,
            Message::Unknown { msg_type, .. } => *msg_type,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stripping_keeps_the_header_and_every_message_but_the_samples() {
        let mut stream = vec![b'U'; FILE_HEADER_LEN];
        let msg = |ty: u8, payload: &[u8]| {
            let mut m = (payload.len() as u16).to_le_bytes().to_vec();
            m.push(ty);
            m.extend_from_slice(payload);
            m
        };
        stream.extend(msg(b'F', b"t:uint64_t timestamp;"));
        stream.extend(msg(b'D', &[1, 0, 9, 9, 9, 9, 9, 9, 9, 9]));
        stream.extend(msg(b'O', &[5, 0]));
        stream.extend(msg(b'D', &[1, 0, 8, 8, 8, 8, 8, 8, 8, 8]));
        let (kept, skipped) = strip_samples(&bytes::Bytes::from(stream.clone()), FILE_HEADER_LEN);
        assert_eq!(skipped, 2);
        let mut expect = vec![b'U'; FILE_HEADER_LEN];
        expect.extend(msg(b'F', b"t:uint64_t timestamp;"));
        expect.extend(msg(b'O', &[5, 0]));
        assert_eq!(&kept[..], &expect[..]);
        // Mid-log: no header.
        let (kept, skipped) =
            strip_samples(&bytes::Bytes::from(stream[FILE_HEADER_LEN..].to_vec()), 0);
        assert_eq!((kept.len(), skipped), (expect.len() - FILE_HEADER_LEN, 2));
        // What is kept waits in a queue that counts its length: its allocation is no larger,
        // however many samples were taken out.
        for _ in 0..1000 {
            stream.extend(msg(b'D', &[1, 0, 7, 7, 7, 7, 7, 7, 7, 7]));
        }
        let (kept, skipped) = strip_samples(&bytes::Bytes::from(stream), FILE_HEADER_LEN);
        assert_eq!((kept.len(), skipped), (expect.len(), 1002));
        let owned = kept.try_into_mut().expect("nothing else holds it");
        assert_eq!(owned.capacity(), expect.len());
    }

    #[test]
    fn info_values_are_typed_by_their_key() {
        let mut payload = vec![b"char[3] name".len() as u8];
        payload.extend_from_slice(b"char[3] name");
        payload.extend_from_slice(b"PX4");
        let Message::Info(kv) = Message::parse(b'I', &payload).unwrap() else {
            panic!("not an info message")
        };
        assert_eq!(kv.name, "name");
        assert_eq!(kv.value(), InfoValue::Str("PX4".into()));

        let mut payload = vec![b"int32_t P".len() as u8];
        payload.extend_from_slice(b"int32_t P");
        payload.extend_from_slice(&(-7i32).to_le_bytes());
        let Message::Parameter(kv) = Message::parse(b'P', &payload).unwrap() else {
            panic!("not a parameter")
        };
        assert_eq!(kv.value(), InfoValue::Int(-7));
    }

    #[test]
    fn malformed_payloads_are_errors_not_panics() {
        assert_eq!(
            Message::parse(b'I', &[200, b'a']),
            Err(MessageError::KeyOverrun)
        );
        assert_eq!(Message::parse(b'I', &[1, b'a']), Err(MessageError::BadKey));
        assert_eq!(Message::parse(b'D', &[1]), Err(MessageError::TooShort));
        assert_eq!(
            Message::parse(b'S', &[0; 8]),
            Err(MessageError::BadSyncMagic)
        );
        assert_eq!(
            Message::parse(b'F', &[0xff, 0xfe]),
            Err(MessageError::NotUtf8)
        );
    }
}
