//! `ulog-recv upload SESSION` (one session by hand, the daemon's way) and `ulog-recv uploads`
//! (what each session has uploaded, has pending, fails on, its Flight Review page and its
//! tables).

use std::path::Path;
use std::time::Instant;

use ulog_recv::store::files::{UPLOADED_MARK, list_sessions, read_manifest};
use ulog_recv::upload::plan::{FlightReviewRecord, Journal, ObjectRecord};
use ulog_recv::upload::uploader::{load_journal, upload_session};

use crate::args::UploadArgs;

/// `ulog-recv upload SESSION`: every step on a line of its own (with the time it took), then
/// the Flight Review page if there is one.
pub(crate) async fn upload(session: &Path, args: &UploadArgs) -> anyhow::Result<()> {
    ulog_recv::store::input::session_input(session, "upload")?;
    let config = args.config()?;
    if !config.is_on() {
        anyhow::bail!("say where to: --upload-to s3://BUCKET/PREFIX and/or --flight-review URL");
    }
    read_manifest(session)
        .map_err(|e| anyhow::anyhow!("{}: not a session directory ({e})", session.display()))?;
    let mut last = Instant::now();
    let journal = upload_session(&config, session, |done| {
        eprintln!("  {done}  ({:.1} s)", last.elapsed().as_secs_f64());
        last = Instant::now();
    })
    .await?;
    if let Some(FlightReviewRecord::Done { url }) = &journal.flight_review {
        println!("{url}");
    }
    eprintln!("{}: uploaded", session.display());
    Ok(())
}

/// One session's upload state, as `uploads` reports it.
#[derive(Debug, serde::Serialize)]
struct Report {
    session: String,
    closed: bool,
    splits_closed: usize,
    splits_uploaded: usize,
    bytes_uploaded: u64,
    /// A multipart upload under way: the file and the parts sent.
    in_progress: Option<String>,
    manifest_uploaded: bool,
    flight_review: Option<String>,
    /// The flight's Parquet tables (`--upload-tables`): built, uploaded, or why not.
    tables: Option<String>,
    failing: Option<String>,
    complete: bool,
}

fn report(session: &Path) -> anyhow::Result<Report> {
    let manifest = read_manifest(session)?;
    let journal = load_journal(session)?.unwrap_or_else(|| Journal::new(String::new()));
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
    Ok(Report {
        session: session
            .file_name()
            .map_or(String::new(), |n| n.to_string_lossy().into_owned()),
        closed: manifest.closed,
        splits_closed: manifest.all_splits().filter(|s| s.closed).count(),
        splits_uploaded,
        bytes_uploaded,
        in_progress,
        manifest_uploaded: journal.manifest_splits > 0 || journal.manifest_final,
        flight_review: journal.flight_review.as_ref().map(|r| match r {
            FlightReviewRecord::Done { url } => url.clone(),
            FlightReviewRecord::Refused { status, message } => {
                format!("refused (HTTP {status}): {message}")
            }
        }),
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
        complete: session.join(UPLOADED_MARK).exists(),
    })
}

/// `ulog-recv uploads`.
pub(crate) fn uploads(log_dir: &Path, json: bool) -> anyhow::Result<()> {
    let sessions =
        list_sessions(log_dir).map_err(|e| anyhow::anyhow!("{}: {e}", log_dir.display()))?;
    for session in sessions {
        let r = match report(&session) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("{}: {e}", session.display());
                continue;
            }
        };
        if json {
            println!("{}", serde_json::to_string(&r)?);
            continue;
        }
        let state = if r.complete {
            "uploaded".to_string()
        } else if let Some(why) = &r.failing {
            format!("FAILING: {why}")
        } else if !r.closed {
            "recording".to_string()
        } else {
            "pending".to_string()
        };
        println!(
            "{}  {state}  splits {}/{} ({:.1} MB){}{}{}{}",
            r.session,
            r.splits_uploaded,
            r.splits_closed,
            r.bytes_uploaded as f64 / 1e6,
            if r.manifest_uploaded {
                ", manifest"
            } else {
                ""
            },
            r.in_progress
                .as_ref()
                .map_or(String::new(), |p| format!(", uploading {p}")),
            r.flight_review
                .as_ref()
                .map_or(String::new(), |u| format!(", Flight Review: {u}")),
            r.tables
                .as_ref()
                .map_or(String::new(), |t| format!(", tables {t}")),
        );
    }
    Ok(())
}
