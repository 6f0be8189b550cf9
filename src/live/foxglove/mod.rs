//! The Foxglove WebSocket server: every topic of the flight, live, in Foxglove, Lichtblick
//! and PlotJuggler, as ROS 2 messages (`ros2msg` schemas, CDR).
//!
//! - [`protocol`]: the protocol's messages and the two subprotocols.
//! - [`publisher`]: the sans-IO core: log bytes, session events and requests in, per-client
//!   messages out.
//! - [`server`]: the shell: listener, handshake, one WebSocket reader and writer per client.
//!   It runs on the publishing thread ([`crate::live::thread`]), which feeds both servers'
//!   cores from the same hand-over, off the network loop.

pub mod protocol;
pub mod publisher;
pub mod server;

pub use publisher::{ClientId, FoxglovePublisher, Outgoing};
