//! The programs the benches measure ours against, found where they are built: Flight Review
//! v2's converter and the previous release of ulog-recv.

use std::path::PathBuf;

/// Flight Review v2's converter (`ulog-convert`): `$FLIGHT_REVIEW_CONVERT`, else the one built
/// in `../shared/vendor/flight-review-rs/bin/`, else `~/.cache/ulog-recv/flight-review-rs/`
/// (`benches/flight-review-rs.sh`).
pub fn flight_review_convert() -> Option<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let home = std::env::var_os("HOME").map(PathBuf::from);
    [
        std::env::var_os("FLIGHT_REVIEW_CONVERT").map(PathBuf::from),
        Some(root.join("../shared/vendor/flight-review-rs/bin/ulog-convert")),
        home.map(|h| h.join(".cache/ulog-recv/flight-review-rs/target/release/ulog-convert")),
    ]
    .into_iter()
    .flatten()
    .find(|p| p.is_file())
}

/// The commit of the previous release: the last whose README quoted the bench figures (the
/// guide's performance page took them over after it). `$PREVIOUS_RELEASE` names another.
pub const PREVIOUS_RELEASE: &str = "1a8eab1";

/// The previous release's binary and its commit: `$PREVIOUS_RELEASE_BIN`, else the one
/// `benches/previous-release.sh` built in `~/.cache/ulog-recv/previous-release/COMMIT/`.
pub fn previous_release() -> Option<(PathBuf, String)> {
    let commit = std::env::var("PREVIOUS_RELEASE").unwrap_or_else(|_| PREVIOUS_RELEASE.into());
    if let Some(bin) = std::env::var_os("PREVIOUS_RELEASE_BIN") {
        return Some((PathBuf::from(bin), commit));
    }
    let home = PathBuf::from(std::env::var_os("HOME")?);
    let bin = home.join(format!(
        ".cache/ulog-recv/previous-release/{commit}/ulog-recv"
    ));
    bin.is_file().then_some((bin, commit))
}

/// `bin` as the package ships it: a copy in `dir` (made if need be; the caller removes it)
/// without the symbols and line tables (`strip`) that the bench profile keeps for profilers.
/// A binary of 140 MB, most of it line tables, took 0.27 ms longer to start (`--version`:
/// 2.23 ms against 1.96 stripped), which a process timed on a small log counts. Without
/// `strip`, `bin` itself, said loudly.
pub fn as_shipped(bin: &std::path::Path, dir: &std::path::Path) -> PathBuf {
    let name = bin
        .file_name()
        .map_or("bin".into(), |n| n.to_string_lossy().into_owned());
    let copy = dir.join(format!("{name}-stripped-{}", fastrand::u64(..)));
    let stripped = std::fs::create_dir_all(dir).is_ok()
        && std::process::Command::new("strip")
            .arg("-o")
            .arg(&copy)
            .arg(bin)
            .status()
            .is_ok_and(|s| s.success());
    match stripped {
        true => copy,
        false => {
            eprintln!(
                "WARNING: cannot strip {} (binutils' strip): timing it with its line tables",
                bin.display()
            );
            bin.to_owned()
        }
    }
}
