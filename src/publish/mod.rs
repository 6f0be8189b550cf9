//! Live publication of the decoded log (issue 5, in progress): samples rendered as JSON
//! ([`sample_json`]) and topic patterns ([`glob`]). The socket, the protocol and
//! `ulog-recv tail` are still to come.

pub mod glob;
pub mod sample_json;

pub use sample_json::JsonShape;
