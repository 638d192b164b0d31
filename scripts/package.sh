#!/usr/bin/env bash
# Builds the Debian package of the gateway: $TARGET/debian/oncerpc_<version>-1_<arch>.deb
# (the binary, /etc/oncerpc/oncerpc.toml, oncerpc.service, the man page and completions;
# see [package.metadata.deb] in crates/gateway/Cargo.toml). Prints the .deb's path last.
#
# Usage: ./scripts/package.sh [--profile PROFILE] [--no-build]
#   --profile dist (the default): the lean release binary (LTO, stripped; a few minutes)
#   --profile dev --no-build: package the binary `cargo test` already built (what CI does)
# Installs cargo-deb 3.8.0 (`cargo install --locked cargo-deb@3.8.0`) when it is missing: pinned,
# because cargo-deb warns that packaging a dev-profile binary (as CI does) will become an error.
set -euo pipefail
cd "$(dirname "$0")/.."

PROFILE=dist
BUILD=1
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) PROFILE=${2:?--profile needs a name}; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    *) echo "usage: $0 [--profile PROFILE] [--no-build]" >&2; exit 2 ;;
  esac
done

if ! cargo deb --version >/dev/null 2>&1; then
  echo "== installing cargo-deb" >&2
  cargo install --locked cargo-deb@3.8.0 >&2
fi

TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
case "$PROFILE" in dev|test) OUT="$TARGET_DIR/debug" ;; release|bench) OUT="$TARGET_DIR/release" ;; *) OUT="$TARGET_DIR/$PROFILE" ;; esac
if [ "$BUILD" = 1 ]; then
  echo "== cargo build --profile $PROFILE -p oncerpc" >&2
  cargo build --locked --profile "$PROFILE" -p oncerpc >&2
fi
BIN="$OUT/oncerpc"
[ -x "$BIN" ] || { echo "error: no binary at $BIN (build it, or drop --no-build)" >&2; exit 1; }

# The man page and completions come from the binary's own command-line definition.
mkdir -p "$OUT/completions"
"$BIN" manpage | gzip -9n > "$OUT/oncerpc.1.gz"
"$BIN" completions bash > "$OUT/completions/oncerpc"
"$BIN" completions zsh > "$OUT/completions/_oncerpc"
"$BIN" completions fish > "$OUT/completions/oncerpc.fish"

# The dist profile strips its own binary and is compressed hard; any other (CI's dev binary)
# is stripped into the package and compressed fast.
FLAGS=(--strip --fast)
[ "$PROFILE" = dist ] && FLAGS=(--no-strip)
echo "== cargo deb --profile $PROFILE ${FLAGS[*]}" >&2
cargo deb --package oncerpc --no-build --profile "$PROFILE" "${FLAGS[@]}" --output "$TARGET_DIR/debian/" | tail -n 1
