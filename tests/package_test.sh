#!/usr/bin/env bash
# The Debian package: configured for /usr, built, packed with CPack, and checked.
# It must hold the binary, the mount helper, the systemd unit (running the packaged
# binary), the example configuration and the Python package in Debian's dist-packages;
# and the packaged files must work from a clean directory: the binary answers
# --version, the Python package imports.
#
#   bash tests/package_test.sh [BUILD_DIR]   (default build-deb)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-deb}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=/usr \
  -DEPOCHFS_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" -j "${JOBS:-$(nproc)}" >/dev/null
(cd "$build" && cpack -G DEB >/dev/null)
deb=$(ls "$build"/epochfs_*.deb | head -n 1)
echo "package: $deb"
work=$(mktemp -d /tmp/epochfs-deb-XXXXXX)
trap 'rm -rf "$work"' EXIT
dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./|/|' > "$work/contents"
fail=0
need() {
  if ! grep -qx "$1" "$work/contents"; then
    echo "missing from the package: $1"
    fail=1
  fi
}
need /usr/bin/epochfs
need /sbin/mount.epochfs
need /usr/lib/systemd/system/epochfs@.service
need /etc/epochfs/epochfs.conf.example
need /usr/share/doc/epochfs/operations.md
need /usr/lib/python3/dist-packages/epochfs/__init__.py
need /usr/lib/python3/dist-packages/epochfs/hook.py
need /usr/lib/python3/dist-packages/epochfs_autohook.py
need /usr/share/epochfs/python-run/sitecustomize.py
need /usr/share/epochfs/python-run/epochfs_autohook.py
if ! grep -q '^/usr/lib/python3/dist-packages/epochfs/_epochfs.*\.so$' "$work/contents"; then
  echo "missing from the package: the Python extension"
  fail=1
fi
dpkg-deb -f "$deb" Depends | grep -q fuse3 || { echo "the package does not depend on fuse3"; fail=1; }
dpkg-deb -x "$deb" "$work/root"
grep -qx 'ExecStart=/usr/bin/epochfs mount --foreground --config-if-exists /etc/epochfs/%i.conf %I' \
  "$work/root/usr/lib/systemd/system/epochfs@.service" || { echo "the unit does not run /usr/bin/epochfs"; fail=1; }
mkdir "$work/clean"
(cd "$work/clean" && "$work/root/usr/bin/epochfs" --version) || { echo "the packaged binary does not run"; fail=1; }
(cd "$work/clean" && PYTHONPATH="$work/root/usr/lib/python3/dist-packages" PYTHONDONTWRITEBYTECODE=1 \
  /usr/bin/python3 -c "import epochfs; print('import epochfs:', epochfs.__file__); epochfs.Loader") ||
  { echo "the packaged Python package does not import"; fail=1; }
# `epochfs run` puts the packaged hook first on the child's path, and the hook registers
# the epochfs_autohook packaged beside it.
(cd "$work/clean" && "$work/root/usr/bin/epochfs" run -- /usr/bin/python3 -c \
  "import sitecustomize, epochfs_autohook; assert sitecustomize.__file__.startswith('$work/root/usr/share/epochfs/python-run/'), sitecustomize.__file__; assert epochfs_autohook.__file__.startswith('$work/root/usr/share/epochfs/python-run/'), epochfs_autohook.__file__; assert epochfs_autohook.registered()") ||
  { echo "epochfs run does not use the packaged hook"; fail=1; }
[ $fail -eq 0 ] && echo "Debian package OK"
exit $fail
