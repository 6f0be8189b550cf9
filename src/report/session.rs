//! A session's whole report: its splits, what fills recovered and what is still missing, its
//! columns and events, then the flight (splits joined, amendments merged) summarised as a
//! file is. `ulog-recv info SESSION --json` prints it; the web page's flight view shows it.

use std::path::Path;

use crate::fill::Edge;
use crate::report::{ReportError, manifest_of};
use crate::store::amend::UnfilledGap;
use crate::store::events::EventRecord;
use crate::store::manifest::BufferEntry;
use crate::ulog::summary::{Summary, SummaryBuilder};

/// See the module docs.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SessionReport {
    pub session: SessionFigures,
    pub flight: Summary,
}

/// What the session's manifest says of it, and what is still missing in the flight.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SessionFigures {
    pub splits: usize,
    pub closed: bool,
    /// Dropouts as the stream was received (before any fill).
    pub dropouts_received: u64,
    pub gaps_filled: usize,
    /// Gaps filled only partly: the SD log lost records there too.
    pub gaps_filled_partly: usize,
    pub records_recovered: u64,
    /// Records recovered before the stream's first record.
    pub records_recovered_head: u64,
    /// Records recovered after the stream's last record.
    pub records_recovered_tail: u64,
    pub fetched_bytes_head: u64,
    pub fetched_bytes_tail: u64,
    /// The amendments' files.
    pub amendments: Vec<String>,
    pub unfilled: Vec<UnfilledGap>,
    /// Where in the flight each filled gap lies (the fills whose amendment records it).
    pub filled: Vec<FilledGap>,
    /// Dropouts in the flight as it reads now (amendments merged).
    pub dropouts_remaining: usize,
    pub columns: Vec<ColumnFigures>,
    pub events: Vec<EventRecord>,
}

/// A gap a fill filled: the log time its records span, and what it brought back.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FilledGap {
    pub first_us: u64,
    pub last_us: u64,
    pub records: u64,
    /// False when the SD log had lost records there too.
    pub complete: bool,
}

impl FilledGap {
    /// Where the manifest's `fill` lies, when it recorded its records' log times.
    pub fn of(fill: &crate::fill::amendment::Fill) -> Option<Self> {
        Some(Self {
            first_us: fill.first_us?,
            last_us: fill.last_us?,
            records: fill.records,
            complete: fill.complete,
        })
    }
}

/// One column: its topics, splits and bytes (the main column's topics are the rest).
#[derive(Debug, Clone, serde::Serialize)]
pub struct ColumnFigures {
    pub name: String,
    pub patterns: Vec<String>,
    pub splits: usize,
    pub bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_buffer: Option<BufferEntry>,
}

impl SessionReport {
    /// Reads the session in `dir`: its manifest, then every byte of its flight.
    pub fn read(dir: &Path) -> Result<Self, ReportError> {
        let manifest = manifest_of(dir)?;
        let flight = crate::export::flight::load(dir, &Default::default()).map_err(|source| {
            ReportError::Flight {
                dir: dir.to_owned(),
                source,
            }
        })?;
        let mut builder = SummaryBuilder::default();
        builder
            .push(&flight)
            .map_err(|source| ReportError::NotULog {
                dir: dir.to_owned(),
                source,
            })?;
        let summary = builder.finish();
        let fills: Vec<_> = manifest.amendments.iter().flat_map(|a| &a.fills).collect();
        // What the flight's two ends brought back, and the bytes finding them fetched.
        let at_edge = |edge: Edge| -> (u64, u64) {
            (fills.iter().filter(|f| f.edge == Some(edge))).fold((0, 0), |(records, fetched), f| {
                (records + f.records, fetched + f.fetched)
            })
        };
        let ((head_records, head_fetched), (tail_records, tail_fetched)) =
            (at_edge(Edge::Head), at_edge(Edge::Tail));
        let columns = manifest
            .column_names()
            .enumerate()
            .map(|(k, name)| {
                let splits = manifest.column_splits(k);
                let column = k.checked_sub(1).map(|k| &manifest.columns[k]);
                ColumnFigures {
                    name: name.to_owned(),
                    patterns: column.map_or_else(Vec::new, |c| c.patterns.clone()),
                    splits: splits.len(),
                    bytes: splits.iter().map(|s| s.summary.bytes).sum(),
                    event_buffer: column.and_then(|c| c.event_buffer.clone()),
                }
            })
            .collect();
        let session = SessionFigures {
            splits: manifest.splits.len(),
            closed: manifest.closed,
            dropouts_received: manifest.splits.iter().map(|s| s.summary.dropouts).sum(),
            gaps_filled: fills.len(),
            gaps_filled_partly: fills.iter().filter(|f| !f.complete).count(),
            records_recovered: fills.iter().map(|f| f.records).sum(),
            records_recovered_head: head_records,
            records_recovered_tail: tail_records,
            fetched_bytes_head: head_fetched,
            fetched_bytes_tail: tail_fetched,
            amendments: manifest.amendments.iter().map(|a| a.file.clone()).collect(),
            unfilled: manifest.unfilled,
            filled: fills.iter().filter_map(|f| FilledGap::of(f)).collect(),
            dropouts_remaining: summary.dropouts.len(),
            columns,
            events: manifest.events,
        };
        Ok(Self {
            session,
            flight: summary,
        })
    }
}
