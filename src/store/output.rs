//! A file a command writes (an export, a snippet): written under a temporary name beside
//! its final one, synced, then renamed over it, so that neither a reader nor a power cut
//! ever finds part of it under the final name. Dropped before [`OutputFile::commit`], the
//! temporary file is removed.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use crate::store::manifest::sync_dir;

/// An output file being written. Write through [`OutputFile::file`] (`&File` is a writer).
#[derive(Debug)]
pub struct OutputFile {
    path: PathBuf,
    temporary: PathBuf,
    file: Option<File>,
}

impl OutputFile {
    /// Creates `.NAME.partial` beside `path` (replacing a stale one).
    pub fn create(path: &Path) -> io::Result<Self> {
        let name = path
            .file_name()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
        let temporary = path.with_file_name(format!(".{}.partial", name.to_string_lossy()));
        let file = File::create(&temporary)?;
        Ok(Self {
            path: path.to_owned(),
            temporary,
            file: Some(file),
        })
    }

    /// The temporary file, to write to.
    pub fn file(&self) -> &File {
        self.file
            .as_ref()
            .expect("an output file not yet committed")
    }

    /// The file whole: synced, renamed to its final name, its directory synced.
    pub fn commit(mut self) -> io::Result<()> {
        let file = self.file.take().expect("committed once");
        file.sync_all()?;
        drop(file);
        std::fs::rename(&self.temporary, &self.path)?;
        let dir = match self.path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        sync_dir(dir)
    }

    /// Commits `outputs` together: each file synced, then all renamed to their final names,
    /// then each of their directories synced once: none appears before all are whole. Syncs are per file, never of the whole filesystem: another writer's data on
    /// the same card (a camera's video) is not waited for.
    pub fn commit_all(outputs: Vec<OutputFile>) -> io::Result<()> {
        for out in &outputs {
            out.file().sync_all()?;
        }
        let mut dirs = std::collections::BTreeSet::new();
        for mut out in outputs {
            drop(out.file.take());
            std::fs::rename(&out.temporary, &out.path)?;
            dirs.insert(out.path.parent().map(Path::to_owned).unwrap_or_default());
        }
        for dir in dirs {
            sync_dir(if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                &dir
            })?;
        }
        Ok(())
    }
}

impl Drop for OutputFile {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            let _ = std::fs::remove_file(&self.temporary);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn the_final_name_appears_only_once_the_file_is_whole() {
        let dir = std::env::temp_dir().join(format!("ulog-recv-output-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("flight.mcap");
        let out = OutputFile::create(&path).unwrap();
        out.file().write_all(b"half").unwrap();
        assert!(!path.exists());
        assert!(dir.join(".flight.mcap.partial").exists());
        drop(out);
        assert!(!dir.join(".flight.mcap.partial").exists());
        assert!(!path.exists());
        let out = OutputFile::create(&path).unwrap();
        out.file().write_all(b"whole").unwrap();
        out.commit().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"whole");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        // Several at once: each under its name once all are committed.
        let outs: Vec<_> = (0..3)
            .map(|k| {
                let out = OutputFile::create(&dir.join(format!("t{k}.parquet"))).unwrap();
                out.file().write_all(&[k]).unwrap();
                out
            })
            .collect();
        assert!(!dir.join("t0.parquet").exists());
        OutputFile::commit_all(outs).unwrap();
        for k in 0..3u8 {
            assert_eq!(
                std::fs::read(dir.join(format!("t{k}.parquet"))).unwrap(),
                [k]
            );
        }
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 4);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
