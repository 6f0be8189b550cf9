//! The web page's routes: the page and its assets, the JSON API, the event stream, the
//! downloads and the actions, behind the guards every request passes (a body only where one
//! belongs, credentials beyond loopback, the CSRF token on every action, headers that keep
//! the page from being framed or its types guessed).

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{ConnectInfo, DefaultBodyLimit, Form, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{Next, from_fn, from_fn_with_state};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::{Stream, StreamExt};

use crate::export::dataset::key_safe;
use crate::export::signals::Ask;
use crate::report::bin_session::BinSessionReport;
use crate::report::session::SessionReport;
use crate::web::auth::{COOKIE, CSRF_HEADER, Login, Verdict};
use crate::web::download::{Download, stream_blocking};
use crate::web::flights::{listed_file, plain_files};
use crate::web::live::{Change, StatusView};
use crate::web::page;
use crate::web::reply::{html, json, json_error, text};
use crate::web::served::{DiskView, Offered, Shared};
use crate::web::{actions, sd_card};

/// An action's body (the login form) is at most this long.
pub const MAX_BODY_BYTES: usize = 4096;
/// A wrong password waits this long before its answer.
const WRONG_PASSWORD_DELAY: Duration = Duration::from_secs(1);

/// The router, every guard on.
pub fn router(served: Shared) -> Router {
    let guarded = Router::new()
        .route("/", get(index))
        .route("/api/session", get(session))
        .route("/api/status", get(status))
        .route("/api/flights", get(flights))
        .route("/api/flights/{id}", get(flight))
        .route("/api/flights/{id}/signals", get(signals))
        .route("/api/flights/{id}/download", get(download))
        .route("/api/flights/{id}/files/{*file}", get(file))
        .route("/api/flights/{id}/delete", post(delete))
        .route("/api/flights/{id}/fill", post(actions::fill))
        .route("/api/flights/{id}/upload", post(actions::upload))
        .route("/api/vehicle/logs", get(sd_card::vehicle_logs))
        .route(
            "/api/vehicle/fetch",
            get(sd_card::fetch_state).post(sd_card::fetch),
        )
        .route("/api/vehicle/fetched/{file}", get(sd_card::fetched))
        .route("/api/events", get(events))
        .route("/logout", post(logout))
        .layer(from_fn_with_state(served.clone(), guard));
    Router::new()
        .merge(guarded)
        .route("/login", get(login_page).post(login))
        .route("/assets/{name}", get(asset))
        .route("/favicon.ico", get(favicon))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(from_fn(limits))
        .with_state(served)
}

/// A body only on a POST, and headers that keep the page from being framed, sniffed or
/// cached.
async fn limits(request: Request, next: Next) -> Response {
    let has_body = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .is_some_and(|v| v.as_bytes() != b"0")
        || request.headers().contains_key(header::TRANSFER_ENCODING);
    let mut response = if has_body && request.method() != Method::POST {
        text(
            StatusCode::PAYLOAD_TOO_LARGE,
            "this request takes no body\n",
        )
    } else {
        next.run(request).await
    };
    let headers = response.headers_mut();
    for (name, value) in [
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
        ),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

/// Credentials (beyond loopback) on every request, the CSRF token on every POST.
async fn guard(State(served): State<Shared>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    let verdict = served.access.check(
        header_str(headers, header::AUTHORIZATION.as_str()),
        header_str(headers, header::COOKIE.as_str()),
        peer(&request),
        Instant::now(),
    );
    if let Verdict::Throttled(retry_after) = verdict {
        return too_many_guesses(retry_after);
    }
    if verdict == Verdict::Unauthorised {
        if request.uri().path() == "/" {
            // A browser's first visit: the login form, still a 401.
            return html(StatusCode::UNAUTHORIZED, page::LOGIN_HTML);
        }
        return json_error(
            StatusCode::UNAUTHORIZED,
            "log in first (a session cookie, or HTTP Basic)",
        );
    }
    if request.method() == Method::POST && !served.access.csrf_ok(header_str(headers, CSRF_HEADER))
    {
        return json_error(
            StatusCode::FORBIDDEN,
            "an action needs the X-CSRF-Token header GET /api/session gives",
        );
    }
    next.run(request).await
}

/// The address a request came from (the server puts it in every request's extensions).
fn peer(request: &Request) -> IpAddr {
    request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| c.0.ip())
}

/// 429: the address guessed wrong too often; its password was not checked.
fn too_many_guesses(retry_after: Duration) -> Response {
    let mut response = json_error(
        StatusCode::TOO_MANY_REQUESTS,
        "too many wrong passwords from this address: try again later",
    );
    if let Ok(v) = HeaderValue::from_str(&retry_after.as_secs().max(1).to_string()) {
        response.headers_mut().insert(header::RETRY_AFTER, v);
    }
    response
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

async fn index() -> Response {
    html(StatusCode::OK, page::INDEX_HTML)
}

async fn login_page() -> Response {
    html(StatusCode::OK, page::LOGIN_HTML)
}

async fn asset(Path(name): Path<String>) -> Response {
    match page::asset(&name) {
        Some((content_type, body)) => (
            [
                (header::CONTENT_TYPE, content_type),
                (header::CACHE_CONTROL, "max-age=300"),
            ],
            body,
        )
            .into_response(),
        None => json_error(StatusCode::NOT_FOUND, "no such asset"),
    }
}

/// `GET /favicon.ico`: the page's icon, for browsers that ask for it there.
async fn favicon() -> Response {
    asset(Path("icon.svg".to_owned())).await
}

#[derive(serde::Deserialize)]
struct LoginForm {
    password: String,
}

async fn login(
    State(served): State<Shared>,
    ConnectInfo(from): ConnectInfo<SocketAddr>,
    Form(form): Form<LoginForm>,
) -> Response {
    if !served.access.needs_login() {
        return redirect_home(None);
    }
    match served
        .access
        .login(&form.password, from.ip(), Instant::now())
    {
        Login::In(token) => redirect_home(Some(format!(
            "{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/"
        ))),
        Login::Wrong => {
            tokio::time::sleep(WRONG_PASSWORD_DELAY).await;
            html(StatusCode::UNAUTHORIZED, page::LOGIN_HTML)
        }
        Login::Throttled(retry_after) => too_many_guesses(retry_after),
    }
}

async fn logout(State(served): State<Shared>, headers: HeaderMap) -> Response {
    served
        .access
        .logout(header_str(&headers, header::COOKIE.as_str()));
    let mut response = json(&serde_json::json!({"logged_out": true}));
    let expired = format!("{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0");
    if let Ok(v) = HeaderValue::from_str(&expired) {
        response.headers_mut().insert(header::SET_COOKIE, v);
    }
    response
}

fn redirect_home(cookie: Option<String>) -> Response {
    // Relative: behind a proxy's prefix, the page is where the form was.
    let mut response = (StatusCode::SEE_OTHER, [(header::LOCATION, "./")]).into_response();
    if let Some(v) = cookie.and_then(|c| HeaderValue::from_str(&c).ok()) {
        response.headers_mut().insert(header::SET_COOKIE, v);
    }
    response
}

/// `GET /api/session`: whether a login is asked for, and the token actions carry.
async fn session(State(served): State<Shared>) -> Response {
    json(&serde_json::json!({
        "needs_login": served.access.needs_login(),
        "csrf_token": served.access.csrf_token(),
    }))
}

#[derive(serde::Serialize)]
struct StatusReply {
    #[serde(flatten)]
    live: StatusView,
    disk: DiskView,
    /// The actions this daemon offers.
    actions: Offered,
}

/// `GET /api/status`.
async fn status(State(served): State<Shared>) -> Response {
    let disk = served.disk_view().await;
    json(&StatusReply {
        live: served.feed.view(),
        disk,
        actions: served.actions.offered(),
    })
}

/// `GET /api/flights`: every flight's line, newest first.
async fn flights(State(served): State<Shared>) -> Response {
    if !served.flights.is_filled() {
        served.refresh_flights().await;
    }
    json(&served.flights.rows())
}

/// A session's report, as `info --json` prints it for its autopilot.
#[derive(serde::Serialize)]
#[serde(untagged)]
enum AnyReport {
    Px4(Box<SessionReport>),
    ArduPilot(Box<BinSessionReport>),
}

/// `GET /api/flights/{id}`: its line and its whole report (what `info --json` says of it:
/// an ArduPilot flight's is its own, with `session.autopilot` saying so).
async fn flight(State(served): State<Shared>, Path(id): Path<String>) -> Response {
    let Some(dir) = served.dir_of(&id).await else {
        return no_flight();
    };
    let dataflash = served
        .flights
        .row(&id)
        .is_some_and(|row| is_dataflash(&row));
    let report = tokio::task::spawn_blocking(move || {
        if dataflash {
            BinSessionReport::read(&dir).map(|r| AnyReport::ArduPilot(Box::new(r)))
        } else {
            SessionReport::read(&dir).map(|r| AnyReport::Px4(Box::new(r)))
        }
    })
    .await;
    match (report, served.flights.row(&id)) {
        (Ok(Ok(report)), Some(row)) => json(&serde_json::json!({"flight": row, "report": report})),
        (Ok(Err(e)), _) => json_error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
        _ => no_flight(),
    }
}

#[derive(serde::Deserialize)]
struct SignalsQuery {
    field: Option<String>,
}

/// `GET /api/flights/{id}/signals[?field=TOPIC.FIELD]`: the first look's signals and the
/// names of every numeric field, or the one field asked for, thinned for a plot.
async fn signals(
    State(served): State<Shared>,
    Path(id): Path<String>,
    Query(query): Query<SignalsQuery>,
) -> Response {
    let ask = match query.field.as_deref().map(str::parse) {
        None => Ask::FirstLook,
        Some(Ok(path)) => Ask::Field(path),
        Some(Err(e)) => return json_error(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    let Some(dir) = served.dir_of(&id).await else {
        return no_flight();
    };
    let read = tokio::task::spawn_blocking(move || {
        if let Some(files) = crate::store::input::dataflash_files(&dir) {
            return crate::export::signals::dataflash::read(&files, &ask);
        }
        let flight = crate::export::flight::open(&dir, &Default::default())?;
        crate::export::signals::read(&*flight, &ask)
    })
    .await;
    match read {
        Ok(Ok(signals)) => json(&signals),
        Ok(Err(e)) => json_error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
        Err(_) => json_error(StatusCode::INTERNAL_SERVER_ERROR, "the read did not finish"),
    }
}

#[derive(serde::Deserialize)]
struct DownloadQuery {
    format: Option<String>,
}

/// `GET /api/flights/{id}/download?format=ulg|bin|mcap`: the flight as one file, as `export`
/// writes it (`.ulg` for a PX4 flight, `.bin` for an ArduPilot one).
async fn download(
    State(served): State<Shared>,
    Path(id): Path<String>,
    Query(query): Query<DownloadQuery>,
) -> Response {
    let what = match query.format.as_deref().unwrap_or("ulg") {
        "ulg" => Download::Ulg,
        "mcap" => Download::Mcap,
        "bin" => Download::Bin,
        _ => return json_error(StatusCode::BAD_REQUEST, "format is ulg, bin or mcap"),
    };
    let Some(dir) = served.dir_of(&id).await else {
        return no_flight();
    };
    let dataflash = served.flights.row(&id).is_some_and(|r| is_dataflash(&r));
    if what == Download::Ulg && dataflash {
        return not_for_dataflash("a .ulg download");
    }
    if what == Download::Bin && !dataflash {
        return json_error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "a .bin download: not for a PX4 flight (it downloads as .ulg)",
        );
    }
    if !plain_files(&dir) {
        return json_error(
            StatusCode::NOT_FOUND,
            "a file of the flight is missing or is a link: it is not served",
        );
    }
    let name = format!("{}.{}", key_safe(&id), what.extension());
    stream_blocking(what, dir, name).await
}

/// `GET /api/flights/{id}/files/{file}`: a split or an amendment the manifest lists.
async fn file(State(served): State<Shared>, Path((id, file)): Path<(String, String)>) -> Response {
    let Some(dir) = served.dir_of(&id).await else {
        return no_flight();
    };
    let Some(path) = listed_file(&dir, &file) else {
        return json_error(StatusCode::NOT_FOUND, "the flight lists no such file");
    };
    let name = path
        .file_name()
        .map_or_else(String::new, |n| key_safe(&n.to_string_lossy()));
    stream_blocking(Download::File, path, format!("{}_{name}", key_safe(&id))).await
}

/// `POST /api/flights/{id}/delete`: a closed flight's local files; never the open session.
async fn delete(State(served): State<Shared>, Path(id): Path<String>) -> Response {
    if served.dir_of(&id).await.is_none() {
        return no_flight();
    }
    let Some(dir) = served.closed_dir(&id).await else {
        return json_error(
            StatusCode::CONFLICT,
            "the flight is still recording: only a closed flight is deleted",
        );
    };
    match tokio::task::spawn_blocking(move || crate::store::files::delete_session(&dir)).await {
        Ok(Ok(())) => {
            tracing::info!(flight = %id, "flight deleted from the web page");
            served.refresh_flights().await;
            json(&serde_json::json!({"deleted": id}))
        }
        Ok(Err(e)) => json_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("cannot delete {id}: {e}"),
        ),
        Err(_) => json_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the delete did not finish",
        ),
    }
}

/// `GET /api/events`: the status now, then every change as it happens.
async fn events(
    State(served): State<Shared>,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let first = [
        Change::new("status", &served.feed.view()),
        Change::new("disk", &served.disk_view().await),
    ];
    let changes = futures_util::stream::unfold(served.feed.subscribe(), |mut rx| async move {
        use tokio::sync::broadcast::error::RecvError;
        match rx.recv().await {
            Ok(change) => Some((change, rx)),
            // Fallen behind: the page reads everything again.
            Err(RecvError::Lagged(_)) => Some((Change::new("resync", &()), rx)),
            Err(RecvError::Closed) => None,
        }
    });
    let stream = futures_util::stream::iter(first)
        .chain(changes)
        .map(|c| Ok(SseEvent::default().event(c.kind).data(&*c.json)));
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

/// An ArduPilot flight (DataFlash splits).
fn is_dataflash(row: &crate::report::flights::FlightRow) -> bool {
    row.log_format == crate::autopilot::LogFormat::DataFlash
}

/// 422: what was asked reads ULog, and the flight is an ArduPilot's.
fn not_for_dataflash(what: &str) -> Response {
    json_error(
        StatusCode::UNPROCESSABLE_ENTITY,
        &format!("{what}: not for an ArduPilot flight (it downloads as .bin or .mcap)"),
    )
}

fn no_flight() -> Response {
    json_error(StatusCode::NOT_FOUND, "no such flight")
}
