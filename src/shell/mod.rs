//! The tokio shell: everything that touches sockets, serial ports, signals and the service
//! manager, around the sans-IO cores.
//!
//! - [`transport`]: UDP (an 8 MB receive buffer asked for, the vehicle's address learnt only
//!   from its authentic frames), TCP and serial (reopened with back-off), which move
//!   datagrams and bytes and nothing else.
//! - [`receiver`]: the daemon's network loop: a link's bytes into the
//!   [`Session`](crate::link::Session), its frames back out, its events to the store's thread
//!   and the publishing thread.
//! - [`simulator`]: the simulated vehicle's loop around [`SimVehicle`](crate::sim::SimVehicle).
//! - [`service`]: sd_notify and the status line; [`config`]: the config file, as
//!   command-line arguments; [`values`]: option values (sizes, durations) checked where they
//!   enter; [`keyfile`]: the signing key file and the signing clock's reservation on disk.
//! - [`vehicle_files`]: the vehicle's files over MAVLink FTP; [`fill`]: a PX4 flight
//!   completed from its SD log; [`fill_bin`]: an ArduPilot flight from its card.
//! - [`monitoring`]: the daemon's counters into its Prometheus metrics and its health check;
//!   [`metrics_server`]: `--metrics`, the HTTP listener of `/metrics` and `/healthz`, on a
//!   [`listener_thread`] as the web page is.
//!
//! Near the top of the crate: it may use every other part but the web page ([`crate::web`]),
//! which uses it.

pub mod config;
pub mod fill;
pub mod fill_bin;
pub mod keyfile;
pub mod listener_thread;
pub mod metrics_server;
pub mod monitoring;
pub mod receiver;
pub mod service;
pub mod simulator;
pub mod transport;
pub mod values;
pub mod vehicle_files;
