"""dsrt's stand-in for the `deepspeed` distribution: `import deepspeed` gives dsrt's DeepSpeed
module tree (dsrt.deepspeed), as `import dsrt.compat` does, for every script in this environment."""

__dsrt_standin__ = True  # lets dsrt.compat tell this package from a real DeepSpeed

import dsrt.compat  # noqa: E402,F401  (replaces this module in sys.modules with dsrt.deepspeed)
