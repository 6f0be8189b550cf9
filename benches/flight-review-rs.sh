#!/usr/bin/env bash
# Builds Flight Review v2's converter (`ulog-convert`, PX4/flight-review-rs) where
# `cargo bench --bench export` looks for it: ~/.cache/ulog-recv/flight-review-rs.
#
# usage: benches/flight-review-rs.sh [CHECKOUT [PX4_ULOG_CHECKOUT]]
#   CHECKOUT: a checkout of PX4/flight-review-rs (default: cloned from GitHub);
#   PX4_ULOG_CHECKOUT: a checkout of PX4/px4-ulog-rs, its git dependency, for a machine that
#   cannot reach GitHub from cargo (the dependency is then taken from there).
set -euo pipefail
dest="${XDG_CACHE_HOME:-$HOME/.cache}/ulog-recv/flight-review-rs"
if [ -n "${1:-}" ]; then
    rm -rf "$dest" && mkdir -p "$dest" && cp -r "$1/." "$dest/"
elif [ ! -d "$dest" ]; then
    git clone https://github.com/PX4/flight-review-rs "$dest"
fi
cd "$dest"
if [ -n "${2:-}" ]; then
    sed -i "s|^px4-ulog = {.*|px4-ulog = { path = \"$(realpath "$2")\" }|" crates/converter/Cargo.toml
fi
# Its pinned toolchain, when this machine has another: the stable one builds it.
rm -f rust-toolchain.toml rust-toolchain
cargo build --release -p flight-review --bin ulog-convert
echo "built: $dest/target/release/ulog-convert"
