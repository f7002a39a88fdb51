"""deepspeed.ops: the optimizer classes scripts and Accelerate name (ops.adam)."""

from . import adam  # noqa: F401
