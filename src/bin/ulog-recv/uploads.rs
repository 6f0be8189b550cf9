//! `ulog-recv upload SESSION` (one session by hand, the daemon's way) and `ulog-recv uploads`
//! (what each session has uploaded, has pending, fails on, its Flight Review page and its
//! tables).

use std::path::Path;
use std::time::Instant;

use ulog_recv::report::uploads::UploadReport;
use ulog_recv::store::files::{list_sessions, read_manifest};
use ulog_recv::upload::uploader::upload_session;

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
    if let Some(url) = journal.flight_review_url() {
        println!("{url}");
    }
    eprintln!("{}: uploaded", session.display());
    Ok(())
}

/// `ulog-recv uploads`.
pub(crate) fn uploads(log_dir: &Path, json: bool) -> anyhow::Result<()> {
    let sessions =
        list_sessions(log_dir).map_err(|e| anyhow::anyhow!("{}: {e}", log_dir.display()))?;
    for session in sessions {
        let r = match UploadReport::read(&session) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("{e}");
                continue;
            }
        };
        if json {
            println!("{}", serde_json::to_string(&r)?);
            continue;
        }
        let state = r.state();
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
                .map_or(String::new(), |u| match r.flight_review_note {
                    Some(note) => format!(", Flight Review: {u} ({note})"),
                    None => format!(", Flight Review: {u}"),
                }),
            r.tables
                .as_ref()
                .map_or(String::new(), |t| format!(", tables {t}")),
        );
    }
    Ok(())
}
