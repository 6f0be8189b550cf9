//! Log storage: a log's stream cut into standalone splits ([`splitter`], sans-IO), and the
//! session directories, manifests and power-safe files that hold them ([`files`]); windows
//! of log time cut from a session ([`snippet`]); the store on its own thread, fed through a
//! queue bounded in bytes ([`thread`]).

pub mod files;
pub mod snippet;
pub mod splitter;
pub mod thread;

pub use files::{LogStore, Manifest, SplitEntry, StoreError, StoreOptions};
pub use splitter::{DEFAULT_LATCHED, IndexEntry, SplitPolicy, SplitSink, SplitSummary, Splitter};
