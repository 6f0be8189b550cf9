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

/// One column of a session as a byte stream, read split by split: the same bytes
/// [`read_session`] joins for that column (each split after the first without its preamble,
/// amendments merged), holding one split at a time, never the column whole.
pub struct ColumnStream {
    dir: PathBuf,
    manifest: Manifest,
    /// The column's index in the manifest (0: the main one).
    column: usize,
    /// The next split to load.
    next: usize,
    /// The split being read, and how far.
    current: Vec<u8>,
    at: usize,
}

impl ColumnStream {
    /// The session in `dir` when it is read as one column (`column` named, or a session
    /// without columns); `None` when its columns must be joined ([`read_session`]).
    pub fn open(dir: &Path, column: Option<&str>) -> Result<Option<Self>, SessionError> {
        let manifest = read_manifest(dir).map_err(|source| SessionError::Io {
            path: dir.to_owned(),
            source,
        })?;
        // A column named must exist (the same error as a whole reading's).
        selected_columns(&manifest, column)?;
        let index = match column {
            None if manifest.columns.is_empty() => 0,
            None => return Ok(None),
            Some(name) if name == crate::store::columns::MAIN => 0,
            Some(name) => match manifest.columns.iter().position(|c| c.name == name) {
                Some(k) => k + 1,
                None => return Ok(None),
            },
        };
        Ok(Some(Self {
            dir: dir.to_owned(),
            manifest,
            column: index,
            next: 0,
            current: Vec::new(),
            at: 0,
        }))
    }

    /// Bytes of the column's split files: the stream's length, preambles not taken off.
    pub fn files_len(&self) -> u64 {
        self.manifest
            .column_splits(self.column)
            .iter()
            .filter_map(|s| std::fs::metadata(self.dir.join(&s.file)).ok())
            .map(|m| m.len())
            .sum()
    }
}

impl io::Read for ColumnStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.at == self.current.len() {
            let splits = self.manifest.column_splits(self.column);
            let Some(split) = splits.get(self.next) else {
                return Ok(0);
            };
            self.current = read_split(&self.dir, &self.manifest.amendments, &split.file)?;
            self.at = match self.next {
                0 => 0,
                _ => (split.summary.preamble_bytes as usize).min(self.current.len()),
            };
            self.next += 1;
        }
        let n = buf.len().min(self.current.len() - self.at);
        buf[..n].copy_from_slice(&self.current[self.at..self.at + n]);
        self.at += n;
        Ok(n)
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
