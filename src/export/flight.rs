//! The flight to export, as one ULog byte stream: a `.ulg` file as it is; a session directory
//! as its splits in order, each after the first without its preamble (the preamble repeats the
//! definitions, the parameters and the latched topics' last samples: joined, they are the log
//! as it was received, each sample once), with the records amendments recovered in place of
//! the dropouts they fill. With a time window, a session is cut by its
//! manifest's time index, reading only the splits the window needs ([`crate::store::snippet`]).

use std::path::Path;

use crate::export::{ExportError, ExportOptions};
use crate::store::amend::read_split;
use crate::store::files::read_manifest;
use crate::store::snippet::snippet;
use crate::store::splitter::SplitPolicy;

/// Reads `input` (a `.ulg` or a session directory) as one ULog stream.
pub fn load(input: &Path, options: &ExportOptions) -> Result<Vec<u8>, ExportError> {
    let read_err = |source| ExportError::Read {
        path: input.to_owned(),
        source,
    };
    if !input.is_dir() {
        return std::fs::read(input).map_err(read_err);
    }
    if options.from_us.is_some() || options.to_us.is_some() {
        let from = options.from_us.unwrap_or(0);
        let to = options.to_us.unwrap_or(u64::MAX);
        let (bytes, _) = snippet(input, from, to, &SplitPolicy::unlimited())?;
        return Ok(bytes);
    }
    let manifest = read_manifest(input).map_err(read_err)?;
    let mut out = Vec::new();
    for (k, split) in manifest.splits.iter().enumerate() {
        let path = input.join(&split.file);
        let bytes = read_split(input, &manifest.amendments, &split.file)
            .map_err(|source| ExportError::Read { path, source })?;
        let skip = if k == 0 {
            0
        } else {
            (split.summary.preamble_bytes as usize).min(bytes.len())
        };
        out.extend_from_slice(&bytes[skip..]);
    }
    Ok(out)
}
