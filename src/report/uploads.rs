//! What a session has uploaded, has pending and fails on, its Flight Review page and its
//! tables, from its manifest and its upload journal (`upload.json`): a line of `ulog-recv
//! uploads`, and the bucket's column of the web page.

use std::path::Path;

use crate::report::{ReportError, manifest_of};
use crate::store::files::UPLOADED_MARK;
use crate::store::manifest::Manifest;
use crate::upload::flight_review::MAYBE_TWICE;
use crate::upload::journal::load_journal;
use crate::upload::plan::{FlightReviewRecord, Journal, ObjectRecord};

/// See the module docs.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct UploadReport {
    pub session: String,
    pub closed: bool,
    pub splits_closed: usize,
    pub splits_uploaded: usize,
    pub bytes_uploaded: u64,
    /// A multipart upload under way: the file and the parts sent.
    pub in_progress: Option<String>,
    pub manifest_uploaded: bool,
    /// The Flight Review page, or why Flight Review refused the log.
    pub flight_review: Option<String>,
    /// A doubt about the Flight Review upload: [`MAYBE_TWICE`] when it may be there twice.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flight_review_note: Option<&'static str>,
    /// The flight's Parquet tables (`--upload-tables`): built, uploaded, or why not.
    pub tables: Option<String>,
    /// Why the last attempt failed, while it fails.
    pub failing: Option<String>,
    /// Everything is in the bucket.
    pub complete: bool,
}

/// What the uploads say of an ArduPilot flight's Flight Review upload.
pub const NOT_FOR_FLIGHT_REVIEW: &str =
    "not sent: an ArduPilot flight, and Flight Review reads ULog only";

impl UploadReport {
    /// Reads the session in `dir`.
    pub fn read(dir: &Path) -> Result<Self, ReportError> {
        let manifest = manifest_of(dir)?;
        Self::of(dir, &manifest)
    }

    /// The session in `dir`, whose manifest was read already.
    pub fn of(dir: &Path, manifest: &Manifest) -> Result<Self, ReportError> {
        let journal = load_journal(dir)
            .map_err(|source| ReportError::Journal {
                dir: dir.to_owned(),
                source,
            })?
            .unwrap_or_else(|| Journal::new(String::new()));
        let mut splits_uploaded = 0;
        let mut bytes_uploaded = 0;
        let mut in_progress = None;
        for split in manifest.all_splits().filter(|s| s.closed) {
            match journal.objects.get(&split.file) {
                Some(ObjectRecord::Done { sha256, size, .. })
                    if Some(sha256) == split.sha256.as_ref() =>
                {
                    splits_uploaded += 1;
                    bytes_uploaded += size;
                }
                Some(ObjectRecord::Multipart {
                    parts,
                    size,
                    part_size,
                    ..
                }) => {
                    in_progress = Some(format!(
                        "{}: {} of {} parts",
                        split.file,
                        parts.len(),
                        size.div_ceil(*part_size)
                    ));
                }
                _ => {}
            }
        }
        Ok(Self {
            session: dir
                .file_name()
                .map_or(String::new(), |n| n.to_string_lossy().into_owned()),
            closed: manifest.closed,
            splits_closed: manifest.all_splits().filter(|s| s.closed).count(),
            splits_uploaded,
            bytes_uploaded,
            in_progress,
            manifest_uploaded: journal.manifest_splits > 0 || journal.manifest_final,
            flight_review: journal.flight_review.as_ref().map(|r| match r {
                FlightReviewRecord::Sending => "being sent (or sent with no answer yet)".to_owned(),
                FlightReviewRecord::Done { url, .. } => url.clone(),
                FlightReviewRecord::Refused { status, message } => {
                    format!("refused (HTTP {status}): {message}")
                }
                FlightReviewRecord::NotULog => NOT_FOR_FLIGHT_REVIEW.to_owned(),
            }),
            flight_review_note: matches!(
                journal.flight_review,
                Some(FlightReviewRecord::Done {
                    maybe_twice: true,
                    ..
                })
            )
            .then_some(MAYBE_TWICE),
            tables: journal.tables.as_ref().map(|t| match &t.failed {
                Some(why) => format!("not built: {why}"),
                None => {
                    let up = (t.files.iter())
                        .filter(|f| {
                            matches!(journal.objects.get(&f.file),
                                Some(ObjectRecord::Done { sha256, .. }) if *sha256 == f.sha256)
                        })
                        .count();
                    format!("{up}/{}", t.files.len())
                }
            }),
            failing: journal.failing.clone(),
            complete: dir.join(UPLOADED_MARK).exists(),
        })
    }

    /// The upload's state in a word or a line: `uploaded`, `FAILING: WHY`, `recording`,
    /// `pending`.
    pub fn state(&self) -> String {
        if self.complete {
            "uploaded".to_owned()
        } else if let Some(why) = &self.failing {
            format!("FAILING: {why}")
        } else if !self.closed {
            "recording".to_owned()
        } else {
            "pending".to_owned()
        }
    }
}
