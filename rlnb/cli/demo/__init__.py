"""``rlnb demo``: ``command`` (its arguments and the run), ``options`` (``DemoOptions``, checked field by field, and
its presets), ``files`` (what it writes in ``--out`` and which earlier files it may replace), ``aside`` (where it sets
them aside until the new run completes a step, and its lock on ``--out``), ``stops`` (SIGTERM and SIGHUP as a stop).
From Python: ``demo(DemoOptions(...))``."""

from rlnb.cli.demo.command import arguments, demo, run
from rlnb.cli.demo.options import DemoOptions

__all__ = ["DemoOptions", "arguments", "demo", "run"]
