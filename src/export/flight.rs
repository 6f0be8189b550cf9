//! The flight to export, as one ULog byte stream: a `.ulg` file as it is; a session directory
//! read back as one stream ([`crate::store::reading`]: its splits joined, amendments merged,
//! its columns joined, or the one column asked for). With a time window, a session is cut by
//! its manifest's time index, reading only the splits the window needs
//! ([`crate::store::snippet`]).

use std::path::Path;

use crate::export::{ExportError, ExportOptions};
use crate::store::reading::read_session;
use crate::store::snippet::snippet;
use crate::store::splitter::SplitPolicy;

/// Reads `input` (a `.ulg` or a session directory) as one ULog stream.
pub fn load(input: &Path, options: &ExportOptions) -> Result<Vec<u8>, ExportError> {
    if !input.is_dir() {
        return std::fs::read(input).map_err(|source| ExportError::Read {
            path: input.to_owned(),
            source,
        });
    }
    let column = options.column.as_deref();
    if options.from_us.is_some() || options.to_us.is_some() {
        let from = options.from_us.unwrap_or(0);
        let to = options.to_us.unwrap_or(u64::MAX);
        let (bytes, _) = snippet(input, from, to, &SplitPolicy::unlimited(), column)?;
        return Ok(bytes);
    }
    Ok(read_session(input, column)?)
}
