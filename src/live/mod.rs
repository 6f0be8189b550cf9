//! The flight, live: every topic decoded as it arrives and published to local processes and
//! to the tools people already open, on a thread of its own that never delays the acks or the
//! files.
//!
//! - [`thread`]: the publishing thread: the network loop's [`PublishFeed`] (log bytes, events
//!   and counters handed over without waiting, samples stripped when the thread falls
//!   behind), and the loop that feeds both servers' cores and delivers their output.
//! - [`ndjson`]: the live socket (Unix, optionally TCP): decoded samples as JSON lines, for
//!   scripts and `ulog-recv tail` / `topics`.
//! - [`foxglove`]: the Foxglove WebSocket server (Foxglove, Lichtblick, PlotJuggler): ROS 2
//!   types and CDR.
//! - [`dataflash_json`]: an ArduPilot message as JSON, and its type's JSON Schema, for both.
//! - [`outbox`]: each client's queue, bounded in bytes (oldest dropped first); [`clients`]:
//!   the plumbing both servers share (a client's queue and tasks, delivery, listeners).
//!
//! Each server is a sans-IO core (log bytes, session events and client requests in, per-client
//! messages out) and a tokio shell. The part may use the engine, the ROS types, the link's
//! events and the store's counters; nothing below it knows it exists.

pub mod clients;
pub mod dataflash_json;
pub mod foxglove;
pub mod ndjson;
pub mod outbox;
pub mod thread;

pub use outbox::{Keep, Outbox};
pub use thread::{PublishConfig, PublishFeed, PublishServer};
