//! Log storage: a log's stream cut into standalone splits ([`splitter`], sans-IO), and the
//! session directories, manifests and power-safe files that hold them ([`files`]); windows
//! of log time cut from a session ([`snippet`]); the store on its own thread, fed through a
//! queue bounded in bytes ([`thread`]).
//!
//! - [`bin_splitter`] (sans-IO) does the same for a DataFlash log (ArduPilot's `.bin`).
//! - [`splitter`] (sans-IO) cuts a log's message stream into splits that each open alone
//!   (replaying definitions, parameters in force, subscriptions, latched samples) and
//!   summarises each (samples, dropouts, time index).
//! - [`files`]: group commit (writes reach the OS as they come; one sync per step per
//!   interval, in the order new directory entries, the open split's data, the manifest, its
//!   directory; a split synced as it closes, its name too), recovery after a crash (splits cut back to their last whole
//!   message, in 64 KB blocks), setting aside what cannot be repaired (`NAME.unrecoverable`),
//!   the disk budget (renamed aside before deletion, so a power cut never half-deletes).
//! - [`columns`] (sans-IO): topics routed to columns of their own (`SESSION/NAME/` splits)
//!   and joined back for reading.
//! - [`events`] (sans-IO): event buffers (columns written only around events) and the
//!   triggers that make events.
//! - [`fsync`]: every sync of what the receiver keeps, in one place, and the watch a test
//!   models power cuts with.
//! - [`manifest`]: `manifest.json` (columns, splits, amendments) and the atomic, durable
//!   replacement of a file.
//! - [`amend`]: amendments (records recovered from the vehicle's SD log, beside the splits,
//!   entered in the manifest); [`amend::read_split`] is how every reader takes a split.
//! - [`reading`]: a session read back as one stream (columns joined) or one column alone.
//! - [`reference`](mod@reference): snippets that copy nothing (byte spans of the splits and a
//!   preamble), made their own copy before the budget deletes their session.
//! - [`input`]: what a command was pointed at (a ULog file, a session, a snippet), anything
//!   else refused with why; [`output`]: a file a command writes, under its final name only
//!   once whole.
//! - [`thread`]: the network loop never waits for the disk: past the queue's bound
//!   ([`queue_bound`], sans-IO), samples are stripped (definitions, parameters and strings
//!   kept) and the log gets a dropout.
//!
//! Uses the engine and [`crate::sys`] (thread priority, free space); knows nothing of the link
//! or of the live servers.

pub mod amend;
pub mod bin_splitter;
pub mod columns;
pub mod events;
pub mod files;
pub mod fsync;
pub mod input;
pub mod manifest;
pub mod output;
pub mod queue_bound;
pub mod reading;
pub mod reference;
pub mod snippet;
pub mod splitter;
pub mod thread;

pub use files::{LogStore, Manifest, SplitEntry, StoreError, StoreOptions};
pub use splitter::{DEFAULT_LATCHED, IndexEntry, SplitPolicy, SplitSink, SplitSummary, Splitter};
