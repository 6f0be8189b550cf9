//! The manifest of a session (`manifest.json`: its columns, splits, amendments) and the
//! power-safe way every file of the store is replaced: a temporary file, synced, renamed over
//! the old one, the directory synced.

use crate::autopilot::LogFormat;
use std::fs::File;
use std::io::{self, Write};
use std::path::Path;

use crate::diagnose::Finding;
use crate::store::amend::{AmendmentEntry, UnfilledGap};
use crate::store::events::{EventRecord, EventSource, MAX_LISTED_EVENTS};
use crate::store::fsync;
use crate::store::splitter::SplitSummary;

/// The manifest's file name in a session directory.
pub const MANIFEST: &str = "manifest.json";
/// Identifies the manifest's format.
pub const MANIFEST_FORMAT: &str = "ulog-recv-manifest/1";

/// `manifest.json`: what a log session holds.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Manifest {
    pub format: String,
    pub system_id: u8,
    pub component_id: u8,
    /// UTC start, RFC 3339.
    pub started_utc: String,
    /// Log start (the first header's timestamp), microseconds since the vehicle's boot.
    pub log_start_us: Option<u64>,
    /// The session is over (its last split is closed).
    pub closed: bool,
    /// The format of its splits: ULog (`.ulg`, PX4) unless it says DataFlash (`.bin`,
    /// ArduPilot).
    #[serde(default, skip_serializing_if = "is_ulog")]
    pub log_format: LogFormat,
    /// The chunks the link lost after the stream's last sample (its last dropout had no
    /// sample after it: the link went, and came back for the STOP's post-flight records),
    /// as the receiver counted them by their sequence numbers; the fill reads that many
    /// chunks' worth of the SD log for them, not the SD log to its end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_lost_chunks: Option<u64>,
    /// The machine's boot the session was written in ([`crate::store::files::this_boot`]):
    /// the repair of a session a crash left open in the same boot trusts the page cache to
    /// have kept every write; after another boot, a power cut may have torn its splits' ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    /// The main column's splits (every topic when there are no other columns).
    pub splits: Vec<SplitEntry>,
    /// The other columns: their topics and splits.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub columns: Vec<ColumnEntry>,
    /// Records recovered from the vehicle's SD log ([`crate::store::amend`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub amendments: Vec<AmendmentEntry>,
    /// Dropouts the last fill could not fill, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unfilled: Vec<UnfilledGap>,
    /// How the last fill ended: `done`, or `failed: WHY`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fill: Option<String>,
    /// Events, in the order they came ([`crate::store::events`]); at most
    /// [`MAX_LISTED_EVENTS`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<EventRecord>,
    /// Events past that many: their windows were written, they are not listed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub events_unlisted: u64,
    /// The flight diagnostics run on the log: which, and what they could not see (their
    /// findings are among `events`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnostics: Option<DiagnosticsEntry>,
    /// The keys of the flight's Parquet tables in the bucket, once uploaded
    /// (`--upload-tables`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tables: Vec<String>,
}

impl Manifest {
    /// Enters the findings of the flight diagnostics made again on the whole flight (after a
    /// fill closed gaps), in place of those listed: a finding listed already keeps its event
    /// (and the windows it opened), the others are entered with none (the buffers' samples
    /// around them are gone); every event stays in log-time order of its moment.
    pub fn replace_findings(&mut self, findings: &[Finding], blind: &[[u64; 2]]) {
        let (mut listed, mut events): (Vec<EventRecord>, Vec<EventRecord>) =
            std::mem::take(&mut self.events)
                .into_iter()
                .partition(|e| e.source == EventSource::Diagnostic);
        for f in findings {
            let same = listed.iter().position(|e| e.finding.as_ref() == Some(f));
            events.push(match same {
                Some(k) => listed.swap_remove(k),
                None => EventRecord::of_finding(f),
            });
        }
        events.sort_by_key(|e| e.at_us);
        events.truncate(MAX_LISTED_EVENTS);
        self.events = events;
        if let Some(d) = &mut self.diagnostics {
            d.blind = blind.to_vec();
            d.after_fill = true;
        }
    }
}

/// What the manifest says of the flight diagnostics.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DiagnosticsEntry {
    /// The analyzers run: `all`, or their ids.
    pub analyzers: String,
    /// Log time they did not see (the log's dropouts), `[from, to]` µs each: nothing was
    /// made of what happened there.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blind: Vec<[u64; 2]>,
    /// The findings were made again on the whole flight after a fill closed gaps.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub after_fill: bool,
}

/// A column besides the main one in the manifest.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ColumnEntry {
    pub name: String,
    pub patterns: Vec<String>,
    /// Its splits; their files are `NAME/split_NNNN.ulg`.
    pub splits: Vec<SplitEntry>,
    /// An event buffer: its samples are only those of its windows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_buffer: Option<BufferEntry>,
}

/// What the manifest says of an event buffer.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BufferEntry {
    pub before_us: u64,
    pub after_us: u64,
    /// The windows written, merged, by start: `[from, to]` µs of log time.
    pub windows: Vec<[u64; 2]>,
    /// Samples the memory bound dropped before their time was up (a window opened then
    /// lacks them).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dropped_for_memory: u64,
}

fn is_ulog(f: &LogFormat) -> bool {
    *f == LogFormat::ULog
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Manifest {
    /// The splits of column `k`: 0 the main column, `k` the `k`th of [`Manifest::columns`].
    pub fn column_splits(&self, k: usize) -> &[SplitEntry] {
        match k {
            0 => &self.splits,
            k => self.columns.get(k - 1).map_or(&[], |c| &c.splits),
        }
    }

    pub(crate) fn column_splits_mut(&mut self, k: usize) -> Option<&mut Vec<SplitEntry>> {
        match k {
            0 => Some(&mut self.splits),
            k => self.columns.get_mut(k - 1).map(|c| &mut c.splits),
        }
    }

    /// The splits of the column called `name` (`main`: the session's own).
    pub fn splits_of(&self, name: &str) -> Option<&[SplitEntry]> {
        if name == crate::store::columns::MAIN {
            return Some(&self.splits);
        }
        self.columns
            .iter()
            .find(|c| c.name == name)
            .map(|c| c.splits.as_slice())
    }

    /// The column names, the main column first.
    pub fn column_names(&self) -> impl Iterator<Item = &str> {
        std::iter::once(crate::store::columns::MAIN)
            .chain(self.columns.iter().map(|c| c.name.as_str()))
    }

    /// Every split of every column: the main column's first, then each column's in order.
    pub fn all_splits(&self) -> impl Iterator<Item = &SplitEntry> {
        self.splits
            .iter()
            .chain(self.columns.iter().flat_map(|c| &c.splits))
    }
}

/// One split in the manifest.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SplitEntry {
    pub file: String,
    pub closed: bool,
    /// Hex SHA-256 of the file, once closed.
    pub sha256: Option<String>,
    #[serde(flatten)]
    pub summary: SplitSummary,
}

/// Writes `manifest.json` atomically and durably: a temporary file, synced, renamed over the
/// old one, and the directory synced.
pub fn write_manifest(dir: &Path, manifest: &Manifest) -> io::Result<()> {
    replace_manifest(dir, manifest)?;
    fsync::dir(dir)
}

/// Changes a closed session's manifest by `change`, read and written again under an exclusive
/// lock on the session's directory (`flock`), so that two processes changing it at once (the
/// daemon's uploader listing the tables, a `ulog-recv fill` adding amendments) each keep the
/// other's change; returns the manifest as written. The lock is the kernel's: it goes with
/// the process, whatever its end.
pub fn update_manifest(dir: &Path, change: impl FnOnce(&mut Manifest)) -> io::Result<Manifest> {
    let locked = File::open(dir)?;
    rustix::fs::flock(&locked, rustix::fs::FlockOperation::LockExclusive)?;
    let mut manifest = read_manifest(dir)?;
    change(&mut manifest);
    write_manifest(dir, &manifest)?;
    Ok(manifest)
}

/// Writes `manifest.json` atomically: a temporary file, synced (so that the name never points
/// at a file a power cut emptied), renamed over the old one. The directory is the caller's to
/// sync.
pub(crate) fn replace_manifest(dir: &Path, manifest: &Manifest) -> io::Result<()> {
    let mut text = serde_json::to_vec_pretty(manifest).map_err(io::Error::other)?;
    text.push(b'\n');
    replace_file(dir, MANIFEST, &text)
}

/// Replaces `dir/name` with `bytes` atomically: a temporary file, synced (so that the name
/// never points at a file a power cut emptied), renamed over the old one. The directory is
/// the caller's to sync.
fn replace_file(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = File::create(&tmp)?;
    f.write_all(bytes)?;
    fsync::file(&f)?;
    std::fs::rename(&tmp, dir.join(name))
}

/// Writes `dir/name` atomically and durably (a temporary file, synced, renamed over the old
/// one, the directory synced): after a power cut it is the old file or the new, whole.
pub fn write_file_durably(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    replace_file(dir, name, bytes)?;
    fsync::dir(dir)
}

/// Reads a session's manifest.
pub fn read_manifest(dir: &Path) -> io::Result<Manifest> {
    let bytes = std::fs::read(dir.join(MANIFEST))?;
    serde_json::from_slice(&bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Lower-case hex digits of `bytes` (how SHA-256 sums are written).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_made_at_once_from_two_threads_are_all_kept() {
        let dir = std::env::temp_dir().join(format!("ulog-recv-manifest-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        write_manifest(&dir, &Manifest::default()).unwrap();
        std::thread::scope(|scope| {
            for who in ["uploader", "fill"] {
                let dir = &dir;
                scope.spawn(move || {
                    for k in 0..50 {
                        update_manifest(dir, |m| m.tables.push(format!("{who}-{k}"))).unwrap();
                    }
                });
            }
        });
        let mut tables = read_manifest(&dir).unwrap().tables;
        assert_eq!(tables.len(), 100, "a change was lost: {tables:?}");
        tables.sort();
        tables.dedup();
        assert_eq!(tables.len(), 100);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
