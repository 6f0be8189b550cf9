//! A session in a line of the flights' list: when it started, how long and how big it is, how
//! whole the stream was, what the fill did, what the diagnostics found and where its uploads
//! stand, from its manifest and upload journal only (no log is read: a list of a thousand
//! sessions stays quick).

use std::path::Path;

use crate::diagnose::Severity;
use crate::report::uploads::UploadReport;
use crate::report::{ReportError, manifest_of};
use crate::store::events::EventSource;

/// See the module docs. Field names say their units.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FlightRow {
    /// The session directory's name: what the API's `/api/flights/{id}` takes.
    pub id: String,
    /// UTC start, RFC 3339.
    pub started_utc: String,
    pub system_id: u8,
    pub component_id: u8,
    /// The format of its splits: `ulog` (a PX4's) or `dataflash` (an ArduPilot's).
    pub log_format: crate::autopilot::LogFormat,
    /// Over: its last split is closed (false: still recording).
    pub closed: bool,
    /// Log time from the first sample to the last, seconds.
    pub duration_s: f64,
    /// The splits' bytes, every column's.
    pub size_bytes: u64,
    /// Dropouts as the stream was received, and the log time they lost.
    pub dropouts_received: u64,
    pub dropout_ms_received: u64,
    /// Messages the vehicle dropped before they reached its stream, as its own records
    /// count them (ArduPilot's `DMS`; 0 for PX4, which counts none): its card has them.
    pub dropped_at_source: u64,
    pub fill: FillState,
    /// What the flight diagnostics found, in log-time order.
    pub findings: Vec<FindingLine>,
    /// The worst finding's severity, if any.
    pub worst_severity: Option<Severity>,
    pub uploads: UploadReport,
    /// Each split's file, for downloads (main column first).
    pub splits: Vec<SplitFile>,
}

/// What the fill from the vehicle's SD log did for a flight.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FillState {
    /// `whole` (the stream lost nothing, and the vehicle dropped nothing at the source),
    /// `filled` (every gap), `partly` (some gaps left), `failed`, `not_filled` (dropouts or
    /// messages the vehicle dropped at the source, no fill yet) or `recording`.
    pub state: &'static str,
    pub gaps_filled: usize,
    pub gaps_unfilled: usize,
    pub records_recovered: u64,
    /// Why the last fill failed, or why gaps were left.
    pub reason: Option<String>,
}

/// A finding of the flight diagnostics, in a line.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FindingLine {
    pub analyzer: String,
    pub severity: Severity,
    pub summary: String,
    /// Log time, µs since the vehicle's boot.
    pub at_us: u64,
}

/// A split's file.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SplitFile {
    /// Its path in the session directory (`split_0000.ulg`, `COLUMN/split_0000.ulg`).
    pub file: String,
    pub size_bytes: u64,
    pub closed: bool,
}

impl FlightRow {
    /// The session in `dir`.
    pub fn read(dir: &Path) -> Result<Self, ReportError> {
        let manifest = manifest_of(dir)?;
        let uploads = UploadReport::of(dir, &manifest)?;
        let first = (manifest.splits.iter())
            .filter_map(|s| s.summary.first_timestamp)
            .min();
        let last = (manifest.splits.iter())
            .filter_map(|s| s.summary.last_timestamp)
            .max();
        let duration_s = match (first, last) {
            (Some(a), Some(b)) => b.saturating_sub(a) as f64 / 1e6,
            _ => 0.0,
        };
        let dropouts_received = manifest.splits.iter().map(|s| s.summary.dropouts).sum();
        // What an ArduPilot dropped before its stream: its card has it, for the fill.
        let dropped_at_source: u64 = (manifest.splits.iter())
            .filter_map(|s| s.summary.dropped_at_source)
            .sum();
        let fills: Vec<_> = manifest.amendments.iter().flat_map(|a| &a.fills).collect();
        let failed = manifest
            .fill
            .as_deref()
            .and_then(|f| f.strip_prefix("failed: "));
        let state = if !manifest.closed {
            "recording"
        } else if failed.is_some() {
            "failed"
        } else if !manifest.unfilled.is_empty() || fills.iter().any(|f| !f.complete) {
            "partly"
        } else if !fills.is_empty() {
            "filled"
        } else if dropouts_received == 0 && dropped_at_source == 0 {
            "whole"
        } else if manifest.fill.as_deref() == Some("done") {
            // Filled, and the card had nothing the stream lacked.
            "filled"
        } else {
            "not_filled"
        };
        let reason = failed
            .map(str::to_owned)
            .or_else(|| manifest.unfilled.first().map(|u| u.reason.clone()));
        let findings: Vec<FindingLine> = (manifest.events.iter())
            .filter(|e| e.source == EventSource::Diagnostic)
            .filter_map(|e| {
                let f = e.finding.as_ref()?;
                Some(FindingLine {
                    analyzer: f.id.as_str().to_owned(),
                    severity: f.severity,
                    summary: f.summary.clone(),
                    at_us: f.timestamp_us,
                })
            })
            .collect();
        Ok(Self {
            id: uploads.session.clone(),
            started_utc: manifest.started_utc.clone(),
            system_id: manifest.system_id,
            component_id: manifest.component_id,
            log_format: manifest.log_format,
            closed: manifest.closed,
            duration_s,
            size_bytes: manifest.all_splits().map(|s| s.summary.bytes).sum(),
            dropouts_received,
            dropout_ms_received: manifest.splits.iter().map(|s| s.summary.dropout_ms).sum(),
            dropped_at_source,
            fill: FillState {
                state,
                gaps_filled: fills.len(),
                gaps_unfilled: manifest.unfilled.len(),
                records_recovered: fills.iter().map(|f| f.records).sum(),
                reason,
            },
            worst_severity: findings.iter().map(|f| f.severity).max(),
            findings,
            splits: manifest
                .all_splits()
                .map(|s| SplitFile {
                    file: s.file.clone(),
                    size_bytes: s.summary.bytes,
                    closed: s.closed,
                })
                .collect(),
            uploads,
        })
    }
}
