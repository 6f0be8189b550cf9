//! The vehicle's SD card from the page: its logs listed (which of them a flight here was
//! filled from), and one fetched whole onto the companion as `ulog-recv fetch` fetches it
//! (resumable from its `.part`, checked against the vehicle's CRC-32), its progress pushed as
//! `sd_fetch` events, then downloaded from the companion. All of it goes through the
//! daemon's own session on the stream's link, taking turns with the fill
//! ([`SharedFiles`](crate::shell::vehicle_files::SharedFiles)), on the ground only.

use std::path::{Path as FsPath, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;

use crate::export::dataset::key_safe;
use crate::shell::vehicle_files::{FilesError, LOG_DIRS, VehicleFiles, VehicleLog};
use crate::store::manifest::read_manifest;
use crate::web::download::{Download, stream_blocking};
use crate::web::reply::{json, json_error};
use crate::web::served::{FetchView, Shared};

/// Where fetched logs go, under the log directory (not a session: the budget, the uploader
/// and the flights' list pass it by; its bytes count in the disk's figures).
pub const FETCHED_DIR: &str = "sd-card";

/// Progress is pushed at most this often (and at the fetch's end).
const PROGRESS_EVERY: Duration = Duration::from_millis(250);
/// How often a fetch looks whether the vehicle armed.
const ARMED_CHECK: Duration = Duration::from_millis(250);

/// One log on the vehicle's SD card. Field names say their units.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SdLog {
    /// The path the vehicle knows it by (what `ulog-recv fetch` takes).
    pub path: String,
    pub size_bytes: u64,
    /// The flight here whose fill read it, if any.
    pub session: Option<String>,
    /// Its file on the companion once fetched whole (`GET /api/vehicle/fetched/{file}`).
    pub fetched: Option<String>,
}

/// The companion's file name of the vehicle's `path`: its part below the log directory,
/// made safe (`/fs/microsd/log/2026-11-29/10_00_00.ulg` → `2026-11-29_10_00_00.ulg`).
pub fn fetched_name(path: &str) -> String {
    let below = LOG_DIRS
        .iter()
        .find_map(|dir| path.strip_prefix(dir.path)?.strip_prefix('/'))
        .unwrap_or(path);
    key_safe(below)
}

/// Where fetched logs go.
fn fetched_dir(log_dir: &FsPath) -> PathBuf {
    log_dir.join(FETCHED_DIR)
}

/// The vehicle's files, or why the page cannot reach them now: no way to them, no vehicle,
/// or the vehicle armed (its link carries the stream then).
fn on_the_ground(served: &Shared) -> Result<VehicleFiles, (StatusCode, &'static str)> {
    let Some(ftp) = &served.actions.ftp else {
        return Err((
            StatusCode::CONFLICT,
            "the daemon has no way to the vehicle's files",
        ));
    };
    let Some(vehicle) = served.feed.view().vehicle else {
        return Err((StatusCode::SERVICE_UNAVAILABLE, "no vehicle heard"));
    };
    if vehicle.armed == Some(true) {
        return Err((
            StatusCode::CONFLICT,
            "the vehicle is armed: its link carries the log stream; ask again once it has landed",
        ));
    }
    Ok(VehicleFiles::shared(ftp.clone()))
}

/// `GET /api/vehicle/logs`: the vehicle's SD-card logs, newest first, each with the flight
/// here that was filled from it and its file here if fetched; only while the vehicle is
/// disarmed.
pub async fn vehicle_logs(State(served): State<Shared>) -> Response {
    let mut files = match on_the_ground(&served) {
        Ok(files) => files,
        Err((status, why)) => return json_error(status, why),
    };
    let logs = match files.list_logs().await {
        Ok(logs) => logs,
        Err(e) => {
            return json_error(
                StatusCode::BAD_GATEWAY,
                &format!("the vehicle's files: {e}"),
            );
        }
    };
    let sources = filled_from(&served.log_dir);
    let here = fetched_dir(&served.log_dir);
    let mut listed: Vec<SdLog> = logs
        .iter()
        .map(|log| {
            let name = fetched_name(&log.path);
            let whole = std::fs::symlink_metadata(here.join(&name))
                .is_ok_and(|m| m.is_file() && m.len() == log.size);
            SdLog {
                session: sources
                    .iter()
                    .find(|(source, _)| *source == log.path)
                    .map(|(_, id)| id.clone()),
                path: log.path.clone(),
                size_bytes: log.size,
                fetched: whole.then_some(name),
            }
        })
        .collect();
    listed.reverse();
    served.sd_card.set_listed(logs);
    json(&listed)
}

/// Each flight's SD log, as its amendments name it: (the vehicle's path, the flight's id).
fn filled_from(log_dir: &FsPath) -> Vec<(String, String)> {
    let sessions = crate::store::files::list_sessions(log_dir).unwrap_or_default();
    let mut sources = Vec::new();
    for dir in sessions {
        let (Ok(manifest), Some(id)) = (read_manifest(&dir), dir.file_name()) else {
            continue;
        };
        let id = id.to_string_lossy().into_owned();
        for a in &manifest.amendments {
            sources.push((a.source.clone(), id.clone()));
        }
    }
    sources
}

#[derive(serde::Deserialize)]
pub struct FetchQuery {
    path: String,
}

/// `POST /api/vehicle/fetch?path=PATH`: fetches a log the SD card's last listing holds onto
/// the companion; 202 at once, its progress on the event stream. One at a time.
pub async fn fetch(State(served): State<Shared>, Query(query): Query<FetchQuery>) -> Response {
    let mut files = match on_the_ground(&served) {
        Ok(files) => files,
        Err((status, why)) => return json_error(status, why),
    };
    let listed = served.sd_card.listed();
    let Some(log) = listed.into_iter().find(|l| l.path == query.path) else {
        return json_error(
            StatusCode::CONFLICT,
            "the SD card's listing holds no such log: list the SD card first",
        );
    };
    if served
        .sd_card
        .current()
        .is_some_and(|f| matches!(f.state, "waiting" | "fetching" | "paused"))
    {
        return json_error(
            StatusCode::CONFLICT,
            "a fetch is under way: one log at a time",
        );
    }
    let dir = fetched_dir(&served.log_dir);
    let file = fetched_name(&log.path);
    let mut view = FetchView {
        path: log.path.clone(),
        file: file.clone(),
        state: "waiting",
        have_bytes: 0,
        size_bytes: log.size,
        error: None,
    };
    served.sd_card.set(&served.feed, view.clone());
    tracing::info!(log = %log.path, "fetch asked for from the web page");
    let task = served.clone();
    tokio::spawn(async move {
        let outcome = fetch_on_the_ground(&task, &mut files, &log, &dir.join(&file), &view).await;
        match outcome {
            Ok(_) => {
                tracing::info!(log = %log.path, file = %file, "fetched from the vehicle's SD card");
                view.state = "done";
                view.have_bytes = view.size_bytes;
            }
            Err(e) => {
                tracing::warn!(log = %log.path, "cannot fetch the SD log: {e}");
                view.state = "failed";
                view.error = Some(e.to_string());
            }
        }
        task.sd_card.set(&task.feed, view);
    });
    json(&served.sd_card.current()).into_accepted()
}

/// Fetches `log` into `out` (its folder made first), its progress pushed, paused while the
/// vehicle is armed (the link is the stream's then: the download is dropped and, once the
/// vehicle is disarmed, goes on from its `.part`).
async fn fetch_on_the_ground(
    served: &Shared,
    files: &mut VehicleFiles,
    log: &VehicleLog,
    out: &FsPath,
    view: &FetchView,
) -> Result<u64, FilesError> {
    if let Some(dir) = out.parent() {
        crate::store::output::make_folders_durably(dir)?;
    }
    let latest = Mutex::new((Instant::now() - PROGRESS_EVERY, 0));
    let progress = |have, size| {
        let mut latest = latest.lock().expect("progress lock");
        if latest.0.elapsed() >= PROGRESS_EVERY || have == size {
            *latest = (Instant::now(), have);
            served.sd_card.set(
                &served.feed,
                FetchView {
                    state: "fetching",
                    have_bytes: have,
                    ..view.clone()
                },
            );
        }
    };
    loop {
        tokio::select! {
            fetched = files.download(&log.path, out, &progress) => return fetched,
            () = until_armed(served, true) => {
                tracing::info!(log = %log.path, "the vehicle armed: the fetch waits for it to land");
                let have_bytes = latest.lock().expect("progress lock").1;
                served.sd_card.set(&served.feed, FetchView { state: "paused", have_bytes, ..view.clone() });
                until_armed(served, false).await;
            }
        }
    }
}

/// Returns once the vehicle's heartbeat says it is `armed` (or, for `false`, once no heartbeat
/// says it is).
async fn until_armed(served: &Shared, armed: bool) {
    loop {
        let now = (served.feed.view().vehicle).is_some_and(|v| v.armed == Some(true));
        if now == armed {
            return;
        }
        tokio::time::sleep(ARMED_CHECK).await;
    }
}

/// `GET /api/vehicle/fetch`: the fetch under way or last done (`null`: none since the start).
pub async fn fetch_state(State(served): State<Shared>) -> Response {
    json(&served.sd_card.current())
}

/// `GET /api/vehicle/fetched/{file}`: a log fetched whole from the SD card.
pub async fn fetched(State(served): State<Shared>, Path(file): Path<String>) -> Response {
    let path = fetched_dir(&served.log_dir).join(&file);
    // A plain name the fetch made, naming a whole file (not its `.part`, not a link).
    let plain = key_safe(&file) == file && file.ends_with(".ulg") && !file.starts_with('.');
    if !plain || !std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file()) {
        return json_error(StatusCode::NOT_FOUND, "no such fetched log");
    }
    stream_blocking(Download::File, path, file).await
}

/// A response's status set to 202 Accepted.
pub trait Accepted {
    fn into_accepted(self) -> Response;
}

impl Accepted for Response {
    fn into_accepted(mut self) -> Response {
        *self.status_mut() = StatusCode::ACCEPTED;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vehicle_path_becomes_a_plain_name_below_its_log_directory() {
        assert_eq!(
            fetched_name("/fs/microsd/log/2026-11-29/10_00_00.ulg"),
            "2026-11-29_10_00_00.ulg"
        );
        assert_eq!(
            fetched_name("@MAV_LOG/sess001/log001.ulg"),
            "sess001_log001.ulg"
        );
        assert_eq!(fetched_name("/log/../../etc/x.ulg"), ".._.._etc_x.ulg");
        assert!(!fetched_name("/elsewhere/a b.ulg").contains(['/', ' ']));
    }
}
