//! Log storage: a log's stream cut into standalone splits ([`splitter`], sans-IO).

pub mod splitter;

pub use splitter::{DEFAULT_LATCHED, IndexEntry, SplitPolicy, SplitSink, SplitSummary, Splitter};
