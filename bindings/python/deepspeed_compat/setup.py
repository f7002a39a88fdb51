"""pip install ./bindings/python/deepspeed_compat -- dsrt's stand-in for the `deepspeed` package.

It installs a distribution named deepspeed (so the Hugging Face Trainer and Accelerate, which look
for that distribution, use it) whose `deepspeed` module is dsrt's (dsrt.deepspeed). The version is
the DeepSpeed API it follows with dsrt's version as local label, e.g. 0.13.1+dsrt.0.1.0. dsrt's
Python package (bindings/python) must be installed too.

It refuses to install over a real DeepSpeed: uninstall that first (pip uninstall deepspeed), or
keep it and write `import dsrt.compat` at the top of the scripts that should run on dsrt.
"""
import glob
import os
import re
import site
import sysconfig

from setuptools import setup

here = os.path.dirname(os.path.abspath(__file__))


def read(relative, pattern):
    with open(os.path.join(here, relative)) as f:
        match = re.search(pattern, f.read())
    if not match:
        raise SystemExit("cannot read the version from %s" % relative)
    return match.group(1)


def installed_deepspeed():
    """(path, version) of a DeepSpeed distribution that is not this stand-in, in the environment pip
    installs into (its site-packages, read directly: an isolated build does not see them on sys.path)."""
    folders = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    if site.ENABLE_USER_SITE:
        folders.add(site.getusersitepackages())
    for folder in folders:
        for info in glob.glob(os.path.join(folder, "deepspeed-*.dist-info")) + glob.glob(
                os.path.join(folder, "deepspeed-*.egg-info")):
            metadata = os.path.join(info, "METADATA") if info.endswith(".dist-info") else os.path.join(info, "PKG-INFO")
            text = open(metadata).read() if os.path.isfile(metadata) else ""
            if "+dsrt." not in text:
                version = re.search(r"^Version: (.*)$", text, re.M)
                return info, version.group(1) if version else "?"
    return None


real = installed_deepspeed()
if real is not None:
    raise SystemExit(
        "refusing to install dsrt's deepspeed stand-in: a real DeepSpeed %s is installed (%s) and pip would "
        "replace it. Uninstall it first (pip uninstall deepspeed), or keep it and put `import dsrt.compat` at "
        "the top of the scripts that should run on dsrt." % (real[1], real[0]))

api_version = read("../dsrt/deepspeed/version.py", r'DEEPSPEED_API_VERSION = "([0-9.]+)"')
dsrt_version = read("../setup.py", r'version="([0-9.]+)"')

setup(
    name="deepspeed",
    version="%s+dsrt.%s" % (api_version, dsrt_version),
    description="dsrt's stand-in for DeepSpeed: the deepspeed module backed by the dsrt runtime",
    packages=["deepspeed"],
    python_requires=">=3.8",
)
