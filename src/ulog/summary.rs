//! What a whole log holds: header, flags, info, parameters, logged messages, dropouts and a
//! per-topic census. Built incrementally from [`Record`]s (sans-IO); the `info` command prints
//! it, and it follows pyulog's conventions so that the two compare directly (a parameter in
//! the data section is a change stamped with the latest sample timestamp, and so is a dropout).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::ulog::{
    Decoder, DecoderStats, InfoValue, Message, ReadError, Reader, ReaderStats, Record, Section,
};

/// An info or parameter value, owned.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum OwnedValue {
    Str(String),
    Int(i64),
    UInt(u64),
    Float(f64),
    Bytes(Vec<u8>),
}

impl From<InfoValue<'_>> for OwnedValue {
    fn from(v: InfoValue<'_>) -> Self {
        match v {
            InfoValue::Str(s) => OwnedValue::Str(s.into_owned()),
            InfoValue::Int(i) => OwnedValue::Int(i),
            InfoValue::UInt(u) => OwnedValue::UInt(u),
            InfoValue::Float(f) => OwnedValue::Float(f),
            InfoValue::Bytes(b) => OwnedValue::Bytes(b.to_vec()),
        }
    }
}

/// A logged string ('L', or 'C' with a tag).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoggedMessage {
    pub timestamp: u64,
    /// ASCII syslog digit, as in the log ('0' emergency … '7' debug).
    pub level: u8,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tag: Option<u16>,
    pub text: String,
}

/// A dropout: the logger lost `duration_ms` of data after `timestamp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Dropout {
    pub timestamp: u64,
    pub duration_ms: u16,
}

/// Census of one subscription.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Dataset {
    pub name: String,
    pub multi_id: u8,
    pub msg_id: u16,
    pub count: u64,
    pub first_timestamp: Option<u64>,
    pub last_timestamp: Option<u64>,
}

impl Dataset {
    /// Mean sample rate over the dataset's time span.
    pub fn rate_hz(&self) -> Option<f64> {
        let (first, last) = (self.first_timestamp?, self.last_timestamp?);
        (last > first && self.count > 1)
            .then(|| (self.count - 1) as f64 / ((last - first) as f64 * 1e-6))
    }
}

/// A parameter change in the data section.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ParameterChange {
    pub timestamp: u64,
    pub name: String,
    pub value: OwnedValue,
}

/// Everything [`Summary::observe`] collected.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    pub version: u8,
    pub start_timestamp: u64,
    pub last_timestamp: u64,
    pub compat_flags: [u8; 8],
    pub incompat_flags: [u8; 8],
    pub appended_offsets: Vec<u64>,
    pub info: BTreeMap<String, OwnedValue>,
    pub info_multiple: BTreeMap<String, Vec<Vec<OwnedValue>>>,
    pub initial_parameters: BTreeMap<String, OwnedValue>,
    pub changed_parameters: Vec<ParameterChange>,
    /// By default-type bit (0: system, 1: current setup).
    pub default_parameters: BTreeMap<u8, BTreeMap<String, OwnedValue>>,
    pub logged_messages: Vec<LoggedMessage>,
    pub dropouts: Vec<Dropout>,
    /// Datasets with at least one sample, by (name, multi id, message id).
    pub datasets: Vec<Dataset>,
    pub reader: ReaderStats,
    pub decoder: DecoderStats,
    /// Bytes of a truncated last message.
    pub truncated_bytes: u64,
    /// First few non-fatal errors met, as text.
    pub errors: Vec<String>,
    #[serde(skip)]
    by_msg_id: BTreeMap<u16, Dataset>,
}

/// How many error texts a summary keeps.
const MAX_ERRORS_KEPT: usize = 20;

/// Reads a whole log held in memory.
pub fn summarize(bytes: &[u8]) -> Result<Summary, ReadError> {
    let mut builder = SummaryBuilder::default();
    builder.push(bytes)?;
    Ok(builder.finish())
}

/// Feeds bytes through a [`Reader`] and [`Decoder`] into a [`Summary`].
#[derive(Default)]
pub struct SummaryBuilder {
    reader: Reader,
    decoder: Decoder,
    summary: Summary,
}

impl SummaryBuilder {
    /// Takes the next bytes of the log; a fatal read error ends the log.
    pub fn push(&mut self, bytes: &[u8]) -> Result<(), ReadError> {
        self.reader.push(bytes);
        self.drain()
    }

    fn drain(&mut self) -> Result<(), ReadError> {
        // By reference: see `Reader::next_record`.
        while let Some(item) = &self.reader.next_record() {
            match item {
                Ok(record) => self.summary.observe(record, &mut self.decoder),
                Err(e) if e.is_fatal() => return Err(e.clone()),
                Err(e) => self.summary.note_error(e),
            }
        }
        Ok(())
    }

    pub fn finish(mut self) -> Summary {
        self.reader.finish();
        // A fatal error was already returned by `push`; nothing more comes after it.
        let _ = self.drain();
        self.summary.truncated_bytes = self.reader.pending_bytes() as u64;
        self.summary.reader = self.reader.stats();
        self.summary.decoder = self.decoder.stats();
        self.summary.last_timestamp = self.decoder.last_timestamp();
        self.summary.datasets = std::mem::take(&mut self.summary.by_msg_id)
            .into_values()
            .filter(|d| d.count > 0)
            .collect();
        self.summary
            .datasets
            .sort_by(|a, b| (&a.name, a.multi_id).cmp(&(&b.name, b.multi_id)));
        self.summary
    }
}

impl Summary {
    fn note_error(&mut self, e: &dyn std::fmt::Display) {
        if self.errors.len() < MAX_ERRORS_KEPT {
            self.errors.push(e.to_string());
        }
    }

    /// Takes one record, decoding it with `decoder`.
    pub fn observe(&mut self, record: &Record<'_>, decoder: &mut Decoder) {
        match decoder.handle_record(record) {
            Ok(Some(sample)) => {
                if let Some(d) = self.by_msg_id.get_mut(&sample.msg_id) {
                    d.count += 1;
                    if let Some(ts) = sample.timestamp {
                        d.first_timestamp.get_or_insert(ts);
                        d.last_timestamp = Some(ts);
                    }
                }
                return;
            }
            Ok(None) => {}
            Err(e) => {
                self.note_error(&e);
                return;
            }
        }
        let last_timestamp = decoder.last_timestamp();
        match &record.message {
            Message::Header(h) => {
                self.version = h.version;
                self.start_timestamp = h.timestamp;
            }
            Message::FlagBits(fb) => {
                self.compat_flags = fb.compat;
                self.incompat_flags = fb.incompat;
                self.appended_offsets = fb
                    .appended_offsets
                    .iter()
                    .copied()
                    .filter(|&o| o != 0)
                    .collect();
            }
            Message::Info(kv) => {
                self.info.insert(kv.name.to_owned(), kv.value().into());
            }
            Message::InfoMultiple { is_continued, kv } => {
                let parts = self.info_multiple.entry(kv.name.to_owned()).or_default();
                match parts.last_mut() {
                    Some(last) if *is_continued => last.push(kv.value().into()),
                    _ => parts.push(vec![kv.value().into()]),
                }
            }
            Message::Parameter(kv) => match record.section {
                Section::Definitions => {
                    self.initial_parameters
                        .insert(kv.name.to_owned(), kv.value().into());
                }
                Section::Data => self.changed_parameters.push(ParameterChange {
                    timestamp: last_timestamp,
                    name: kv.name.to_owned(),
                    value: kv.value().into(),
                }),
            },
            Message::ParameterDefault { default_types, kv } => {
                for bit in 0..8u8 {
                    if default_types & (1 << bit) != 0 {
                        self.default_parameters
                            .entry(bit)
                            .or_default()
                            .insert(kv.name.to_owned(), kv.value().into());
                    }
                }
            }
            Message::AddLogged {
                multi_id,
                msg_id,
                name,
            } => {
                let fresh = Dataset {
                    name: (*name).to_owned(),
                    multi_id: *multi_id,
                    msg_id: *msg_id,
                    count: 0,
                    first_timestamp: None,
                    last_timestamp: None,
                };
                let slot = self
                    .by_msg_id
                    .entry(*msg_id)
                    .or_insert_with(|| fresh.clone());
                if (&slot.name, slot.multi_id) != (&fresh.name, fresh.multi_id) {
                    // The id was reused for another topic: keep the old census under a key
                    // past the u16 range would be cleaner; PX4 never does this, so start anew.
                    *slot = fresh;
                }
            }
            Message::Logging {
                level,
                timestamp,
                text,
            } => self.logged_messages.push(LoggedMessage {
                timestamp: *timestamp,
                level: *level,
                tag: None,
                text: String::from_utf8_lossy(text).into_owned(),
            }),
            Message::LoggingTagged {
                level,
                tag,
                timestamp,
                text,
            } => self.logged_messages.push(LoggedMessage {
                timestamp: *timestamp,
                level: *level,
                tag: Some(*tag),
                text: String::from_utf8_lossy(text).into_owned(),
            }),
            Message::Dropout { duration_ms } => self.dropouts.push(Dropout {
                timestamp: last_timestamp,
                duration_ms: *duration_ms,
            }),
            Message::Format(_)
            | Message::RemoveLogged { .. }
            | Message::Data { .. }
            | Message::Sync
            | Message::Unknown { .. } => {}
        }
    }
}
