//! The decoder (sans-IO): follows the formats and subscriptions of a log and turns each data
//! message into a [`Sample`], a zero-copy view whose fields are read on demand through the
//! subscription's compiled [`Layout`]. Decoding allocates nothing per sample or per field.
//!
//! Fed [`Record`]s from a [`Reader`](crate::ulog::Reader) ([`Decoder::handle_record`]), it
//! shares the formats the reader parsed (the reader sizes samples from them, the decoder
//! compiles its layouts from the same objects); fed bare [`Message`]s ([`Decoder::handle`],
//! e.g. from the link's framer), it parses its own.

use std::collections::HashMap;
use std::sync::Arc;

use crate::ulog::format::{FormatDef, FormatError, Formats};
use crate::ulog::layout::{Layout, LayoutError};
use crate::ulog::message::Message;
use crate::ulog::reader::Record;
use crate::ulog::types::{BasicType, Value};

/// A message id bound to a format and instance by an 'A' message.
#[derive(Debug, Clone)]
pub struct Subscription {
    pub msg_id: u16,
    pub multi_id: u8,
    pub layout: Arc<Layout>,
    /// Unwraps timestamps narrower than 64 bits.
    last_raw_timestamp: Option<u64>,
    last_timestamp: u64,
}

impl Subscription {
    /// Format name of the topic.
    pub fn name(&self) -> &str {
        &self.layout.name
    }

    /// Extends a raw timestamp of `bits` width to 64 bits, assuming less than one wrap
    /// between consecutive samples (the wrap period is 65 ms for `uint16_t`, 71 min for
    /// `uint32_t`, 256 ms for the millisecond `uint8_t`).
    fn unwrap_timestamp(&mut self, raw: u64, bits: u32, unit_us: u64) -> u64 {
        let ts = if bits >= 64 {
            raw
        } else {
            match self.last_raw_timestamp {
                None => raw * unit_us,
                Some(prev) => {
                    let mask = (1u64 << bits) - 1;
                    let delta = raw.wrapping_sub(prev) & mask;
                    self.last_timestamp + delta * unit_us
                }
            }
        };
        self.last_raw_timestamp = Some(raw);
        self.last_timestamp = ts;
        ts
    }
}

/// One decoded data message: a view over its bytes and its subscription's layout.
#[derive(Debug, Clone, Copy)]
pub struct Sample<'a> {
    pub msg_id: u16,
    pub multi_id: u8,
    pub layout: &'a Layout,
    /// The sample's bytes (message id excluded); `layout.accepts_len(data.len())` holds.
    pub data: &'a [u8],
    /// Timestamp in microseconds (unwrapped for narrow types); `None` when the format has no
    /// timestamp field.
    pub timestamp: Option<u64>,
}

impl<'a> Sample<'a> {
    /// Topic (format) name.
    pub fn name(&self) -> &'a str {
        &self.layout.name
    }

    /// Value of leaf field `index` of `layout.fields`.
    #[inline]
    pub fn value(&self, index: usize) -> Value {
        let f = &self.layout.fields[index];
        f.ty.read(&self.data[f.offset..])
    }

    /// Every leaf field's name with its value, padding included (pyulog's view).
    pub fn values(&self) -> impl Iterator<Item = (&'a str, Value)> + '_ {
        let data = self.data;
        self.layout
            .named_fields()
            .map(move |(name, f)| (name, f.ty.read(&data[f.offset..])))
    }

    /// Calls `f(field_index, value)` for every leaf field in order, padding included: the
    /// same pairs as [`values`](Self::values) (indices into `layout.fields`), faster, since
    /// the type is dispatched once per run of same-typed fields rather than per field.
    #[inline]
    pub fn for_each_value(&self, f: impl FnMut(usize, Value)) {
        self.walk_runs(true, f)
    }

    /// [`for_each_value`](Self::for_each_value) without the padding fields: every field a
    /// person (or a plot) wants.
    #[inline]
    pub fn for_each_visible_value(&self, f: impl FnMut(usize, Value)) {
        self.walk_runs(false, f)
    }

    #[inline(always)]
    fn walk_runs(&self, with_padding: bool, mut f: impl FnMut(usize, Value)) {
        let runs = match with_padding {
            true => &self.layout.runs,
            false => &self.layout.visible_runs,
        };
        // `accepts_len` was checked when the sample was made, so every run lies within
        // `data[..layout.size]`.
        let data = &self.data[..self.layout.size];
        for run in runs {
            let bytes = &data[run.byte_range()];
            let i = run.first_field as usize;
            match run.ty {
                BasicType::Int8 => each(bytes, i, |b: [u8; 1]| Value::I8(b[0] as i8), &mut f),
                BasicType::UInt8 => each(bytes, i, |b: [u8; 1]| Value::U8(b[0]), &mut f),
                BasicType::Bool => each(bytes, i, |b: [u8; 1]| Value::Bool(b[0]), &mut f),
                BasicType::Char => each(bytes, i, |b: [u8; 1]| Value::Char(b[0]), &mut f),
                BasicType::Int16 => each(bytes, i, |b| Value::I16(i16::from_le_bytes(b)), &mut f),
                BasicType::UInt16 => each(bytes, i, |b| Value::U16(u16::from_le_bytes(b)), &mut f),
                BasicType::Int32 => each(bytes, i, |b| Value::I32(i32::from_le_bytes(b)), &mut f),
                BasicType::UInt32 => each(bytes, i, |b| Value::U32(u32::from_le_bytes(b)), &mut f),
                BasicType::Float => each(bytes, i, |b| Value::F32(f32::from_le_bytes(b)), &mut f),
                BasicType::Int64 => each(bytes, i, |b| Value::I64(i64::from_le_bytes(b)), &mut f),
                BasicType::UInt64 => each(bytes, i, |b| Value::U64(u64::from_le_bytes(b)), &mut f),
                BasicType::Double => each(bytes, i, |b| Value::F64(f64::from_le_bytes(b)), &mut f),
            }
        }
    }

    /// The value of the field named `name` (a linear search: for one-off look-ups).
    pub fn get(&self, name: &str) -> Option<Value> {
        self.layout.field_index(name).map(|i| self.value(i))
    }
}

/// Calls `f(first + k, read(chunk k))` for each `N`-byte chunk of `bytes`. Half the runs of
/// PX4's formats are a single field: those skip the loop.
#[inline(always)]
fn each<const N: usize>(
    bytes: &[u8],
    first: usize,
    read: impl Fn([u8; N]) -> Value,
    f: &mut impl FnMut(usize, Value),
) {
    let (chunks, _) = bytes.as_chunks::<N>();
    if let [only] = chunks {
        return f(first, read(*only));
    }
    for (k, chunk) in chunks.iter().enumerate() {
        f(first + k, read(*chunk));
    }
}

/// Why a message could not be decoded. The decoder goes on with the next message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("bad format definition: {0}")]
    Format(#[from] FormatError),
    #[error("cannot compile subscription {msg_id}: {source}")]
    Layout { msg_id: u16, source: LayoutError },
    #[error("data for message id {msg_id}, which has no subscription")]
    NoSubscription { msg_id: u16 },
    #[error("sample of '{topic}' has {got} bytes, its format needs {need}")]
    SizeMismatch {
        topic: String,
        need: usize,
        got: usize,
    },
}

/// Counters of the decoder.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct DecoderStats {
    pub samples: u64,
    pub errors: u64,
}

/// Follows formats and subscriptions; see the module docs.
#[derive(Debug, Default, Clone)]
pub struct Decoder {
    formats: Formats,
    /// Layouts compiled here (for messages fed without the reader's), by format name; cleared
    /// when a format is (re)defined.
    layouts: HashMap<String, Arc<Layout>>,
    /// Indexed by message id.
    subscriptions: Vec<Option<Subscription>>,
    /// Largest sample timestamp so far (starting at the header's), as pyulog keeps it: the
    /// time stamped on dropouts and parameter changes.
    last_timestamp: u64,
    stats: DecoderStats,
}

impl Decoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes one record of a [`Reader`](crate::ulog::Reader): as [`handle`](Self::handle),
    /// sharing the reader's parse of an 'F' message rather than parsing its text again.
    #[inline]
    pub fn handle_record<'s, 'a: 's>(
        &'s mut self,
        record: &Record<'a>,
    ) -> Result<Option<Sample<'s>>, DecodeError> {
        if let Message::Data { msg_id, data } = record.message {
            return self.decode_data(msg_id, data);
        }
        match (record.format, &record.message) {
            (Some(def), Message::Format(_)) => self.add_format(def.clone()),
            _ => self
                .handle_definition(&record.message)
                .inspect_err(|_| self.stats.errors += 1)?,
        }
        Ok(None)
    }

    /// Takes one message. Returns the sample for a data message, `None` for the others
    /// (whose definitions it records).
    #[inline]
    pub fn handle<'s, 'a: 's>(
        &'s mut self,
        message: &Message<'a>,
    ) -> Result<Option<Sample<'s>>, DecodeError> {
        if let Message::Data { msg_id, data } = *message {
            return self.decode_data(msg_id, data);
        }
        self.handle_definition(message)
            .inspect_err(|_| self.stats.errors += 1)?;
        Ok(None)
    }

    #[inline(always)]
    fn decode_data<'s, 'a: 's>(
        &'s mut self,
        msg_id: u16,
        data: &'a [u8],
    ) -> Result<Option<Sample<'s>>, DecodeError> {
        let Some(Some(sub)) = self.subscriptions.get_mut(msg_id as usize) else {
            self.stats.errors += 1;
            return Err(DecodeError::NoSubscription { msg_id });
        };
        if !sub.layout.accepts_len(data.len()) {
            self.stats.errors += 1;
            return Err(DecodeError::SizeMismatch {
                topic: sub.layout.name.clone(),
                need: sub.layout.size,
                got: data.len(),
            });
        }
        // A `match`, not `Option::map`: a closure here was left out of line on some paths.
        let timestamp = match sub.layout.timestamp {
            Some(t) => {
                let ticks = t.ticks(data);
                Some(sub.unwrap_timestamp(ticks, t.ty.size() as u32 * 8, t.unit_us))
            }
            None => None,
        };
        if let Some(ts) = timestamp
            && ts > self.last_timestamp
        {
            self.last_timestamp = ts;
        }
        self.stats.samples += 1;
        Ok(Some(Sample {
            msg_id,
            multi_id: sub.multi_id,
            layout: &sub.layout,
            data,
            timestamp,
        }))
    }

    #[inline(never)]
    fn handle_definition(&mut self, message: &Message<'_>) -> Result<(), DecodeError> {
        match *message {
            Message::Header(h) => self.last_timestamp = h.timestamp,
            Message::Format(text) => self.add_format(Arc::new(FormatDef::parse(text)?)),
            Message::AddLogged {
                multi_id,
                msg_id,
                name,
            } => {
                let layout = match self.layouts.get(name) {
                    Some(l) => l.clone(),
                    None => {
                        let l = Arc::new(
                            Layout::compile(name, &self.formats)
                                .map_err(|source| DecodeError::Layout { msg_id, source })?,
                        );
                        self.layouts.insert(name.to_owned(), l.clone());
                        l
                    }
                };
                self.subscribe(msg_id, multi_id, layout);
            }
            Message::RemoveLogged { msg_id } => {
                if let Some(slot) = self.subscriptions.get_mut(msg_id as usize) {
                    *slot = None;
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn add_format(&mut self, def: Arc<FormatDef>) {
        self.formats.insert(def.name.clone(), def);
        self.layouts.clear();
    }

    fn subscribe(&mut self, msg_id: u16, multi_id: u8, layout: Arc<Layout>) {
        let i = msg_id as usize;
        if self.subscriptions.len() <= i {
            self.subscriptions.resize(i + 1, None);
        }
        self.subscriptions[i] = Some(Subscription {
            msg_id,
            multi_id,
            layout,
            last_raw_timestamp: None,
            last_timestamp: 0,
        });
    }

    /// Follows `message` (parsed or not) and returns its sample's timestamp, if it is a data
    /// message that decodes and has one.
    pub fn timestamp_of(&mut self, message: Option<&Message<'_>>) -> Option<u64> {
        match self.handle(message?) {
            Ok(Some(sample)) => sample.timestamp,
            _ => None,
        }
    }

    /// The format definitions seen so far, by name.
    pub fn formats(&self) -> &Formats {
        &self.formats
    }

    /// The subscription of `msg_id`, if any.
    pub fn subscription(&self, msg_id: u16) -> Option<&Subscription> {
        self.subscriptions.get(msg_id as usize)?.as_ref()
    }

    /// All current subscriptions, by message id.
    pub fn subscriptions(&self) -> impl Iterator<Item = &Subscription> {
        self.subscriptions.iter().flatten()
    }

    /// Largest sample timestamp so far (the header's before any sample).
    pub fn last_timestamp(&self) -> u64 {
        self.last_timestamp
    }

    pub fn stats(&self) -> DecoderStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn narrow_timestamps_unwrap_across_wraps() {
        let mut sub = Subscription {
            msg_id: 0,
            multi_id: 0,
            layout: Arc::new(
                Layout::compile("t", &crate::ulog::format::parse_formats(["t:"]).unwrap()).unwrap(),
            ),
            last_raw_timestamp: None,
            last_timestamp: 0,
        };
        assert_eq!(sub.unwrap_timestamp(65_000, 16, 1), 65_000);
        assert_eq!(sub.unwrap_timestamp(100, 16, 1), 65_536 + 100);
        assert_eq!(sub.unwrap_timestamp(200, 16, 1), 65_536 + 200);
        let mut ms = sub.clone();
        ms.last_raw_timestamp = None;
        assert_eq!(ms.unwrap_timestamp(250, 8, 1000), 250_000);
        assert_eq!(ms.unwrap_timestamp(4, 8, 1000), 260_000);
    }
}
