//! Live publication of the decoded log on a local socket (JSON lines), for scripts and
//! `ulog-recv tail`.
//!
//! - [`sample_json`]: samples as JSON objects; [`glob`]: topic patterns.
//! - [`protocol`]: the newline-delimited JSON protocol (requests, line framing, version).
//! - [`publisher`]: the sans-IO core: log bytes, session events and requests in, per-client
//!   lines out.
//! - [`outbox`]: each client's bounded queue (oldest lines dropped, then `lagged`).
//! - [`server`]: the tokio shell on its own thread (Unix and TCP listeners, client tasks).
//! - [`client`]: `ulog-recv tail` and `ulog-recv topics`.

pub mod client;
pub mod glob;
pub mod outbox;
pub mod protocol;
pub mod publisher;
pub mod sample_json;
pub mod server;

pub use outbox::{Keep, Outbox};
pub use publisher::{ClientId, Outgoing, Publisher, ServerStats};
pub use sample_json::JsonShape;
