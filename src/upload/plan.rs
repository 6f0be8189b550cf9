//! What a session still needs uploaded, sans-IO: the journal of what went up (kept in the
//! session directory as `upload.json`) and, from it and the session's manifest, the next
//! step.
//!
//! The order: each closed split, in order, as soon as it is closed; after each, the manifest
//! as it is then (so that a vehicle lost mid-flight leaves everything but the open split in
//! the bucket, described); once the session is closed, its final manifest; then the flight to
//! Flight Review. Amendments a fill adds later go up as they come, the manifest after them.
//! Last, when asked for, the flight's Parquet tables: built once the session is closed (and
//! its fill over), each file uploaded, then listed in the manifest, which goes up again; a
//! fill that adds amendments later has them built and uploaded again, under the same keys.
//! A step recorded done is never taken again; a multipart upload in progress keeps its id and
//! the parts already sent, so that a restart resumes it.

use std::collections::BTreeMap;

use crate::store::{Manifest, SplitEntry};

/// The journal's file name in a session directory.
pub const JOURNAL: &str = "upload.json";
/// The journal's format tag.
pub const JOURNAL_FORMAT: &str = "ulog-recv-uploads/1";

/// `upload.json`: what of a session is in object storage and Flight Review.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Journal {
    pub format: String,
    /// The key prefix of the session's objects: `PREFIX/VEHICLE/SESSION`.
    pub prefix: String,
    /// Per file of the session (`split_0000.ulg`, `manifest.json`): what is uploaded.
    #[serde(default)]
    pub objects: BTreeMap<String, ObjectRecord>,
    /// Closed splits the last uploaded manifest listed.
    #[serde(default)]
    pub manifest_splits: usize,
    /// The last uploaded manifest was the closed session's.
    #[serde(default)]
    pub manifest_final: bool,
    /// Amendments the last uploaded manifest listed (a fill adds them after the session
    /// closed).
    #[serde(default)]
    pub manifest_amendments: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flight_review: Option<FlightReviewRecord>,
    /// The flight's Parquet tables, once built; each file's upload is in `objects`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tables: Option<TablesRecord>,
    /// The last failure, while uploads of this session fail (cleared by the next success).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failing: Option<String>,
}

impl Journal {
    /// A journal for a session whose objects go under `prefix`.
    pub fn new(prefix: String) -> Self {
        Self {
            format: JOURNAL_FORMAT.to_string(),
            prefix,
            objects: BTreeMap::new(),
            manifest_splits: 0,
            manifest_final: false,
            manifest_amendments: 0,
            flight_review: None,
            tables: None,
            failing: None,
        }
    }

    /// Flight Review's upload is over: done, refused, or not for it. A flight being sent
    /// (or sent with no answer written down) is not.
    pub fn flight_review_settled(&self) -> bool {
        !matches!(self.flight_review, None | Some(FlightReviewRecord::Sending))
    }

    /// The flight's page on Flight Review, once uploaded.
    pub fn flight_review_url(&self) -> Option<&str> {
        match &self.flight_review {
            Some(FlightReviewRecord::Done { url, .. }) => Some(url),
            _ => None,
        }
    }

    /// The flight's tables are built from `manifest` as it is (its amendments), uploaded and
    /// listed in its manifest, or could not be built.
    pub fn tables_complete(&self, manifest: &Manifest) -> bool {
        match &self.tables {
            None => false,
            Some(t) if t.failed.is_some() => true,
            Some(t) => {
                t.amendments >= manifest.amendments.len()
                    && t.listed
                    && t.files.iter().all(|f| self.has(&f.file, &f.sha256))
            }
        }
    }

    /// The object key of a file of the session.
    pub fn key(&self, file: &str) -> String {
        if self.prefix.is_empty() {
            file.to_string()
        } else {
            format!("{}/{file}", self.prefix)
        }
    }

    /// Every closed split of `manifest` is uploaded, and so is its final manifest.
    pub fn storage_complete(&self, manifest: &Manifest) -> bool {
        manifest.closed
            && self.manifest_final
            && self.manifest_amendments >= manifest.amendments.len()
            && closed_splits(manifest).all(|s| self.is_uploaded(s))
            && manifest
                .amendments
                .iter()
                .all(|a| self.has(&a.file, &a.sha256))
    }

    /// Whether `split` (closed, with its SHA-256) is uploaded with that content.
    fn is_uploaded(&self, split: &SplitEntry) -> bool {
        split
            .sha256
            .as_ref()
            .is_some_and(|sha256| self.has(&split.file, sha256))
    }

    /// Whether `file` is uploaded with the content whose SHA-256 is `sha256`.
    fn has(&self, file: &str, sha256: &str) -> bool {
        matches!(self.objects.get(file), Some(ObjectRecord::Done { sha256: s, .. }) if s == sha256)
    }
}

/// One file's upload.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ObjectRecord {
    /// In the bucket, checked by the server against this SHA-256.
    Done {
        key: String,
        sha256: String,
        size: u64,
    },
    /// A multipart upload under way: its id and, per part in order, S3's id of it once it
    /// is sent (`null` until then: parts complete in any order).
    Multipart {
        key: String,
        sha256: String,
        size: u64,
        upload_id: String,
        part_size: u64,
        parts: Vec<Option<String>>,
    },
}

impl ObjectRecord {
    /// The file's size.
    pub fn size(&self) -> u64 {
        match self {
            ObjectRecord::Done { size, .. } | ObjectRecord::Multipart { size, .. } => *size,
        }
    }
}

/// The flight's upload to Flight Review.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum FlightReviewRecord {
    /// Sent, and no answer written down yet. Flight Review has no way to ask whether it
    /// holds a flight, so a daemon stopped here sends the flight again on its next start.
    Sending,
    /// Uploaded: the log's page. `maybe_twice`: an earlier sending got no answer (the daemon
    /// stopped, or the connection broke, after the flight reached the server), so Flight
    /// Review may hold the flight twice.
    Done {
        url: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        maybe_twice: bool,
    },
    /// The server refused it for good (HTTP 4xx): not tried again.
    Refused { status: u16, message: String },
    /// Not sent: an ArduPilot flight (DataFlash), and Flight Review reads ULog only.
    #[serde(rename = "not_ulog")]
    NotULog,
}

/// The flight's Parquet tables for the fleet.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TablesRecord {
    /// Amendments of the manifest the tables were built with.
    pub amendments: usize,
    /// The files, in the session's [`TABLES_DIR`](crate::upload::tables::TABLES_DIR).
    pub files: Vec<TableEntry>,
    /// The manifest lists the tables' keys.
    #[serde(default)]
    pub listed: bool,
    /// Why the flight could not be exported: not tried again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
}

/// One file to upload (a table, or a split): its path in the session, its key in the bucket,
/// its SHA-256.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TableEntry {
    pub file: String,
    pub key: String,
    pub sha256: String,
}

/// What to do next for a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Upload this closed split or amendment (its SHA-256 from the manifest).
    Split { file: String, sha256: String },
    /// Upload the manifest as it is now; `closed_splits` of its splits are closed (and
    /// uploaded), `last` when the session is closed, with `amendments` amendments.
    Manifest {
        closed_splits: usize,
        last: bool,
        amendments: usize,
    },
    /// Send the whole flight to Flight Review.
    FlightReview,
    /// Build the flight's tables (again: the manifest has amendments they lack).
    BuildTables,
    /// Upload one table file to its key.
    Table(TableEntry),
    /// List the uploaded tables in the manifest (which then goes up again).
    ListTables,
}

/// The closed splits of a session, in order: the main column's before any other column's
/// (the flight's overview leaves the vehicle first; high-rate columns follow).
fn closed_splits(manifest: &Manifest) -> impl Iterator<Item = &SplitEntry> {
    manifest
        .all_splits()
        .filter(|s| s.closed && s.sha256.is_some())
}

/// The next step for a session with `manifest` and `journal`; `None` when everything the
/// session has so far is where it goes. `flight_review`: whether a Flight Review server is
/// configured; `tables`: whether the flight's tables are to be built and uploaded now (they
/// come last, once the session is closed).
pub fn next_step(
    manifest: &Manifest,
    journal: &Journal,
    flight_review: bool,
    tables: bool,
) -> Option<Step> {
    let mut closed = 0;
    for split in closed_splits(manifest) {
        if !journal.is_uploaded(split) {
            return Some(Step::Split {
                file: split.file.clone(),
                sha256: split.sha256.clone().expect("closed splits have one"),
            });
        }
        closed += 1;
    }
    for amendment in &manifest.amendments {
        if !journal.has(&amendment.file, &amendment.sha256) {
            return Some(Step::Split {
                file: amendment.file.clone(),
                sha256: amendment.sha256.clone(),
            });
        }
    }
    let amendments = manifest.amendments.len();
    if closed > journal.manifest_splits
        || (manifest.closed && !journal.manifest_final)
        || amendments > journal.manifest_amendments
    {
        return Some(Step::Manifest {
            closed_splits: closed,
            last: manifest.closed,
            amendments,
        });
    }
    if flight_review && manifest.closed && closed > 0 && !journal.flight_review_settled() {
        return Some(Step::FlightReview);
    }
    if tables && manifest.closed && closed > 0 && !journal.tables_complete(manifest) {
        let Some(built) = journal
            .tables
            .as_ref()
            .filter(|t| t.amendments >= amendments)
        else {
            return Some(Step::BuildTables);
        };
        if let Some(file) = (built.files.iter()).find(|f| !journal.has(&f.file, &f.sha256)) {
            return Some(Step::Table(file.clone()));
        }
        return Some(Step::ListTables);
    }
    None
}

/// The parts of a file of `size` bytes cut in parts of `part_size`: (offset, length) each.
pub fn parts(size: u64, part_size: u64) -> Vec<(u64, u64)> {
    let part_size = part_size.max(1);
    (0..size.div_ceil(part_size))
        .map(|i| {
            let offset = i * part_size;
            (offset, part_size.min(size - offset))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(splits: &[(bool, &str)], closed: bool) -> Manifest {
        Manifest {
            closed,
            splits: splits
                .iter()
                .enumerate()
                .map(|(i, (c, sha))| SplitEntry {
                    file: format!("split_{i:04}.ulg"),
                    closed: *c,
                    sha256: c.then(|| sha.to_string()),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    fn done(j: &mut Journal, file: &str, sha: &str) {
        j.objects.insert(
            file.into(),
            ObjectRecord::Done {
                key: j.key(file),
                sha256: sha.into(),
                size: 1,
            },
        );
    }

    #[test]
    fn splits_go_in_order_each_followed_by_the_manifest_and_the_final_manifest_last() {
        let mut j = Journal::new("fleet/v1/s1".into());
        let m = manifest(&[(true, "a"), (true, "b"), (false, "")], false);
        assert_eq!(
            next_step(&m, &j, true, false),
            Some(Step::Split {
                file: "split_0000.ulg".into(),
                sha256: "a".into()
            })
        );
        done(&mut j, "split_0000.ulg", "a");
        assert!(
            matches!(next_step(&m, &j, true, false), Some(Step::Split { file, .. }) if file == "split_0001.ulg")
        );
        done(&mut j, "split_0001.ulg", "b");
        assert_eq!(
            next_step(&m, &j, true, false),
            Some(Step::Manifest {
                closed_splits: 2,
                last: false,
                amendments: 0
            })
        );
        j.manifest_splits = 2;
        // The open split is not uploaded, nor is the flight sent before the session closes.
        assert_eq!(next_step(&m, &j, true, false), None);
        let m = manifest(&[(true, "a"), (true, "b"), (true, "c")], true);
        done(&mut j, "split_0002.ulg", "c");
        assert_eq!(
            next_step(&m, &j, true, false),
            Some(Step::Manifest {
                closed_splits: 3,
                last: true,
                amendments: 0
            })
        );
        j.manifest_splits = 3;
        j.manifest_final = true;
        assert!(j.storage_complete(&m));
        assert_eq!(next_step(&m, &j, true, false), Some(Step::FlightReview));
        assert_eq!(next_step(&m, &j, false, false), None);
        // Sent with no answer written down: sent again.
        j.flight_review = Some(FlightReviewRecord::Sending);
        assert!(!j.flight_review_settled());
        assert_eq!(next_step(&m, &j, true, false), Some(Step::FlightReview));
        j.flight_review = Some(FlightReviewRecord::Done {
            url: "u".into(),
            maybe_twice: false,
        });
        assert_eq!(next_step(&m, &j, true, false), None);
        assert_eq!(j.key("manifest.json"), "fleet/v1/s1/manifest.json");
    }

    #[test]
    fn the_main_column_goes_first_and_a_column_split_keeps_its_folder_in_the_key() {
        let mut j = Journal::new("fleet/v1/s1".into());
        let mut m = manifest(&[(true, "a"), (false, "")], false);
        m.columns.push(crate::store::files::ColumnEntry {
            name: "imu".into(),
            patterns: vec!["sensor_*".into()],
            splits: vec![SplitEntry {
                file: "imu/split_0000.ulg".into(),
                closed: true,
                sha256: Some("i".into()),
                ..Default::default()
            }],
            event_buffer: None,
        });
        let next = |m: &Manifest, j: &Journal| match next_step(m, j, false, false) {
            Some(Step::Split { file, .. }) => file,
            other => panic!("{other:?}"),
        };
        assert_eq!(next(&m, &j), "split_0000.ulg");
        done(&mut j, "split_0000.ulg", "a");
        assert_eq!(next(&m, &j), "imu/split_0000.ulg");
        // A main split that closes meanwhile goes before the column's next one.
        m.splits[1].closed = true;
        m.splits[1].sha256 = Some("b".into());
        m.columns[0].splits.push(SplitEntry {
            file: "imu/split_0001.ulg".into(),
            closed: true,
            sha256: Some("j".into()),
            ..Default::default()
        });
        assert_eq!(next(&m, &j), "split_0001.ulg");
        done(&mut j, "split_0001.ulg", "b");
        assert_eq!(next(&m, &j), "imu/split_0000.ulg");
        done(&mut j, "imu/split_0000.ulg", "i");
        done(&mut j, "imu/split_0001.ulg", "j");
        assert_eq!(
            next_step(&m, &j, false, false),
            Some(Step::Manifest {
                closed_splits: 4,
                last: false,
                amendments: 0
            })
        );
        assert_eq!(
            j.key("imu/split_0000.ulg"),
            "fleet/v1/s1/imu/split_0000.ulg"
        );
    }

    #[test]
    fn amendments_a_fill_adds_later_go_up_then_the_manifest_again() {
        let mut j = Journal::new("p".into());
        let mut m = manifest(&[(true, "a")], true);
        done(&mut j, "split_0000.ulg", "a");
        j.manifest_splits = 1;
        j.manifest_final = true;
        assert!(j.storage_complete(&m));
        m.amendments.push(crate::store::amend::AmendmentEntry {
            file: "amend_0000.ulg".into(),
            sha256: "x".into(),
            ..Default::default()
        });
        assert!(!j.storage_complete(&m));
        assert_eq!(
            next_step(&m, &j, false, false),
            Some(Step::Split {
                file: "amend_0000.ulg".into(),
                sha256: "x".into()
            })
        );
        done(&mut j, "amend_0000.ulg", "x");
        assert_eq!(
            next_step(&m, &j, false, false),
            Some(Step::Manifest {
                closed_splits: 1,
                last: true,
                amendments: 1
            })
        );
        j.manifest_amendments = 1;
        assert_eq!(next_step(&m, &j, false, false), None);
        assert!(j.storage_complete(&m));
    }

    #[test]
    fn a_split_whose_content_changed_goes_again_and_a_multipart_in_progress_is_not_done() {
        let mut j = Journal::new(String::new());
        let m = manifest(&[(true, "new")], true);
        done(&mut j, "split_0000.ulg", "old");
        assert!(
            matches!(next_step(&m, &j, false, false), Some(Step::Split { sha256, .. }) if sha256 == "new")
        );
        j.objects.insert(
            "split_0000.ulg".into(),
            ObjectRecord::Multipart {
                key: "split_0000.ulg".into(),
                sha256: "new".into(),
                size: 10,
                upload_id: "id".into(),
                part_size: 5,
                parts: vec![Some("p1".into()), None],
            },
        );
        assert!(matches!(
            next_step(&m, &j, false, false),
            Some(Step::Split { .. })
        ));
        assert!(!j.storage_complete(&m));
    }

    #[test]
    fn a_refused_flight_is_not_sent_again_and_the_journal_reads_back() {
        let mut j = Journal::new("p".into());
        let m = manifest(&[(true, "a")], true);
        done(&mut j, "split_0000.ulg", "a");
        j.manifest_splits = 1;
        j.manifest_final = true;
        j.flight_review = Some(FlightReviewRecord::Refused {
            status: 400,
            message: "not a ULog".into(),
        });
        assert_eq!(next_step(&m, &j, true, false), None);
        let text = serde_json::to_string(&j).unwrap();
        assert_eq!(serde_json::from_str::<Journal>(&text).unwrap(), j);
    }

    #[test]
    fn tables_come_last_once_closed_then_are_listed_and_built_again_after_a_fill() {
        let mut j = Journal::new("p".into());
        let mut m = manifest(&[(true, "a"), (false, "")], false);
        done(&mut j, "split_0000.ulg", "a");
        j.manifest_splits = 1;
        // An open session's tables wait.
        assert_eq!(next_step(&m, &j, true, true), None);
        m = manifest(&[(true, "a"), (true, "b")], true);
        done(&mut j, "split_0001.ulg", "b");
        j.manifest_splits = 2;
        j.manifest_final = true;
        // Flight Review before the tables; without tables wanted, nothing after it.
        assert_eq!(next_step(&m, &j, true, true), Some(Step::FlightReview));
        j.flight_review = Some(FlightReviewRecord::Done {
            url: "u".into(),
            maybe_twice: false,
        });
        assert_eq!(next_step(&m, &j, true, false), None);
        assert_eq!(next_step(&m, &j, true, true), Some(Step::BuildTables));
        let entry = |n: &str, sha: &str| TableEntry {
            file: format!("tables.d/{n}"),
            key: format!("fleet/{n}"),
            sha256: sha.into(),
        };
        j.tables = Some(TablesRecord {
            amendments: 0,
            files: vec![entry("t1", "1"), entry("t2", "2")],
            ..Default::default()
        });
        assert_eq!(
            next_step(&m, &j, true, true),
            Some(Step::Table(entry("t1", "1")))
        );
        done(&mut j, "tables.d/t1", "1");
        assert_eq!(
            next_step(&m, &j, true, true),
            Some(Step::Table(entry("t2", "2")))
        );
        done(&mut j, "tables.d/t2", "2");
        assert!(!j.tables_complete(&m));
        assert_eq!(next_step(&m, &j, true, true), Some(Step::ListTables));
        // Listing them makes the manifest go up again.
        j.tables.as_mut().unwrap().listed = true;
        j.manifest_final = false;
        assert!(matches!(
            next_step(&m, &j, true, true),
            Some(Step::Manifest { last: true, .. })
        ));
        j.manifest_final = true;
        assert_eq!(next_step(&m, &j, true, true), None);
        assert!(j.tables_complete(&m));
        // A fill's amendment: up, the manifest, then the tables built again.
        m.amendments.push(crate::store::amend::AmendmentEntry {
            file: "amend_0000.ulg".into(),
            sha256: "x".into(),
            ..Default::default()
        });
        done(&mut j, "amend_0000.ulg", "x");
        j.manifest_amendments = 1;
        assert_eq!(next_step(&m, &j, true, true), Some(Step::BuildTables));
        // A flight that cannot be exported is not tried again.
        j.tables = Some(TablesRecord {
            failed: Some("not a ULog".into()),
            ..Default::default()
        });
        assert_eq!(next_step(&m, &j, true, true), None);
    }

    #[test]
    fn a_flight_review_record_reads_as_written_and_as_journals_without_the_doubt_were() {
        let sending = serde_json::to_string(&FlightReviewRecord::Sending).unwrap();
        assert_eq!(sending, r#"{"state":"sending"}"#);
        let doubted = FlightReviewRecord::Done {
            url: "u".into(),
            maybe_twice: true,
        };
        let text = serde_json::to_string(&doubted).unwrap();
        assert_eq!(
            serde_json::from_str::<FlightReviewRecord>(&text).unwrap(),
            doubted
        );
        let old: FlightReviewRecord =
            serde_json::from_str(r#"{"state":"done","url":"u"}"#).unwrap();
        assert_eq!(
            old,
            FlightReviewRecord::Done {
                url: "u".into(),
                maybe_twice: false
            }
        );
        assert_eq!(
            serde_json::to_string(&old).unwrap(),
            r#"{"state":"done","url":"u"}"#
        );
    }

    #[test]
    fn parts_cover_the_file_exactly() {
        assert_eq!(parts(0, 5), vec![]);
        assert_eq!(parts(5, 5), vec![(0, 5)]);
        assert_eq!(parts(12, 5), vec![(0, 5), (5, 5), (10, 2)]);
    }
}
