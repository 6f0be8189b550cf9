//! Columns (sans-IO): a log's topics stored in more than one series of splits. Topics whose
//! names match a column's patterns go to that column's splits (`SESSION/NAME/split_NNNN.ulg`),
//! the rest to the main column (the session's own `split_NNNN.ulg`). High-rate topics (IMU,
//! raw sensors, ESC status) are most of a log's bytes; in a column of their own they can be
//! uploaded after the rest, or left out of a reading.
//!
//! [`ColumnRouter`] cuts one log's stream into one stream per column, each a ULog of its own:
//!
//! | message | goes to |
//! |---|---|
//! | file header, flag bits, info, multi-info, parameters, defaults, sync, dropouts | every column |
//! | format | the column its name belongs to, and every column whose formats nest it |
//! | subscription, its samples, its removal | the column its format's name belongs to |
//! | logged strings, anything else | the main column |
//!
//! A name belongs to the first column whose patterns match it (the `tail` glob syntax), else
//! to the main column. Each column's stream then goes through a splitter of its own, so each
//! split carries only its column's formats, subscriptions and latched topics.
//!
//! [`join`] puts the columns' streams of a log back together: the main stream as it is (its
//! dropouts, strings and parameter changes are every column's), the other columns'
//! subscriptions and samples merged in by log time, and their formats added to the
//! definitions. Each sample comes out once, every topic's samples in their own order.

use std::collections::HashMap;
use std::ops::ControlFlow;

use bytes::BytesMut;

use crate::ulog::Decoder;
use crate::ulog::format::{FieldType, FormatDef};
use crate::ulog::framer::{Framer, Unit};
use crate::ulog::glob;
use crate::ulog::message::{
    FILE_HEADER_LEN, Message, framed, is_definition, is_whole_log, msg_type,
};

/// The main column's name (its splits are the session's own).
pub const MAIN: &str = "main";

/// Most columns besides the main one.
pub const MAX_COLUMNS: usize = 32;

/// A column besides the main one: its name and the topic patterns that go to it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ColumnSpec {
    /// A directory name of the session: letters, digits, `_` and `-`.
    pub name: String,
    pub patterns: Vec<String>,
}

/// Why a column cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ColumnError {
    #[error("a column is NAME=PATTERN[,PATTERN…], not '{0}'")]
    Syntax(String),
    #[error(
        "column name '{0}': letters, digits, '_' and '-' only, at most 64, and not 'main' \
         (the main column is every topic no other column takes)"
    )]
    BadName(String),
    #[error("column '{0}' is given twice")]
    Duplicate(String),
    #[error("at most {MAX_COLUMNS} columns")]
    TooMany,
}

impl ColumnSpec {
    /// `NAME=PATTERN[,PATTERN…]`.
    pub fn parse(text: &str) -> Result<Self, ColumnError> {
        let (name, patterns) = text
            .split_once('=')
            .ok_or_else(|| ColumnError::Syntax(text.into()))?;
        let name = name.trim();
        let patterns: Vec<String> = patterns
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(String::from)
            .collect();
        if patterns.is_empty() {
            return Err(ColumnError::Syntax(text.into()));
        }
        check_name(name)?;
        Ok(Self {
            name: name.into(),
            patterns,
        })
    }

    /// Whether topic (format) `name` matches one of the column's patterns.
    pub fn matches(&self, name: &str) -> bool {
        self.patterns.iter().any(|p| glob::matches(p, name))
    }
}

/// Checks a column's name (it names a directory of the session).
pub fn check_name(name: &str) -> Result<(), ColumnError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name != MAIN
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok {
        Ok(())
    } else {
        Err(ColumnError::BadName(name.into()))
    }
}

/// Checks a set of columns: names unique, not too many.
pub fn check_columns(columns: &[ColumnSpec]) -> Result<(), ColumnError> {
    if columns.len() > MAX_COLUMNS {
        return Err(ColumnError::TooMany);
    }
    for (i, c) in columns.iter().enumerate() {
        check_name(&c.name)?;
        if columns[..i].iter().any(|d| d.name == c.name) {
            return Err(ColumnError::Duplicate(c.name.clone()));
        }
    }
    Ok(())
}

/// Cuts one log's stream into a stream per column (see the module docs). Output `0` is the
/// main column, output `k` the `k`th column of the list.
#[derive(Debug)]
pub struct ColumnRouter {
    columns: Vec<ColumnSpec>,
    framer: Framer,
    /// Formats seen, by name: their message, and the outputs it went to (a bit each).
    formats: HashMap<String, (Vec<u8>, u64)>,
    /// Formats not seen yet that outputs need (nested in a format they have), by name.
    wanted: HashMap<String, u64>,
    /// The output of each subscription, by message id.
    outputs: HashMap<u16, usize>,
}

impl ColumnRouter {
    /// A router for `columns` (checked with [`check_columns`]).
    pub fn new(columns: Vec<ColumnSpec>) -> Self {
        Self {
            columns,
            framer: Framer::file(),
            formats: HashMap::new(),
            wanted: HashMap::new(),
            outputs: HashMap::new(),
        }
    }

    /// Outputs: the main column and one per column.
    pub fn outputs(&self) -> usize {
        self.columns.len() + 1
    }

    /// The output topic (format) `name` belongs to.
    pub fn output_of(&self, name: &str) -> usize {
        glob::first_matching(self.columns.iter().map(|c| &c.patterns[..]), name)
            .map_or(0, |k| k + 1)
    }

    /// Takes the log's next bytes (the file header first, then messages, in pieces of any
    /// size) and appends each whole unit to the outputs it goes to; `out` has
    /// [`outputs`](Self::outputs) buffers.
    pub fn push(&mut self, bytes: &[u8], out: &mut [BytesMut]) {
        let mut framer = std::mem::take(&mut self.framer);
        let _ = framer.push(bytes, |unit| {
            match unit {
                Unit::Header(h) => out.iter_mut().for_each(|o| o.extend_from_slice(h)),
                Unit::Message(m) => self.route(m, out),
            }
            ControlFlow::Continue(())
        });
        self.framer = framer;
    }

    fn route(&mut self, message: &[u8], out: &mut [BytesMut]) {
        let parsed = Message::parse_framed(message);
        match (message[2], parsed) {
            (msg_type::DATA, Some(Message::Data { msg_id, .. }))
            | (msg_type::REMOVE_LOGGED, Some(Message::RemoveLogged { msg_id })) => {
                let k = self.outputs.get(&msg_id).copied().unwrap_or(0);
                out[k].extend_from_slice(message);
            }
            (msg_type::ADD_LOGGED, Some(Message::AddLogged { msg_id, name, .. })) => {
                let k = self.output_of(name);
                self.outputs.insert(msg_id, k);
                out[k].extend_from_slice(message);
            }
            (msg_type::FORMAT, Some(Message::Format(text))) => {
                let Ok(def) = FormatDef::parse(text) else {
                    out[0].extend_from_slice(message);
                    return;
                };
                let mut to = 1u64 << self.output_of(&def.name);
                if let Some(w) = self.wanted.remove(&def.name) {
                    to |= w;
                }
                self.formats.insert(def.name.clone(), (message.to_vec(), 0));
                self.send_format(&def.name, to, out);
            }
            (ty, _) if is_whole_log(ty) => {
                out.iter_mut().for_each(|o| o.extend_from_slice(message))
            }
            _ => out[0].extend_from_slice(message),
        }
    }

    /// Sends format `name` (seen) to the outputs in `to` that do not have it yet, and the
    /// formats it nests after it (those not seen yet are wanted).
    fn send_format(&mut self, name: &str, to: u64, out: &mut [BytesMut]) {
        let Some((message, sent)) = self.formats.get_mut(name) else {
            *self.wanted.entry(name.to_owned()).or_default() |= to;
            return;
        };
        let new = to & !*sent;
        if new == 0 {
            return;
        }
        *sent |= new;
        for (k, o) in out.iter_mut().enumerate() {
            if new & (1 << k) != 0 {
                o.extend_from_slice(message);
            }
        }
        let text = Message::parse_framed(message)
            .and_then(|m| match m {
                Message::Format(t) => FormatDef::parse(t).ok(),
                _ => None,
            })
            .map(|def| def.fields)
            .unwrap_or_default();
        for field in text {
            if let FieldType::Nested(nested) = field.ty {
                self.send_format(&nested, new, out);
            }
        }
    }
}

/// One column's stream being merged: its messages after the definitions, each with its log
/// time (the largest sample time so far: non-decreasing).
struct Merging<'a> {
    messages: std::iter::Peekable<crate::ulog::message::Framed<'a>>,
    decoder: Decoder,
    /// Keep every message (the base stream) or only subscriptions and samples.
    everything: bool,
}

impl<'a> Merging<'a> {
    /// The next message this stream hands to the join, and its log time.
    fn next(&mut self) -> Option<(&'a [u8], u64)> {
        loop {
            let m = self.messages.next()?;
            let parsed = Message::parse_framed(m);
            if let Some(p) = &parsed {
                let _ = self.decoder.handle(p);
            }
            let keep = self.everything
                || matches!(
                    m[2],
                    msg_type::ADD_LOGGED | msg_type::REMOVE_LOGGED | msg_type::DATA
                );
            if keep {
                return Some((m, self.decoder.last_timestamp()));
            }
        }
    }
}

/// Joins the streams of one log's columns (each a ULog stream: header, definitions, data;
/// the first is the main column's) into one (see the module docs). Streams without a file
/// header are left out; `None` when none has one.
pub fn join(streams: &[&[u8]]) -> Option<Vec<u8>> {
    let streams: Vec<&[u8]> = streams
        .iter()
        .copied()
        .filter(|s| s.len() >= FILE_HEADER_LEN)
        .collect();
    let (base, _) = streams.split_first()?;
    let mut out = Vec::with_capacity(streams.iter().map(|s| s.len()).sum());
    out.extend_from_slice(&base[..FILE_HEADER_LEN]);
    // Definitions: the base's, then the formats the others add.
    let mut known = std::collections::HashSet::new();
    let mut merging = Vec::with_capacity(streams.len());
    for (k, stream) in streams.iter().enumerate() {
        let mut decoder = Decoder::new();
        let header: &[u8; FILE_HEADER_LEN] = stream[..FILE_HEADER_LEN].try_into().ok()?;
        if let Some(h) = crate::ulog::message::FileHeader::parse(header) {
            let _ = decoder.handle(&Message::Header(h));
        }
        let body = &stream[FILE_HEADER_LEN..];
        let mut messages = framed(body).peekable();
        while let Some(m) = messages.next_if(|m| is_definition(m[2])) {
            let parsed = Message::parse_framed(m);
            if let Some(p) = &parsed {
                let _ = decoder.handle(p);
            }
            let add = match (&parsed, k) {
                (_, 0) => true,
                (Some(Message::Format(text)), _) => {
                    let name = text.split(':').next().unwrap_or_default();
                    !known.contains(name)
                }
                _ => false,
            };
            if let Some(Message::Format(text)) = &parsed {
                known.insert(text.split(':').next().unwrap_or_default().to_owned());
            }
            if add {
                out.extend_from_slice(m);
            }
        }
        merging.push(Merging {
            messages,
            decoder,
            everything: k == 0,
        });
    }
    // The data sections, merged by log time (the base first on a tie).
    let mut heads: Vec<Option<(&[u8], u64)>> = merging.iter_mut().map(|m| m.next()).collect();
    while let Some(k) = heads
        .iter()
        .enumerate()
        .filter_map(|(k, h)| h.map(|(_, t)| (t, k)))
        .min()
        .map(|(_, k)| k)
    {
        let (m, _) = heads[k].expect("the smallest head is there");
        out.extend_from_slice(m);
        heads[k] = merging[k].next();
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_column_is_a_name_and_patterns() {
        let c = ColumnSpec::parse("imu=sensor_*, vehicle_imu*").unwrap();
        assert_eq!(c.name, "imu");
        assert_eq!(c.patterns, ["sensor_*", "vehicle_imu*"]);
        assert!(c.matches("sensor_accel") && c.matches("vehicle_imu_status"));
        assert!(!c.matches("vehicle_status"));
        for bad in ["imu", "imu=", "=a", "main=a", "a/b=x", "../x=y"] {
            assert!(ColumnSpec::parse(bad).is_err(), "{bad}");
        }
        let twice = [c.clone(), c];
        assert_eq!(
            check_columns(&twice),
            Err(ColumnError::Duplicate("imu".into()))
        );
    }
}
