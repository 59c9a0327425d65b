#!/usr/bin/env bash
# The Debian package: configured for /usr, built, packed with CPack, and checked.
#
# 1. Its contents: the binary, the mount helper in /usr/sbin, the systemd unit (running the
#    packaged binary), the example configuration (a conffile), manual pages, copyright,
#    changelog, maintainer scripts, the Python package in Debian's dist-packages; and the
#    packaged files work from a clean directory.
# 2. lintian reports no error.
# 3. In a clean Debian bookworm root (debootstrap), as a user would: apt installs it with
#    its dependencies; it mounts with `epochfs mount` and with `mount -t epochfs` and serves
#    the source's bytes; removing it while a mount is active is refused; removed, then
#    purged, it leaves nothing behind. Skipped (said so) without root, debootstrap or a
#    Debian mirror.
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
deb=$(realpath "$deb")
echo "package: $deb"
work=$(mktemp -d /tmp/epochfs-deb-XXXXXX)
root=""
cleanup() {
  if [ -n "$root" ]; then
    for p in /proc/[0-9]*; do  # daemons still running in the clean root
      [ "$(readlink "$p/root" 2>/dev/null)" = "$root" ] && kill -9 "${p#/proc/}" 2>/dev/null
    done
    sleep 0.5
    for m in $(awk -v r="$root" 'index($2, r) == 1 { print $2 }' /proc/mounts | sort -r); do
      umount -l "$m" 2>/dev/null || true
    done
    rm -rf --one-file-system "$root"
  fi
  rm -rf "$work"
}
trap cleanup EXIT
fail=0
bad() {
  echo "FAIL: $*"
  fail=1
}

# ---- 1. contents ----
dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./|/|' > "$work/contents"
need() { grep -qx "$1" "$work/contents" || bad "missing from the package: $1"; }
need /usr/bin/epochfs
need /usr/sbin/mount.epochfs
need /usr/lib/systemd/system/epochfs@.service
need /etc/epochfs/epochfs.conf.example
need /usr/share/doc/epochfs/operations.md
need /usr/share/doc/epochfs/copyright
need /usr/share/doc/epochfs/changelog.gz
need /usr/share/man/man8/epochfs.8.gz
need /usr/share/man/man8/mount.epochfs.8.gz
need /usr/lib/python3/dist-packages/epochfs/__init__.py
need /usr/lib/python3/dist-packages/epochfs/hook.py
need /usr/lib/python3/dist-packages/epochfs/images.py
need /usr/lib/python3/dist-packages/epochfs_autohook.py
need /usr/share/epochfs/python-run/sitecustomize.py
need /usr/share/epochfs/python-run/epochfs_autohook.py
grep -q '^/usr/lib/python3/dist-packages/epochfs/_epochfs.*\.so$' "$work/contents" ||
  bad "missing from the package: the Python extension"
dpkg-deb -f "$deb" Depends | grep -q fuse3 || bad "the package does not depend on fuse3"
dpkg-deb -f "$deb" Maintainer | grep -q '<.*@.*>' || bad "the Maintainer has no address"
dpkg-deb -f "$deb" Suggests | grep -q python3-torch || bad "the package does not suggest python3-torch"
mkdir "$work/control"
dpkg-deb -e "$deb" "$work/control"
for f in postinst prerm postrm conffiles; do
  [ -e "$work/control/$f" ] || bad "no $f in the package's control"
done
grep -qx /etc/epochfs/epochfs.conf.example "$work/control/conffiles" || bad "the example is no conffile"
dpkg-deb -x "$deb" "$work/root"
grep -qx 'ExecStart=/usr/bin/epochfs mount --foreground --config-if-exists /etc/epochfs/%i.conf %I' \
  "$work/root/usr/lib/systemd/system/epochfs@.service" || bad "the unit does not run /usr/bin/epochfs"
mkdir "$work/clean"
(cd "$work/clean" && "$work/root/usr/bin/epochfs" --version) || bad "the packaged binary does not run"
for flag in --help -h -V --version; do
  "$work/root/usr/sbin/mount.epochfs" $flag >/dev/null || bad "mount.epochfs $flag fails"
done
for sub in "" mount umount status top warm run python-hook; do  # --help of every entry point
  "$work/root/usr/bin/epochfs" $sub --help >/dev/null || bad "epochfs $sub --help fails"
done
(cd "$work/clean" && PYTHONPATH="$work/root/usr/lib/python3/dist-packages" PYTHONDONTWRITEBYTECODE=1 \
  /usr/bin/python3 -c "import epochfs; print('import epochfs:', epochfs.__file__); epochfs.Loader") ||
  bad "the packaged Python package does not import"
# `epochfs run` puts the packaged hook first on the child's path, and the hook registers
# the epochfs_autohook packaged beside it.
(cd "$work/clean" && "$work/root/usr/bin/epochfs" run -- /usr/bin/python3 -c \
  "import sitecustomize, epochfs_autohook; assert sitecustomize.__file__.startswith('$work/root/usr/share/epochfs/python-run/'), sitecustomize.__file__; assert epochfs_autohook.__file__.startswith('$work/root/usr/share/epochfs/python-run/'), epochfs_autohook.__file__; assert epochfs_autohook.registered()") ||
  bad "epochfs run does not use the packaged hook"

# ---- 2. lintian ----
if command -v lintian >/dev/null; then
  lintian --fail-on error --tag-display-limit 0 "$deb" > "$work/lintian" 2>&1 ||
    { cat "$work/lintian"; bad "lintian reports errors"; }
  echo "lintian: $(grep -c '^E:' "$work/lintian" || true) errors, $(grep -c '^W:' "$work/lintian" || true) warnings"
else
  bad "lintian is missing (apt-get install lintian)"
fi

# ---- 3. a clean root ----
mirror=${EPOCHFS_DEBIAN_MIRROR:-http://deb.debian.org/debian}
if [ "$(id -u)" -ne 0 ] || ! command -v debootstrap >/dev/null || [ ! -e /dev/fuse ]; then
  echo "SKIP the clean-root install: it needs root, debootstrap and /dev/fuse"
elif ! timeout 20 /usr/bin/python3 -c "import urllib.request; urllib.request.urlopen('$mirror/dists/bookworm/Release', timeout=15)" 2>/dev/null; then
  echo "SKIP the clean-root install: no Debian mirror reachable"
else
  root=$(mktemp -d /var/tmp/epochfs-pkgroot-XXXXXX)
  t=$SECONDS
  debootstrap --variant=minbase bookworm "$root" "$mirror" > "$work/debootstrap.log" 2>&1 ||
    { tail -20 "$work/debootstrap.log"; bad "debootstrap failed"; exit 1; }
  echo "debootstrap: $((SECONDS - t)) s"
  mount -t proc proc "$root/proc"
  mount --bind /dev "$root/dev"
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  cp "$deb" "$root/tmp/epochfs.deb"
  in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root "$@"; }
  t=$SECONDS
  in_root apt-get update -qq > "$work/apt.log" 2>&1
  in_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq /tmp/epochfs.deb \
    >> "$work/apt.log" 2>&1 || { tail -20 "$work/apt.log"; bad "apt could not install the package"; exit 1; }
  echo "apt install with its dependencies: $((SECONDS - t)) s"
  in_root epochfs --version
  in_root sh -c 'mkdir -p /data/a /data/b /mnt/b /ref && for i in 1 2 3; do head -c 100000 /dev/urandom > /data/a/f$i; cp /data/a/f$i /ref/f$i; done; cp /data/a/f1 /data/b/g'
  in_root epochfs mount /data/a || bad "epochfs mount failed in the clean root"
  in_root sh -c 'grep -q " /data/a fuse.epochfs " /proc/mounts && for i in 1 2 3; do cmp /data/a/f$i /ref/f$i || exit 1; done' ||
    bad "the mount does not serve the source's bytes"
  in_root mount -t epochfs -o ram=64M /data/b /mnt/b || bad "mount -t epochfs failed"
  in_root cmp /data/a/f1 /mnt/b/g || bad "mount -t epochfs does not serve the source's bytes"
  in_root umount /mnt/b || bad "umount of the mount -t epochfs failed"
  if in_root env DEBIAN_FRONTEND=noninteractive apt-get remove -y -qq epochfs > "$work/remove.log" 2>&1; then
    bad "the package was removed while a mount was active"
  else
    grep -q "unmount them first" "$work/remove.log" || { cat "$work/remove.log"; bad "the refusal does not say why"; }
  fi
  in_root test -x /usr/bin/epochfs || bad "the refused removal removed the binary"
  in_root epochfs umount /data/a || bad "epochfs umount failed"
  in_root env DEBIAN_FRONTEND=noninteractive apt-get remove -y -qq epochfs > "$work/remove.log" 2>&1 ||
    { cat "$work/remove.log"; bad "remove failed with no mount active"; }
  in_root dpkg-query -W -f='${Status}\n' epochfs | grep -q "config-files" ||
    bad "after remove the package is not in its config-files state"
  in_root test -d /var/cache/epochfs || bad "remove took the cache (purge's job)"
  in_root env DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq epochfs > "$work/purge.log" 2>&1 ||
    { cat "$work/purge.log"; bad "apt purge after remove failed"; }
  for left in /var/cache/epochfs /run/epochfs /etc/epochfs /usr/bin/epochfs; do
    in_root test ! -e "$left" || bad "purge left $left behind"
  done
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/root" 2>/dev/null)" = "$root" ] &&
      bad "a process of the clean root is still running: $(tr '\0' ' ' < "$p/cmdline")"
  done
  echo "clean root: installed, mounted twice, refused a removal under a mount, removed, purged"
fi
if [ "$fail" = 0 ]; then
  echo "Debian package OK"
fi
exit "$fail"
