#!/usr/bin/env bash
# The Debian package as an operator meets it: install it with dpkg, check what it put where,
# check its config, verify its systemd unit, run the unit's ExecStart as the service would
# (no systemd runs in the test container: a UID of DynamicUser's range and a state directory
# made the way StateDirectory= makes it), send a keyed command twice, reload it with the
# unit's ExecReload and with `oncerpc reload`, see an invalid config refused, then remove and
# purge it.
#
# Usage: ./scripts/package-test.sh [PACKAGE.deb]
#   Without an argument it builds one from the dev binary `cargo test` left in the target dir
#   (./scripts/package.sh --profile dev --no-build); ONCERPC_PACKAGE_ARGS overrides those flags.
# Needs root (dpkg). In CI (CI=true) anything missing is a failure; elsewhere it skips, saying why.
set -euo pipefail
cd "$(dirname "$0")/.."

ci() { [[ "${CI:-}" == "true" || "${CI:-}" == "1" ]]; }
skip() { if ci; then echo "error: package test: $1" >&2; exit 1; fi; echo "warning: package test skipped: $1" >&2; exit 0; }
fail() { echo "error: package test: $*" >&2; exit 1; }
step() { echo "== package: $*"; }

[ "$(id -u)" = 0 ] || skip "it installs a package with dpkg and needs root"
# One run at a time on a machine: the package, /etc/oncerpc and /var/lib/oncerpc are global.
exec 9>/var/lock/oncerpc-package-test.lock
flock -w 900 9 || fail "another package test holds /var/lock/oncerpc-package-test.lock"
command -v dpkg >/dev/null || skip "dpkg is not available (not a Debian system)"
for tool in curl setpriv; do command -v "$tool" >/dev/null || skip "$tool is not installed"; done
if dpkg-query -W -f='${Status}' oncerpc 2>/dev/null | grep -q 'ok installed'; then
  ci || fail "oncerpc is installed on this machine: this test would replace and purge it; remove it first"
fi
STATE=/var/lib/oncerpc
[ ! -e "$STATE" ] || ci || fail "$STATE exists: this test would use and then purge it; move it away first"

started=$(date +%s)
DEB=${1:-}
if [ -z "$DEB" ]; then
  # shellcheck disable=SC2086 # word splitting of the flags is intended
  DEB=$(./scripts/package.sh ${ONCERPC_PACKAGE_ARGS:---profile dev --no-build} | tail -n 1)
fi
[ -f "$DEB" ] || fail "no package at '$DEB'"
echo "== package: $DEB ($(du -h "$DEB" | cut -f1))"

WORK=$(mktemp -d)
PID=
CONF=/etc/oncerpc/oncerpc.toml
cleanup() {
  [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
  [ -f "$WORK/oncerpc.toml.orig" ] && cp "$WORK/oncerpc.toml.orig" "$CONF"
  if dpkg-query -W -f='${Status}' oncerpc 2>/dev/null | grep -q 'installed'; then dpkg --purge oncerpc >/dev/null 2>&1 || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

step "dpkg -i"
dpkg -i "$DEB" >"$WORK/dpkg.log" 2>&1 || { cat "$WORK/dpkg.log" >&2; fail "dpkg -i failed"; }
[ -x /usr/bin/oncerpc ] || fail "/usr/bin/oncerpc is missing"
/usr/bin/oncerpc --version | grep -q '^oncerpc [0-9]' || fail "oncerpc --version: $(/usr/bin/oncerpc --version)"
dpkg-query -W -f='${Conffiles}\n' oncerpc | grep -q "^ $CONF " || fail "$CONF is not a conffile"
UNIT=$(dpkg -L oncerpc | grep '/systemd/system/oncerpc\.service$' | head -n 1)
[ -n "$UNIT" ] && [ -f "$UNIT" ] || fail "oncerpc.service is not installed: $(dpkg -L oncerpc | tr '\n' ' ')"
for f in /usr/share/bash-completion/completions/oncerpc /usr/share/zsh/vendor-completions/_oncerpc \
         /usr/share/fish/vendor_completions.d/oncerpc.fish; do
  grep -q serve "$f" || fail "$f is missing or does not complete serve"
done
MAN=/usr/share/man/man1/oncerpc.1.gz
[ -f "$MAN" ] || fail "$MAN is missing"
if command -v man >/dev/null; then
  MANPAGER=cat MANWIDTH=80 man -l "$MAN" 2>/dev/null | grep -q 'SYNOPSIS' || fail "man -l $MAN does not render"
else
  zcat "$MAN" | grep -q '^\.TH oncerpc 1' || fail "$MAN has no .TH header"
fi

step "check-config $CONF"
/usr/bin/oncerpc check-config "$CONF" >"$WORK/check.out" 2>&1 || { cat "$WORK/check.out" >&2; fail "the shipped config is refused"; }
grep -q '^config OK' "$WORK/check.out" || fail "check-config: $(cat "$WORK/check.out")"

step "systemd-analyze verify $UNIT"
if ! command -v systemd-analyze >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd >/dev/null 2>&1 || true
fi
if command -v systemd-analyze >/dev/null; then
  set +e; systemd-analyze verify "$UNIT" >"$WORK/verify.out" 2>&1; rc=$?; set -e
  # Unknown keys and unparsable values are only warnings (exit 0): any line about the unit fails.
  if grep -q 'oncerpc\.service' "$WORK/verify.out"; then
    cat "$WORK/verify.out" >&2; fail "systemd-analyze verify finds fault with the unit"
  elif [ "$rc" = 0 ]; then
    echo "   the unit verifies"
  else
    echo "   systemd-analyze could not run here (not a fault of the unit):"
    sed 's/^/     /' "$WORK/verify.out"
  fi
else
  echo "   systemd-analyze is not available (apt package systemd could not be installed): not verified"
fi

# The unit's own ExecStart, as its dynamic user: a free UID from DynamicUser's range, and the
# state directory StateDirectory=oncerpc would make (owned by it, 0700, the working directory).
EXEC=$(sed -n 's/^ExecStart=//p' "$UNIT")
[ -n "$EXEC" ] || fail "no ExecStart= in $UNIT"
SVC_UID=61184
while getent passwd "$SVC_UID" >/dev/null || getent group "$SVC_UID" >/dev/null; do SVC_UID=$((SVC_UID + 1)); done
mkdir -p "$STATE" && chown "$SVC_UID:$SVC_UID" "$STATE" && chmod 0700 "$STATE"

step "ExecStart as UID $SVC_UID: $EXEC (listening on a free port instead of 8080)"
# shellcheck disable=SC2086 # the unit's command line, split as systemd splits it (no quotes in it)
(cd "$STATE" && exec setpriv --reuid="$SVC_UID" --regid="$SVC_UID" --clear-groups --no-new-privs -- \
   $EXEC --listen 127.0.0.1:0) 2>"$WORK/serve.log" &
PID=$!
ADDR=
for _ in $(seq 1 100); do
  ADDR=$(grep -o 'listening on 127\.0\.0\.1:[0-9]*' "$WORK/serve.log" | head -n 1 | sed 's/listening on //') || true
  [ -n "$ADDR" ] && break
  kill -0 "$PID" 2>/dev/null || { cat "$WORK/serve.log" >&2; fail "oncerpc serve exited at start"; }
  sleep 0.1
done
[ -n "$ADDR" ] || { cat "$WORK/serve.log" >&2; fail "oncerpc serve did not listen"; }
[ -f "$STATE/oncerpc.db" ] || fail "the SQLite store is not in $STATE: $(ls -la "$STATE")"
[ "$(stat -c %u "$STATE/oncerpc.db")" = "$SVC_UID" ] || fail "$STATE/oncerpc.db is not the service user's"

rpc() { # rpc HEADERS_FILE BODY [curl args...]
  local headers=$1 body=$2; shift 2
  curl -sS -D "$headers" "http://$ADDR/rpc" -H 'content-type: application/json' "$@" -d "$body"
}
KEY="pkg-test-$$-$(date +%s)"
CALL='{"jsonrpc":"2.0","method":"counter.increment","params":{"by":3},"id":1}'
before=$(rpc "$WORK/h0" '{"jsonrpc":"2.0","method":"counter.get","id":0}' | sed -n 's/.*"total":\([0-9]*\).*/\1/p')
[ -n "$before" ] || fail "counter.get did not answer a total"
first=$(rpc "$WORK/h1" "$CALL" -H "X-Idempotency-Key: $KEY")
second=$(rpc "$WORK/h2" "$CALL" -H "X-Idempotency-Key: $KEY")
after=$(rpc "$WORK/h3" '{"jsonrpc":"2.0","method":"counter.get","id":0}' | sed -n 's/.*"total":\([0-9]*\).*/\1/p')
step "counter.increment twice with key $KEY: $first / $second; total $before -> $after"
grep -qi '^x-idempotency-status: new' "$WORK/h1" || fail "the first call is not new: $(cat "$WORK/h1")"
grep -qi '^x-idempotency-status: duplicate' "$WORK/h2" || fail "the retry is not a duplicate: $(cat "$WORK/h2")"
[ "$first" = "$second" ] || fail "the duplicate's body differs: $first / $second"
[ "$first" = "{\"jsonrpc\":\"2.0\",\"result\":{\"total\":$((before + 3))},\"id\":1}" ] || fail "unexpected answer $first"
[ "$after" = "$((before + 3))" ] || fail "the counter moved from $before to $after, not by 3 once"

# The unit's ExecReload (what `systemctl reload oncerpc` runs; no systemd runs here), then
# `oncerpc reload`, which waits for the outcome on /healthz: the process reloads, keeps
# serving and keeps its records.
RELOAD=$(sed -n 's/^ExecReload=//p' "$UNIT")
[ -n "$RELOAD" ] || fail "no ExecReload= in $UNIT: systemctl reload would not reload"
step "ExecReload: ${RELOAD//\$MAINPID/$PID}"
${RELOAD//\$MAINPID/$PID} || fail "ExecReload failed"
for _ in $(seq 1 100); do
  grep -q 'configuration reloaded' "$WORK/serve.log" && break
  kill -0 "$PID" 2>/dev/null || { cat "$WORK/serve.log" >&2; fail "oncerpc serve exited on SIGHUP"; }
  sleep 0.1
done
grep -q 'configuration reloaded' "$WORK/serve.log" || { cat "$WORK/serve.log" >&2; fail "no reload after ExecReload"; }
step "oncerpc reload --pid $PID --healthz http://$ADDR"
/usr/bin/oncerpc reload --pid "$PID" --healthz "http://$ADDR" >"$WORK/reload.out" 2>&1 \
  || { cat "$WORK/reload.out" "$WORK/serve.log" >&2; fail "oncerpc reload failed"; }
grep -q '"outcome":"ok"' "$WORK/reload.out" || fail "oncerpc reload: $(cat "$WORK/reload.out")"
again=$(rpc "$WORK/h4" "$CALL" -H "X-Idempotency-Key: $KEY")
grep -qi '^x-idempotency-status: duplicate' "$WORK/h4" || fail "after the reloads the retry is not a duplicate: $(cat "$WORK/h4")"
[ "$again" = "$first" ] || fail "after the reloads the duplicate's body differs: $again"

step "SIGTERM"
kill -TERM "$PID"
wait "$PID" || fail "oncerpc serve exited $? on SIGTERM: $(cat "$WORK/serve.log")"
PID=

step "an invalid config is refused, naming the key"
cp "$CONF" "$WORK/oncerpc.toml.orig"
{ echo 'listne = "127.0.0.1:8080"'; cat "$WORK/oncerpc.toml.orig"; } >"$CONF"
set +e
# shellcheck disable=SC2086
timeout 20 setpriv --reuid="$SVC_UID" --regid="$SVC_UID" --clear-groups -- $EXEC 2>"$WORK/bad.log"
rc=$?
set -e
[ "$rc" = 2 ] || fail "with an unknown key, ExecStart exited $rc, not 2: $(cat "$WORK/bad.log")"
grep -q 'listne' "$WORK/bad.log" || fail "the error does not name the key: $(cat "$WORK/bad.log")"
echo "   exit 2: $(head -n 1 "$WORK/bad.log")"
grep -q '^RestartPreventExitStatus=2' "$UNIT" || fail "the unit would restart on a config error"
cp "$WORK/oncerpc.toml.orig" "$CONF" && rm "$WORK/oncerpc.toml.orig"

step "dpkg -r, then --purge"
dpkg -r oncerpc >"$WORK/dpkg.log" 2>&1 || { cat "$WORK/dpkg.log" >&2; fail "dpkg -r failed"; }
[ ! -e /usr/bin/oncerpc ] || fail "/usr/bin/oncerpc is still there after dpkg -r"
[ ! -e "$UNIT" ] || fail "$UNIT is still there after dpkg -r"
[ -f "$CONF" ] || fail "dpkg -r removed the conffile (only --purge should)"
dpkg --purge oncerpc >"$WORK/dpkg.log" 2>&1 || { cat "$WORK/dpkg.log" >&2; fail "dpkg --purge failed"; }
[ ! -e "$CONF" ] || fail "$CONF is still there after --purge"
[ ! -e "$STATE" ] || fail "$STATE is still there after --purge"
if dpkg-query -W -f='${Status}' oncerpc 2>/dev/null | grep -q installed; then fail "oncerpc is still known to dpkg"; fi

echo "== package test passed in $(( $(date +%s) - started )) s"
