//! A session read back as one ULog stream: each column's splits in order, each after the
//! first without its preamble (the preamble repeats the definitions, the parameters and the
//! latched topics' last samples: joined, the splits are the column's stream as it was
//! written, each sample once), amendments merged ([`read_split`]); then the columns joined
//! ([`crate::store::columns::join`]). One column alone is read without opening the others'
//! files.

use std::io;
use std::path::{Path, PathBuf};

use crate::store::amend::read_split;
use crate::store::columns::join;
use crate::store::manifest::{Manifest, SplitEntry, read_manifest};

/// Why a session cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("cannot read {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("the session has no column '{name}' (its columns: {known})")]
    NoColumn { name: String, known: String },
}

/// The columns of `manifest` a reading takes: `column` alone, or every column (the main one
/// first).
pub fn selected_columns<'m>(
    manifest: &'m Manifest,
    column: Option<&str>,
) -> Result<Vec<&'m [SplitEntry]>, SessionError> {
    match column {
        Some(name) => match manifest.splits_of(name) {
            Some(splits) => Ok(vec![splits]),
            None => Err(SessionError::NoColumn {
                name: name.to_owned(),
                known: manifest.column_names().collect::<Vec<_>>().join(", "),
            }),
        },
        None => Ok((0..=manifest.columns.len())
            .map(|k| manifest.column_splits(k))
            .collect()),
    }
}

/// The session in `dir` (all its columns joined, or `column` alone) as one ULog stream.
pub fn read_session(dir: &Path, column: Option<&str>) -> Result<Vec<u8>, SessionError> {
    let io_err = |path: &Path| {
        let path = path.to_owned();
        move |source| SessionError::Io { path, source }
    };
    let manifest = read_manifest(dir).map_err(io_err(dir))?;
    let mut streams = Vec::new();
    for splits in selected_columns(&manifest, column)? {
        let mut stream = Vec::new();
        for (k, split) in splits.iter().enumerate() {
            let bytes = read_split(dir, &manifest.amendments, &split.file)
                .map_err(io_err(&dir.join(&split.file)))?;
            let skip = if k == 0 {
                0
            } else {
                (split.summary.preamble_bytes as usize).min(bytes.len())
            };
            stream.extend_from_slice(&bytes[skip..]);
        }
        streams.push(stream);
    }
    if streams.len() == 1 {
        return Ok(streams.pop().unwrap_or_default());
    }
    let views: Vec<&[u8]> = streams.iter().map(Vec::as_slice).collect();
    Ok(join(&views).unwrap_or_default())
}
