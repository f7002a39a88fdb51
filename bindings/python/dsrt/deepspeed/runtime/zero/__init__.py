"""deepspeed.zero (deepspeed.runtime.zero): Init, GatheredParameters and
register_external_parameter from dsrt's PyTorch front (see dsrt.zero_front for what each does)."""

from ....zero_front import GatheredParameters, _ZeroInit as Init, register_external_parameter  # noqa: F401
from . import partition_parameters  # noqa: F401
