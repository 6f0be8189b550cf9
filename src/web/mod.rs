//! The companion's web page (`--http`): every flight, how whole it is, where its uploads
//! stand and what the diagnostics found, live in a browser, with the JSON API it is built on
//! for scripts and the companion's own tools (ARK-OS, Rpanion-server).
//!
//! - [`live`]: the status bar's state and the changes pushed as Server-Sent Events, fed by
//!   the network loop without ever waiting;
//! - [`flights`]: the flights' list kept from the log directory, and the one way a request's
//!   flight id becomes a directory;
//! - [`auth`]: who may use it (loopback open, a password beyond), the CSRF token;
//! - [`throttle`]: wrong passwords held back, per address and in all;
//! - [`served`]: what every handler shares;
//! - [`routes`]: the page, the API, the event stream, downloads and the delete;
//! - [`actions`]: fill now, upload now, through the daemon's parts;
//! - [`sd_card`]: the vehicle's SD card: its logs, and one fetched whole with its progress;
//! - [`download`]: a file or an export streamed to the client in bounded chunks;
//! - [`reply`]: the plain answers (JSON, HTML, text);
//! - [`page`]: the page's HTML, CSS and JavaScript, compiled into the binary;
//! - [`server`]: the listener on its own thread, under its connection limits.
//!
//! The figures are [`crate::report`]'s: the API and `ulog-recv info`/`uploads` cannot
//! disagree.

pub mod actions;
pub mod auth;
pub mod download;
pub mod flights;
pub mod live;
pub mod page;
pub mod reply;
pub mod routes;
pub mod sd_card;
pub mod served;
pub mod server;
pub mod throttle;
