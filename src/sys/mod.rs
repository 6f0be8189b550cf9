//! What the threads of every part may use, below everything else: the few raw OS calls
//! ([`os`]: thread priority, free space, socket buffers), a latency histogram ([`latency`])
//! for what the threads measure, and secret files read only when nobody else may read them
//! ([`secret`]).
//!
//! Uses no other part of the crate.

pub mod latency;
pub mod os;
pub mod secret;
