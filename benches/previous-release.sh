#!/usr/bin/env bash
# Builds the previous release of ulog-recv where `cargo bench --bench export` looks for it
# (~/.cache/ulog-recv/previous-release/COMMIT/ulog-recv), from this repository's history, so
# that the bench puts it beside the current code in the same run.
#
# usage: benches/previous-release.sh [COMMIT]   (default: PREVIOUS_RELEASE in benches/common/peers.rs)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
commit="${1:-$(sed -n 's/^pub const PREVIOUS_RELEASE: &str = "\(.*\)";/\1/p' "$here/benches/common/peers.rs")}"
dest="${XDG_CACHE_HOME:-$HOME/.cache}/ulog-recv/previous-release/$commit"
# Built as the current binary is: the bench profile, given the current Cargo.toml's `dist`
# settings (LTO, codegen units: what ships), whatever the previous release's own Cargo.toml
# said. A build with other settings is built again.
build=$(python3 -c '
import sys, tomllib
dist = tomllib.load(open(sys.argv[1], "rb"))["profile"]["dist"]
lto = dist.get("lto", False)
print(str(lto).lower() if isinstance(lto, bool) else lto, dist.get("codegen-units", 16))
' "$here/Cargo.toml")
read -r lto codegen_units <<< "$build"
if [ -x "$dest/ulog-recv" ] && [ "$(cat "$dest/build" 2>/dev/null)" = "$build" ]; then
    echo "built already: $dest/ulog-recv"
    exit 0
fi
src="$(mktemp -d)"
trap 'rm -rf "$src"' EXIT
git -C "$here" archive "$commit" | tar -x -C "$src"
CARGO_TARGET_DIR="$src/target" CARGO_PROFILE_BENCH_LTO="$lto" \
    CARGO_PROFILE_BENCH_CODEGEN_UNITS="$codegen_units" \
    cargo build --profile bench --locked --manifest-path "$src/Cargo.toml" --bin ulog-recv
mkdir -p "$dest"
cp "$src/target/release/ulog-recv" "$dest/ulog-recv"
echo "$build" > "$dest/build"
echo "built: $dest/ulog-recv ($(git -C "$here" log -1 --format='%h %ad %s' --date=short "$commit"))"
