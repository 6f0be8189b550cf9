//! What the page asks the daemon to do with a flight besides reading its files: fill it now,
//! upload it now. Each goes to the part of the daemon that already does it: the fill's
//! queue, the uploader's wake-up.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;

use crate::web::reply::{json, json_error};
use crate::web::sd_card::Accepted;
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
