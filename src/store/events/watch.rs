//! The trigger watch: follows the whole log, says when a logged string or a field's
//! condition makes an event, and runs the flight diagnostics on the way. An ArduPilot log
//! (DataFlash) is followed by the diagnostics alone ([`TriggerWatch::dataflash`]).

use std::ops::ControlFlow;

use super::{EventRecord, EventSource, Trigger};
use crate::diagnose::{BinDiagnosis, Follower, Selection};
use crate::ulog::Sample;
use crate::ulog::framer::{Framer, Unit};
use crate::ulog::message::Message;

/// Longest text of a logged string kept in an event's record.
const MAX_DETAIL: usize = 200;

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
    /// An ArduPilot log's diagnostics, which then follow the log in place of the ULog walk.
    dataflash: Option<BinDiagnosis>,
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
            dataflash: None,
        }
    }

    /// A watch of an ArduPilot log (DataFlash): the analyzers `diagnostics` selects, each
    /// finding an event whose detail adds what the vehicle logged of the same moment (its
    /// `ERR` and `EV` records so far). It skims: its log time is the analyzers'.
    pub fn dataflash(diagnostics: Selection) -> Self {
        Self {
            dataflash: Some(BinDiagnosis::new(diagnostics)),
            // The ULog walk stands idle: no analyzer of its own.
            ..Self::new(Vec::new(), Selection::NONE, false)
        }
    }

    /// The largest sample time seen so far, µs (of the samples the analyzers read, when it
    /// [`skims`](Self::skims)).
    pub fn log_time(&self) -> u64 {
        match &self.dataflash {
            Some(d) => d.follower().log_time(),
            None => self.follower.log_time(),
        }
    }

    /// Whether it leaves the samples no analyzer reads undecoded.
    pub fn skims(&self) -> bool {
        self.skims
    }

    /// The log time the diagnostics did not see (the log's dropouts), `[from, to]` µs each.
    pub fn blind(&self) -> &[[u64; 2]] {
        match &self.dataflash {
            Some(d) => d.follower().detectors().blind(),
            None => self.follower.detectors().map_or(&[], |d| d.blind()),
        }
    }

    /// Takes the log's next bytes (the file header first, then messages, in pieces of any
    /// size); appends the events they make to `events`.
    pub fn push(&mut self, bytes: &[u8], events: &mut Vec<EventRecord>) {
        if let Some(d) = &mut self.dataflash {
            d.push(bytes);
            let detectors = d.follower_mut().detectors_mut();
            let new: Vec<_> = detectors.take_new().to_vec();
            events.extend(new.iter().map(|f| {
                let mut event = EventRecord::of_finding(f);
                for said in detectors.vehicle_said(f) {
                    event.detail += &format!("; the vehicle: {said}");
                }
                event
            }));
            return;
        }
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
