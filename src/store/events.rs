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

use std::collections::{HashMap, VecDeque};
use std::ops::ControlFlow;

use bytes::BytesMut;

use crate::diagnose::{Finding, Follower, Selection};
use crate::store::columns::{ColumnError, ColumnSpec};
use crate::ulog::framer::{Framer, Unit};
use crate::ulog::message::{FileHeader, Message};
use crate::ulog::{Decoder, Sample};

/// How much longer than `before` a sample is held (log time): a logged string that triggers
/// an event may come that late after the samples of its moment.
pub const HOLD_MARGIN_US: u64 = 2_000_000;

/// Default bound of one buffer's held samples.
pub const DEFAULT_BUFFER_BYTES: u64 = 32 << 20;

/// Most events a session's manifest lists (a trigger that fires on every sample must not grow
/// the manifest without bound); past them, events still open their windows and are counted.
pub const MAX_LISTED_EVENTS: usize = 1000;

/// Longest text of a logged string kept in an event's record.
const MAX_DETAIL: usize = 200;

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

/// Follows the whole log for triggers and runs the flight diagnostics on it (see the module
/// docs).
#[derive(Debug)]
pub struct TriggerWatch {
    framer: Framer,
    /// Decodes the log and hands each sample to the diagnostics.
    follower: Follower,
    /// Leaves the samples no analyzer reads undecoded.
    skims: bool,
    triggers: Vec<Trigger>,
    /// Whether any trigger is a field condition (else samples are only timed).
    has_fields: bool,
    /// Per message id (index): the field conditions on its topic, found at its first sample
    /// (`None` until then, and again when the id is subscribed anew).
    watched: Vec<Option<Vec<WatchedField>>>,
}

/// A field condition on one subscription's samples.
#[derive(Debug, Clone, Copy)]
struct WatchedField {
    /// Index of the trigger in the watch's list.
    trigger: usize,
    /// Index of the field in the subscription's layout.
    field: usize,
    /// Whether the condition held at the last sample.
    holding: bool,
}

impl TriggerWatch {
    /// A watch for `triggers`, running the analyzers `diagnostics` selects. With
    /// `every_sample` (event buffers open their windows by its log time) it decodes every
    /// sample; else, without field conditions, it skims: the samples no analyzer reads are
    /// left undecoded, and [`log_time`](Self::log_time) follows those it reads only.
    pub fn new(triggers: Vec<Trigger>, diagnostics: Selection, every_sample: bool) -> Self {
        let has_fields = triggers.iter().any(|t| matches!(t, Trigger::Field(_)));
        Self {
            framer: Framer::file(),
            follower: Follower::new(diagnostics),
            skims: !every_sample && !has_fields,
            has_fields,
            triggers,
            watched: Vec::new(),
        }
    }

    /// The largest sample time seen so far, µs (of the samples the analyzers read, when it
    /// [`skims`](Self::skims)).
    pub fn log_time(&self) -> u64 {
        self.follower.log_time()
    }

    /// Whether it leaves the samples no analyzer reads undecoded.
    pub fn skims(&self) -> bool {
        self.skims
    }

    /// The log time the diagnostics did not see (the log's dropouts), `[from, to]` µs each.
    pub fn blind(&self) -> &[[u64; 2]] {
        self.follower.detectors().map_or(&[], |d| d.blind())
    }

    /// Takes the log's next bytes (the file header first, then messages, in pieces of any
    /// size); appends the events they make to `events`.
    pub fn push(&mut self, bytes: &[u8], events: &mut Vec<EventRecord>) {
        let mut framer = std::mem::take(&mut self.framer);
        let _ = framer.push(bytes, |unit| {
            match unit {
                Unit::Header(h) => self.follower.header(h),
                Unit::Message(m) => self.follow(m, events),
            }
            ControlFlow::Continue(())
        });
        self.framer = framer;
    }

    fn follow(&mut self, message: &[u8], events: &mut Vec<EventRecord>) {
        if self.skims && self.follower.skips(message) {
            return;
        }
        let Some(parsed) = Message::parse_framed(message) else {
            return;
        };
        match parsed {
            Message::Logging {
                timestamp, text, ..
            }
            | Message::LoggingTagged {
                timestamp, text, ..
            } => {
                let text = String::from_utf8_lossy(text);
                for t in &self.triggers {
                    if let Trigger::LoggedText(r) = t
                        && r.is_match(&text)
                    {
                        events.push(EventRecord {
                            name: r.as_str().to_owned(),
                            source: EventSource::LoggedText,
                            at_us: timestamp,
                            detail: text.chars().take(MAX_DETAIL).collect(),
                            after_us: None,
                            windows: Vec::new(),
                            finding: None,
                        });
                    }
                }
                return;
            }
            Message::AddLogged { msg_id, .. } | Message::RemoveLogged { msg_id } => {
                // A new subscription under this id: its conditions are found again.
                if let Some(w) = self.watched.get_mut(usize::from(msg_id)) {
                    *w = None;
                }
            }
            _ => {}
        }
        let log_time = self.follower.log_time();
        let Some(sample) = self.follower.follow(&parsed) else {
            return;
        };
        if self.has_fields {
            watch_fields(&self.triggers, &mut self.watched, &sample, log_time, events);
        }
        if let Some(d) = self.follower.detectors_mut() {
            events.extend(d.take_new().iter().map(EventRecord::of_finding));
        }
    }
}

/// The field conditions on `sample`'s topic (each subscription's found at its first sample,
/// in `watched`): an event for each that turns true.
fn watch_fields(
    triggers: &[Trigger],
    watched: &mut Vec<Option<Vec<WatchedField>>>,
    sample: &Sample<'_>,
    log_time: u64,
    events: &mut Vec<EventRecord>,
) {
    let msg_id = usize::from(sample.msg_id);
    if watched.len() <= msg_id {
        watched.resize(msg_id + 1, None);
    }
    let watched = watched[msg_id].get_or_insert_with(|| {
        (triggers.iter().enumerate())
            .filter_map(|(trigger, t)| match t {
                Trigger::Field(c) if c.topic == sample.name() => {
                    let field = sample.layout.field_index(&c.field)?;
                    Some(WatchedField {
                        trigger,
                        field,
                        holding: false,
                    })
                }
                _ => None,
            })
            .collect()
    });
    for w in watched {
        let Trigger::Field(c) = &triggers[w.trigger] else {
            continue;
        };
        let value = sample.value(w.field).as_f64();
        let now = c.holds(value);
        let before = std::mem::replace(&mut w.holding, now);
        if now && !before {
            events.push(EventRecord {
                name: c.text.clone(),
                source: EventSource::Field,
                at_us: sample.timestamp.unwrap_or(log_time),
                detail: format!(
                    "{}[{}].{} = {value}",
                    sample.name(),
                    sample.multi_id,
                    c.field
                ),
                after_us: None,
                windows: Vec::new(),
                finding: None,
            });
        }
    }
}

/// One buffer's gate on its column's stream (see the module docs).
#[derive(Debug)]
pub struct EventGate {
    spec: EventBufferSpec,
    framer: Framer,
    decoder: Decoder,
    /// Samples held, in arrival order.
    held: HeldSamples,
    /// Windows so far, merged, by start.
    windows: Vec<[u64; 2]>,
    /// Per message id: the last sample time written.
    written: HashMap<u16, u64>,
    /// Samples dropped from memory before their time was up (the byte bound).
    pub dropped_for_memory: u64,
}

impl EventGate {
    pub fn new(spec: EventBufferSpec) -> Self {
        Self {
            spec,
            framer: Framer::file(),
            decoder: Decoder::new(),
            held: HeldSamples::default(),
            windows: Vec::new(),
            written: HashMap::new(),
            dropped_for_memory: 0,
        }
    }

    pub fn spec(&self) -> &EventBufferSpec {
        &self.spec
    }

    /// The windows so far, merged, by start: `[from, to]` µs of log time.
    pub fn windows(&self) -> &[[u64; 2]] {
        &self.windows
    }

    /// Bytes of samples held now.
    pub fn held_bytes(&self) -> u64 {
        self.held.bytes_held
    }

    /// Takes the column's next bytes (header first, then messages, in pieces of any size) and
    /// appends what is to be written now to `out`.
    pub fn push(&mut self, bytes: &[u8], out: &mut BytesMut) {
        let mut framer = std::mem::take(&mut self.framer);
        let _ = framer.push(bytes, |unit| {
            match unit {
                Unit::Header(h) => {
                    follow_header(&mut self.decoder, h);
                    out.extend_from_slice(h);
                }
                Unit::Message(m) => self.follow(m, out),
            }
            ControlFlow::Continue(())
        });
        self.framer = framer;
        self.evict();
    }

    fn follow(&mut self, message: &[u8], out: &mut BytesMut) {
        let parsed = Message::parse_framed(message);
        if let Some(Message::RemoveLogged { msg_id }) = parsed {
            // Its held samples could not follow the removal.
            self.held.take_where(|_, id| id == msg_id, |_, _, _| {});
            self.written.remove(&msg_id);
        }
        let msg_id = match parsed {
            Some(Message::Data { msg_id, .. }) => msg_id,
            _ => {
                if let Some(p) = &parsed {
                    let _ = self.decoder.handle(p);
                }
                out.extend_from_slice(message);
                return;
            }
        };
        let Some(ts) = self.decoder.timestamp_of(parsed.as_ref()) else {
            // No time to place it by: written as it comes.
            out.extend_from_slice(message);
            return;
        };
        if self.in_window(ts) {
            self.write(ts, msg_id, message, out);
        } else {
            self.held.push(ts, msg_id, message);
        }
    }

    fn write(&mut self, ts: u64, msg_id: u16, message: &[u8], out: &mut BytesMut) {
        write_in_order(&mut self.written, ts, msg_id, message, out);
    }

    fn in_window(&self, ts: u64) -> bool {
        let k = self.windows.partition_point(|w| w[1] < ts);
        self.windows.get(k).is_some_and(|w| w[0] <= ts)
    }

    /// Drops held samples past `before` (and the margin) and over the byte bound.
    fn evict(&mut self) {
        let horizon = self
            .decoder
            .last_timestamp()
            .saturating_sub(self.spec.before_us + HOLD_MARGIN_US);
        while let Some(ts) = self.held.front_time() {
            let over = self.held.bytes_held > self.spec.max_bytes;
            if ts >= horizon && !over {
                break;
            }
            if over && ts >= horizon {
                self.dropped_for_memory += 1;
            }
            self.held.pop_front();
        }
    }

    /// An event at `at_us` (log time): opens its window (`after_us` instead of the buffer's
    /// own when given), merged with those it overlaps, and appends the held samples it takes
    /// to `out`. Returns the event's own window.
    pub fn open(&mut self, at_us: u64, after_us: Option<u64>, out: &mut BytesMut) -> [u64; 2] {
        let window = [
            at_us.saturating_sub(self.spec.before_us),
            at_us.saturating_add(after_us.unwrap_or(self.spec.after_us)),
        ];
        // Held samples are older than the newest sample and outside every window: when the
        // window's part up to now is covered already, none can be in it (a trigger firing on
        // every sample costs no scan of what is held).
        let past_end = window[1].min(self.decoder.last_timestamp());
        let scan = window[0] <= past_end
            && !self
                .windows
                .iter()
                .any(|w| w[0] <= window[0] && w[1] >= past_end);
        let [mut from, mut to] = window;
        self.windows.retain(|w| {
            let overlaps = w[0] <= to && w[1] >= from;
            if overlaps {
                from = from.min(w[0]);
                to = to.max(w[1]);
            }
            !overlaps
        });
        let k = self.windows.partition_point(|w| w[0] < from);
        self.windows.insert(k, [from, to]);
        if scan {
            let written = &mut self.written;
            self.held.take_where(
                |ts, _| ts >= from && ts <= to,
                |ts, msg_id, m| write_in_order(written, ts, msg_id, m, out),
            );
        }
        window
    }
}

/// Appends a sample to `out` unless one of its topic stamped later was written already.
fn write_in_order(
    written: &mut HashMap<u16, u64>,
    ts: u64,
    msg_id: u16,
    message: &[u8],
    out: &mut BytesMut,
) {
    let last = written.entry(msg_id).or_insert(0);
    if ts >= *last {
        *last = ts;
        out.extend_from_slice(message);
    }
}

/// A gate's held samples in arrival order, their bytes in one buffer (no allocation per
/// sample; the buffer's dropped front is reclaimed once it is half of it).
#[derive(Debug, Default)]
struct HeldSamples {
    samples: VecDeque<HeldSample>,
    /// The held messages' bytes; `bytes[0]` is byte `base` of all ever pushed.
    bytes: Vec<u8>,
    base: usize,
    /// Bytes of the samples held (what the byte bound counts).
    bytes_held: u64,
}

#[derive(Debug, Clone, Copy)]
struct HeldSample {
    ts: u64,
    msg_id: u16,
    /// Where its message starts among all bytes ever pushed.
    start: usize,
    len: usize,
}

impl HeldSamples {
    fn push(&mut self, ts: u64, msg_id: u16, message: &[u8]) {
        self.samples.push_back(HeldSample {
            ts,
            msg_id,
            start: self.base + self.bytes.len(),
            len: message.len(),
        });
        self.bytes.extend_from_slice(message);
        self.bytes_held += message.len() as u64;
    }

    fn front_time(&self) -> Option<u64> {
        self.samples.front().map(|s| s.ts)
    }

    fn pop_front(&mut self) {
        let Some(s) = self.samples.pop_front() else {
            return;
        };
        self.bytes_held -= s.len as u64;
        match self.samples.front() {
            None => {
                self.base += self.bytes.len();
                self.bytes.clear();
            }
            Some(next) => {
                let dead = next.start - self.base;
                if dead >= 64 << 10 && dead * 2 >= self.bytes.len() {
                    self.bytes.drain(..dead);
                    self.base = next.start;
                }
            }
        }
    }

    /// Takes out the samples `pick` chooses, handing each to `take` in order; keeps the rest.
    fn take_where(
        &mut self,
        mut pick: impl FnMut(u64, u16) -> bool,
        mut take: impl FnMut(u64, u16, &[u8]),
    ) {
        let old = std::mem::take(self);
        self.base = old.base + old.bytes.len();
        for s in old.samples {
            let message = &old.bytes[s.start - old.base..][..s.len];
            if pick(s.ts, s.msg_id) {
                take(s.ts, s.msg_id, message);
            } else {
                self.push(s.ts, s.msg_id, message);
            }
        }
    }
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

    #[test]
    fn held_samples_keep_their_bytes_through_drops_and_takes() {
        let mut held = HeldSamples::default();
        let message = |k: u64| vec![k as u8; 1000 + (k % 7) as usize];
        for k in 0..300u64 {
            held.push(k, (k % 3) as u16, &message(k));
        }
        for _ in 0..200 {
            held.pop_front();
        }
        // The dropped front was reclaimed, the rest is intact.
        assert!(held.bytes.len() < 150_000, "{}", held.bytes.len());
        assert_eq!(
            held.bytes_held,
            (200..300).map(|k| message(k).len() as u64).sum::<u64>()
        );
        let mut taken = Vec::new();
        held.take_where(
            |ts, id| id == 0 && ts < 250,
            |ts, _, m| taken.push((ts, m.to_vec())),
        );
        let want: Vec<(u64, Vec<u8>)> = (200..250)
            .filter(|k| k % 3 == 0)
            .map(|k| (k, message(k)))
            .collect();
        assert_eq!(taken, want);
        let mut rest = Vec::new();
        held.take_where(|_, _| true, |ts, _, m| rest.push((ts, m.to_vec())));
        let want: Vec<(u64, Vec<u8>)> = (200..300)
            .filter(|k| !(k % 3 == 0 && *k < 250))
            .map(|k| (k, message(k)))
            .collect();
        assert_eq!(rest, want);
        assert_eq!(held.bytes_held, 0);
    }

    #[test]
    fn overlapping_windows_merge_and_lookups_find_them() {
        let spec = EventBufferSpec {
            column: ColumnSpec::parse("imu=sensor_*").unwrap(),
            before_us: 5,
            after_us: 2,
            max_bytes: 1 << 20,
        };
        let mut gate = EventGate::new(spec);
        let mut out = BytesMut::new();
        assert_eq!(gate.open(100, None, &mut out), [95, 102]);
        assert_eq!(gate.open(50, Some(10), &mut out), [45, 60]);
        assert_eq!(gate.open(104, None, &mut out), [99, 106]);
        assert_eq!(gate.windows(), [[45, 60], [95, 106]]);
        gate.open(58, None, &mut out);
        assert_eq!(gate.windows(), [[45, 60], [95, 106]]);
        gate.open(80, Some(20), &mut out);
        assert_eq!(gate.windows(), [[45, 60], [75, 106]]);
        for (ts, inside) in [
            (44, false),
            (45, true),
            (60, true),
            (61, false),
            (75, true),
            (106, true),
            (107, false),
        ] {
            assert_eq!(gate.in_window(ts), inside, "{ts}");
        }
    }
}
