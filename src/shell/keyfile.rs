//! The shell's side of MAVLink 2 signing: reading the key file, and keeping the signing
//! clock's reservation on disk so that our timestamps never go backwards across restarts.
//!
//! The reservation: before signing with timestamps up to T, T is on disk (written whole:
//! temporary file, fsync, rename, fsync of the directory). A start begins above what the file
//! says and above the wall clock, and reserves [`RESERVATION`] ahead; while the daemon runs the
//! reservation is renewed when half of it is used. A power cut or `kill -9` then costs at most
//! a jump ahead of a minute, never a timestamp used twice, even on a computer whose clock
//! starts at 1970 after each boot.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::link::signing::{KeyError, SigningKey, TIMESTAMP_UNITS_PER_S, timestamp_at};
use crate::sys::secret::{SecretFileError, read_secret_file};

/// How far ahead of the timestamps in use the file reserves (a minute).
pub const RESERVATION: u64 = 60 * TIMESTAMP_UNITS_PER_S;

/// The reservation file's name, in the log directory.
pub const RESERVATION_FILE: &str = "signing-timestamp";

/// Why a key file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    #[error(transparent)]
    File(#[from] SecretFileError),
    #[error("{path}: {source}")]
    Key { path: PathBuf, source: KeyError },
}

/// Reads the key in `path`: 64 hex digits, or a passphrase (see
/// [`SigningKey::from_file_text`]). A file that group or others may read or write is refused.
pub fn load_key(path: &Path) -> Result<SigningKey, KeyFileError> {
    let text = read_secret_file(path, "the signing key file")?;
    SigningKey::from_file_text(&text).map_err(|source| KeyFileError::Key {
        path: path.to_owned(),
        source,
    })
}

/// Why the reservation cannot be kept.
#[derive(Debug, thiserror::Error)]
#[error("cannot keep the signing timestamp in {path}: {source}")]
pub struct ReservationError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

/// The signing clock's reservation on disk; see the module docs.
#[derive(Debug, Clone)]
pub struct Reservation {
    path: PathBuf,
    /// Timestamps below this are ours to use.
    reserved_until: u64,
}

impl Reservation {
    /// Reads the reservation in `dir` (none yet: 0) and reserves ahead of it and of the wall
    /// clock. Returns the reservation and the timestamp to start signing at.
    pub fn open(dir: &Path) -> Result<(Self, u64), ReservationError> {
        let path = dir.join(RESERVATION_FILE);
        let err = |source| ReservationError {
            path: path.clone(),
            source,
        };
        let on_disk = match std::fs::read_to_string(&path) {
            Ok(text) => text.trim().parse::<u64>().unwrap_or_else(|_| {
                tracing::warn!(path = %path.display(), "unreadable signing timestamp; using the clock");
                0
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(err(e)),
        };
        let start = start_above(on_disk, timestamp_at(SystemTime::now()));
        let mut reservation = Self {
            path: path.clone(),
            reserved_until: 0,
        };
        reservation.write(start + RESERVATION).map_err(err)?;
        Ok((reservation, start))
    }

    pub fn reserved_until(&self) -> u64 {
        self.reserved_until
    }

    /// The new reservation to write when our clock reads `timestamp`: `Some` once half of the
    /// reservation is used.
    pub fn renewal(&self, timestamp: u64) -> Option<u64> {
        renewal(self.reserved_until, timestamp)
    }

    /// Writes `until` whole and durably; the reservation holds it once this returns.
    pub fn write(&mut self, until: u64) -> std::io::Result<()> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        crate::store::output::make_folders_durably(dir)?;
        let tmp = self.path.with_extension("tmp");
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode_0600()
            .open(&tmp)?;
        writeln!(f, "{until}")?;
        f.sync_all()?;
        std::fs::rename(&tmp, &self.path)?;
        std::fs::File::open(dir)?.sync_all()?;
        self.reserved_until = until;
        Ok(())
    }
}

/// Where a start's signing clock begins: above the reservation on disk (`on_disk`, 0 for
/// none) and above the wall clock's timestamp (`wall`).
pub fn start_above(on_disk: u64, wall: u64) -> u64 {
    if crate::planted::is(crate::planted::Bug::SigningClockFromWallClock) {
        return wall + 1;
    }
    on_disk.max(wall) + 1
}

/// The reservation to write when the clock reads `timestamp` and `reserved_until` is on
/// disk: `Some` once half of the reservation is used.
pub fn renewal(reserved_until: u64, timestamp: u64) -> Option<u64> {
    (timestamp + RESERVATION / 2 >= reserved_until).then(|| timestamp + RESERVATION)
}

/// `OpenOptions::mode(0o600)` under a name that says why.
trait PrivateFile {
    fn mode_0600(&mut self) -> &mut Self;
}

impl PrivateFile for std::fs::OpenOptions {
    fn mode_0600(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.mode(0o600)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn dir(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("ulog-recv-keyfile-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_key_others_can_read_is_refused() {
        let d = dir("key");
        let path = d.join("key");
        std::fs::write(&path, "correct horse battery staple\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = load_key(&path).unwrap_err();
        assert!(
            matches!(
                e,
                KeyFileError::File(SecretFileError::TooOpen { mode: 0o644, .. })
            ),
            "{e}"
        );
        assert!(e.to_string().contains("chmod 600"), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let key = load_key(&path).unwrap();
        assert_eq!(
            key,
            SigningKey::from_file_text(b"correct horse battery staple").unwrap()
        );
        assert!(matches!(
            load_key(&d),
            Err(KeyFileError::File(SecretFileError::NotAFile { .. }))
        ));
        assert!(matches!(
            load_key(&d.join("none")),
            Err(KeyFileError::File(SecretFileError::Read { .. }))
        ));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_restart_starts_above_every_reserved_timestamp_even_with_the_clock_behind() {
        let d = dir("reservation");
        // A reservation far in the future (a clock that was ahead, or many restarts).
        let ahead = timestamp_at(SystemTime::now()) + 1000 * TIMESTAMP_UNITS_PER_S;
        std::fs::write(d.join(RESERVATION_FILE), format!("{ahead}\n")).unwrap();
        let (r, start) = Reservation::open(&d).unwrap();
        assert!(start > ahead);
        assert_eq!(r.reserved_until(), start + RESERVATION);
        let mode = std::fs::metadata(d.join(RESERVATION_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        // Renewed once half is used, not before.
        assert_eq!(r.renewal(start), None);
        let half = start + RESERVATION / 2;
        assert_eq!(r.renewal(half), Some(half + RESERVATION));
        // The next start begins above the reservation on disk.
        let (_, again) = Reservation::open(&d).unwrap();
        assert!(again > r.reserved_until());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
