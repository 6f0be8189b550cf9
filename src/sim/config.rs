//! What the simulated vehicle and its link are set to be ([`VehicleConfig`], [`Impairment`])
//! and what the vehicle counts ([`VehicleStats`]).

use std::time::Duration;

use mavlink::dialects::ardupilotmega::MavResult;

use crate::link::signing::SigningKey;

/// PX4 refuses to stream its log over a link configured below this many bytes per second.
pub const MIN_LINK_RATE: u64 = 5000;

/// Wire bytes of a full LOGGING_DATA frame, as PX4's rate limiter counts one.
const CHUNK_WIRE_BYTES: f64 = 267.0;

/// What the simulated link does to frames. All probabilities in [0, 1].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Impairment {
    /// A frame from the vehicle is lost.
    pub loss: f64,
    /// A frame from the vehicle arrives twice.
    pub duplicate: f64,
    /// A frame from the vehicle is held back behind up to `reorder_depth` later ones.
    pub reorder: f64,
    pub reorder_depth: usize,
    /// A frame to the vehicle (an ack, a command) is lost.
    pub uplink_loss: f64,
    /// A frame from the vehicle arrives with one byte changed (its checksum then fails).
    pub corrupt: f64,
    /// Every `outage_every`, nothing gets through either way for `outage_len`.
    pub outage_every: Option<Duration>,
    pub outage_len: Duration,
    /// Once this share of the log (of its chunks) has gone out, nothing gets through either
    /// way until all of it has: a radio out of range until the landing, back for the STOP.
    pub lost_from: Option<f64>,
    /// With `lost_from`: the link never comes back.
    pub lost_for_good: bool,
}

impl Impairment {
    /// A perfect link.
    pub const NONE: Self = Self {
        loss: 0.0,
        duplicate: 0.0,
        reorder: 0.0,
        reorder_depth: 0,
        uplink_loss: 0.0,
        corrupt: 0.0,
        outage_every: None,
        outage_len: Duration::ZERO,
        lost_from: None,
        lost_for_good: false,
    };
}

impl Default for Impairment {
    fn default() -> Self {
        Self::NONE
    }
}

/// The simulated vehicle's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct VehicleConfig {
    pub system_id: u8,
    pub component_id: u8,
    /// The MAVLink link's configured rate in bytes per second (PX4's `MAV_x_RATE`), which
    /// caps the log stream at 70 % of it; `None`: as fast as the caller polls,
    /// [`VehicleConfig::burst`] chunks per poll.
    pub link_rate: Option<u64>,
    /// Chunks sent per [`SimVehicle::handle_timeout`](crate::sim::SimVehicle::handle_timeout) without a link rate.
    pub burst: usize,
    pub ack_timeout: Duration,
    pub max_tries: u32,
    pub heartbeat_interval: Duration,
    /// Answer every LOGGING_START with this instead of streaming.
    pub refuse_start: Option<MavResult>,
    /// MAVLink 2 signing with this key.
    pub signing: Option<SigningKey>,
    pub impairment: Impairment,
    pub seed: u64,
    /// The vehicle has an SD card with its log on it, served over MAVLink FTP (default).
    pub sd_log: bool,
    /// Its heartbeat says armed over this span of time since power-up (what a ground station
    /// and the receiver see of it; the log's own arming state is the log's). `None`: never.
    pub armed: Option<std::ops::Range<Duration>>,
}

impl Default for VehicleConfig {
    fn default() -> Self {
        Self {
            system_id: 1,
            component_id: 1,
            link_rate: Some(140_000),
            burst: 64,
            ack_timeout: Duration::from_millis(50),
            max_tries: 50,
            heartbeat_interval: Duration::from_secs(1),
            refuse_start: None,
            signing: None,
            impairment: Impairment::NONE,
            seed: 1,
            sd_log: true,
            armed: None,
        }
    }
}

impl VehicleConfig {
    /// Time between chunks under PX4's rate limiter (`None`: no limit).
    pub fn chunk_interval(&self) -> Option<Duration> {
        let rate = self.link_rate? as f64;
        let per_window = (0.1 * 0.7 * rate / CHUNK_WIRE_BYTES).ceil().max(1.0);
        Some(Duration::from_secs_f64(0.1 / per_window))
    }
}

/// Counters; all monotonic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct VehicleStats {
    pub starts: u64,
    /// Streams ended by a STOP.
    pub stops: u64,
    /// STOPs answered ACCEPTED after the post-flight data was acked.
    pub stops_completed: u64,
    /// Chunks sent for the first time.
    pub chunks_sent: u64,
    /// Acked chunks sent again after 50 ms without an ack.
    pub resends: u64,
    pub acks_received: u64,
    /// Acked chunks whose ack came (each once).
    pub chunks_acked: u64,
    /// Post-flight chunks sent after a STOP, and those acked.
    pub postflight_chunks: u64,
    pub postflight_acked: u64,
    /// Streams abandoned after the last try of an acked chunk.
    pub ack_timeouts: u64,
    /// The longest wait for an ack, in milliseconds: PX4's logger thread is blocked that long.
    pub longest_ack_wait_ms: u64,
    /// Received frames dropped for their signature (with a key).
    pub refused_frames: u64,
    pub frames_sent: u64,
    /// Frames the impaired link dropped, both ways.
    pub frames_dropped: u64,
}
