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
//! - [`ftp_server`]: the vehicle's MAVLink FTP server over its SD card's log (the file it
//!   streams, with the post-flight data), one session at a time, bursts of ~35 KB, as PX4's.
//! - [`chunker`]: cuts a `.ulg` into chunks the way PX4 does (reliable sections, the
//!   definitions and in-flight 'A' and 'M', flushed as short acked chunks; the rest full and
//!   unacked; the post-flight perf counters held back for the STOP).
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

pub mod chunker;
pub mod config;
pub mod faults;
pub mod ftp_server;
pub mod impaired;
pub mod synth;
pub mod vehicle;

pub use chunker::{CHUNK_DATA_LEN, ChunkedLog, LogChunk, chunk_log};
pub use config::{Impairment, MIN_LINK_RATE, VehicleConfig, VehicleStats};
pub use vehicle::SimVehicle;
