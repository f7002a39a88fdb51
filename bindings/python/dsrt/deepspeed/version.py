"""The DeepSpeed release whose API this module tree follows, with dsrt's version as the local
label (PEP 440), e.g. 0.13.1+dsrt.0.1.0: the HF libraries' version checks (deepspeed>=0.9.3)
compare the public part, and the label says which runtime is behind it."""

from .. import _core

DEEPSPEED_API_VERSION = "0.13.1"
__version__ = "%s+dsrt.%s" % (DEEPSPEED_API_VERSION, _core.version())
__version_major__, __version_minor__, __version_patch__ = (int(p) for p in DEEPSPEED_API_VERSION.split("."))
