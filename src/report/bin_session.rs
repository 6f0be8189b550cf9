//! An ArduPilot session (DataFlash splits) reported: what its manifest says (its splits, the
//! link's dropouts, what fills recovered from the card and what is still missing, the events
//! the daemon's diagnostics made as the log came), and its flight summarised
//! ([`BinSummary`]), the splits read in order with their amendments merged, each one's
//! replayed preamble left out. `ulog-recv info SESSION` prints it; the web page's flight view
//! draws its timeline from it.

use std::path::Path;

use crate::dataflash::{BinSummary, BinSummaryBuilder};
use crate::report::session::FilledGap;
use crate::report::{ReportError, manifest_of};
use crate::store::amend::{UnfilledGap, read_split};

/// See the module docs.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BinSessionReport {
    pub session: BinSessionFigures,
    pub flight: BinSummary,
}

/// What the manifest says of the session.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BinSessionFigures {
    pub autopilot: crate::autopilot::Autopilot,
    pub splits: usize,
    pub closed: bool,
    /// Dropouts the link made (its marks), and the log time they span.
    pub dropouts_received: u64,
    pub dropout_ms: u64,
    /// Gaps the fills filled from the vehicle's card, and how many only partly (the card's
    /// log lost records there too).
    pub gaps_filled: usize,
    pub gaps_filled_partly: usize,
    /// Records the card gave that the stream had lost.
    pub records_recovered: u64,
    /// The amendments' files.
    pub amendments: Vec<String>,
    /// Gaps the last fill could not fill, and why.
    pub unfilled: Vec<UnfilledGap>,
    /// Where in the flight each filled gap lies.
    pub filled: Vec<FilledGap>,
    /// Dropouts in the flight as it reads now (amendments merged): `flight.dropouts`.
    pub dropouts_remaining: usize,
    /// The events made as the log came: the diagnostics' findings, as a PX4 session lists
    /// them.
    pub events: Vec<crate::store::events::EventRecord>,
    /// Which analyzers ran on the stream, and what they could not see.
    pub diagnostics: Option<crate::store::manifest::DiagnosticsEntry>,
}

impl BinSessionReport {
    /// Reads the session in `dir`: its manifest, then every byte of its splits, each gap an
    /// amendment fills read as its records.
    pub fn read(dir: &Path) -> Result<Self, ReportError> {
        let manifest = manifest_of(dir)?;
        let mut builder = BinSummaryBuilder::default();
        for (k, split) in manifest.splits.iter().enumerate() {
            let bytes = read_split(dir, &manifest.amendments, &split.file).map_err(|source| {
                ReportError::NotASession {
                    dir: dir.to_owned(),
                    source,
                }
            })?;
            if k > 0 {
                // Its preamble replays what the splits before it hold.
                builder.next_split();
            }
            builder.push(&bytes);
        }
        let flight = builder.finish();
        let fills: Vec<_> = manifest.amendments.iter().flat_map(|a| &a.fills).collect();
        let session = BinSessionFigures {
            autopilot: crate::autopilot::Autopilot::ArduPilot,
            splits: manifest.splits.len(),
            closed: manifest.closed,
            dropouts_received: manifest.splits.iter().map(|s| s.summary.dropouts).sum(),
            dropout_ms: manifest.splits.iter().map(|s| s.summary.dropout_ms).sum(),
            gaps_filled: fills.len(),
            gaps_filled_partly: fills.iter().filter(|f| !f.complete).count(),
            records_recovered: fills.iter().map(|f| f.records).sum(),
            amendments: manifest.amendments.iter().map(|a| a.file.clone()).collect(),
            unfilled: manifest.unfilled.clone(),
            filled: fills.iter().filter_map(|f| FilledGap::of(f)).collect(),
            dropouts_remaining: flight.dropouts.len(),
            events: manifest.events.clone(),
            diagnostics: manifest.diagnostics.clone(),
        };
        Ok(Self { session, flight })
    }
}
