"""deepspeed.utils: the logger the HF Trainer sets the level of, log_dist, and zero_to_fp32."""

import logging
import sys

from . import zero_to_fp32  # noqa: F401


def _make_logger():
    logger = logging.getLogger("DeepSpeed")
    if not logger.handlers:
        handler = logging.StreamHandler(stream=sys.stdout)
        handler.setFormatter(logging.Formatter("[%(asctime)s] [%(levelname)s] [%(filename)s:%(lineno)d:%(funcName)s] "
                                               "%(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    return logger


logger = _make_logger()


def log_dist(message, ranks=None, level=logging.INFO):
    """Log message on the given ranks (None or [-1]: every rank), as DeepSpeed's log_dist."""
    from .. import comm

    rank = comm.get_rank()
    if ranks is None or -1 in ranks or rank in ranks:
        logger.log(level, "[Rank %d] %s" % (rank, message))
