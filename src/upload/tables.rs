//! A session's flight as the fleet's Parquet tables (`--upload-tables`): exported whole
//! (every column joined, amendments in) into the session's `tables.d/` folder, in the dataset's
//! layout ([`crate::export::dataset`]), each file then uploaded to its key under the bucket's
//! prefix, so that every vehicle's tables land in one dataset:
//! `PREFIX/parquet/v1/TOPIC/date=…/vehicle=…/SESSION.parquet`.
//!
//! The build is deterministic: built again (after a crash, or a fill's amendments), the same
//! flight gives the same files under the same keys, so an object is overwritten, never
//! doubled.

use std::os::unix::fs::DirBuilderExt;
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::export::dataset::{FlightFacts, TableWritten, export_tables};
use crate::export::{ExportError, ExportOptions};
use crate::store::files::read_manifest;
use crate::store::manifest::hex;
use crate::upload::plan::{Journal, ObjectRecord, TableEntry, TablesRecord};
use crate::upload::s3::{Bucket, UploadError};

/// The folder of a session the tables are built in: a name no column can take (column names
/// have no `.`), since each build starts by removing it.
pub const TABLES_DIR: &str = "tables.d";

/// Why a session's tables could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TablesError {
    /// The flight cannot be exported: building again will not help.
    #[error("the flight cannot be exported as tables: {0}")]
    Export(ExportError),
    /// The disk failed (full, read-only): worth another try.
    #[error("cannot write the tables in {path}: {source}")]
    Disk {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

impl TablesError {
    /// Whether another try may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, TablesError::Disk { .. })
    }
}

impl From<ExportError> for TablesError {
    fn from(e: ExportError) -> Self {
        match e {
            ExportError::Write(source) => TablesError::Disk {
                path: TABLES_DIR.into(),
                source,
            },
            other => TablesError::Export(other),
        }
    }
}

/// What the receiver knows of the flight in `input` beyond its log, for the `flights` table:
/// its session's manifest, and the keys and Flight Review page its upload `journal` records.
/// Nothing for a `.ulg` that is not a session.
pub fn flight_facts(input: &Path, journal: Option<&Journal>) -> FlightFacts {
    let Ok(manifest) = read_manifest(input) else {
        return FlightFacts::default();
    };
    let mut facts = FlightFacts::from_manifest(&manifest);
    if let Some(journal) = journal {
        facts.ulg_keys = (journal.objects.iter())
            .filter(|(file, _)| file.ends_with(".ulg"))
            .filter_map(|(_, record)| match record {
                ObjectRecord::Done { key, .. } => Some(key.clone()),
                ObjectRecord::Multipart { .. } => None,
            })
            .collect();
        facts.flight_review_url = journal.flight_review_url().map(str::to_owned);
    }
    facts
}

/// Exports the flight in `input` (a `.ulg` or a session) as `options` select under `dir`;
/// each table written, with the SHA-256 of its file.
fn write_tables(
    input: &Path,
    options: &ExportOptions,
    facts: &FlightFacts,
    dir: &Path,
) -> Result<Vec<(TableWritten, String)>, TablesError> {
    let written = export_tables(input, options, facts, dir)?;
    written
        .into_iter()
        .map(|table| {
            let path = dir.join(&table.key);
            let bytes =
                std::fs::read(&path).map_err(|source| TablesError::Disk { path, source })?;
            Ok((table, hex(&Sha256::digest(&bytes))))
        })
        .collect()
}

/// `key` under the bucket's `prefix`.
fn under(prefix: &str, key: String) -> String {
    match prefix {
        "" => key,
        prefix => format!("{prefix}/{key}"),
    }
}

/// Builds the tables of `session` afresh in its [`TABLES_DIR`] (what an earlier build left is
/// removed first), each file keyed `bucket_prefix/` + its dataset key; `journal` is the
/// session's, for what `flights` says of its uploads.
pub fn build_tables(
    session: &Path,
    bucket_prefix: &str,
    journal: &Journal,
) -> Result<TablesRecord, TablesError> {
    let dir = session.join(TABLES_DIR);
    let disk = |source| TablesError::Disk {
        path: dir.clone(),
        source,
    };
    match std::fs::remove_dir_all(&dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(disk(e)),
        _ => {}
    }
    let manifest = read_manifest(session).map_err(disk)?;
    let facts = flight_facts(session, Some(journal));
    let written = write_tables(session, &ExportOptions::default(), &facts, &dir)?;
    let files = written
        .into_iter()
        .map(|(table, sha256)| TableEntry {
            file: format!("{TABLES_DIR}/{}", table.key),
            key: under(bucket_prefix, table.key),
            sha256,
        })
        .collect();
    Ok(TablesRecord {
        amendments: manifest.amendments.len(),
        files,
        listed: false,
        failed: None,
    })
}

/// Exports the flight in `input` (a `.ulg` or a session) as the dataset's tables into
/// `bucket` (`export --dataset s3://BUCKET/PREFIX`): built in `staging` (a private folder,
/// removed after), then each file uploaded to the bucket's prefix + its key, as the
/// uploader does. The keys are deterministic: exported again, the same objects are replaced.
/// Returns the keys and rows of each table. `facts`: what `flights` says beyond the log.
pub async fn export_to_bucket(
    input: &Path,
    options: &ExportOptions,
    facts: &FlightFacts,
    bucket: &Bucket,
    staging: &Path,
) -> Result<Vec<(String, u64)>, BucketExportError> {
    let disk = |source| {
        BucketExportError::Tables(TablesError::Disk {
            path: staging.to_owned(),
            source,
        })
    };
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(staging)
        .map_err(disk)?;
    let result = async {
        let mut keys = Vec::new();
        for (table, sha256) in write_tables(input, options, facts, staging)? {
            let path = staging.join(&table.key);
            let key = under(bucket.prefix(), table.key);
            let no_pace = |_, _| std::future::ready(());
            bucket
                .upload_file(&path, &key, &sha256, None, no_pace, |_| Ok(()))
                .await?;
            keys.push((key, table.rows));
        }
        Ok(keys)
    }
    .await;
    let _ = std::fs::remove_dir_all(staging);
    result
}

/// Why an export into a bucket failed.
#[derive(Debug, thiserror::Error)]
pub enum BucketExportError {
    #[error(transparent)]
    Tables(#[from] TablesError),
    #[error(transparent)]
    Upload(#[from] UploadError),
}
