//! The log-streaming link, sans-IO: MAVLink framing ([`frames`]) and signing ([`signing`]),
//! the receiver's session state machine ([`session`]), which puts chunks of the ULog stream
//! back in order ([`reorder`]) and reassembles whole ULog messages ([`assembler`]).
//!
//! - [`session`]: [`Session`], the receiver's state machine. Bytes and `now` in
//!   (`handle_bytes` for a byte stream, `handle_datagram` for one UDP datagram, which also
//!   says whether the vehicle spoke in it; `handle_timeout` when `poll_timeout` says); MAVLink
//!   frames (`poll_transmit`) and events (`poll_event`) out. It finds the vehicle from its
//!   HEARTBEAT and sends its own every second; asks for the stream with STOP then START, each
//!   retried until a COMMAND_ACK (TEMPORARILY_REJECTED backs off 1, 2, 4, 8, 10 s; DENIED,
//!   UNSUPPORTED and FAILED say why and retry every 30 s); runs the STOP handshake (acking
//!   until ACCEPTED, 5 s at most); acks every LOGGING_DATA_ACKED before anything else,
//!   duplicates included; after a gap writes a dropout whose duration the samples around it
//!   tell. Liveness: no chunk for 3 s while the vehicle is heard closes the log and restarts
//!   the stream; nothing heard for 5 s closes it and waits. A log opens only with its header;
//!   a new header at sequence 0, confirmed by the chunk after it, is a new log.
//! - [`signing`]: the key (from a key file's text), our signing clock, signing and checking
//!   frames (the signature itself is the `mavlink` crate's), per-stream replay checks.
//! - [`reorder`]: [`ReorderBuffer`]: chunks in any order, duplicates dropped, late chunks put
//!   back in order, gaps counted modulo 65536 and declared when the buffer holds
//!   `max_chunks` or its oldest chunk waited `max_wait` (256 chunks, 250 ms). A chunk further
//!   than `max_chunks` beyond the newest waits aside for a neighbour to confirm it (1 s).
//! - [`assembler`]: [`Assembler`]: in-order chunks to whole ULog messages; after a gap the
//!   partial message is dropped and output resumes at the next `first_message_offset`; every
//!   offset is checked against the framing.
//! - [`ftp`]: MAVLink FTP: the payload codec and the client the session runs beside the
//!   stream ([`Session::ftp_start`], results as [`Event::Ftp`]), for the vehicle's SD log.
//! - [`frames`]: MAVLink framing on the `mavlink` crate: frames keep their raw bytes (for the
//!   signature); a datagram is read on its own; bad frames are skipped and counted.
//!
//! Frames and `now: Instant` go in; events ([`Event`]: log bytes, dropouts, the log's start
//! and end) and frames to send come out. The link may use the ULog engine ([`crate::ulog`]);
//! it knows nothing of files, sockets, threads or tokio (those are [`crate::shell`]'s), and
//! nothing of the simulated vehicle that talks to it in tests ([`crate::sim`]).

pub mod assembler;
pub mod frames;
pub mod ftp;
pub mod log_block;
pub mod reorder;
pub mod session;
pub mod signing;

pub use assembler::{Assembler, AssemblerStats};
pub use frames::{FrameDecoder, FrameStats};
pub use reorder::{Arrival, Chunk, Delivery, ReorderBuffer, ReorderConfig, ReorderStats};
pub use session::{
    CloseReason, Event, LinkProblem, Rates, Session, SessionConfig, SessionStats, SigningSetup,
};
pub use signing::{SigningKey, SigningStats};
