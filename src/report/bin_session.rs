//! An ArduPilot session (DataFlash splits) reported: what its manifest says (its splits, the
//! link's dropouts, the events the daemon's diagnostics made as the log came), and its flight
//! summarised ([`BinSummary`]), the splits read in order, each one's replayed preamble left
//! out. `ulog-recv info SESSION` prints it.

use std::path::Path;

use crate::dataflash::{BinSummary, BinSummaryBuilder};
use crate::report::{ReportError, manifest_of};

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
    /// The events made as the log came: the diagnostics' findings, as a PX4 session lists
    /// them.
    pub events: Vec<crate::store::events::EventRecord>,
    /// Which analyzers ran on the stream, and what they could not see.
    pub diagnostics: Option<crate::store::manifest::DiagnosticsEntry>,
}

impl BinSessionReport {
    /// Reads the session in `dir`: its manifest, then every byte of its splits.
    pub fn read(dir: &Path) -> Result<Self, ReportError> {
        let manifest = manifest_of(dir)?;
        let mut builder = BinSummaryBuilder::default();
        for (k, split) in manifest.splits.iter().enumerate() {
            let bytes = std::fs::read(dir.join(&split.file)).map_err(|source| {
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
        let session = BinSessionFigures {
            autopilot: crate::autopilot::Autopilot::ArduPilot,
            splits: manifest.splits.len(),
            closed: manifest.closed,
            dropouts_received: manifest.splits.iter().map(|s| s.summary.dropouts).sum(),
            dropout_ms: manifest.splits.iter().map(|s| s.summary.dropout_ms).sum(),
            events: manifest.events.clone(),
            diagnostics: manifest.diagnostics.clone(),
        };
        Ok(Self {
            session,
            flight: builder.finish(),
        })
    }
}
