//! The log-streaming link, sans-IO: MAVLink framing ([`frames`]), the receiver's session state
//! machine ([`session`]), which puts chunks of the ULog stream back in order ([`reorder`]) and
//! reassembles whole ULog messages ([`assembler`]); and, for the simulator and tests, a vehicle
//! that streams a log as PX4 does ([`vehicle`]), cutting it into chunks as PX4 cuts them
//! ([`chunker`]).

pub mod assembler;
pub mod chunker;
pub mod frames;
pub mod reorder;
pub mod session;
pub mod signing;
pub mod vehicle;

pub use assembler::{Assembler, AssemblerStats};
pub use chunker::{CHUNK_DATA_LEN, ChunkedLog, LogChunk, chunk_log};
pub use frames::{FrameDecoder, FrameStats};
pub use reorder::{Arrival, Chunk, Delivery, ReorderBuffer, ReorderConfig, ReorderStats};
pub use session::{
    CloseReason, Event, LinkProblem, Rates, Session, SessionConfig, SessionStats, SigningSetup,
};
pub use signing::{SigningKey, SigningStats};
pub use vehicle::{Impairment, SimVehicle, VehicleConfig, VehicleStats};
