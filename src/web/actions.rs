//! What the page asks the daemon to do besides reading its files: fill a flight now, upload
//! it now, and list the vehicle's SD card (which of its logs are flights here). Each goes to
//! the part of the daemon that already does it: the fill's queue, the uploader's wake-up,
//! the FTP operations the network loop runs on the stream's own session.

use std::path::Path as FsPath;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;

use crate::shell::vehicle_files::VehicleFiles;
use crate::store::manifest::read_manifest;
use crate::web::reply::{json, json_error};
use crate::web::served::Shared;

/// `POST /api/flights/{id}/fill`: the flight goes to the fill's queue (filled once the
/// vehicle is disarmed and the fills before it are done).
pub async fn fill(State(served): State<Shared>, Path(id): Path<String>) -> Response {
    let Some(queue) = &served.actions.fill else {
        return json_error(
            StatusCode::CONFLICT,
            "the daemon fills only with --fill auto; run ulog-recv fill SESSION",
        );
    };
    let Some(dir) = served.closed_dir(&id).await else {
        return json_error(StatusCode::CONFLICT, "no such closed flight");
    };
    if queue.send(dir).is_err() {
        return json_error(StatusCode::SERVICE_UNAVAILABLE, "the fill has stopped");
    }
    tracing::info!(flight = %id, "fill asked for from the web page");
    json(&serde_json::json!({"queued": "fill", "id": id})).into_accepted()
}

/// `POST /api/flights/{id}/upload`: the uploader goes through its sessions now (a failing one
/// is tried again at once; it still waits for the vehicle to disarm where `upload-when`
/// says so).
pub async fn upload(State(served): State<Shared>, Path(id): Path<String>) -> Response {
    let Some(nudge) = &served.actions.upload else {
        return json_error(
            StatusCode::CONFLICT,
            "the daemon uploads nowhere: give it --upload-to or --flight-review",
        );
    };
    if served.closed_dir(&id).await.is_none() {
        return json_error(StatusCode::CONFLICT, "no such closed flight");
    }
    nudge.notify_one();
    tracing::info!(flight = %id, "upload asked for from the web page");
    json(&serde_json::json!({"queued": "upload", "id": id})).into_accepted()
}

/// One log on the vehicle's SD card. Field names say their units.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SdLog {
    /// The path the vehicle knows it by (what `ulog-recv fetch` takes).
    pub path: String,
    pub size_bytes: u64,
    /// The flight here whose fill read it, if any.
    pub session: Option<String>,
}

/// `GET /api/vehicle/logs`: the vehicle's SD-card logs, newest first, each with the flight
/// here that was filled from it; only while the vehicle is disarmed (in flight the link is
/// the stream's).
pub async fn vehicle_logs(State(served): State<Shared>) -> Response {
    let Some(ftp) = &served.actions.ftp else {
        return json_error(
            StatusCode::CONFLICT,
            "the daemon has no way to the vehicle's files",
        );
    };
    let view = served.feed.view();
    let Some(vehicle) = view.vehicle else {
        return json_error(StatusCode::SERVICE_UNAVAILABLE, "no vehicle heard");
    };
    if vehicle.armed == Some(true) {
        return json_error(
            StatusCode::CONFLICT,
            "the vehicle is armed: its link carries the log stream; ask again once it has landed",
        );
    }
    let mut files = VehicleFiles::shared(ftp.clone());
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
    let mut listed: Vec<SdLog> = logs
        .into_iter()
        .map(|log| SdLog {
            session: sources
                .iter()
                .find(|(source, _)| *source == log.path)
                .map(|(_, id)| id.clone()),
            path: log.path,
            size_bytes: log.size,
        })
        .collect();
    listed.reverse();
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

/// A response's status set to 202 Accepted.
trait Accepted {
    fn into_accepted(self) -> Response;
}

impl Accepted for Response {
    fn into_accepted(mut self) -> Response {
        *self.status_mut() = StatusCode::ACCEPTED;
        self
    }
}
