//! A vehicle without a drone: a deterministic synthetic flight log ([`synth`]), cut into
//! LOGGING_DATA chunks as PX4 cuts them ([`chunker`]), streamed by a sans-IO vehicle that
//! behaves as PX4's logger and MAVLink stack do, impairments included ([`vehicle`]).
//!
//! - [`vehicle`]: [`SimVehicle`], a PX4 that streams a log: START/STOP answered as PX4 answers
//!   them (DENIED below 5000 B/s), reliable chunks stop-and-wait (50 ms, 50 tries, then it
//!   gives up) and nothing else meanwhile, PX4's rate limiter (70 % of the link rate, per
//!   100 ms), the STOP handshake with post-flight data, signing, a new header time for every
//!   new log; seeded loss, duplication, reordering, uplink (ack) loss and outages.
//! - [`impaired`]: the vehicle's side of an impaired link (loss, duplication, reordering,
//!   uplink loss, outages), from one seeded RNG.
//! - [`ardupilot`]: [`SimArduPilot`](ardupilot::SimArduPilot), an ArduPilot that streams a
//!   `.bin` log as `AP_Logger`'s MAVLink backend does: 200-byte blocks acked one by one,
//!   resent after 100 ms and on a NACK, a buffer that drops at the source, the 10 s client
//!   timeout, a restart at seqno 0 with the startup records.
//! - [`ftp_server`]: the vehicle's MAVLink FTP server over its SD card's log (the file it
//!   streams, with the post-flight data), one session at a time, bursts of ~35 KB, as PX4's.
//! - [`chunker`]: cuts a `.ulg` into chunks the way PX4 does (reliable sections, the
//!   definitions and in-flight 'A' and 'M', flushed as short acked chunks; the rest full and
//!   unacked; the post-flight perf counters held back for the STOP).
//! - [`signing`]: what each simulated autopilot takes unsigned once it has a key, and the
//!   signing clock a reboot starts from.
//! - [`faults`]: flights with one thing going wrong (a sagging pack, a failing estimator,
//!   GPS interference, a motor, RC loss), for the flight diagnostics.
//! - [`synth`]: every message and basic type in a deterministic flight;
//!   `testdata/synthetic.ulg` is its output (`UPDATE_TESTDATA=1 cargo test --test it
//!   synthetic_testdata` writes it anew) and `testdata/synthetic.expected.json` pyulog's
//!   reading of it.
//!
//! The demo, the `sim` command, the tests and the benches use it; the daemon's receiving path
//! never does. It may use the engine ([`crate::ulog`]) and the link's framing and signing
//! ([`crate::link`]); its tokio loop is in the shell ([`crate::shell::simulator`]).

pub mod ardupilot;
pub mod chunker;
pub mod config;
pub mod faults;
pub mod ftp_server;
pub mod impaired;
pub mod signing;
pub mod synth;
pub mod vehicle;

pub use chunker::{CHUNK_DATA_LEN, ChunkedLog, LogChunk, chunk_log};
pub use config::{Impairment, MIN_LINK_RATE, VehicleConfig, VehicleStats};
pub use vehicle::SimVehicle;

/// A simulated autopilot as the simulator's shell drives it: bytes and `now` in, frames and
/// the next time it has work out.
pub trait Simulated {
    fn handle_bytes(&mut self, bytes: &[u8], now: std::time::Instant);
    fn handle_timeout(&mut self, now: std::time::Instant);
    fn poll_transmit(&mut self) -> Option<Vec<u8>>;
    fn poll_timeout(&self) -> Option<std::time::Instant>;
    /// The whole log went out (the stream may still be on, as a vehicle's is).
    fn finished(&self) -> bool;
    /// The receiver ended the stream.
    fn stopped(&self) -> bool;
    /// Chunks or blocks of the log sent so far (each once).
    fn sent(&self) -> u64;
}

impl Simulated for SimVehicle {
    fn handle_bytes(&mut self, bytes: &[u8], now: std::time::Instant) {
        SimVehicle::handle_bytes(self, bytes, now)
    }
    fn handle_timeout(&mut self, now: std::time::Instant) {
        SimVehicle::handle_timeout(self, now)
    }
    fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        SimVehicle::poll_transmit(self)
    }
    fn poll_timeout(&self) -> Option<std::time::Instant> {
        SimVehicle::poll_timeout(self)
    }
    fn finished(&self) -> bool {
        SimVehicle::finished(self)
    }
    fn stopped(&self) -> bool {
        !self.streaming() && self.stats().stops_completed > 0
    }
    fn sent(&self) -> u64 {
        self.stats().chunks_sent
    }
}

impl Simulated for ardupilot::SimArduPilot {
    fn handle_bytes(&mut self, bytes: &[u8], now: std::time::Instant) {
        ardupilot::SimArduPilot::handle_bytes(self, bytes, now)
    }
    fn handle_timeout(&mut self, now: std::time::Instant) {
        ardupilot::SimArduPilot::handle_timeout(self, now)
    }
    fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        ardupilot::SimArduPilot::poll_transmit(self)
    }
    fn poll_timeout(&self) -> Option<std::time::Instant> {
        ardupilot::SimArduPilot::poll_timeout(self)
    }
    fn finished(&self) -> bool {
        ardupilot::SimArduPilot::finished(self)
    }
    fn stopped(&self) -> bool {
        // A STOP in the middle of the flight is no end: a receiver stops a stream it found
        // in its middle and STARTs it again (in another datagram), and the vehicle flies on.
        !self.streaming() && self.stats().stops > 0 && self.finished()
    }
    fn sent(&self) -> u64 {
        self.stats().blocks_sent
    }
}
