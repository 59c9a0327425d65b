#!/usr/bin/env bash
# `cmake --install` puts every operations file where systemd, mount(8) and an operator
# look for them. Usage: install_test.sh BUILD_DIR PREFIX
set -euo pipefail
build=$1
prefix=$2
dest=$(mktemp -d /tmp/epochfs-install-XXXXXX)
trap 'rm -rf "$dest"' EXIT
DESTDIR=$dest cmake --install "$build" >/dev/null
fail=0
check() {
  if [ ! -e "$dest$1" ]; then
    echo "missing: $1"
    fail=1
  fi
}
check "$prefix/bin/epochfs"
check "/sbin/mount.epochfs"
check "$prefix/lib/systemd/system/epochfs@.service"
check "/etc/epochfs/epochfs.conf.example"
check "$prefix/share/doc/epochfs/epochfs.conf.example"
check "$prefix/share/doc/epochfs/operations.md"
unit="$dest$prefix/lib/systemd/system/epochfs@.service"
if ! grep -qx "ExecStart=$prefix/bin/epochfs mount --foreground --config-if-exists /etc/epochfs/%i.conf %I" "$unit"; then
  echo "the installed unit does not run the installed binary:"
  grep ExecStart= "$unit" || true
  fail=1
fi
if grep -q "@" <(grep -v '^#' "$unit" | grep -v 'epochfs@'); then
  echo "unsubstituted @VARIABLE@ in the unit"
  fail=1
fi
# The example must parse as a config file: every key in it, uncommented, is known.
example="$dest/etc/epochfs/epochfs.conf.example"
sed -n 's/^# \([a-z_]* = .*\)/\1/p' "$example" | sed 's/ *#.*//' > "$dest/all.conf"
if ! "$dest$prefix/bin/epochfs" mount --config "$dest/all.conf" /nonexistent-src 2>"$dest/err"; then
  if grep -q "conf:" "$dest/err"; then
    echo "the example config has a bad key:"
    cat "$dest/err"
    fail=1
  fi
fi
[ $fail -eq 0 ] && echo "install layout OK"
exit $fail
