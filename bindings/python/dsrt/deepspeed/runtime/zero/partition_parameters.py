"""deepspeed.runtime.zero.partition_parameters: the names scripts import from here.

ZeroParamStatus is the state DeepSpeed keeps in param.ds_status; dsrt's front holds it per
engine, and status_of(param) reads it (AVAILABLE while gathered under ZeRO-3, NOT_AVAILABLE while
released; parameters dsrt does not partition are always AVAILABLE)."""

import enum

from ....zero_front import GatheredParameters, _ZeroInit as Init, register_external_parameter  # noqa: F401


class ZeroParamStatus(enum.Enum):
    AVAILABLE = 1
    NOT_AVAILABLE = 2
    INFLIGHT = 3


def status_of(param):
    front = getattr(param, "_dsrt_front", None)
    if front is None or front.stage != 3 or not front._is_released(param):
        return ZeroParamStatus.AVAILABLE
    return ZeroParamStatus.NOT_AVAILABLE
