//! What a command was pointed at: a ULog file, a log session, or a referencing snippet.
//! Anything else is refused before anything is written, naming the path and why (a file
//! that is empty, shorter than a ULog header, or does not begin with the ULog magic; a
//! directory without a manifest; an ArduPilot DataFlash log, file or session, which the
//! commands that read ULog cannot read).

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::autopilot::LogFormat;
use crate::dataflash::HEADER as DATAFLASH_HEADER;
use crate::store::manifest::{MANIFEST, read_manifest};
use crate::store::reference::is_snippet;
use crate::ulog::message::{FILE_HEADER_LEN, FileHeader, NotULog};

/// A path a command can read a flight from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogInput {
    /// A file that opens with a ULog header (its messages may still be cut short).
    File(FileHeader),
    /// A session directory (its manifest is there).
    Session,
    /// A referencing snippet's directory.
    Snippet,
}

/// Why a path is not something to read a flight from.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a ULog log ({why})")]
    NotULog { path: PathBuf, why: NotULog },
    #[error(
        "{path} is not a ULog log nor a log session (a directory holding {MANIFEST}, as the \
         daemon writes under --log-dir)"
    )]
    NotSession { path: PathBuf },
    #[error(
        "{path} is a file; {what} takes a log session (a directory holding {MANIFEST}, as the \
         daemon writes under --log-dir)"
    )]
    FileNotSession { path: PathBuf, what: &'static str },
    #[error(
        "{path} is an ArduPilot DataFlash log{}: this command reads ULog (PX4's logs) only; \
         ulog-recv info reads it, and pymavlink, MAVExplorer, Mission Planner and UAV Log \
         Viewer open its .bin files",
        if *session { " session" } else { "" }
    )]
    DataFlash { path: PathBuf, session: bool },
}

/// What `path` is, judged by its first bytes or its directory's files.
pub fn log_input(path: &Path) -> Result<LogInput, InputError> {
    let io = |source| InputError::Io {
        path: path.to_owned(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(io)?;
    if meta.is_dir() {
        return if is_snippet(path) {
            Ok(LogInput::Snippet)
        } else if path.join(MANIFEST).is_file() {
            match read_manifest(path) {
                Ok(m) if m.log_format == LogFormat::DataFlash => Err(InputError::DataFlash {
                    path: path.to_owned(),
                    session: true,
                }),
                _ => Ok(LogInput::Session),
            }
        } else {
            Err(InputError::NotSession {
                path: path.to_owned(),
            })
        };
    }
    let mut first = Vec::with_capacity(FILE_HEADER_LEN);
    std::fs::File::open(path)
        .map_err(io)?
        .take(FILE_HEADER_LEN as u64)
        .read_to_end(&mut first)
        .map_err(io)?;
    if first.len() >= 3 && first[..2] == DATAFLASH_HEADER && first[2] == crate::dataflash::FMT_TYPE
    {
        return Err(InputError::DataFlash {
            path: path.to_owned(),
            session: false,
        });
    }
    FileHeader::check_file_start(&first)
        .map(LogInput::File)
        .map_err(|why| InputError::NotULog {
            path: path.to_owned(),
            why,
        })
}

/// `path` as a session directory of either format, for `what` (the command) that takes only
/// sessions: a file or anything else is refused, saying which it is (a file that is no log
/// as [`log_input`] refuses it). Returns the format of
/// its splits.
pub fn session_input(path: &Path, what: &'static str) -> Result<LogFormat, InputError> {
    let not_session = || InputError::NotSession {
        path: path.to_owned(),
    };
    let meta = std::fs::metadata(path).map_err(|source| InputError::Io {
        path: path.to_owned(),
        source,
    })?;
    if !meta.is_dir() {
        // What the file is, if it is not a log at all; else that it is not a session.
        log_input(path)?;
        return Err(InputError::FileNotSession {
            path: path.to_owned(),
            what,
        });
    }
    if is_snippet(path) || !path.join(MANIFEST).is_file() {
        return Err(not_session());
    }
    read_manifest(path)
        .map(|m| m.log_format)
        .map_err(|source| InputError::Io {
            path: path.join(MANIFEST),
            source,
        })
}

/// `path` as a ULog session (PX4's), for `what` that reads ULog: [`session_input`], and an
/// ArduPilot session refused as such.
pub fn ulog_session_input(path: &Path, what: &'static str) -> Result<(), InputError> {
    match session_input(path, what)? {
        LogFormat::ULog => Ok(()),
        LogFormat::DataFlash => Err(InputError::DataFlash {
            path: path.to_owned(),
            session: true,
        }),
    }
}

/// The files of the ArduPilot log `path` names, in log order: a DataFlash file (it begins
/// with an FMT record) itself, or an ArduPilot session's splits in its manifest's order;
/// `None` for anything else (a ULog log, a PX4 session, a path that cannot be read).
pub fn dataflash_files(path: &Path) -> Option<Vec<PathBuf>> {
    if path.is_dir() {
        let manifest = read_manifest(path).ok()?;
        return (manifest.log_format == LogFormat::DataFlash)
            .then(|| manifest.splits.iter().map(|s| path.join(&s.file)).collect());
    }
    let mut head = [0u8; 3];
    std::fs::File::open(path).ok()?.read_exact(&mut head).ok()?;
    (head[..2] == DATAFLASH_HEADER && head[2] == crate::dataflash::FMT_TYPE)
        .then(|| vec![path.to_owned()])
}

/// Opens one of the files [`dataflash_files`] names: a split of a session with the gaps
/// its amendments fill read as their records ([`crate::store::amend::read_split`]), any
/// other file as it is.
pub fn open_bin_part(path: &Path) -> std::io::Result<Box<dyn Read + Send>> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    if let (Ok(manifest), Some(name)) = (read_manifest(dir), name)
        && (manifest.amendments.iter())
            .flat_map(|a| &a.fills)
            .any(|f| f.split == name)
    {
        let bytes = crate::store::amend::read_split(dir, &manifest.amendments, &name)?;
        return Ok(Box::new(std::io::Cursor::new(bytes)));
    }
    Ok(Box::new(std::fs::File::open(path)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_that_do_not_open_with_a_ulog_header_are_refused_with_why() {
        let dir = std::env::temp_dir().join(format!("ulog-recv-input-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, bytes: &[u8]| {
            let p = dir.join(name);
            std::fs::write(&p, bytes).unwrap();
            p
        };
        let why = |p: &Path| match log_input(p) {
            Err(InputError::NotULog { why, .. }) => why,
            other => panic!("{}: {other:?}", p.display()),
        };
        assert_eq!(why(&write("empty.ulg", b"")), NotULog::Empty);
        assert_eq!(
            why(&write("junk.ulg", b"junk\n")),
            NotULog::Magic {
                start: b"junk\n".to_vec()
            }
        );
        assert_eq!(
            why(&write("short.ulg", b"ULog\x01\x12\x35\x01")),
            NotULog::Short { len: 8 }
        );
        let e = log_input(&write("junk2.ulg", b"junk\n"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("junk2.ulg is not a ULog log (it does not begin"),
            "{e}"
        );
        assert!(e.contains("6a 75 6e 6b 0a"), "{e}");
        let mut header = b"ULog\x01\x12\x35\x01".to_vec();
        header.extend_from_slice(&7u64.to_le_bytes());
        assert_eq!(
            log_input(&write("header.ulg", &header)).unwrap(),
            LogInput::File(FileHeader {
                version: 1,
                timestamp: 7
            })
        );
        let plain = dir.join("plain");
        std::fs::create_dir_all(&plain).unwrap();
        assert!(matches!(
            log_input(&plain),
            Err(InputError::NotSession { .. })
        ));
        assert!(matches!(
            session_input(&dir.join("header.ulg"), "fill"),
            Err(InputError::FileNotSession { what: "fill", .. })
        ));
        assert!(matches!(
            session_input(&plain, "upload"),
            Err(InputError::NotSession { .. })
        ));
        // ArduPilot's logs, a file and a session, are named as what they are.
        let bin = write("00000001.BIN", &crate::dataflash::Format::fmt().to_bytes());
        let e = log_input(&bin).unwrap_err();
        assert!(matches!(e, InputError::DataFlash { session: false, .. }));
        assert!(
            e.to_string().contains("is an ArduPilot DataFlash log: "),
            "{e}"
        );
        let session = dir.join("ardupilot-session");
        std::fs::create_dir_all(&session).unwrap();
        let manifest = crate::store::manifest::Manifest {
            log_format: LogFormat::DataFlash,
            ..Default::default()
        };
        crate::store::manifest::write_manifest(&session, &manifest).unwrap();
        // A command that takes either autopilot's sessions takes it.
        assert_eq!(
            session_input(&session, "upload").unwrap(),
            LogFormat::DataFlash
        );
        assert!(ulog_session_input(&session, "fill").is_err());
        let e = log_input(&session).unwrap_err();
        assert!(
            e.to_string()
                .contains("is an ArduPilot DataFlash log session: this command reads ULog"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
