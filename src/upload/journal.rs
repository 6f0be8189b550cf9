//! The upload journal's file: `upload.json` in the session's folder, read, and written
//! durably (whole, synced, renamed into place) after every step of the session's upload
//! ([`crate::upload::plan::Journal`] says what it holds).

use std::path::Path;

use crate::store::files::write_file_durably;
use crate::upload::plan::{JOURNAL, Journal};

/// The journal of `session`, if it has one.
pub fn load_journal(session: &Path) -> std::io::Result<Option<Journal>> {
    match std::fs::read(session.join(JOURNAL)) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Writes `journal` as `session`'s, durably: a crash leaves the one before or this one.
pub fn save_journal(session: &Path, journal: &Journal) -> std::io::Result<()> {
    let mut text = serde_json::to_vec_pretty(journal).map_err(std::io::Error::other)?;
    text.push(b'\n');
    write_file_durably(session, JOURNAL, &text)
}
