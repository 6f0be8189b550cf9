//! Live publication of the decoded log on a local socket (JSON lines), for scripts and
//! `ulog-recv tail`.
//!
//! - [`sample_json`]: samples as JSON objects; topic patterns are [`crate::ulog::glob`]'s.
//! - [`protocol`]: the newline-delimited JSON protocol (requests, line framing, version).
//! - [`publisher`]: the sans-IO core: log bytes, session events and requests in, per-client
//!   lines out.
//! - [`server`]: the socket's shell (its path, Unix and TCP listeners, client tasks), run by
//!   the publishing thread ([`crate::live::thread`]); each client's queue is an
//!   [`Outbox`](crate::live::Outbox).
//! - [`client`]: `ulog-recv tail` and `ulog-recv topics`.

pub mod client;
pub mod protocol;
pub mod publisher;
pub mod sample_json;
pub mod server;

pub use publisher::{ClientId, Outgoing, Publisher, ServerStats};
pub use sample_json::JsonShape;
