//! What a session and its uploads amount to, read from its directory: the figures `ulog-recv
//! info` and `ulog-recv uploads` print and the web page's API serves, built in one place so
//! that the two can never disagree.
//!
//! - [`session`]: a session's whole report (its splits, fills, columns, events, and the
//!   flight as it reads now), which reads every byte of the flight;
//! - [`bin_session`]: an ArduPilot session's (DataFlash splits) report;
//! - [`uploads`]: what a session has uploaded, has pending, fails on;
//! - [`flights`]: a session in a line of the flights' list, from its manifest and journal
//!   only (a list of a thousand sessions reads no log).

pub mod bin_session;
pub mod flights;
pub mod session;
pub mod uploads;

/// The manifest of the session in `dir`, or why it is not a session.
fn manifest_of(dir: &std::path::Path) -> Result<crate::store::manifest::Manifest, ReportError> {
    crate::store::manifest::read_manifest(dir).map_err(|source| ReportError::NotASession {
        dir: dir.to_owned(),
        source,
    })
}

/// Why a session could not be reported.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("{} is not a log session", dir.display())]
    NotASession {
        dir: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("{}: cannot read its upload journal", dir.display())]
    Journal {
        dir: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read {}", dir.display())]
    Flight {
        dir: std::path::PathBuf,
        source: crate::export::ExportError,
    },
    #[error("{} cannot be read", dir.display())]
    NotULog {
        dir: std::path::PathBuf,
        source: crate::ulog::ReadError,
    },
}
