//! A session's flight as a fill sees it, sans-IO: its columns, each the flight as received
//! in it ([`FlightScan`], with every column's definitions: the SD log's records are read
//! with all of them) and what of the SD log it takes ([`ColumnFilter`]); the gaps across the
//! columns ([`Gaps`]); where the stream stopped ([`StreamEnd`]); the dropout to tell the
//! flight's SD log by ([`Flight::probe`]); and the column each topic goes to, as the store
//! routed it ([`Flight::column_of`]). The [`Filler`](crate::fill::Filler) fills it.

use std::collections::HashSet;

use crate::fill::column::ColumnFilter;
use crate::fill::locate::StreamEnd;
use crate::fill::scan::{DropoutSite, Edge, FlightScan, scan, window_sites};
use crate::fill::walk::Gaps;

/// One column of a session as read: its splits `(file, bytes, preamble bytes)` in order,
/// its topic patterns (none for the main column), and, for an event buffer, the windows it
/// wrote (`[from, to]` µs).
pub struct ColumnSplits<'a> {
    pub splits: Vec<(&'a str, &'a [u8], usize)>,
    pub patterns: &'a [String],
    pub windows: Option<&'a [[u64; 2]]>,
}

impl<'a> ColumnSplits<'a> {
    /// The splits as [`scan`] takes them (the first one whole).
    fn scanned(&self) -> Vec<(&'a str, &'a [u8], usize)> {
        self.splits
            .iter()
            .enumerate()
            .map(|(k, (name, bytes, skip))| (*name, *bytes, if k == 0 { 0 } else { *skip }))
            .collect()
    }
}

/// One column as a fill sees it: the flight as received in it (with every column's
/// definitions: the SD log's records are read with all of them) and what of the SD log it
/// takes.
#[derive(Debug, Clone)]
pub struct Column {
    pub flight: FlightScan,
    pub filter: ColumnFilter,
    /// The topic patterns that route to it (none for the main column).
    pub patterns: Vec<String>,
}

/// A session's flight as a fill sees it.
#[derive(Debug, Clone)]
pub struct Flight {
    pub columns: Vec<Column>,
    /// Its gaps across the columns; `None` when a column is an event buffer (what it holds
    /// is not the stream's order).
    pub gaps: Option<Gaps>,
    /// Where the stream stopped, across every column (each column's tail starts from it).
    pub stream_end: StreamEnd,
}

impl Flight {
    /// The flight of a session's columns (the main column first); with the event buffers'
    /// windows that cannot be filled (their samples lie in two splits), as
    /// `(column, window)`.
    pub fn new(columns: &[ColumnSplits]) -> (Self, Vec<(usize, [u64; 2])>) {
        let mut flights: Vec<FlightScan> = columns.iter().map(|c| scan(c.scanned())).collect();
        // When a gap of the other columns may have lost samples (log time, µs): from its
        // last anchor before (less what PX4 logs late) to its first after.
        let lag = crate::fill::locate::TAIL_LAG_US;
        let spans: Vec<[u64; 2]> = flights
            .iter()
            .zip(columns)
            .filter(|(_, c)| c.windows.is_none())
            .flat_map(|(f, _)| {
                f.sites.iter().filter_map(|s| match s.edge() {
                    Some(Edge::Window) => None,
                    Some(Edge::Head) => Some([f.start_us, s.after_us.unwrap_or(u64::MAX)]),
                    _ => Some([
                        s.last_before_us.saturating_sub(lag),
                        s.after_us.unwrap_or(u64::MAX),
                    ]),
                })
            })
            .collect();
        let mut unfillable = Vec::new();
        for (k, column) in columns.iter().enumerate() {
            let Some(windows) = column.windows else {
                continue;
            };
            let touched = |[from, to]: [u64; 2]| spans.iter().any(|[a, b]| *a <= to && from <= *b);
            let (sites, left) = window_sites(column.scanned(), windows, touched);
            flights[k].sites = sites;
            unfillable.extend(left.into_iter().map(|w| (k, w)));
        }
        let ids: Vec<HashSet<u16>> = flights
            .iter()
            .map(|f| f.subscriptions.keys().copied().collect())
            .collect();
        let mut formats: Vec<Vec<u8>> = Vec::new();
        let mut subscriptions = std::collections::HashMap::new();
        for f in &flights {
            for format in &f.formats {
                if !formats.contains(format) {
                    formats.push(format.clone());
                }
            }
            subscriptions.extend(f.subscriptions.iter().map(|(id, a)| (*id, a.clone())));
        }
        let one_column = flights.len() == 1;
        let stream_end = StreamEnd::of(&flights);
        let built = flights
            .into_iter()
            .enumerate()
            .map(|(k, mut flight)| {
                let filter = if one_column {
                    ColumnFilter::all()
                } else {
                    let others = ids
                        .iter()
                        .enumerate()
                        .filter(|(j, _)| *j != k)
                        .flat_map(|(_, ids)| ids.iter().copied())
                        .collect();
                    let filter = ColumnFilter::column(ids[k].clone(), others, k == 0);
                    match columns[k].windows {
                        Some(w) => filter.with_windows(w.to_vec()),
                        None => filter,
                    }
                };
                flight.formats = formats.clone();
                flight.subscriptions = subscriptions.clone();
                Column {
                    flight,
                    filter,
                    patterns: columns[k].patterns.to_vec(),
                }
            })
            .collect();
        let gaps = if columns.iter().any(|c| c.windows.is_some()) {
            None
        } else {
            let all: Vec<Vec<(&str, &[u8], usize)>> =
                columns.iter().map(ColumnSplits::scanned).collect();
            Gaps::scan(&all)
        };
        (
            Self {
                columns: built,
                gaps,
                stream_end,
            },
            unfillable,
        )
    }

    /// The dropout to tell the flight's SD log by: one with records on both sides (the
    /// head's may be missing from an SD log that began later), else the head or the tail;
    /// the main column's first. Among the sites `todo` says are left.
    pub fn probe(&self, todo: impl Fn(usize, usize) -> bool) -> Option<(usize, usize)> {
        let all = || {
            self.columns.iter().enumerate().flat_map(|(c, col)| {
                col.flight
                    .sites
                    .iter()
                    .enumerate()
                    .map(move |(k, s)| (c, k, s))
            })
        };
        all()
            .filter(|(c, k, _)| todo(*c, *k))
            .find(|(_, _, s)| s.edge().is_none())
            .or_else(|| {
                all()
                    .filter(|(c, k, _)| todo(*c, *k))
                    .find(|(_, _, s)| !s.before.is_empty() || !s.after.is_empty())
            })
            .map(|(c, k, _)| (c, k))
    }

    pub(crate) fn site(&self, (c, k): (usize, usize)) -> &DropoutSite {
        &self.columns[c].flight.sites[k]
    }

    /// A column names no subscription: the session's definitions may not cover the SD
    /// log's records ([`crate::fill::definitions`]).
    pub fn lacks_definitions(&self) -> bool {
        self.columns.iter().any(|c| c.filter.owns_no_id())
    }

    /// The column a topic (format) `name` goes to, as the store routed it.
    pub fn column_of(&self, name: &str) -> usize {
        crate::ulog::glob::first_matching(self.columns[1..].iter().map(|c| &c.patterns[..]), name)
            .map_or(0, |k| k + 1)
    }
}
