//! systemd's own checks of a unit file, shared by the tests of the repository's units and of
//! the packages' units: `systemd-analyze verify` without a warning, and
//! `systemd-analyze security` rating the sandbox at 2 or less (0 locked down, 10 exposed).

use std::path::{Path, PathBuf};
use std::process::Command;

/// `systemd-analyze`, or `None` after a loud skip; under CI its absence is a failure.
pub fn systemd_analyze() -> Option<PathBuf> {
    let found = ["/usr/bin/systemd-analyze", "/bin/systemd-analyze"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists());
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must verify the units: install systemd (`.ci/run` does)"
        );
        eprintln!("\n!!! SKIPPED: systemd-analyze not found; the units are not verified !!!\n");
    }
    found
}

/// Writes `text` (a unit whose `ExecStart` names `installed_binary`) as `dir/name` with the
/// binary at `binary` instead (verify checks that it exists), and has systemd check it.
pub fn check_unit(
    analyze: &Path,
    dir: &Path,
    name: &str,
    text: &str,
    installed_binary: &str,
    binary: &Path,
) {
    assert!(
        text.contains(&format!(
            "ExecStart={installed_binary} --config /etc/ulog-recv/"
        )),
        "{name}: ExecStart does not run {installed_binary}"
    );
    let path = dir.join(name);
    std::fs::write(
        &path,
        text.replace(installed_binary, &binary.display().to_string()),
    )
    .unwrap();
    let out = Command::new(analyze)
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // verify exits 0 on some bad values, but warns: no warning either.
    assert!(
        out.status.success() && stderr.trim().is_empty(),
        "{name}: {stderr}"
    );
    let out = Command::new(analyze)
        .args(["security", "--offline=true"])
        .arg(&path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let exposure: f64 = text
        .lines()
        .find_map(|l| l.split("Overall exposure level for ").nth(1))
        .and_then(|l| l.split(": ").nth(1))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|x| x.parse().ok())
        .unwrap_or_else(|| panic!("{name}: no exposure level in {text}"));
    assert!(exposure <= 2.0, "{name}: exposure {exposure}");
}
