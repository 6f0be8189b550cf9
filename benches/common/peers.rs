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
