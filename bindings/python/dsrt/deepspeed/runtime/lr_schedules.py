"""deepspeed.runtime.lr_schedules: the schedule names the config's "scheduler" section takes.

dsrt runs DeepSpeed's schedules itself (its core computes them, see docs/schedules.md); scripts and
Accelerate only look up these names (Accelerate: `type(scheduler).__name__ in VALID_LR_SCHEDULES`).
The schedule classes, which DeepSpeed also lets a script build around a torch optimizer, are not
provided: describe the schedule in the config instead.
"""

LR_RANGE_TEST = "LRRangeTest"
ONE_CYCLE = "OneCycle"
WARMUP_LR = "WarmupLR"
WARMUP_DECAY_LR = "WarmupDecayLR"
WARMUP_COSINE_LR = "WarmupCosineLR"
VALID_LR_SCHEDULES = [LR_RANGE_TEST, ONE_CYCLE, WARMUP_LR, WARMUP_DECAY_LR, WARMUP_COSINE_LR]

WARMUP_LOG_RATE = "log"
WARMUP_LINEAR_RATE = "linear"
