"""deepspeed.runtime: engine, lr_schedules and zero, backed by dsrt."""

from . import engine, lr_schedules, zero  # noqa: F401
