//! Flights exported to the formats other tools open: MCAP with the `ros2` profile (Foxglove,
//! PlotJuggler, `ros2 bag`).
//!
//! - [`flight`]: the input, a `.ulg` or a session directory, as one ULog byte stream.
//! - [`mcap`]: the MCAP writer.
//!
//! Topics are the Foxglove server's (`/NAME`, `/NAME/N`, `/log`), with the same ROS 2 types
//! and CDR encoding ([`crate::ros2msg`]), so that a recording and the live view look alike.

pub mod flight;
pub mod mcap;

use crate::publish::glob;

/// What to export.
#[derive(Debug, Clone, Default)]
pub struct ExportOptions {
    /// Log time window in µs (inclusive); `None`: from the start / to the end.
    pub from_us: Option<u64>,
    pub to_us: Option<u64>,
    /// Topic name patterns (`*`, `?`); empty: every topic. `/log` is kept unless patterns are
    /// given that do not match `log`.
    pub topics: Vec<String>,
}

impl ExportOptions {
    /// Whether a sample or string stamped `timestamp` lies in the window.
    pub fn in_window(&self, timestamp: u64) -> bool {
        self.from_us.is_none_or(|f| timestamp >= f) && self.to_us.is_none_or(|t| timestamp <= t)
    }

    /// Whether the topic (format) `name` is exported.
    pub fn wants(&self, name: &str) -> bool {
        self.topics.is_empty() || self.topics.iter().any(|p| glob::matches(p, name))
    }
}

/// What an export wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExportStats {
    /// Channels (topic instances with at least one message, and `/log`).
    pub channels: usize,
    /// Samples written.
    pub samples: u64,
    /// Logged strings written to `/log`.
    pub log_messages: u64,
}

/// Why an export failed.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Session(#[from] crate::store::snippet::SnippetError),
    #[error("not a ULog stream: {0}")]
    NotULog(#[from] crate::ulog::ReadError),
    #[error("cannot write the MCAP file: {0}")]
    Mcap(#[from] ::mcap::McapError),
}
