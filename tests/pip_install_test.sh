#!/usr/bin/env bash
# pip install of the epochfs Python package into a fresh virtual environment, as a GPU
# user does in their own venv or conda environment: a venv made with
# --system-site-packages from Debian's python3 (torch comes from the system), then
# `pip install --no-build-isolation --no-index ./loader` (nothing downloaded), then
# import, and one epoch read with epochfs.Loader, raw and decoded.
#
#   bash tests/pip_install_test.sh [PYTHON]
set -euo pipefail
cd "$(dirname "$0")/.."
python=${1:-/usr/bin/python3}
work=$(mktemp -d /tmp/epochfs-pip-XXXXXX)
trap 'rm -rf "$work"' EXIT
"$python" -m venv --system-site-packages "$work/venv"
# An interpreter that is itself a venv's (a GPU machine's, with its own torch): the new
# venv sees that venv's packages too, as --system-site-packages shows Debian's.
parent=$("$python" -c 'import site, sys; print(site.getsitepackages()[0] if sys.prefix != sys.base_prefix else "")')
if [ -n "$parent" ]; then
  echo "$parent" > "$("$work/venv/bin/python" -c 'import site; print(site.getsitepackages()[0])')/parent-venv.pth"
fi
"$work/venv/bin/pip" install --quiet --no-build-isolation --no-index ./loader \
  > "$work/pip.log" 2>&1 || { tail -40 "$work/pip.log"; exit 1; }
rm -rf loader/build loader/python/epochfs.egg-info  # pip's in-tree build leftovers
cd "$work"  # not the checkout: the installed package must be the one imported
# Nor one a PYTHONPATH names (a build tree's): the environment's own.
env -u PYTHONPATH "$work/venv/bin/python" - <<'PY'
import io, os, tempfile
import epochfs, epochfs.hook
assert "/venv/" in epochfs.__file__, epochfs.__file__
import torch
from PIL import Image
root = tempfile.mkdtemp()
for c in range(2):
    os.makedirs(f"{root}/c{c}")
    for i in range(5):
        Image.new("RGB", (64 + i, 48), (40 * i, 80, 120 * c)).save(f"{root}/c{c}/{i}.jpg")
raw = epochfs.Loader(root, batch_size=4, device="cpu")
n = sum(len(labels) for _, _, _, labels in raw)
assert n == 10, n
images = epochfs.Loader(root, batch_size=4, device="cpu", decode="image", size=32, train=True)
shapes = [tuple(x.shape) for x, _ in images]
assert shapes == [(4, 3, 32, 32), (4, 3, 32, 32), (2, 3, 32, 32)], shapes
print(f"pip install: epochfs {epochfs.__file__}, one epoch of {n} files read and decoded "
      f"(reader threads {raw.reader_threads}, io {raw.io_backend}, cuda built {epochfs.cuda_compiled()})")
PY
