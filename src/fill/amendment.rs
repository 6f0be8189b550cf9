//! An amendment, sans-IO: what a fill recovered, as a standalone ULog (the flight's header
//! and formats, the subscriptions its records need, then one run of records per gap it
//! fills), and where each run lies in it and which bytes of which split it stands for: what
//! the manifest records so that readers put each run in place.

use std::collections::BTreeSet;

use crate::fill::scan::{Edge, FlightScan};
use crate::ulog::Decoder;
use crate::ulog::message::{Message, framed, msg_type};

/// One gap an amendment fills, in the manifest.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Fill {
    /// The split holding the gap and the byte offset of its (first) 'O' message there; for
    /// the flight's tail without a dropout, the end of the split (`from..to` then ends
    /// there, and may be empty: records added at the end).
    pub split: String,
    pub offset: u64,
    /// The split's bytes `[from, to)` that read as the amendment's `[start, end)`: the
    /// dropouts and what the stream has between the anchors around them, merged with what
    /// the SD log has there.
    pub from: u64,
    pub to: u64,
    pub start: u64,
    pub end: u64,
    /// Records the SD log gave that the stream had lost.
    pub records: u64,
    /// False when the SD log had a dropout there too (kept among the records).
    pub complete: bool,
    /// The flight's head or tail, if the gap is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edge: Option<Edge>,
    /// Bytes of the SD log fetched to find the gap (a search's; a gap read where the gap
    /// before put it costs its own read, counted with the fill's).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub fetched: u64,
    /// The log time (µs) of the run's earliest and latest record that has one: where the
    /// fill lies in the flight. Absent when no record has a time, and in manifests that
    /// did not record it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_us: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_us: Option<u64>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One gap's merged records, to go into an amendment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovered {
    pub split: String,
    pub offset: u64,
    pub from: u64,
    pub to: u64,
    /// Whole messages, back to back.
    pub records: Vec<u8>,
    pub recovered: u64,
    pub complete: bool,
    pub edge: Option<Edge>,
    /// See [`Fill::fetched`].
    pub fetched: u64,
}

/// Builds the amendment file of `recovered` (in order); returns its bytes and one
/// [`Fill`] per dropout, with the byte range of its records in the file.
pub fn build(flight: &FlightScan, recovered: &[Recovered]) -> (Vec<u8>, Vec<Fill>) {
    // The subscriptions the records use, unless they bring their own.
    let mut used = BTreeSet::new();
    let mut brought = BTreeSet::new();
    for r in recovered {
        for raw in framed(&r.records) {
            if raw.len() >= 5 {
                let id = u16::from_le_bytes([raw[3], raw[4]]);
                match raw[2] {
                    msg_type::DATA => {
                        used.insert(id);
                    }
                    msg_type::ADD_LOGGED if raw.len() >= 6 => {
                        brought.insert(u16::from_le_bytes([raw[4], raw[5]]));
                    }
                    _ => {}
                }
            }
        }
    }
    let mut out = flight.header.clone();
    for f in &flight.formats {
        out.extend_from_slice(f);
    }
    for id in used.difference(&brought) {
        if let Some(a) = flight.subscriptions.get(id) {
            out.extend_from_slice(a);
        }
    }
    let mut fills = Vec::with_capacity(recovered.len());
    let mut decoder = flight.decoder();
    for r in recovered {
        let span = time_span(&mut decoder, &r.records);
        let start = out.len() as u64;
        out.extend_from_slice(&r.records);
        fills.push(Fill {
            split: r.split.clone(),
            offset: r.offset,
            from: r.from,
            to: r.to,
            start,
            end: out.len() as u64,
            records: r.recovered,
            complete: r.complete,
            edge: r.edge,
            fetched: r.fetched,
            first_us: span.map(|s| s.0),
            last_us: span.map(|s| s.1),
        });
    }
    (out, fills)
}

/// The earliest and latest log time among `records` (whole messages, back to back), the
/// definitions among them taken by `decoder` on the way.
fn time_span(decoder: &mut Decoder, records: &[u8]) -> Option<(u64, u64)> {
    let mut span: Option<(u64, u64)> = None;
    for raw in framed(records) {
        let time = match Message::parse_framed(raw) {
            Some(Message::Logging { timestamp, .. } | Message::LoggingTagged { timestamp, .. }) => {
                Some(timestamp)
            }
            Some(message) => decoder.timestamp_of(Some(&message)),
            None => None,
        };
        if let Some(t) = time {
            span = Some(span.map_or((t, t), |(first, last)| (first.min(t), last.max(t))));
        }
    }
    span
}
