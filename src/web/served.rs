//! What every handler of the web page shares: who may use it, the live feed, the flights'
//! list, the log directory, the actions' ways into the daemon ([`Actions`]); the disk's
//! figures; the SD card's last listing and the fetch from it ([`SdCard`]).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::shell::vehicle_files::{SharedFiles, VehicleLog};
use crate::web::auth::Access;
use crate::web::flights::FlightsCache;
use crate::web::live::{Change, WebFeed};

/// The log directory's size is walked at most this often (and the `disk` event pushed).
pub const DISK_REFRESH: Duration = Duration::from_secs(10);

/// What every handler shares.
pub struct Served {
    pub access: Access,
    /// What the actions reach.
    pub actions: Actions,
    pub feed: WebFeed,
    pub flights: FlightsCache,
    pub log_dir: PathBuf,
    pub budget: Option<u64>,
    /// The log directory's size, and when it was walked.
    pub disk: Mutex<Option<(u64, Instant)>>,
    /// The vehicle's SD card as last listed, and the fetch from it.
    pub sd_card: SdCard,
}

/// The handlers' state.
pub type Shared = Arc<Served>;

impl Served {
    /// Looks at the log directory again and pushes what changed.
    ///
    /// On this thread, not the runtime's blocking pool: a `stat` per session, a manifest read
    /// only for those that changed; a thread of the pool would cost its stack and its own
    /// malloc arena in the daemon's memory for that.
    pub async fn refresh_flights(self: &Arc<Self>) {
        for change in self.flights.refresh() {
            self.feed.push(Some(change));
        }
    }

    /// The directory of flight `id` if it is closed (not the open session).
    pub async fn closed_dir(self: &Arc<Self>, id: &str) -> Option<PathBuf> {
        let dir = self.dir_of(id).await?;
        let open = self.feed.open_session().as_deref() == Some(id);
        (!open && self.flights.row(id).is_some_and(|row| row.closed)).then_some(dir)
    }

    /// The directory of flight `id` (the listing looked at again if it does not hold it yet).
    pub async fn dir_of(self: &Arc<Self>, id: &str) -> Option<PathBuf> {
        if let Some(dir) = self.flights.dir_of(id) {
            return Some(dir);
        }
        self.refresh_flights().await;
        self.flights.dir_of(id)
    }
}

/// The disk's figures (also the `disk` event). Field names say their units.
#[derive(serde::Serialize)]
pub struct DiskView {
    /// The log directory's size (walked at most every 10 s).
    pub logs_bytes: Option<u64>,
    pub budget_bytes: Option<u64>,
    pub free_bytes: Option<u64>,
}
impl Served {
    /// The disk's figures now (the log directory walked at most every [`DISK_REFRESH`]).
    pub async fn disk_view(self: &Arc<Self>) -> DiskView {
        let free_bytes = crate::sys::os::free_bytes(&self.log_dir).ok();
        let mut disk = self.disk.lock().expect("disk lock");
        if disk.is_none_or(|(_, at)| at.elapsed() >= DISK_REFRESH)
            && let Ok(size) = crate::store::files::dir_size(&self.log_dir)
        {
            *disk = Some((size, Instant::now()));
        }
        DiskView {
            logs_bytes: disk.map(|(size, _)| size),
            budget_bytes: self.budget,
            free_bytes,
        }
    }
}

/// The daemon's parts the actions reach; each absent when the daemon runs without it.
#[derive(Default, Clone)]
pub struct Actions {
    /// The fill's queue (`--fill auto`).
    pub fill: Option<std::sync::mpsc::Sender<PathBuf>>,
    /// The uploader's wake-up (uploads configured).
    pub upload: Option<Arc<tokio::sync::Notify>>,
    /// The vehicle's files, through the network loop's session.
    pub ftp: Option<SharedFiles>,
}

/// What the page may offer: `fill` and `upload` (the flight's actions), `vehicle_logs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Offered {
    pub fill: bool,
    pub upload: bool,
    pub vehicle_logs: bool,
}

impl Actions {
    pub fn offered(&self) -> Offered {
        Offered {
            fill: self.fill.is_some(),
            upload: self.upload.is_some(),
            vehicle_logs: self.ftp.is_some(),
        }
    }
}

/// A fetch from the page: what it fetches and how far it got (the `sd_fetch` event).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FetchView {
    pub path: String,
    /// Its file on the companion.
    pub file: String,
    /// `waiting` (for the fill to close its file, or for the vehicle), `fetching`, `paused`
    /// (while the vehicle is armed: it goes on once disarmed), `done` or `failed`.
    pub state: &'static str,
    pub have_bytes: u64,
    pub size_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The SD card as the page last listed it, and the fetch under way or last done.
#[derive(Default)]
pub struct SdCard {
    listed: Mutex<Vec<VehicleLog>>,
    fetch: Mutex<Option<FetchView>>,
}

impl SdCard {
    /// A fetch moved: kept, and pushed as an `sd_fetch` event.
    pub fn set(&self, feed: &WebFeed, view: FetchView) {
        feed.push(Some(Change::new("sd_fetch", &view)));
        *self.fetch.lock().expect("fetch lock") = Some(view);
    }

    /// The fetch under way or last done.
    pub fn current(&self) -> Option<FetchView> {
        self.fetch.lock().expect("fetch lock").clone()
    }

    /// The SD card's logs as the page last listed them (what a fetch may name).
    pub fn listed(&self) -> Vec<VehicleLog> {
        self.listed.lock().expect("listed lock").clone()
    }

    pub fn set_listed(&self, logs: Vec<VehicleLog>) {
        *self.listed.lock().expect("listed lock") = logs;
    }
}
