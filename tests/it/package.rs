//! The packages `.ci/package` builds, checked as an operator gets them: each .deb holds the
//! binary for its architecture, both units, the config as a conffile, the system user,
//! completions and man pages, the copyright file (DEP-5, the project's MIT OR Apache-2.0) and
//! the third-party licences of every crate the binary links; lintian finds no error and
//! nothing to say of the copyright file; the packaged units pass systemd's checks;
//! the binaries need no glibc newer than Ubuntu 22.04's (a Jetson) and `Depends` says what they
//! need; dpkg installs the package into a scratch root, makes its user, and an upgrade keeps
//! the operator's edited config; the arm64 binary, under qemu-user, receives a flight from the
//! simulator over loopback UDP and reads it back as the native build does.
//!
//! Without the packages (`.ci/package` not run) or the tools (dpkg-deb, lintian, qemu-user),
//! these tests say so loudly and pass; under CI they fail instead.

use crate::common;
use crate::common::project;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::procs::{BIN, Proc, free_udp_port, fresh_dir, ulg_files, wait_for_line};

const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The newest glibc the binaries may need: Ubuntu 22.04's (JetPack 6). Raspberry Pi OS
/// bookworm has 2.36.
const GLIBC_FLOOR: (u32, u32) = (2, 35);

/// Something these tests need is missing: a loud skip, or under CI a failure.
fn skip_or_fail(what: &str) {
    assert!(
        std::env::var_os("CI").is_none(),
        "CI must build and test the packages: {what}"
    );
    eprintln!("\n!!! SKIPPED: {what} !!!\n");
}

/// A command-line tool, or a loud skip (`install` says where it comes from).
fn tool(name: &str, install: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        skip_or_fail(&format!("{name} not found ({install})"));
    }
    found
}

/// One architecture's package.
struct Package {
    /// Debian's name for the architecture: amd64, arm64.
    arch: &'static str,
    deb: PathBuf,
}

impl Package {
    /// The ELF machine its binary is built for.
    fn elf_machine(&self) -> u16 {
        match self.arch {
            "amd64" => 0x3e,
            "arm64" => 0xb7,
            other => panic!("no ELF machine for {other}"),
        }
    }

    /// The Rust name of the architecture, as `std::env::consts::ARCH` says it.
    fn rust_arch(&self) -> &'static str {
        match self.arch {
            "amd64" => "x86_64",
            "arm64" => "aarch64",
            other => panic!("no Rust architecture for {other}"),
        }
    }

    /// The package's files under a fresh directory (`dpkg-deb -x`).
    fn unpack(&self, name: &str) -> PathBuf {
        let dir = fresh_dir(&format!("deb-{}-{name}", self.arch));
        run(Command::new("dpkg-deb").arg("-x").arg(&self.deb).arg(&dir));
        dir
    }

    /// A command running `binary` (this package's architecture) on this machine: directly,
    /// or under qemu-user where the machine is another (no binfmt is assumed).
    fn command(&self, binary: &Path) -> Option<Command> {
        if std::env::consts::ARCH == self.rust_arch() {
            return Some(Command::new(binary));
        }
        let qemu = format!("qemu-{}", self.rust_arch());
        let qemu = tool(&qemu, "Debian's qemu-user")?;
        let mut command = Command::new(qemu);
        command
            .args(["-L", &format!("/usr/{}-linux-gnu", self.rust_arch())])
            .arg(binary);
        Some(command)
    }
}

/// Both packages, built by `.ci/package` into target/debian; `None` after a loud skip.
fn packages() -> Option<Vec<Package>> {
    tool("dpkg-deb", "Debian's dpkg")?;
    let packages: Vec<Package> = ["amd64", "arm64"]
        .into_iter()
        .map(|arch| Package {
            arch,
            deb: project().join(format!("target/debian/ulog-recv_{VERSION}-1_{arch}.deb")),
        })
        .collect();
    for p in &packages {
        if !p.deb.exists() {
            skip_or_fail(&format!(
                "{} not built (run .ci/package first)",
                p.deb.display()
            ));
            return None;
        }
    }
    Some(packages)
}

/// Runs `command`; asserts it succeeded (showing its stderr); returns its stdout.
fn run(command: &mut Command) -> String {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(
        out.status.success(),
        "{command:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `dpkg-deb --field DEB FIELD`.
fn field(deb: &Path, name: &str) -> String {
    run(Command::new("dpkg-deb").arg("--field").arg(deb).arg(name))
        .trim()
        .to_string()
}

/// "2.34" as (2, 34).
fn glibc_version(text: &str) -> (u32, u32) {
    let (major, minor) = text
        .split_once('.')
        .unwrap_or_else(|| panic!("not a version: {text}"));
    (
        major.parse().unwrap(),
        minor.trim_end_matches(')').parse().unwrap(),
    )
}

#[test]
fn each_package_holds_the_binary_units_config_user_completions_and_man_pages() {
    let Some(packages) = packages() else { return };
    for p in &packages {
        assert_eq!(field(&p.deb, "Package"), "ulog-recv");
        assert_eq!(field(&p.deb, "Version"), format!("{VERSION}-1"));
        assert_eq!(field(&p.deb, "Architecture"), p.arch);
        let description = field(&p.deb, "Description");
        assert!(
            description.contains("kept when the package")
                && description.contains("removed and when it is purged"),
            "the description says the logs stay: {description}"
        );

        let listing = run(Command::new("dpkg-deb").arg("-c").arg(&p.deb));
        let paths: BTreeSet<&str> = listing
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .map(|p| p.trim_start_matches('.'))
            .collect();
        let mut wanted = vec![
            "/usr/bin/ulog-recv",
            "/usr/lib/systemd/system/ulog-recv.service",
            "/usr/lib/systemd/system/ulog-recv@.service",
            "/etc/ulog-recv/ulog-recv.toml",
            "/usr/lib/sysusers.d/ulog-recv.conf",
            "/usr/share/bash-completion/completions/ulog-recv",
            "/usr/share/zsh/vendor-completions/_ulog-recv",
            "/usr/share/fish/vendor_completions.d/ulog-recv.fish",
            "/usr/share/man/man1/ulog-recv.1.gz",
            "/usr/share/doc/ulog-recv/copyright",
            "/usr/share/doc/ulog-recv/changelog.Debian.gz",
            "/usr/share/doc/ulog-recv/third-party-licenses.md",
            "/usr/share/doc/ulog-recv/monitoring/ulog-recv.rules.yml",
            "/usr/share/doc/ulog-recv/monitoring/grafana-dashboard.json",
        ];
        let commands = ["info", "export", "fill", "tail", "demo"];
        let pages: Vec<String> = commands
            .iter()
            .map(|c| format!("/usr/share/man/man1/ulog-recv-{c}.1.gz"))
            .collect();
        wanted.extend(pages.iter().map(String::as_str));
        for path in &wanted {
            assert!(paths.contains(path), "{}: no {path} in {listing}", p.arch);
        }

        // The control files: the conffile, and the maintainer scripts.
        let control = fresh_dir(&format!("control-{}", p.arch));
        run(Command::new("dpkg-deb").arg("-e").arg(&p.deb).arg(&control));
        assert_eq!(
            std::fs::read_to_string(control.join("conffiles")).unwrap(),
            "/etc/ulog-recv/ulog-recv.toml\n"
        );
        for script in ["postinst", "prerm", "postrm"] {
            let mode = std::os::unix::fs::PermissionsExt::mode(
                &std::fs::metadata(control.join(script))
                    .unwrap()
                    .permissions(),
            );
            assert_eq!(mode & 0o111, 0o111, "{script} is executable");
        }

        // The files are the project's own, the binary is for the package's architecture.
        let tree = p.unpack("contents");
        for (packaged, ours) in [
            (
                "usr/lib/systemd/system/ulog-recv.service",
                "systemd/ulog-recv.service",
            ),
            (
                "usr/lib/systemd/system/ulog-recv@.service",
                "systemd/ulog-recv@.service",
            ),
            ("etc/ulog-recv/ulog-recv.toml", "systemd/ulog-recv.toml"),
            (
                "usr/lib/sysusers.d/ulog-recv.conf",
                "systemd/ulog-recv.sysusers",
            ),
            (
                "usr/share/doc/ulog-recv/copyright",
                "systemd/package/copyright",
            ),
        ] {
            assert_eq!(
                std::fs::read(tree.join(packaged)).unwrap(),
                std::fs::read(project().join(ours)).unwrap(),
                "{packaged} is not {ours}"
            );
        }
        let elf = std::fs::read(tree.join("usr/bin/ulog-recv")).unwrap();
        assert_eq!(&elf[..4], b"\x7fELF");
        assert_eq!(
            u16::from_le_bytes([elf[18], elf[19]]),
            p.elf_machine(),
            "{}: the binary is for another machine",
            p.arch
        );
        // The man page and the completions know the commands.
        let man = run(Command::new("gzip")
            .arg("-dc")
            .arg(tree.join("usr/share/man/man1/ulog-recv.1.gz")));
        assert!(man.contains(".TH ulog-recv 1"), "{man}");
        let bash =
            std::fs::read_to_string(tree.join("usr/share/bash-completion/completions/ulog-recv"))
                .unwrap();
        assert!(
            bash.lines()
                .any(|l| l.trim_start().starts_with("complete -F ")
                    && l.trim_end().ends_with(" ulog-recv")),
            "the bash completion is registered for ulog-recv"
        );
        for c in commands {
            assert!(
                man.contains(&format!("ulog\\-recv\\-{c}(1)")) && bash.contains(c),
                "{c} is in the man page and the completions"
            );
        }

        // The third-party notice names every crate the binary depends on directly.
        let notice =
            std::fs::read_to_string(tree.join("usr/share/doc/ulog-recv/third-party-licenses.md"))
                .unwrap();
        for (name, version) in locked_direct_dependencies() {
            assert!(
                notice.contains(&format!("- {name} {version}\n")),
                "{}: the third-party licences do not list {name} {version}",
                p.arch
            );
        }

        // And the web page's vendored plotting library, with its licence's text.
        let uplot =
            std::fs::read_to_string(project().join("src/web/page/vendor/uPlot.LICENSE")).unwrap();
        assert!(
            notice.contains("uPlot 1.6.32 (MIT)") && notice.contains(uplot.trim_end()),
            "{}: the third-party licences do not hold uPlot's",
            p.arch
        );

        // The tarball: the same tree under ulog-recv-VERSION-ARCH/, the same binary, and the
        // licence texts (no package manager shows them a copyright file's way).
        let tarball = project().join(format!(
            "target/package/ulog-recv-{VERSION}-{}.tar.gz",
            p.arch
        ));
        let untarred = fresh_dir(&format!("tarball-{}", p.arch));
        std::fs::create_dir_all(&untarred).unwrap();
        run(Command::new("tar")
            .arg("-xzf")
            .arg(&tarball)
            .arg("-C")
            .arg(&untarred));
        let top = untarred.join(format!("ulog-recv-{VERSION}-{}", p.arch));
        for path in wanted
            .iter()
            .filter(|p| !p.ends_with("/changelog.Debian.gz"))
        {
            let packaged = std::fs::read(tree.join(&path[1..])).unwrap();
            let tarred = std::fs::read(top.join(&path[1..]))
                .unwrap_or_else(|e| panic!("{}: {path}: {e}", tarball.display()));
            assert!(
                packaged == tarred,
                "{}: {path} differs from the .deb's",
                tarball.display()
            );
        }
        for licence in ["LICENSE-MIT", "LICENSE-APACHE"] {
            let tarred = std::fs::read(top.join("usr/share/doc/ulog-recv").join(licence))
                .unwrap_or_else(|e| panic!("{}: {licence}: {e}", tarball.display()));
            assert_eq!(
                tarred,
                std::fs::read(project().join(licence)).unwrap(),
                "{licence}"
            );
        }
        for dir in [&tree, &control, &untarred] {
            std::fs::remove_dir_all(dir).unwrap();
        }
    }
}

#[test]
fn the_binaries_need_no_glibc_newer_than_ubuntu_22_04_and_depends_says_what_they_need() {
    let Some(packages) = packages() else { return };
    let Some(readelf) = tool("readelf", "Debian's binutils") else {
        return;
    };
    for p in &packages {
        let tree = p.unpack("glibc");
        let versions = run(Command::new(&readelf)
            .arg("-V")
            .arg(tree.join("usr/bin/ulog-recv")));
        let newest = versions
            .split("GLIBC_")
            .skip(1)
            .filter_map(|v| {
                let v: String = v
                    .chars()
                    .take_while(|c| c.is_ascii_digit() || *c == '.')
                    .collect();
                let mut parts = v.split('.');
                Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
            })
            .max()
            .expect("the binary names glibc versions");
        assert!(
            newest <= GLIBC_FLOOR,
            "{}: needs GLIBC_{}.{}, newer than Ubuntu 22.04's {}.{}",
            p.arch,
            newest.0,
            newest.1,
            GLIBC_FLOOR.0,
            GLIBC_FLOOR.1
        );
        let depends = field(&p.deb, "Depends");
        let libc = depends
            .split(", ")
            .find_map(|d| d.strip_prefix("libc6 (>= "))
            .unwrap_or_else(|| panic!("{}: Depends names no libc6 version: {depends}", p.arch));
        let declared = glibc_version(libc);
        assert!(
            newest <= declared && declared <= GLIBC_FLOOR,
            "{}: the binary needs glibc {newest:?}, Depends says {declared:?}",
            p.arch
        );
        assert!(depends.contains("libgcc-s1"), "{depends}");
        std::fs::remove_dir_all(&tree).unwrap();
    }
}

#[test]
fn lintian_finds_no_error_in_either_package() {
    let Some(packages) = packages() else { return };
    let Some(lintian) = tool("lintian", "Debian's lintian") else {
        return;
    };
    for p in &packages {
        let out = Command::new(&lintian).arg(&p.deb).output().unwrap();
        let report = String::from_utf8_lossy(&out.stdout);
        let errors: Vec<&str> = report.lines().filter(|l| l.starts_with("E:")).collect();
        assert!(errors.is_empty(), "{}: lintian says {errors:#?}", p.arch);
        // Of the copyright file, not even a pedantic remark (a missing notice, DEP-5 syntax).
        let pedantic = run(Command::new(&lintian)
            .args(["--info", "--pedantic"])
            .arg(&p.deb));
        let about_copyright: Vec<&str> = pedantic
            .lines()
            .filter(|l| l.contains("copyright") || l.contains("dep5"))
            .collect();
        assert!(
            about_copyright.is_empty(),
            "{}: lintian says {about_copyright:#?}",
            p.arch
        );
    }
}

/// The name and locked version of each crate in Cargo.toml's `[dependencies]`, as
/// `cargo metadata` resolves them.
fn locked_direct_dependencies() -> Vec<(String, String)> {
    let metadata = run(Command::new(env!("CARGO"))
        .args(["metadata", "--locked", "--offline", "--format-version", "1"])
        .arg("--manifest-path")
        .arg(project().join("Cargo.toml")));
    let metadata: serde_json::Value = serde_json::from_str(&metadata).unwrap();
    let packages = metadata["packages"].as_array().unwrap();
    let ours = packages
        .iter()
        .find(|p| p["name"] == "ulog-recv")
        .expect("ulog-recv in cargo metadata");
    let normal: BTreeSet<&str> = ours["dependencies"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["kind"].is_null())
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    let resolved = metadata["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["id"] == ours["id"])
        .expect("ulog-recv in the resolved graph");
    resolved["deps"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| {
            let package = packages.iter().find(|p| p["id"] == d["pkg"])?;
            let name = package["name"].as_str()?;
            normal.contains(name).then(|| {
                (
                    name.to_string(),
                    package["version"].as_str().unwrap().to_string(),
                )
            })
        })
        .collect()
}

/// What ships is built with `dist` (fat LTO, one codegen unit, stripped); the benches time
/// the same optimisation (their built-in profile cannot inherit a custom one, so it repeats
/// `dist`'s two settings), and `release` stays as cargo makes it, so that the README's first
/// command (`cargo run --release -- demo`) builds in minutes.
#[test]
fn the_benches_build_as_dist_ships_and_release_is_cargos_own() {
    let manifest: toml::Table =
        toml::from_str(&std::fs::read_to_string(project().join("Cargo.toml")).unwrap()).unwrap();
    let profiles = manifest["profile"]
        .as_table()
        .expect("[profile.*] in Cargo.toml");
    let dist = profiles["dist"].as_table().expect("[profile.dist]");
    assert_eq!(dist["inherits"].as_str(), Some("release"));
    assert_eq!(dist["lto"].as_str(), Some("fat"));
    assert_eq!(dist["codegen-units"].as_integer(), Some(1));
    assert_eq!(dist["strip"].as_bool(), Some(true));
    let bench = profiles["bench"].as_table().expect("[profile.bench]");
    for key in ["lto", "codegen-units"] {
        assert_eq!(
            bench.get(key),
            dist.get(key),
            "[profile.bench] {key} is not [profile.dist]'s: the benches would time another build"
        );
    }
    assert!(
        !profiles.contains_key("release"),
        "[profile.release] is set: `cargo run --release` should build as cargo makes it"
    );
    let package = std::fs::read_to_string(project().join(".ci/package")).unwrap();
    assert!(package.contains("cargo build --profile dist --locked"));
    assert!(package.contains("deb_options=(--profile dist "));
}

#[test]
fn the_packaged_units_pass_systemd_analyze_verify_and_security() {
    let Some(packages) = packages() else { return };
    let Some(analyze) = common::units::systemd_analyze() else {
        return;
    };
    for p in &packages {
        let tree = p.unpack("units");
        let dir = fresh_dir(&format!("units-{}", p.arch));
        std::fs::create_dir_all(&dir).unwrap();
        let units = tree.join("usr/lib/systemd/system");
        for (unit, name) in [
            ("ulog-recv.service", "ulog-recv.service"),
            ("ulog-recv@.service", "ulog-recv@drone1.service"),
        ] {
            let text = std::fs::read_to_string(units.join(unit)).unwrap();
            common::units::check_unit(
                &analyze,
                &dir,
                name,
                &text,
                "/usr/bin/ulog-recv",
                &tree.join("usr/bin/ulog-recv"),
            );
        }
        std::fs::remove_dir_all(&tree).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// `binary` (a command running a packaged binary) runs `demo`: a simulated vehicle's flight
/// received into .ulg files, which pyulog reads as we do. Returns their directory.
fn runs_the_demo(mut binary: Command, name: &str) -> PathBuf {
    let logs = fresh_dir(&format!("{name}-demo"));
    let demo = [
        "demo",
        "--duration",
        "3",
        "--clean",
        "--foxglove",
        "0",
        "--log-dir",
    ];
    run(binary.args(demo).arg(&logs));
    let files = ulg_files(&logs);
    assert!(!files.is_empty(), "{name}: the demo wrote no .ulg");
    for f in &files {
        common::check_with_pyulog(f);
    }
    logs
}

/// `dpkg --root ROOT ARGS`, its maintainer scripts run without a chroot (they act inside
/// `$DPKG_ROOT` only, and leave this machine's services alone); dependencies not checked: the
/// root holds no libc package.
fn dpkg_in(root: &Path, args: &[&str]) -> String {
    run(Command::new("dpkg")
        .arg(format!("--root={}", root.display()))
        .args(["--force-script-chrootless", "--force-depends"])
        .args(args)
        .stdin(Stdio::null()))
}

/// A copy of `deb` with another version and, if given, another shipped config: what an
/// upgrade brings.
fn repacked(deb: &Path, version: &str, config: Option<&str>) -> PathBuf {
    let dir = fresh_dir(&format!("repack-{version}"));
    run(Command::new("dpkg-deb").arg("-R").arg(deb).arg(&dir));
    let control = dir.join("DEBIAN/control");
    let text = std::fs::read_to_string(&control).unwrap();
    let text = text.replace(
        &format!("Version: {VERSION}-1\n"),
        &format!("Version: {version}\n"),
    );
    assert!(text.contains(&format!("Version: {version}\n")));
    std::fs::write(&control, text).unwrap();
    if let Some(config) = config {
        std::fs::write(dir.join("etc/ulog-recv/ulog-recv.toml"), config).unwrap();
        // dpkg takes a conffile's change from its md5sum: keep the list true.
        let md5sums = dir.join("DEBIAN/md5sums");
        if md5sums.exists() {
            let sum = run(Command::new("md5sum").arg(dir.join("etc/ulog-recv/ulog-recv.toml")));
            let sum = sum.split_whitespace().next().unwrap();
            let text: String = std::fs::read_to_string(&md5sums)
                .unwrap()
                .lines()
                .map(|l| {
                    if l.ends_with(" etc/ulog-recv/ulog-recv.toml") {
                        format!("{sum}  etc/ulog-recv/ulog-recv.toml\n")
                    } else {
                        format!("{l}\n")
                    }
                })
                .collect();
            std::fs::write(&md5sums, text).unwrap();
        }
    }
    let out = dir.with_extension("deb");
    run(Command::new("dpkg-deb")
        .args(["--root-owner-group", "-b"])
        .arg(&dir)
        .arg(&out));
    out
}

#[test]
fn installed_into_a_root_it_makes_its_user_keeps_an_edited_config_on_upgrade_and_the_logs_on_purge()
{
    let Some(packages) = packages() else { return };
    if tool("dpkg", "Debian's dpkg").is_none() {
        return;
    }
    let host_arch = run(Command::new("dpkg").arg("--print-architecture"));
    let Some(p) = packages.iter().find(|p| p.arch == host_arch.trim()) else {
        skip_or_fail(&format!("no package for this machine ({host_arch})"));
        return;
    };
    let root = fresh_dir("dpkg-root");
    for dir in [
        "var/lib/dpkg/info",
        "var/lib/dpkg/updates",
        "var/log",
        "etc",
    ] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
    }
    std::fs::write(root.join("var/lib/dpkg/status"), "").unwrap();

    dpkg_in(&root, &["-i", p.deb.to_str().unwrap()]);
    let status = dpkg_in(&root, &["-s", "ulog-recv"]);
    assert!(status.contains("Status: install ok installed"), "{status}");
    // The user, from the package's sysusers.d file, in the root and not on this machine.
    let passwd = std::fs::read_to_string(root.join("etc/passwd")).unwrap();
    let user = passwd
        .lines()
        .find(|l| l.starts_with("ulog-recv:"))
        .unwrap_or_else(|| panic!("no ulog-recv user in {passwd}"));
    assert!(
        user.ends_with(":/var/lib/ulog-recv:/usr/sbin/nologin"),
        "{user}"
    );
    let group = std::fs::read_to_string(root.join("etc/group")).unwrap();
    assert!(
        group.lines().any(
            |l| l.starts_with("dialout:") && l.split(':').nth(3).unwrap().contains("ulog-recv")
        ),
        "ulog-recv is in dialout: {group}"
    );

    // The installed binary runs the demo: a simulated flight received into .ulg files.
    let logs = runs_the_demo(Command::new(root.join("usr/bin/ulog-recv")), "dpkg-root");

    // The operator edits the config; upgrades keep the edit.
    let config = root.join("etc/ulog-recv/ulog-recv.toml");
    let shipped = std::fs::read_to_string(&config).unwrap();
    let edited = shipped.replace("udp = 14550 ", "udp = 14551 ");
    assert_ne!(edited, shipped, "the shipped config sets udp = 14550");
    std::fs::write(&config, &edited).unwrap();
    // An upgrade whose config is the same as before: the edit stays, silently.
    let same = repacked(&p.deb, &format!("{VERSION}-2"), None);
    dpkg_in(&root, &["-i", same.to_str().unwrap()]);
    assert_eq!(std::fs::read_to_string(&config).unwrap(), edited);
    assert!(!root.join("etc/ulog-recv/ulog-recv.toml.dpkg-dist").exists());
    // An upgrade that ships a changed config, unattended (keep the operator's): the edit stays,
    // the new one lands beside it.
    let newer = format!("{shipped}# a new option's documentation\n");
    let changed = repacked(&p.deb, &format!("{VERSION}-3"), Some(&newer));
    dpkg_in(
        &root,
        &[
            "--force-confdef",
            "--force-confold",
            "-i",
            changed.to_str().unwrap(),
        ],
    );
    assert_eq!(std::fs::read_to_string(&config).unwrap(), edited);
    assert_eq!(
        std::fs::read_to_string(root.join("etc/ulog-recv/ulog-recv.toml.dpkg-dist")).unwrap(),
        newer
    );

    // Remove, then purge: the flights stay.
    let flight = root.join("var/lib/ulog-recv/2026-11-25T10-00-00Z/split_0000.ulg");
    std::fs::create_dir_all(flight.parent().unwrap()).unwrap();
    std::fs::write(&flight, b"ULog\x01\x12\x35").unwrap();
    dpkg_in(&root, &["--remove", "ulog-recv"]);
    assert!(!root.join("usr/bin/ulog-recv").exists());
    assert_eq!(
        std::fs::read_to_string(&config).unwrap(),
        edited,
        "remove keeps the config"
    );
    dpkg_in(&root, &["--purge", "ulog-recv"]);
    assert!(!config.exists(), "purge removes the config");
    assert!(flight.exists(), "purge keeps the logs");
    for dir in [&root, &logs] {
        std::fs::remove_dir_all(dir).unwrap();
    }
}

#[test]
fn the_arm64_binary_receives_a_flight_and_reads_it_back_as_the_native_build_does() {
    let Some(packages) = packages() else { return };
    let arm64 = packages.iter().find(|p| p.arch == "arm64").unwrap();
    let tree = arm64.unpack("e2e");
    let binary = tree.join("usr/bin/ulog-recv");
    let Some(mut probe) = arm64.command(&binary) else {
        return;
    };
    let version = run(probe.arg("--version"));
    assert_eq!(version.trim(), format!("ulog-recv {VERSION}"));

    // The arm64 daemon (under qemu-user here), the simulated vehicle native, over loopback UDP.
    let logs = fresh_dir("arm64-logs");
    let runtime = fresh_dir("arm64-run");
    std::fs::create_dir_all(&runtime).unwrap();
    let port = free_udp_port();
    let mut daemon = arm64.command(&binary).unwrap();
    daemon
        .args(["--udp", &port.to_string(), "--log-dir"])
        .arg(&logs)
        .env("RUNTIME_DIRECTORY", &runtime)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    let mut daemon = Proc(daemon.spawn().unwrap(), "the arm64 daemon");
    let log = project().join("testdata/synthetic.ulg");
    let (mut sim, lines) = Proc::spawn_watched(
        "the simulator",
        &[
            "sim".into(),
            log.display().to_string(),
            "--once".into(),
            "--link-rate".into(),
            "570000".into(),
            "--udp-connect".into(),
            format!("127.0.0.1:{port}"),
        ],
    );
    wait_for_line(&lines, "the whole log was sent", Duration::from_secs(120));
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        daemon.terminate().success(),
        "the arm64 daemon exits cleanly"
    );
    assert!(sim.wait(Duration::from_secs(10)).success());

    let files = ulg_files(&logs);
    assert!(!files.is_empty(), "the arm64 daemon wrote no .ulg");
    let session = files[0].parent().unwrap().to_path_buf();
    let mut written = 0;
    for f in &files {
        written += std::fs::metadata(f).unwrap().len();
        common::check_with_pyulog(f);
    }
    let original = std::fs::metadata(&log).unwrap().len();
    assert!(
        written >= original * 9 / 10,
        "the arm64 daemon wrote {written} bytes of a {original}-byte log"
    );

    // `info` answers the same from both builds, on every split and on the session.
    let mut inputs = files.clone();
    inputs.push(session);
    for input in &inputs {
        let ours = run(Command::new(BIN).arg("info").arg("--json").arg(input));
        let theirs = run(arm64
            .command(&binary)
            .unwrap()
            .arg("info")
            .arg("--json")
            .arg(input));
        assert_eq!(theirs, ours, "info --json {} differs", input.display());
    }

    // From the unpacked package, the arm64 binary runs the demo too.
    let demo_logs = runs_the_demo(arm64.command(&binary).unwrap(), "arm64");
    for dir in [&tree, &logs, &runtime, &demo_logs] {
        std::fs::remove_dir_all(dir).unwrap();
    }
}
