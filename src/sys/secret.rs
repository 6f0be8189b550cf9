//! Files that hold secrets (the signing key, upload credentials, a server's API key): read
//! only when nobody but their owner may read or write them, as ssh does with its keys.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Why a secret file cannot be used; `what` names it for the user ("the signing key file").
#[derive(Debug, thiserror::Error)]
pub enum SecretFileError {
    #[error("cannot read {what} {path}: {source}")]
    Read {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{what} {path} can be read by others (mode {mode:04o}): run `chmod 600 {path}` (as \
         ssh, ulog-recv refuses a secret others can read)"
    )]
    TooOpen {
        what: &'static str,
        path: PathBuf,
        mode: u32,
    },
    #[error("{what} {path} is not a regular file")]
    NotAFile { what: &'static str, path: PathBuf },
}

/// The bytes of the secret file `path`. A file that group or others may read or write is
/// refused.
pub fn read_secret_file(path: &Path, what: &'static str) -> Result<Vec<u8>, SecretFileError> {
    let read = |source| SecretFileError::Read {
        what,
        path: path.to_owned(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(read)?;
    if !meta.is_file() {
        return Err(SecretFileError::NotAFile {
            what,
            path: path.to_owned(),
        });
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(SecretFileError::TooOpen {
            what,
            path: path.to_owned(),
            mode,
        });
    }
    std::fs::read(path).map_err(read)
}
