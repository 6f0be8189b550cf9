//! What the web page shows live: the vehicle, the link, the logging, the store and the
//! uploads, followed from the daemon's events and its status reports, and each change as a
//! Server-Sent Event. [`LiveState`] is plain state (events, reports and `now` in; views and
//! changes out); [`WebFeed`] shares it with the web thread and is all the network loop
//! touches: a short lock and a broadcast that never waits.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::link::{Event, SessionStats};
use crate::report::flights::FindingLine;
use crate::store::events::EventRecord;
use crate::store::thread::StorageStats;

/// Changes a subscriber may fall behind by before it is told to reload.
pub const CHANGES_BUFFERED: usize = 256;

/// One Server-Sent Event: its type and its JSON, made once for every subscriber.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// `status`, `disk`, `dropout`, `finding`, `flight`, `flight_removed`, `resync`.
    pub kind: &'static str,
    pub json: Arc<str>,
}

impl Change {
    pub fn new(kind: &'static str, value: &impl serde::Serialize) -> Self {
        let json = serde_json::to_string(value).unwrap_or_else(|_| "null".to_owned());
        Self {
            kind,
            json: json.into(),
        }
    }
}

/// The status bar's figures. Field names say their units.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct StatusView {
    pub version: &'static str,
    pub link: LinkView,
    pub vehicle: Option<VehicleView>,
    pub logging: LoggingView,
    pub store: StoreView,
    /// The uploader's line (`pending`, `failing: WHY`, ...); none without uploads.
    pub uploads: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct LinkView {
    /// `udp`, `tcp` or `serial`.
    pub kind: &'static str,
    /// The link as given (`udp:0.0.0.0:14550`, ...).
    pub address: String,
    pub open: bool,
    /// Log bytes received per second, over the last report's interval.
    pub log_bytes_per_s: f64,
    /// Chunks lost over the last report's interval, of those sent.
    pub loss_percent: f64,
    /// A problem the operator must fix, as the daemon's log says it.
    pub problem: Option<String>,
    /// Frames refused by signing since the start.
    pub refused_frames: u64,
}

#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct VehicleView {
    pub system_id: u8,
    pub component_id: u8,
    /// Whose log stream it speaks: `px4` or `ardupilot`.
    pub autopilot: &'static str,
    /// Unknown until its first HEARTBEAT says.
    pub armed: Option<bool>,
    /// Seconds since a frame of the link last came in.
    pub last_heard_s_ago: f64,
}

#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct LoggingView {
    /// The vehicle streams its log to us.
    pub streaming: bool,
    /// The open session's id, while one is open.
    pub open_session: Option<String>,
    /// Bytes of the open log so far.
    pub open_log_bytes: u64,
    /// Since the daemon's start.
    pub logs: u64,
    pub dropouts: u64,
    pub lost_chunks: u64,
}

#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct StoreView {
    /// Log bytes waiting for the store.
    pub queued_bytes: u64,
    /// Writing is paused: the disk is full.
    pub paused: bool,
    /// Bytes that could not be written, since the start.
    pub failed_bytes: u64,
    /// Samples the store had to drop (the disk could not keep up).
    pub dropped_samples: u64,
}

/// A dropout as it happens.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DropoutView {
    pub session: Option<String>,
    pub lost_chunks: u64,
    pub duration_ms: Option<u64>,
}

/// A finding as the diagnostics make it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FindingView {
    pub session: String,
    #[serde(flatten)]
    pub finding: FindingLine,
}

/// See the module docs.
#[derive(Debug, Clone)]
pub struct LiveState {
    view: StatusView,
    previous: Option<(Instant, SessionStats)>,
    last_heard: Option<Instant>,
    log_bytes_at_open: u64,
}

impl LiveState {
    /// A daemon on a link of `kind` at `address`.
    pub fn new(kind: &'static str, address: String) -> Self {
        Self {
            view: StatusView {
                version: env!("CARGO_PKG_VERSION"),
                link: LinkView {
                    kind,
                    address,
                    ..LinkView::default()
                },
                ..StatusView::default()
            },
            previous: None,
            last_heard: None,
            log_bytes_at_open: 0,
        }
    }

    /// An event of the session; the change it makes to push, if any.
    pub fn event(&mut self, event: &Event, now: Instant) -> Option<Change> {
        match event {
            Event::VehicleFound {
                system_id,
                component_id,
                autopilot,
            } => {
                self.last_heard = Some(now);
                self.view.vehicle = Some(VehicleView {
                    system_id: *system_id,
                    component_id: *component_id,
                    autopilot: autopilot.name(),
                    ..VehicleView::default()
                });
            }
            Event::VehicleLost => {
                self.view.vehicle = None;
                self.view.logging.streaming = false;
            }
            Event::Armed(armed) => {
                if let Some(v) = &mut self.view.vehicle {
                    v.armed = Some(*armed);
                }
            }
            Event::LogOpened { .. } => {
                self.view.logging.streaming = true;
                self.log_bytes_at_open = self.previous.as_ref().map_or(0, |(_, s)| s.log_bytes);
            }
            Event::LogClosed { .. } => self.view.logging.streaming = false,
            Event::Dropout {
                lost_chunks,
                duration_ms,
            } => {
                return Some(Change::new(
                    "dropout",
                    &DropoutView {
                        session: self.view.logging.open_session.clone(),
                        lost_chunks: *lost_chunks,
                        duration_ms: *duration_ms,
                    },
                ));
            }
            _ => return None,
        }
        Some(self.status_change(now))
    }

    /// A session directory opened or closed.
    pub fn session(&mut self, dir: &Path, open: bool, now: Instant) -> Change {
        self.view.logging.open_session = open.then(|| session_id(dir));
        self.status_change(now)
    }

    /// An event the store entered in a session's manifest: a finding's change, if it is one.
    pub fn recorded(&self, record: &EventRecord) -> Option<Change> {
        let f = record.finding.as_ref()?;
        let session = self.view.logging.open_session.clone()?;
        Some(Change::new(
            "finding",
            &FindingView {
                session,
                finding: FindingLine {
                    analyzer: f.id.as_str().to_owned(),
                    severity: f.severity,
                    summary: f.summary.clone(),
                    at_us: f.timestamp_us,
                },
            },
        ))
    }

    /// A status report at `now`: the counters, the store's state, the link open or not, the
    /// uploader's line.
    pub fn status(
        &mut self,
        stats: &SessionStats,
        storage: &StorageStats,
        failed_bytes: u64,
        link_open: bool,
        uploads: Option<String>,
        now: Instant,
    ) -> Change {
        if let Some((then, before)) = &self.previous {
            let rates = stats.rates_since(before, now.duration_since(*then).as_secs_f64());
            self.view.link.log_bytes_per_s = rates.log_bytes_per_s;
            self.view.link.loss_percent = rates.loss_percent;
            if stats.frames.messages > before.frames.messages {
                self.last_heard = Some(now);
            }
        }
        self.previous = Some((now, *stats));
        let v = &mut self.view;
        v.link.open = link_open;
        v.link.problem = stats.problem.map(|p| p.to_string());
        v.link.refused_frames = stats.refused_frames();
        v.logging.logs = stats.logs;
        v.logging.dropouts = stats.dropouts;
        v.logging.lost_chunks = stats.lost_chunks;
        v.logging.open_log_bytes = if v.logging.streaming {
            stats.log_bytes.saturating_sub(self.log_bytes_at_open)
        } else {
            0
        };
        v.store = StoreView {
            queued_bytes: storage.queued_bytes,
            paused: storage.paused,
            failed_bytes,
            dropped_samples: storage.lost_samples,
        };
        v.uploads = uploads;
        self.status_change(now)
    }

    /// The status bar as it is at `now`.
    pub fn view(&self, now: Instant) -> StatusView {
        let mut view = self.view.clone();
        if let (Some(v), Some(heard)) = (&mut view.vehicle, self.last_heard) {
            v.last_heard_s_ago = now.saturating_duration_since(heard).as_secs_f64();
        }
        view
    }

    fn status_change(&self, now: Instant) -> Change {
        Change::new("status", &self.view(now))
    }
}

/// A session directory's id: its name.
pub fn session_id(dir: &Path) -> String {
    dir.file_name()
        .map_or(String::new(), |n| n.to_string_lossy().into_owned())
}

/// The live state and its changes, shared between the network loop and the web thread.
#[derive(Clone)]
pub struct WebFeed {
    state: Arc<Mutex<LiveState>>,
    changes: tokio::sync::broadcast::Sender<Change>,
    /// Wakes the web thread's look at the log directory (a session opened or closed).
    sessions_changed: Arc<tokio::sync::Notify>,
}

impl WebFeed {
    pub fn new(state: LiveState) -> Self {
        Self {
            state: Arc::new(Mutex::new(state)),
            changes: tokio::sync::broadcast::channel(CHANGES_BUFFERED).0,
            sessions_changed: Arc::new(tokio::sync::Notify::new()),
        }
    }

    /// An event of the session.
    pub fn event(&self, event: &Event) {
        if matches!(event, Event::LogBytes(_) | Event::Ftp(_)) {
            return;
        }
        let change = self.lock().event(event, Instant::now());
        self.push(change);
    }

    /// A session directory opened (`open`) or closed.
    pub fn session(&self, dir: &Path, open: bool) {
        let change = self.lock().session(dir, open, Instant::now());
        self.push(Some(change));
        self.sessions_changed.notify_one();
    }

    /// Completes when a session opened or closed since the last call.
    pub async fn sessions_changed(&self) {
        self.sessions_changed.notified().await;
    }

    /// An event entered in the open session's manifest.
    pub fn recorded(&self, record: &EventRecord) {
        let change = self.lock().recorded(record);
        self.push(change);
    }

    /// A status report; see [`LiveState::status`].
    pub fn status(
        &self,
        stats: &SessionStats,
        storage: &StorageStats,
        failed_bytes: u64,
        link_open: bool,
        uploads: Option<String>,
    ) {
        let change = self.lock().status(
            stats,
            storage,
            failed_bytes,
            link_open,
            uploads,
            Instant::now(),
        );
        self.push(Some(change));
    }

    /// A change made elsewhere (the web thread's view of the log directory).
    pub fn push(&self, change: Option<Change>) {
        if let Some(change) = change {
            // No subscriber: nobody to tell.
            let _ = self.changes.send(change);
        }
    }

    /// The status bar now.
    pub fn view(&self) -> StatusView {
        self.lock().view(Instant::now())
    }

    /// The open session's id, if one is open.
    pub fn open_session(&self) -> Option<String> {
        self.lock().view.logging.open_session.clone()
    }

    /// A new subscriber to the changes.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Change> {
        self.changes.subscribe()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LiveState> {
        self.state.lock().expect("live state lock")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_follows_the_vehicle_the_stream_and_the_counters() {
        let t0 = Instant::now();
        let mut live = LiveState::new("udp", "udp:0.0.0.0:14550".into());
        assert!(live.view(t0).vehicle.is_none());
        live.event(
            &Event::VehicleFound {
                system_id: 1,
                component_id: 1,
                autopilot: crate::autopilot::Autopilot::Px4,
            },
            t0,
        );
        live.event(&Event::Armed(true), t0);
        let mut stats = SessionStats::default();
        stats.frames.messages = 10;
        live.status(&stats, &StorageStats::default(), 0, true, None, t0);
        live.event(
            &Event::LogOpened {
                number: 1,
                format: crate::autopilot::LogFormat::ULog,
            },
            t0,
        );
        live.session(Path::new("/logs/2026-11-29T07-00-00Z_sys1"), true, t0);
        let t1 = t0 + std::time::Duration::from_secs(2);
        stats.frames.messages = 20;
        stats.log_bytes = 20_000;
        stats.chunks = 90;
        stats.lost_chunks = 10;
        let change = live.status(&stats, &StorageStats::default(), 0, true, None, t1);
        assert_eq!(change.kind, "status");
        let view = live.view(t1 + std::time::Duration::from_secs(3));
        let vehicle = view.vehicle.expect("vehicle");
        assert_eq!((vehicle.system_id, vehicle.armed), (1, Some(true)));
        assert_eq!(vehicle.autopilot, "px4");
        assert_eq!(vehicle.last_heard_s_ago, 3.0);
        assert_eq!(view.link.log_bytes_per_s, 10_000.0);
        assert_eq!(view.link.loss_percent, 10.0);
        assert!(view.logging.streaming);
        assert_eq!(view.logging.open_log_bytes, 20_000);
        assert_eq!(
            view.logging.open_session.as_deref(),
            Some("2026-11-29T07-00-00Z_sys1")
        );
        let dropout = live
            .event(
                &Event::Dropout {
                    lost_chunks: 3,
                    duration_ms: Some(120),
                },
                t1,
            )
            .expect("a dropout is pushed");
        assert_eq!(dropout.kind, "dropout");
        assert!(
            dropout.json.contains("\"duration_ms\":120"),
            "{}",
            dropout.json
        );
        live.event(&Event::VehicleLost, t1);
        assert!(!live.view(t1).logging.streaming);
    }
}
