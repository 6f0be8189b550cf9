//! What the threads of every part may use, below everything else: the few raw OS calls
//! ([`os`]: thread priority, free space, socket buffers) and a latency histogram
//! ([`latency`]) for what the threads measure.
//!
//! Uses no other part of the crate.

pub mod latency;
pub mod os;
