//! `ulog-recv`: receives a PX4 flight log streamed over MAVLink, writes it to disk and
//! publishes its topics live.
//!
//! The protocol logic is sans-IO (bytes and time in, events and bytes out); the binary is a
//! thin shell around it. Modules:
//! - [`ulog`]: the ULog engine (incremental reader, decoder, writer).
//! - [`summary`]: what a whole log holds (the `info` command), built from the engine.
//! - [`synth`]: a deterministic synthetic flight log, for tests and the demo.
//! - [`link`]: the log-streaming session over MAVLink and a simulated PX4 (sans-IO).
//! - [`publish`]: the live socket: decoded topics as JSON lines to local clients (a sans-IO
//!   publisher, a server on its own thread, and the `tail` / `topics` clients).
//! - [`store`]: a log cut into standalone, rolling splits (sans-IO).
//! - [`foxglove`]: the Foxglove WebSocket server's protocol and sans-IO core.
//! - [`ros2msg`]: ULog formats as ROS 2 message types: `ros2msg` schemas and CDR samples.
//! - [`ros1msg`]: the same types for ROS 1 (definitions, MD5 sums, `rosgraph_msgs/Log`).
//! - [`export`]: a flight (a file or a session) to MCAP and ROS bags.
//! - [`values`]: option values (sizes, durations) checked where they enter.
//! - [`os`]: the few raw OS calls (thread priority, free space, socket buffer).
//! - [`keyfile`]: the MAVLink signing key file and the signing clock's reservation on disk.
//! - [`config`]: the daemon's config file, as command-line arguments; [`service`]: sd_notify
//!   and the status line.
//! - [`transport`], [`receiver`], [`simulator`]: the tokio shell (links, the daemon's loop
//!   and log files, the simulated vehicle's loop); [`latency`]: a latency histogram.

pub mod config;
pub mod export;
pub mod foxglove;
pub mod keyfile;
pub mod latency;
pub mod link;
pub mod os;
pub mod publish;
pub mod receiver;
pub mod ros1msg;
pub mod ros2msg;
pub mod service;
pub mod simulator;
pub mod store;
pub mod summary;
pub mod synth;
pub mod transport;
pub mod ulog;
pub mod values;
