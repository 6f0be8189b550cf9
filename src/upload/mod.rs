//! The flight leaves the drone: closed splits and manifests to the fleet's object storage
//! (any S3-compatible service), the whole flight to Flight Review.
//!
//! - [`plan`] (sans-IO): the journal of what of a session is uploaded (`upload.json`, beside
//!   its splits) and the next step: each closed split as soon as it is closed, the manifest
//!   after it, the final manifest, then the flight to Flight Review.
//! - [`journal`]: that journal's file, read and written durably.
//! - [`pace`] (sans-IO): the byte-rate cap and the back-off between failed tries.
//! - [`s3`]: the bucket, on the `object_store` crate: checked by the server with SHA-256,
//!   multipart and resumable for large files.
//! - [`http`]: the client under the bucket's requests, which gives a request up once it stops
//!   moving rather than after a fixed time (a part takes what a slow link needs).
//! - [`flight_review`]: the upload to a Flight Review server.
//! - [`tables`]: the flight as the fleet's Parquet tables, built in the session and
//!   uploaded last.
//! - [`uploader`]: the thread that walks the sessions and takes their steps, never at the
//!   cost of receiving; [`uploader::upload_session`] does one session by hand.
//!
//! Uses the store (manifests, durable writes, the mark that lets the disk budget delete
//! uploaded sessions first), the export's joining of a session into one flight, the engine
//! and [`crate::sys`].

pub mod flight_review;
pub mod http;
pub mod journal;
pub mod pace;
pub mod plan;
pub mod s3;
pub mod tables;
pub mod uploader;

pub use uploader::{UploadConfig, UploadHandle, UploadStatus, UploadWhen};
