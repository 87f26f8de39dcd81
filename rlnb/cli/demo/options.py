"""``DemoOptions``: what one ``rlnb demo`` run takes, checked field by field before anything is written or a model
loads (and against the model once loaded, ``check_loaded``), and ``DEMO_PARAMS``, the optimizers' presets it trains
with. Each field is the ``rlnb demo`` option of that name (``task`` is ``--task``), so an error names the option as a
user typed it; ``demo(DemoOptions(...))`` runs the same checks from Python."""

from __future__ import annotations

import math
import numbers
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlnb._input.checks import is_integer, user_path
from rlnb._input.shown import shown
from rlnb.cli.options import checked_threads, refused_option
from rlnb.engine.dtypes import WEIGHT_DTYPES

if TYPE_CHECKING:
    from rlnb.wire import OptimizerKind

_ADAM: dict[str, Any] = {
    "learning_rate": 2e-3,
    "beta1": 0.9,
    "beta2": 0.95,
    "eps": 1e-8,
    "weight_decay": 0.0,
    "grad_clip_norm": 1.0,
}
DEMO_PARAMS: dict[OptimizerKind, dict[str, Any]] = {
    # The builder's "Learns in 40 steps" preset (its lesson is measured on seeds 0-9 by bench/bench_lessons.py).
    # Together's documented Adam default (1e-4) is meant for large pretrained models: it barely moves a
    # ~150k-parameter model. Muon's AdamW half (embeddings, head, norms, biases) is Adam's.
    "adam": _ADAM,
    "muon": {
        "learning_rate": 0.05,
        "momentum": 0.95,
        "newton_schulz_steps": 5,
        "weight_decay": 0.0,
        "grad_clip_norm": 1.0,
        "adam": _ADAM,
    },
}


TASK_NAMES = ("first_letter", "addition", "digits")
"""``rlnb.tasks.TASKS``' names, written out: importing the tasks takes seconds that ``rlnb demo --help`` would wait
(``tests/test_cli_help.py`` holds the two together)."""
DEMO_DTYPES = tuple(d for d in WEIGHT_DTYPES if d != "float16")
"""The weights' dtypes ``rlnb demo`` offers: not float16, whose backward is not loss-scaled (its gradients below 3e-8
are 0); bfloat16 is the half precision to train in (docs/models.md)."""


@dataclass(frozen=True)
class DemoOptions:
    """One demo run: the task and optimizer, ``steps`` RL steps, the files in ``out`` (``force``: replace files of
    the demo's names that no earlier demo wrote there), ``seed``, ``device``, ``model``, ``lr`` (None: the preset's),
    ``lora`` (rank; 0: all weights), ``dtype`` and ``threads`` (torch's intra-op threads on the CPU, as
    ``rlnb.connect(..., threads=N)``; None: the engine's thread policy picks them from the machine's load, so a seeded
    run can differ between a busy and an idle machine)."""

    task: str = "first_letter"
    optimizer: str = "adam"
    steps: int = 40
    out: str | Path = "rlnb-demo"
    """Kept as a ``Path``, ``~`` expanded."""
    force: bool = False
    seed: int = 0
    device: str = "auto"
    model: str = "tiny"
    lr: float | None = None
    lora: int = 0
    dtype: str = "auto"
    threads: int | None = None

    def __post_init__(self) -> None:
        from rlnb import wire
        from rlnb.tasks import TASKS

        _one_of("--task", self.task, tuple(TASKS))
        _one_of("--optimizer", self.optimizer, wire.OPTIMIZERS)
        _one_of("--dtype", self.dtype, WEIGHT_DTYPES)
        if self.dtype == "float16":  # the engine takes it: ``DEMO_DTYPES`` says why the demo does not
            raise ValueError(
                "--dtype float16: float16's backward is not loss-scaled (its gradients below 3e-8 are 0); use "
                "--dtype bfloat16 (float16 is for rlnb serve)"
            )
        paths = (("--out", self.out, "a folder", "a folder's path"),
                 ("--model", self.model, "a folder or a model", "tiny, small, a folder or a hub id"))  # fmt: skip
        for option, value, what, takes in paths:
            if not isinstance(value, str | os.PathLike):  # Path(123) would raise a TypeError naming no option
                raise ValueError(f"{option} must be {takes} (a str or a Path), got {value!r}")
            if not str(value).strip():  # an unset variable: '' is the working folder (its files overwritten) for either
                raise ValueError(f"{option} is empty (an unset variable?): give {what}")
        # "~/demo" was a folder named "~" in the working folder (a shell expands no "~" after --out=)
        self._keep("out", user_path("--out", self.out))
        if not isinstance(self.force, bool):
            raise ValueError(f"--force must be True or False, got {self.force!r}")
        self._check_numbers()

    def _check_numbers(self) -> None:
        from rlnb.engine.options import check_device
        from rlnb.tasks import check_steps, seed_range

        # past 2**63, seed_range turned over: "--seed must be in [-9e12, -9e13]"
        self._keep("steps", check_steps(self.steps, name="--steps"))
        if not is_integer(self.lora) or self.lora < 0:  # numpy's too, kept as plain ints, as every entry takes them
            raise ValueError(f"--lora must be >= 0 (0 = train all weights), got {self.lora!r}")
        self._keep("lora", int(self.lora))
        lr = self.lr
        if lr is not None:
            try:  # 10**400 raised OverflowError from math.isfinite
                value = float(lr) if isinstance(lr, numbers.Real) and not isinstance(lr, bool) else math.nan
            except OverflowError:
                value = math.inf
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"--lr must be a finite number > 0, got {shown(lr)}")
            self._keep("lr", value)
        lowest, highest = seed_range(self.steps)
        if not is_integer(self.seed) or not lowest <= self.seed <= highest:
            raise ValueError(f"--seed must be in [{lowest}, {highest}] for {self.steps} steps, got {self.seed!r}")
        self._keep("seed", int(self.seed))
        check_device(self.device, "--device")  # "meta" trained a session whose every operation failed, then a traceback
        self._keep("threads", checked_threads(self.threads))

    def _keep(self, name: str, value: object) -> None:
        """Set a checked field on the frozen options, as the plain Python value it was checked as."""
        object.__setattr__(self, name, value)


def _one_of(option: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{option} must be one of {', '.join(allowed)}, got {value!r}")


def as_option(exc: ValueError) -> ValueError:
    """The engine's refusal of a demo option (a device this torch lacks, a LoRA rank past the model's layers, a model
    it cannot load: ``OptionRefused``, by its field) naming the option typed, as every other refusal of ``rlnb demo``
    does; any other error as it is."""
    from rlnb.errors import OptionRefused  # here: rlnb.errors reads rlnb.wire (pydantic), which ``--help`` never needs

    return ValueError(refused_option(exc, f"--{exc.field}")) if isinstance(exc, OptionRefused) else exc


def check_loaded(backend: Any, options: DemoOptions, params: Any) -> None:
    """A ``ValueError`` naming the option where ``options`` do not fit the model ``backend`` loaded, before training:
    ``--dtype auto`` that loaded a float16 checkpoint as float16 (``DEMO_DTYPES`` says why the demo does not train
    in it); ``params`` the engine's own check of each optim-step refuses (``check_optim_step``:
    ``--lr 1e308`` sampled and failed all its steps INVALID_INPUT)."""
    if options.dtype == "auto" and backend.config()["dtype"] == "float16":
        raise ValueError(
            "--dtype auto gave float16 (the checkpoint's); give --dtype bfloat16 (float16's backward is not "
            "loss-scaled: its gradients below 3e-8 are 0)"
        )
    try:
        backend.check_optim_step(params.resolved())  # as Session.check_params asks it
    except ValueError as exc:
        given = f" (--lr {options.lr:g})" if options.lr is not None else ""
        raise ValueError(f"the optimizer's params do not fit this model{given}: {exc}") from None
