#!/usr/bin/env bash
# The GPU check: on a machine with an NVIDIA GPU, build epochfs, run the loader's tests
# (the CUDA ones included, and pip install into the machine's own Python environment),
# then bench/loader_bench.py and bench/train_bench.py. Under 8 minutes on one H100.
#
#   bash bench/gpu_check.sh [OUT]      # OUT: where logs and JSON go (default $OUT or /tmp/gpu-check)
#
# The machine needs CUDA, CMake, a compiler and a Python with torch and torchvision; the
# project's libraries come from Debian packages carried in .gpu/ (../shared/device/README.md
# says how: `bash .gpu/fetch-debs.sh .gpu/debs` where apt reaches Debian). Each step's
# output goes to OUT/<step>.log; a failed step is reported and the next one still runs.
set -uo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-${OUT:-/tmp/gpu-check}}
mkdir -p "$out"
build=/tmp/epochfs-build
failed=()

step() {  # step NAME COMMAND...: runs it, logs it, says how it went
  local name=$1 t=$SECONDS rc
  shift
  echo "== $name"
  "$@" >"$out/$name.log" 2>&1
  rc=$?
  echo "   exit $rc after $((SECONDS - t)) s"
  tail -n "${TAIL:-12}" "$out/$name.log" | sed 's/^/   | /'
  [ "$rc" -eq 0 ] || failed+=("$name")
}

{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  nproc; python3 -c 'import sys, torch, torchvision; print(sys.version.split()[0], torch.__version__, torchvision.__version__)'
} >"$out/machine.txt" 2>&1
cat "$out/machine.txt"

# Build: Debian's libraries unpacked into /tmp/deps, the project with the loader's CUDA path.
t=$SECONDS
if ! env_line=$(bash "$src/.gpu/build.sh" "$src" "$build" 2>"$out/build.err"); then
  echo "build failed:"; tail -30 "$out/build.err"; tail -40 "$build.build.log" 2>/dev/null
  exit 1
fi
eval "$env_line"
echo "== build: $((SECONDS - t)) s"
# pip's build backend, where the environment has none (Debian's, pure Python).
python3 -c 'import setuptools, wheel' 2>/dev/null ||
  export PYTHONPATH="$PYTHONPATH:/tmp/deps/usr/lib/python3/dist-packages"
# `pip install ./loader` configures CMake itself: point it at the unpacked libraries too.
D=/tmp/deps LIB=/tmp/deps/usr/lib/x86_64-linux-gnu
export PKG_CONFIG=$D/usr/bin/pkgconf PKG_CONFIG_LIBDIR=$LIB/pkgconfig:$D/usr/share/pkgconfig
link="-L$LIB -Wl,-rpath-link,$LIB -Wl,-rpath,$LIB"
export EPOCHFS_CMAKE_ARGS="-DCMAKE_PREFIX_PATH=$D/usr '-DCMAKE_CXX_FLAGS=-isystem $D/usr/include' \
'-DCMAKE_SHARED_LINKER_FLAGS=$link' '-DCMAKE_MODULE_LINKER_FLAGS=$link' -DEPOCHFS_LOADER_CUDA=ON"

step loader_tests ctest --test-dir "$build" -L loader --output-on-failure
# The pixel difference nvJPEG vs libjpeg-turbo, printed by the test.
step gpu_decode_diff bash -c "cd '$src/loader/python/tests' && python3 -m unittest -v \
  test_images.Decoding.test_gpu_decode_is_close_to_the_cpu_decode \
  test_images.Pipeline.test_on_the_gpu_images_are_bf16_channels_last_on_the_device"
step loader_bench python3 "$src/bench/loader_bench.py" --seconds "${BENCH_SECONDS:-1.5}" --out "$out"
step train_bench python3 "$src/bench/train_bench.py" --images "${TRAIN_IMAGES:-8000}" --epochs 3 --seconds "${TRAIN_SECONDS:-4}" \
  --epochfs "$build/cli/epochfs" --out "$out"

echo "== done in $SECONDS s; failed: ${failed[*]:-none}"
[ ${#failed[@]} -eq 0 ]
