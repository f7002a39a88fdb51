"""`import dsrt.compat` -- one line at the top of a script makes `import deepspeed` mean dsrt.

After it, `import deepspeed` and every `deepspeed.*` module (deepspeed.runtime.engine,
deepspeed.utils, deepspeed.comm, ...) resolve to dsrt's DeepSpeed module tree (dsrt.deepspeed),
and the package metadata the Hugging Face libraries check before they use DeepSpeed
(importlib.metadata.version("deepspeed"), find_spec("deepspeed")) answers for it, with a
DeepSpeed API version and dsrt's as local label (e.g. 0.13.1+dsrt.0.1.0). Import it before
transformers and accelerate: they decide whether DeepSpeed is there when they are imported.

The pip-installable stand-in (bindings/python/deepspeed_compat) does the same for every script
in an environment, without the line. With a real DeepSpeed installed, this module still takes
over `deepspeed` in this process (that is what the line asks for), but refuses when the real one
has already been imported.
"""

import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import pathlib
import sys

from . import deepspeed as _tree
from .deepspeed.version import __version__ as DEEPSPEED_VERSION

_PREFIX = "deepspeed"
_REAL = __name__.rsplit(".", 1)[0] + ".deepspeed"  # "dsrt.deepspeed"

_METADATA = """Metadata-Version: 2.1
Name: deepspeed
Version: {version}
Summary: dsrt's stand-in for DeepSpeed: the deepspeed module backed by the dsrt runtime
License: Apache-2.0
Requires-Python: >=3.8
"""


class _AliasLoader(importlib.abc.Loader):
    """Loads deepspeed.X as the already imported dsrt.deepspeed.X (one module object under two
    names, so classes and state are shared)."""

    def __init__(self, real_name):
        self.real_name = real_name

    def create_module(self, spec):
        return importlib.import_module(self.real_name)

    def exec_module(self, module):
        pass


class _StandInDistribution(importlib.metadata.Distribution):
    """The `deepspeed` distribution's metadata, answered from memory."""

    def read_text(self, filename):
        if filename in ("METADATA", "PKG-INFO"):
            return _METADATA.format(version=DEEPSPEED_VERSION)
        if filename == "top_level.txt":
            return "deepspeed\n"
        return None

    def locate_file(self, path):
        # The folder that holds the dsrt package (this distribution lists no files of its own).
        return pathlib.Path(_tree.__file__).parent.parent.parent / path


class _DeepSpeedFinder(importlib.abc.MetaPathFinder):
    """First on sys.meta_path: deepspeed and deepspeed.* -> dsrt.deepspeed[.*]."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != _PREFIX and not fullname.startswith(_PREFIX + "."):
            return None
        real_name = _REAL + fullname[len(_PREFIX):]
        real_spec = importlib.util.find_spec(real_name)
        if real_spec is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(real_name),
                                              is_package=real_spec.submodule_search_locations is not None)

    def find_distributions(self, context=importlib.metadata.DistributionFinder.Context()):
        if context.name is None or context.name.lower().replace("_", "-") == _PREFIX:
            yield _StandInDistribution()

    def invalidate_caches(self):
        pass


def _install():
    for finder in sys.meta_path:
        if isinstance(finder, _DeepSpeedFinder) or type(finder).__name__ == "_DeepSpeedFinder":
            return
    loaded = sys.modules.get(_PREFIX)
    if loaded is not None and loaded is not _tree and not getattr(loaded, "__dsrt_standin__", False):
        raise ImportError("dsrt.compat: a DeepSpeed module is already imported (%s, version %s); import "
                          "dsrt.compat first, before anything imports deepspeed"
                          % (getattr(loaded, "__file__", None) or "?", getattr(loaded, "__version__", "?")))
    sys.meta_path.insert(0, _DeepSpeedFinder())
    # `import deepspeed` now gives dsrt.deepspeed, and so do the submodules already imported.
    sys.modules[_PREFIX] = _tree
    for name, module in list(sys.modules.items()):
        if name.startswith(_REAL + "."):
            sys.modules.setdefault(_PREFIX + name[len(_REAL):], module)


_install()

deepspeed = _tree
__all__ = ["deepspeed", "DEEPSPEED_VERSION"]
