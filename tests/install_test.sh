#!/usr/bin/env bash
# `cmake --install` puts every operations file where systemd, mount(8) and an operator
# look for them, and the Python package where Debian's python3 finds it.
# Usage: install_test.sh BUILD_DIR PREFIX [PYTHON_DIR]  (PYTHON_DIR: relative to PREFIX;
# empty when the build has no Python module)
set -euo pipefail
build=$1
prefix=$2
python_dir=${3:-}
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
check "/usr/sbin/mount.epochfs"
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
# The Python package: in a folder on Debian's python3's own path, and importable from
# there out of a clean directory (the tree's build folders are not on the path).
if [ -n "$python_dir" ]; then
  check "$prefix/$python_dir/epochfs/__init__.py"
  if ! ls "$dest$prefix/$python_dir/epochfs/"_epochfs*.so >/dev/null 2>&1; then
    echo "missing: $prefix/$python_dir/epochfs/_epochfs*.so"
    fail=1
  fi
  if ! /usr/bin/python3 -c "import sys; sys.exit('$prefix/$python_dir' not in sys.path)"; then
    echo "$prefix/$python_dir is not on /usr/bin/python3's path"
    fail=1
  fi
  clean=$(mktemp -d /tmp/epochfs-clean-XXXXXX)
  if ! (cd "$clean" && PYTHONPATH="$dest$prefix/$python_dir" PYTHONDONTWRITEBYTECODE=1 \
        /usr/bin/python3 -c "import epochfs, sys; assert epochfs.__file__.startswith('$dest'), epochfs.__file__; epochfs.Loader"); then
    echo "the installed epochfs package does not import"
    fail=1
  fi
  rm -rf "$clean"
fi
[ $fail -eq 0 ] && echo "install layout OK"
exit $fail
