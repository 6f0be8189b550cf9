//! Event buffers and their triggers (sans-IO).
//!
//! High-rate topics matter mostly around incidents. An event buffer is a column
//! ([`crate::store::columns`]) whose samples are held in memory for `before` of log time and
//! written only around events: from `before` ahead of an event to `after` past it. Everything
//! else of the column (its definitions, subscriptions, dropouts) is written as it comes, so its
//! splits open alone like any column's, and readers join it back like any column.
//!
//! - [`TriggerWatch`] follows the whole log and says when an event happens: a logged string
//!   matches a pattern ([`Trigger::LoggedText`]), or a topic's field condition becomes true
//!   ([`Trigger::Field`]; it fires on the sample where it turns true, not again until it was
//!   false). Events asked for from outside (`ulog-recv event NAME`) take the log time the
//!   watch has reached ([`TriggerWatch::log_time`]).
//! - [`EventGate`] sits on one buffer's column stream: a sample stamped inside a window is
//!   written at once; any other sample is held (for `before` plus [`HOLD_MARGIN_US`] of log
//!   time, and at most the buffer's bytes: the oldest go first), and an event writes out the
//!   held samples its window takes. Overlapping windows merge. A topic's samples never go out
//!   of their order: a held sample older than one already written of its topic stays out.
//!
//! This file holds what both share (the buffers' and triggers' specifications, the events'
//! records, the checks of a configuration); `watch` holds the [`TriggerWatch`], `gate` the
//! [`EventGate`] and the samples it holds, each with its tests.

mod gate;
mod watch;

pub use self::gate::EventGate;
pub use self::watch::TriggerWatch;

use crate::diagnose::Finding;
use crate::store::columns::{ColumnError, ColumnSpec};
use crate::ulog::Decoder;
use crate::ulog::message::{FileHeader, Message};

/// How much longer than `before` a sample is held (log time): a logged string that triggers
/// an event may come that late after the samples of its moment.
pub const HOLD_MARGIN_US: u64 = 2_000_000;

/// Default bound of one buffer's held samples.
pub const DEFAULT_BUFFER_BYTES: u64 = 32 << 20;

/// Most events a session's manifest lists (a trigger that fires on every sample must not grow
/// the manifest without bound); past them, events still open their windows and are counted.
pub const MAX_LISTED_EVENTS: usize = 1000;

/// One event buffer: a column whose samples are written only around events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventBufferSpec {
    pub column: ColumnSpec,
    /// Log time kept before an event, µs.
    pub before_us: u64,
    /// Log time written after an event, µs (an event may ask for another).
    pub after_us: u64,
    /// Most bytes of samples held.
    pub max_bytes: u64,
}

/// Why an event option cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventError {
    #[error(transparent)]
    Column(#[from] ColumnError),
    #[error("not a regular expression: {0}")]
    Pattern(String),
    #[error(
        "a condition is TOPIC.FIELD OP NUMBER (OP one of == != < <= > >=), e.g. \
         'vehicle_status.failsafe == 1', not '{0}'"
    )]
    Condition(String),
    #[error("'{0}' is both a column and an event buffer")]
    Both(String),
}

/// What makes an event.
#[derive(Debug, Clone)]
pub enum Trigger {
    /// A logged string (plain or tagged) that matches.
    LoggedText(regex::Regex),
    /// A topic's field condition turns true.
    Field(FieldCondition),
}

impl Trigger {
    /// A logged-string trigger from a regular expression (`(?i)failsafe|crash`).
    pub fn logged_text(pattern: &str) -> Result<Self, EventError> {
        regex::Regex::new(pattern)
            .map(Trigger::LoggedText)
            .map_err(|e| EventError::Pattern(e.to_string()))
    }

    /// What the trigger is, as the user wrote it.
    pub fn text(&self) -> String {
        match self {
            Trigger::LoggedText(r) => r.as_str().to_owned(),
            Trigger::Field(c) => c.text.clone(),
        }
    }
}

/// Comparison of a field condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompareOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// `TOPIC.FIELD OP NUMBER`: any instance of the topic; the field as `info` and the live
/// socket name it (`accelerometer_m_s2[2]`, `esc[0].esc_rpm`).
#[derive(Debug, Clone, PartialEq)]
pub struct FieldCondition {
    pub topic: String,
    pub field: String,
    pub op: CompareOp,
    pub value: f64,
    text: String,
}

impl FieldCondition {
    /// Parses `vehicle_status.failsafe == 1`.
    pub fn parse(text: &str) -> Result<Self, EventError> {
        let bad = || EventError::Condition(text.to_owned());
        // Two-character operators first.
        let ops = [
            ("==", CompareOp::Eq),
            ("!=", CompareOp::Ne),
            ("<=", CompareOp::Le),
            (">=", CompareOp::Ge),
            ("<", CompareOp::Lt),
            (">", CompareOp::Gt),
        ];
        let (at, token, op) = ops
            .iter()
            .filter_map(|&(token, op)| text.find(token).map(|at| (at, token, op)))
            .min_by_key(|&(at, token, _)| (at, std::cmp::Reverse(token.len())))
            .ok_or_else(bad)?;
        let (lhs, rhs) = (text[..at].trim(), text[at + token.len()..].trim());
        let (topic, field) = lhs.split_once('.').ok_or_else(bad)?;
        let value: f64 = rhs.parse().map_err(|_| bad())?;
        let name_ok = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_[].".contains(c))
        };
        if !name_ok(topic) || !name_ok(field) || topic.contains(['.', '[']) {
            return Err(bad());
        }
        Ok(Self {
            topic: topic.to_owned(),
            field: field.to_owned(),
            op,
            value,
            text: text.trim().to_owned(),
        })
    }

    fn holds(&self, v: f64) -> bool {
        match self.op {
            CompareOp::Eq => v == self.value,
            CompareOp::Ne => v != self.value,
            CompareOp::Lt => v < self.value,
            CompareOp::Le => v <= self.value,
            CompareOp::Gt => v > self.value,
            CompareOp::Ge => v >= self.value,
        }
    }
}

/// What made an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventSource {
    /// Asked for from outside (`ulog-recv event`, the live socket).
    Request,
    /// A logged string matched.
    LoggedText,
    /// A field condition turned true.
    Field,
    /// The flight diagnostics found something ([`crate::diagnose`]).
    Diagnostic,
}

/// An event's window in one buffer, µs of log time (the event's own, before merging).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BufferWindow {
    pub buffer: String,
    pub from_us: u64,
    pub to_us: u64,
}

/// One event, as the manifest and the live socket tell it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EventRecord {
    /// The name asked for, or the trigger as written (pattern, condition).
    pub name: String,
    pub source: EventSource,
    /// Log time of the event, µs since the vehicle's boot.
    pub at_us: u64,
    /// What fired it: the logged string, the field's value.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
    /// `after` asked for with the event (instead of each buffer's own), µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_us: Option<u64>,
    /// Its window in each buffer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub windows: Vec<BufferWindow>,
    /// What the flight diagnostics found, for a [`EventSource::Diagnostic`] event (whose
    /// name is the analyzer's id, its detail the summary, and its time when the finding was
    /// made: its end for one that spans a window, so the buffers' windows open around the
    /// moment the detector knew, not seconds before it, past what they hold).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finding: Option<Finding>,
}

impl EventRecord {
    /// The event a finding makes.
    pub fn of_finding(finding: &Finding) -> Self {
        EventRecord {
            name: finding.id.to_string(),
            source: EventSource::Diagnostic,
            at_us: finding.made_at_us(),
            detail: finding.summary.clone(),
            after_us: None,
            windows: Vec::new(),
            finding: Some(finding.clone()),
        }
    }
}

/// An event asked for from outside (`ulog-recv event NAME [--after S]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRequest {
    pub name: String,
    /// `after` for this event instead of each buffer's own, µs.
    pub after_us: Option<u64>,
}

/// Why an event asked for was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventRefused {
    #[error("no log is open (the vehicle is not streaming)")]
    NoLog,
    #[error("this log has {MAX_LISTED_EVENTS} events already; no more are taken")]
    TooMany,
}

/// What became of an event: entered in the manifest, or refused (asked for with no log open,
/// or past [`MAX_LISTED_EVENTS`]).
#[derive(Debug, Clone, PartialEq)]
pub enum EventOutcome {
    Recorded(EventRecord),
    Refused { name: String, reason: String },
}

fn follow_header(decoder: &mut Decoder, header: &[u8]) {
    if let Ok(h) = FileHeader::check_file_start(header) {
        let _ = decoder.handle(&Message::Header(h));
    }
}

/// Checks buffers against each other and the columns: names unique and not both.
pub fn check_buffers(
    columns: &[ColumnSpec],
    buffers: &[EventBufferSpec],
) -> Result<(), EventError> {
    let all: Vec<ColumnSpec> = columns
        .iter()
        .cloned()
        .chain(buffers.iter().map(|b| b.column.clone()))
        .collect();
    if let Some(b) = buffers
        .iter()
        .find(|b| columns.iter().any(|c| c.name == b.column.name))
    {
        return Err(EventError::Both(b.column.name.clone()));
    }
    crate::store::columns::check_columns(&all)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_parse_and_bad_ones_say_why() {
        let c = FieldCondition::parse("vehicle_status.failsafe == 1").unwrap();
        assert_eq!(
            (c.topic.as_str(), c.field.as_str()),
            ("vehicle_status", "failsafe")
        );
        assert_eq!((c.op, c.value), (CompareOp::Eq, 1.0));
        let c = FieldCondition::parse("sensor_accel.accelerometer_m_s2[2]<=-30.5").unwrap();
        assert_eq!(c.field, "accelerometer_m_s2[2]");
        assert_eq!((c.op, c.value), (CompareOp::Le, -30.5));
        let c = FieldCondition::parse("esc_status.esc[0].esc_rpm > 9000").unwrap();
        assert_eq!((c.field.as_str(), c.op), ("esc[0].esc_rpm", CompareOp::Gt));
        for bad in [
            "vehicle_status.failsafe",
            "failsafe == 1",
            "vehicle_status.failsafe == yes",
            "vehicle status.failsafe == 1",
            ".x == 1",
        ] {
            assert!(
                matches!(FieldCondition::parse(bad), Err(EventError::Condition(_))),
                "{bad}"
            );
        }
        assert!(matches!(
            Trigger::logged_text("(unclosed"),
            Err(EventError::Pattern(_))
        ));
    }
}
