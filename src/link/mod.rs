//! The log-streaming link, sans-IO: chunks of the ULog stream put back in order
//! ([`reorder`]), reassembled into whole ULog messages ([`assembler`]), and, for the
//! simulator and tests, cut from a log the way PX4 cuts them ([`chunker`]).

pub mod assembler;
pub mod chunker;
pub mod frames;
pub mod reorder;

pub use assembler::{Assembler, AssemblerStats};
pub use chunker::{CHUNK_DATA_LEN, ChunkedLog, LogChunk, chunk_log};
pub use frames::{FrameDecoder, FrameStats};
pub use reorder::{Arrival, Chunk, Delivery, ReorderBuffer, ReorderConfig, ReorderStats};
