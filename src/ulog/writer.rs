//! The ULog writer (sans-IO): serialises the file header and every message type into a byte
//! buffer. Writing back every [`Message`] a [`crate::ulog::Reader`] produced gives the same
//! bytes as the input.

use crate::ulog::message::{
    FILE_HEADER_LEN, FILE_MAGIC, FLAG_BITS_LEN, INCOMPAT_DATA_APPENDED, KeyValue, MSG_HEADER_LEN,
    Message, SYNC_MAGIC, msg_type,
};

/// Why a message cannot be written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    #[error("message payload of {0} bytes exceeds the 65535 a ULog message can hold")]
    TooLarge(usize),
    #[error("info key '{0}' is longer than 255 bytes")]
    KeyTooLong(String),
    #[error("no flag-bits message right after the file header to patch")]
    NoFlagBits,
}

/// Appends ULog bytes to an owned buffer; take them with [`Writer::take`] or read them with
/// [`Writer::bytes`].
#[derive(Debug, Default, Clone)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Hands out the bytes written so far and empties the buffer.
    pub fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.buf)
    }

    /// Writes any message (the file header included).
    pub fn write(&mut self, message: &Message<'_>) -> Result<(), WriteError> {
        match *message {
            Message::Header(h) => {
                self.header(h.version, h.timestamp);
                Ok(())
            }
            Message::FlagBits(fb) => {
                let mut p = Vec::with_capacity(FLAG_BITS_LEN + fb.extra.len());
                p.extend_from_slice(&fb.compat);
                p.extend_from_slice(&fb.incompat);
                for o in fb.appended_offsets {
                    p.extend_from_slice(&o.to_le_bytes());
                }
                p.extend_from_slice(fb.extra);
                self.message(msg_type::FLAG_BITS, &[&p])
            }
            Message::Format(text) => self.message(msg_type::FORMAT, &[text.as_bytes()]),
            Message::Info(kv) => self.key_value(msg_type::INFO, None, &kv),
            Message::InfoMultiple { is_continued, kv } => {
                self.key_value(msg_type::INFO_MULTIPLE, Some(is_continued as u8), &kv)
            }
            Message::Parameter(kv) => self.key_value(msg_type::PARAMETER, None, &kv),
            Message::ParameterDefault { default_types, kv } => {
                self.key_value(msg_type::PARAMETER_DEFAULT, Some(default_types), &kv)
            }
            Message::AddLogged {
                multi_id,
                msg_id,
                name,
            } => self.message(
                msg_type::ADD_LOGGED,
                &[&[multi_id], &msg_id.to_le_bytes(), name.as_bytes()],
            ),
            Message::RemoveLogged { msg_id } => {
                self.message(msg_type::REMOVE_LOGGED, &[&msg_id.to_le_bytes()])
            }
            Message::Data { msg_id, data } => {
                self.message(msg_type::DATA, &[&msg_id.to_le_bytes(), data])
            }
            Message::Logging {
                level,
                timestamp,
                text,
            } => self.message(
                msg_type::LOGGING,
                &[&[level], &timestamp.to_le_bytes(), text],
            ),
            Message::LoggingTagged {
                level,
                tag,
                timestamp,
                text,
            } => self.message(
                msg_type::LOGGING_TAGGED,
                &[&[level], &tag.to_le_bytes(), &timestamp.to_le_bytes(), text],
            ),
            Message::Sync => self.message(msg_type::SYNC, &[&SYNC_MAGIC]),
            Message::Dropout { duration_ms } => {
                self.message(msg_type::DROPOUT, &[&duration_ms.to_le_bytes()])
            }
            Message::Unknown { msg_type, payload } => self.message(msg_type, &[payload]),
        }
    }

    /// The 16-byte file header.
    pub fn header(&mut self, version: u8, timestamp: u64) {
        self.buf.extend_from_slice(&FILE_MAGIC);
        self.buf.push(version);
        self.buf.extend_from_slice(&timestamp.to_le_bytes());
    }

    /// A 'B' message with the given flags and appended-data offsets.
    pub fn flag_bits(
        &mut self,
        compat: [u8; 8],
        incompat: [u8; 8],
        appended_offsets: [u64; 3],
    ) -> Result<(), WriteError> {
        self.write(&Message::FlagBits(crate::ulog::FlagBits {
            compat,
            incompat,
            appended_offsets,
            extra: &[],
        }))
    }

    /// Rewrites the appended-data offsets of the flag-bits message that follows the file
    /// header (for writers that learn the offsets only after writing the data).
    pub fn patch_appended_offsets(&mut self, offsets: [u64; 3]) -> Result<(), WriteError> {
        patch_appended_offsets(&mut self.buf, offsets)
    }

    /// An 'I', 'M', 'P' or 'Q' message from a type name, a name and the raw value bytes;
    /// `prefix` is the leading byte of 'M' (is_continued) and 'Q' (default types).
    pub fn key_value(
        &mut self,
        ty: u8,
        prefix: Option<u8>,
        kv: &KeyValue<'_>,
    ) -> Result<(), WriteError> {
        let key_len = kv.type_name.len() + 1 + kv.name.len();
        let key_len_byte =
            u8::try_from(key_len).map_err(|_| WriteError::KeyTooLong(kv.name.to_owned()))?;
        let prefix_bytes: &[u8] = match &prefix {
            Some(p) => std::slice::from_ref(p),
            None => &[],
        };
        self.message(
            ty,
            &[
                prefix_bytes,
                &[key_len_byte],
                kv.type_name.as_bytes(),
                b" ",
                kv.name.as_bytes(),
                kv.raw_value,
            ],
        )
    }

    /// An 'I' message holding a string (`char[n]`).
    pub fn info_string(&mut self, name: &str, value: &str) -> Result<(), WriteError> {
        let ty = format!("char[{}]", value.len());
        self.key_value(msg_type::INFO, None, &kv(&ty, name, value.as_bytes()))
    }

    /// An 'M' message part holding a string.
    pub fn info_multiple_string(
        &mut self,
        name: &str,
        value: &str,
        is_continued: bool,
    ) -> Result<(), WriteError> {
        let ty = format!("char[{}]", value.len());
        self.key_value(
            msg_type::INFO_MULTIPLE,
            Some(is_continued as u8),
            &kv(&ty, name, value.as_bytes()),
        )
    }

    /// A 'P' message (PX4 parameters are `int32_t` or `float`).
    pub fn parameter(&mut self, name: &str, value: ParamValue) -> Result<(), WriteError> {
        let (ty, raw) = value.encode();
        self.key_value(msg_type::PARAMETER, None, &kv(ty, name, &raw))
    }

    /// A 'Q' message: `default_types` bit 0 system default, bit 1 current-setup default.
    pub fn parameter_default(
        &mut self,
        default_types: u8,
        name: &str,
        value: ParamValue,
    ) -> Result<(), WriteError> {
        let (ty, raw) = value.encode();
        self.key_value(
            msg_type::PARAMETER_DEFAULT,
            Some(default_types),
            &kv(ty, name, &raw),
        )
    }

    /// Any message from its type and payload parts (concatenated).
    pub fn message(&mut self, ty: u8, parts: &[&[u8]]) -> Result<(), WriteError> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let len16 = u16::try_from(len).map_err(|_| WriteError::TooLarge(len))?;
        self.buf.reserve(MSG_HEADER_LEN + len);
        self.buf.extend_from_slice(&len16.to_le_bytes());
        self.buf.push(ty);
        for p in parts {
            self.buf.extend_from_slice(p);
        }
        Ok(())
    }
}

/// Rewrites the appended-data offsets of the flag-bits message that follows the file header
/// of a log held in `log` (for logs assembled outside a [`Writer`]).
pub fn patch_appended_offsets(log: &mut [u8], offsets: [u64; 3]) -> Result<(), WriteError> {
    let at = FILE_HEADER_LEN;
    let is_flag_bits =
        log.len() >= at + MSG_HEADER_LEN + FLAG_BITS_LEN && log[at + 2] == msg_type::FLAG_BITS;
    if !is_flag_bits {
        return Err(WriteError::NoFlagBits);
    }
    let start = at + MSG_HEADER_LEN + 16;
    for (i, o) in offsets.iter().enumerate() {
        log[start + 8 * i..start + 8 * i + 8].copy_from_slice(&o.to_le_bytes());
    }
    Ok(())
}

/// Says that a log held in `log` has no appended data (its flag bit cleared, its offsets
/// zero): for a log rewritten with every message inline, whose old offsets would point
/// anywhere. A log without flag bits is left as it is.
pub fn clear_appended_data(log: &mut [u8]) {
    if patch_appended_offsets(log, [0; 3]).is_ok() {
        log[FILE_HEADER_LEN + MSG_HEADER_LEN + 8] &= !INCOMPAT_DATA_APPENDED;
    }
}

fn kv<'a>(type_name: &'a str, name: &'a str, raw_value: &'a [u8]) -> KeyValue<'a> {
    KeyValue {
        type_name,
        name,
        raw_value,
    }
}

/// A PX4 parameter value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ParamValue {
    Int32(i32),
    Float(f32),
}

impl ParamValue {
    fn encode(self) -> (&'static str, [u8; 4]) {
        match self {
            ParamValue::Int32(v) => ("int32_t", v.to_le_bytes()),
            ParamValue::Float(v) => ("float", v.to_le_bytes()),
        }
    }
}
