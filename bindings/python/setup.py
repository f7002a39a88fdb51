"""pip install ./bindings/python -- builds dsrt.capi with SWIG against an installed libdsrt.

The library is found through pkg-config (dsrt.pc), or DSRT_PREFIX (the `make install PREFIX`)."""
import os
import shlex
import subprocess

from setuptools import Extension, find_packages, setup
from setuptools.command.build_py import build_py


class BuildPyAfterExt(build_py):
    """SWIG writes dsrt/capi.py while building the extension: build it before copying modules."""

    def run(self):
        self.run_command("build_ext")
        super().run()


def dsrt_flags():
    prefix = os.environ.get("DSRT_PREFIX")
    if prefix:
        return ([os.path.join(prefix, "include")], [os.path.join(prefix, "lib")])
    try:
        cflags = subprocess.check_output(["pkg-config", "--cflags-only-I", "dsrt"], text=True)
        libs = subprocess.check_output(["pkg-config", "--libs-only-L", "dsrt"], text=True)
    except (OSError, subprocess.CalledProcessError):
        raise SystemExit("libdsrt not found: install it (make install PREFIX=...) and set PKG_CONFIG_PATH "
                         "to PREFIX/lib/pkgconfig, or set DSRT_PREFIX=PREFIX")
    return ([f[2:] for f in shlex.split(cflags)], [f[2:] for f in shlex.split(libs)])


here = os.path.dirname(os.path.abspath(__file__))
include_dirs, library_dirs = dsrt_flags()
extension = Extension(
    "dsrt._capi",
    sources=[os.path.join("dsrt_capi.i")],
    swig_opts=["-threads", "-outdir", os.path.join(here, "dsrt")] + ["-I" + d for d in include_dirs],
    include_dirs=include_dirs,
    library_dirs=library_dirs,
    runtime_library_dirs=library_dirs,
    libraries=["dsrt"],
)

setup(
    name="dsrt",
    version="0.1.0",
    description="ZeRO training memory for every host: the Python binding and a DeepSpeed-shaped PyTorch front",
    # dsrt and its DeepSpeed module tree (dsrt.deepspeed.*, which dsrt.compat names `deepspeed`).
    packages=find_packages(include=["dsrt", "dsrt.*"]),
    ext_modules=[extension],
    cmdclass={"build_py": BuildPyAfterExt},
    python_requires=">=3.8",
)
