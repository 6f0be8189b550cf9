//! MAVLink FTP, sans-IO: the payload codec ([`wire`]) and the client ([`client`]) the
//! session runs beside the log stream, over the same framing and signing. The vehicle's SD
//! log is read with it (a whole file, or only the byte ranges a fill needs).

pub mod client;
pub mod wire;

pub use client::{FtpClient, FtpConfig, FtpError, FtpOp, FtpReply, FtpStats};
pub use wire::{DirEntry, FtpPayload, Nak};
