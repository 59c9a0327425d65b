"""Builds the epochfs Python package (pyproject.toml says how to call it).

The extension module is built by the project's own CMake (configured with
EPOCHFS_LOADER_ONLY, so only base/ and loader/ are compiled) against the interpreter that
runs this script. Extra CMake arguments can be passed in EPOCHFS_CMAKE_ARGS (for example
-DCMAKE_PREFIX_PATH=... where the libraries live outside the system's paths, or
-DEPOCHFS_LOADER_CUDA=OFF).
"""

import os
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        if shutil.which("cmake") is None:
            raise RuntimeError("building epochfs needs CMake (apt install cmake)")
        build_dir = os.path.abspath(os.path.join(self.build_temp, "cmake"))
        args = [
            f"-DPython3_EXECUTABLE={sys.executable}",
            "-DEPOCHFS_LOADER_ONLY=ON",
            "-DEPOCHFS_BUILD_TESTS=OFF",
            "-DCMAKE_BUILD_TYPE=Release",
        ]
        try:  # the environment's pybind11, else CMake looks for Debian's pybind11-dev
            import pybind11
            args.append(f"-Dpybind11_DIR={pybind11.get_cmake_dir()}")
        except ImportError:
            pass
        args += shlex.split(os.environ.get("EPOCHFS_CMAKE_ARGS", ""))
        if shutil.which("ninja"):
            args += ["-G", "Ninja"]
        subprocess.check_call(["cmake", "-S", ROOT, "-B", build_dir, *args])
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "_epochfs",
                               "-j", str(os.cpu_count() or 2)])
        built = os.path.join(build_dir, "loader", "python", "epochfs")
        modules = [f for f in os.listdir(built) if f.startswith("_epochfs") and f.endswith(".so")]
        if not modules:
            raise RuntimeError(f"CMake built no _epochfs module in {built}")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(os.path.join(built, modules[0]), target)


setup(
    packages=["epochfs"],
    package_dir={"epochfs": "python/epochfs", "": "python"},
    py_modules=["epochfs_autohook"],
    ext_modules=[Extension("epochfs._epochfs", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
)
