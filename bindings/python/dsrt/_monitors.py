"""DeepSpeed's tensorboard and wandb monitors in the PyTorch front.

dsrt's core produces DeepSpeed's monitor events at every accumulation boundary (the same names,
values and sample steps: Train/Samples/train_loss, lr, loss_scale, and the elapsed_time_ms_*
timings with wall_clock_breakdown) and writes csv_monitor's files itself. TensorBoard and
Weights & Biases need their Python packages, so the front forwards the events to them here, on
rank 0, as DeepSpeed's monitors do. The front also reports to the core what only it sees: each
micro-step's loss and, with wall_clock_breakdown, the forward and backward times.
"""

import contextlib
import os
import time

from . import _core


def _section(config, name):
    section = config.to_dict().get(name)
    return section if isinstance(section, dict) else {}


def _missing(section, package, error):
    return _core.ConfigError(
        _core.capi.DSRT_ERR_CONFIG,
        "%s.enabled is true, but the %s package is not installed in this Python (%s): install it (pip install %s) "
        "or set %s.enabled to false" % (section, package, error, package, section))


class HostMonitors:
    """The tensorboard and wandb monitors a config enables. Creating it checks that their packages
    are importable on every rank (a ConfigError naming the package otherwise); only rank 0
    writes."""

    def __init__(self, config, rank):
        self.writers = []
        self._summary_writer = None
        self._wandb = None
        tensorboard = _section(config, "tensorboard")
        wandb_section = _section(config, "wandb")
        if tensorboard.get("enabled") is True:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as error:  # torch's writer needs the tensorboard package
                raise _missing("tensorboard", "tensorboard", error) from None
            if rank == 0:
                folder = os.path.join(tensorboard.get("output_path", "") or "",
                                      tensorboard.get("job_name", "DeepSpeedJobName"))
                os.makedirs(folder or ".", exist_ok=True)
                self._summary_writer = SummaryWriter(log_dir=folder)
                self.writers.append(self._write_tensorboard)
        if wandb_section.get("enabled") is True:
            try:
                import wandb
            except ImportError as error:
                raise _missing("wandb", "wandb", error) from None
            if rank == 0:
                wandb.init(project=wandb_section.get("project", "deepspeed"), group=wandb_section.get("group"),
                           entity=wandb_section.get("team"))
                self._wandb = wandb
                self.writers.append(self._write_wandb)
        self.enabled = bool(self.writers)

    def _write_tensorboard(self, events):
        for name, value, step in events:
            self._summary_writer.add_scalar(name, value, step)
        self._summary_writer.flush()

    def _write_wandb(self, events):
        for name, value, step in events:
            self._wandb.log({name: value}, step=step)

    def write(self, events):
        if events:
            for writer in self.writers:
                writer(events)

    def close(self):
        if self._summary_writer is not None:
            self._summary_writer.close()
            self._summary_writer = None
        self.writers = []
        self.enabled = False


@contextlib.contextmanager
def timed(engine, phase, enabled):
    """Reports the block's wall time to the core as the host's forward or backward (with
    wall_clock_breakdown; on a GPU after synchronizing, as DeepSpeed's timers do)."""
    if not enabled:
        yield
        return
    import torch

    synchronize = torch.cuda.synchronize if torch.cuda.is_available() and torch.cuda.is_initialized() else (
        lambda: None)
    synchronize()
    start = time.perf_counter()
    yield
    synchronize()
    engine.report_host_time(phase, time.perf_counter() - start)
