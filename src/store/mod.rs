//! Log storage: a log's stream cut into standalone splits ([`splitter`], sans-IO), and the
//! session directories, manifests and power-safe files that hold them ([`files`]); windows
//! of log time cut from a session ([`snippet`]).

pub mod files;
pub mod snippet;
pub mod splitter;

pub use files::{LogStore, Manifest, SplitEntry, StoreOptions};
pub use splitter::{DEFAULT_LATCHED, IndexEntry, SplitPolicy, SplitSink, SplitSummary, Splitter};
