//! Snippets that copy nothing: a window of a session kept as byte spans of its splits.
//!
//! A referencing snippet is a directory:
//!
//! ```text
//! landing/
//!   snippet.json          what it is: the session, the window, per column its preamble and
//!                         per split the span of bytes that follows it (with the split's
//!                         SHA-256)
//!   preamble_main.ulg     the state at the window's start (header, definitions, parameters
//!                         in force, subscriptions, latched samples): a few KB
//! ```
//!
//! Read back ([`read_reference`]), each column is its preamble and then its spans, in order,
//! less the samples in them stamped outside the window (a real log has topics stamped 0, say,
//! between the window's samples; leaving them out as a rule rather than listing the bytes
//! around each keeps a snippet of a real log a few KB): the bytes
//! [`crate::store::snippet::snippet`] would have copied; columns are joined as a
//! session's are. The session learns of the snippet (`SESSION/referenced-by/`), and the disk
//! budget makes a snippet its own copy ([`materialise_references`]) before it deletes a session
//! a snippet references. A split is checked against its SHA-256 when read: a session changed
//! under a snippet is an error, never a wrong snippet.

use std::io;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::store::amend::read_split;
use crate::store::columns::join;
use crate::store::manifest::{hex, read_manifest, write_file_durably};
use crate::store::output::make_folders_durably;
use crate::store::reading::selected_columns;
use crate::store::snippet::{SnippetError, SnippetStats, WindowFollower, cut_column};
use crate::store::splitter::SplitPolicy;

/// The snippet's description in its directory.
pub const SNIPPET_FILE: &str = "snippet.json";
/// Identifies its format.
pub const SNIPPET_FORMAT: &str = "ulog-recv-snippet/1";
/// The copy a snippet holds once its session is gone.
pub const MATERIALISED_FILE: &str = "snippet.ulg";
/// The folder of a session that lists the snippets referencing it.
pub const REFERENCED_BY: &str = "referenced-by";

/// `snippet.json`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SnippetReference {
    pub format: String,
    /// The session, as an absolute path.
    pub session: PathBuf,
    /// The window, µs of log time.
    pub from_us: u64,
    pub to_us: u64,
    pub columns: Vec<ReferencedColumn>,
    /// Once the session was to be deleted: the snippet's own copy (a file of its directory);
    /// the references are then history.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub materialised: Option<String>,
}

/// One column of a referencing snippet.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReferencedColumn {
    pub name: String,
    /// Its preamble: a file of the snippet's directory.
    pub preamble: String,
    pub splits: Vec<ReferencedSplit>,
}

/// The bytes of one split a column takes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReferencedSplit {
    /// The split, relative to the session.
    pub file: String,
    pub sha256: String,
    /// The amendments merged into it when the snippet was cut (the span is of the split read
    /// with them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub amendments: Vec<String>,
    /// `[start, end)`: the bytes from the window's first message in this split to its last.
    /// Samples in the span stamped outside the window are not part of the snippet (as a
    /// copied snippet leaves them out).
    pub span: [u64; 2],
}

/// Why a referencing snippet cannot be made or read.
#[derive(Debug, thiserror::Error)]
pub enum ReferenceError {
    #[error(transparent)]
    Cut(#[from] SnippetError),
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{0} is not a snippet ({SNIPPET_FILE} unreadable: {1})")]
    NotASnippet(PathBuf, String),
    #[error(
        "the snippet references {file} of {session}, which changed or is gone (SHA-256 {found} \
         instead of {expected})"
    )]
    Changed {
        session: PathBuf,
        file: String,
        expected: String,
        found: String,
    },
    #[error("the snippet has no column '{0}'")]
    NoColumn(String),
    #[error("{0} exists and is not empty")]
    Exists(PathBuf),
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> ReferenceError + '_ {
    move |source| ReferenceError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Whether `dir` holds a snippet (referencing or materialised).
pub fn is_snippet(dir: &Path) -> bool {
    dir.join(SNIPPET_FILE).is_file()
}

/// Cuts the window `[from_us, to_us]` of the session in `session_dir` (all its columns, or
/// `column` alone) as a referencing snippet in the new directory `out`, and enters it in the
/// session. Returns what it holds, and the bytes a copied snippet would have.
pub fn snippet_reference(
    session_dir: &Path,
    from_us: u64,
    to_us: u64,
    latched: &SplitPolicy,
    column: Option<&str>,
    out: &Path,
) -> Result<(SnippetStats, u64), ReferenceError> {
    if to_us < from_us {
        return Err(SnippetError::EmptyWindow { from_us, to_us }.into());
    }
    if std::fs::read_dir(out).is_ok_and(|mut d| d.next().is_some()) {
        return Err(ReferenceError::Exists(out.to_owned()));
    }
    let session = session_dir.canonicalize().map_err(io_at(session_dir))?;
    let manifest = read_manifest(&session).map_err(io_at(&session))?;
    let names: Vec<&str> = match column {
        Some(c) => vec![c],
        None => manifest.column_names().collect(),
    };
    let mut reference = SnippetReference {
        format: SNIPPET_FORMAT.into(),
        session: session.clone(),
        from_us,
        to_us,
        columns: Vec::new(),
        materialised: None,
    };
    let mut preambles = Vec::new();
    let mut stats = SnippetStats::default();
    let mut cut_bytes: Vec<Vec<u8>> = Vec::new();
    let columns = selected_columns(&manifest, column).map_err(SnippetError::from)?;
    for (name, splits) in names.into_iter().zip(columns) {
        let splits: Vec<_> = splits.iter().filter(|s| s.closed).collect();
        let Some(cut) = cut_column(&session, &manifest, &splits, from_us, to_us, latched)? else {
            continue;
        };
        stats.splits_read += cut.stats.splits_read;
        stats.samples += cut.stats.samples;
        stats.latched_samples += cut.stats.latched_samples;
        let referenced = cut
            .spans
            .iter()
            .map(|&(k, start, end)| {
                let split = cut.splits[k];
                ReferencedSplit {
                    file: split.file.clone(),
                    sha256: split.sha256.clone().unwrap_or_default(),
                    amendments: manifest
                        .amendments
                        .iter()
                        .filter(|a| a.fills.iter().any(|f| f.split == split.file))
                        .map(|a| a.file.clone())
                        .collect(),
                    span: [start, end],
                }
            })
            .collect();
        let preamble = format!("preamble_{name}.ulg");
        preambles.push((preamble.clone(), cut.bytes[..cut.preamble_len].to_vec()));
        cut_bytes.push(cut.bytes);
        reference.columns.push(ReferencedColumn {
            name: name.to_owned(),
            preamble,
            splits: referenced,
        });
    }
    // What a copied snippet would hold: the columns joined (a lone column as it is).
    let copied = match cut_bytes.as_slice() {
        [] => return Err(SnippetError::NoData.into()),
        [one] => one.len(),
        several => {
            let streams: Vec<&[u8]> = several.iter().map(Vec::as_slice).collect();
            join(&streams).map_or(0, |joined| joined.len())
        }
    } as u64;
    make_folders_durably(out).map_err(io_at(out))?;
    let out = out.canonicalize().map_err(io_at(out))?;
    for (name, bytes) in &preambles {
        write_file_durably(&out, name, bytes).map_err(io_at(&out.join(name)))?;
    }
    write_reference(&out, &reference)?;
    // The session learns of it last: a snippet it lists always exists whole.
    register(&session, &out)?;
    Ok((stats, copied))
}

fn write_reference(dir: &Path, reference: &SnippetReference) -> Result<(), ReferenceError> {
    let mut text = serde_json::to_vec_pretty(reference).map_err(|e| ReferenceError::Io {
        path: dir.join(SNIPPET_FILE),
        source: io::Error::other(e),
    })?;
    text.push(b'\n');
    write_file_durably(dir, SNIPPET_FILE, &text).map_err(io_at(&dir.join(SNIPPET_FILE)))
}

/// Reads a snippet's `snippet.json`.
pub fn read_reference_file(dir: &Path) -> Result<SnippetReference, ReferenceError> {
    let bytes = std::fs::read(dir.join(SNIPPET_FILE))
        .map_err(|e| ReferenceError::NotASnippet(dir.to_owned(), e.to_string()))?;
    serde_json::from_slice(&bytes)
        .map_err(|e| ReferenceError::NotASnippet(dir.to_owned(), e.to_string()))
}

/// The name under which a session lists the snippet in `snippet_dir` (absolute).
fn registration_name(snippet_dir: &Path) -> String {
    let digest = Sha256::digest(snippet_dir.as_os_str().as_encoded_bytes());
    format!("{}.path", &hex(&digest)[..16])
}

fn register(session: &Path, snippet_dir: &Path) -> Result<(), ReferenceError> {
    let dir = session.join(REFERENCED_BY);
    make_folders_durably(&dir).map_err(io_at(&dir))?;
    write_file_durably(
        &dir,
        &registration_name(snippet_dir),
        snippet_dir.as_os_str().as_encoded_bytes(),
    )
    .map_err(io_at(&dir))
}

/// The snippet in `dir` as one ULog stream (all its columns joined, or `column` alone).
pub fn read_reference(dir: &Path, column: Option<&str>) -> Result<Vec<u8>, ReferenceError> {
    let reference = read_reference_file(dir)?;
    if let Some(copy) = &reference.materialised {
        let path = dir.join(copy);
        return std::fs::read(&path).map_err(io_at(&path));
    }
    let manifest = read_manifest(&reference.session).map_err(io_at(&reference.session))?;
    let mut streams = Vec::new();
    for c in &reference.columns {
        if column.is_some_and(|name| name != c.name) {
            continue;
        }
        let path = dir.join(&c.preamble);
        let mut stream = std::fs::read(&path).map_err(io_at(&path))?;
        let mut follower = WindowFollower::new(&stream, reference.from_us, reference.to_us);
        for split in &c.splits {
            let path = reference.session.join(&split.file);
            let raw = std::fs::read(&path).map_err(io_at(&path))?;
            let found = hex(&Sha256::digest(&raw));
            if found != split.sha256 {
                return Err(ReferenceError::Changed {
                    session: reference.session.clone(),
                    file: split.file.clone(),
                    expected: split.sha256.clone(),
                    found,
                });
            }
            drop(raw);
            let amendments: Vec<_> = manifest
                .amendments
                .iter()
                .filter(|a| split.amendments.contains(&a.file))
                .cloned()
                .collect();
            let bytes =
                read_split(&reference.session, &amendments, &split.file).map_err(io_at(&path))?;
            let [start, end] = split.span;
            let span =
                bytes
                    .get(start as usize..end as usize)
                    .ok_or_else(|| ReferenceError::Changed {
                        session: reference.session.clone(),
                        file: split.file.clone(),
                        expected: format!("bytes {start}..{end}"),
                        found: format!("{} bytes", bytes.len()),
                    })?;
            follower.follow(span, &mut stream);
        }
        streams.push(stream);
    }
    match streams.len() {
        0 => Err(ReferenceError::NoColumn(
            column.unwrap_or_default().to_owned(),
        )),
        1 => Ok(streams.pop().unwrap_or_default()),
        _ => {
            let views: Vec<&[u8]> = streams.iter().map(Vec::as_slice).collect();
            Ok(join(&views).unwrap_or_default())
        }
    }
}

/// The snippets that reference the session in `session` and still exist (those whose
/// directory is gone or that were materialised are left out).
pub fn referencing_snippets(session: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(session.join(REFERENCED_BY)) else {
        return Vec::new();
    };
    let session = session
        .canonicalize()
        .unwrap_or_else(|_| session.to_owned());
    let mut out: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read(e.path()).ok())
        .map(|bytes| PathBuf::from(String::from_utf8_lossy(&bytes).into_owned()))
        .filter(|dir| {
            read_reference_file(dir).is_ok_and(|r| r.materialised.is_none() && r.session == session)
        })
        .collect();
    out.sort();
    out
}

/// Makes every snippet that references the session in `session` hold its own copy (before
/// the session is deleted): the copy written durably, then `snippet.json` says so. Fails on
/// the first snippet it cannot copy (the session must then stay).
pub fn materialise_references(session: &Path) -> Result<usize, ReferenceError> {
    let snippets = referencing_snippets(session);
    for dir in &snippets {
        let bytes = read_reference(dir, None)?;
        write_file_durably(dir, MATERIALISED_FILE, &bytes)
            .map_err(io_at(&dir.join(MATERIALISED_FILE)))?;
        let mut reference = read_reference_file(dir)?;
        reference.materialised = Some(MATERIALISED_FILE.into());
        write_reference(dir, &reference)?;
        tracing::info!(
            snippet = %dir.display(),
            session = %session.display(),
            bytes = bytes.len(),
            "a snippet now holds its own copy: the session it referenced is to be deleted"
        );
    }
    Ok(snippets.len())
}
