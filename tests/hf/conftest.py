"""Makes the freshly built dsrt package importable: DSRT_BUILD_DIR (default <repo>/build)/python."""
import os
import sys

_repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_build = os.environ.get("DSRT_BUILD_DIR", os.path.join(_repo, "build"))
sys.path.insert(0, os.path.join(_build, "python"))
