"""Batched trials: RL training runs of one built-in model that differ only in hyperparameters and seed,
trained as one stacked ensemble.

Run one at a time, every step of a small trial pays Python's and torch's fixed costs on tiny tensors.
``run_batched`` trains all of them together: per step one sampling pass (every member's prompts in one
batch, each row with its own member's randomness), one forward and one backward (``torch.func.vmap`` over
the stacked weights, ``rlnb.batched.stacked``) and one optimizer update (``rlnb.batched.optim``).

Each member is still a full trial. It has its own History (a run folder under ``runs_dir``) with the
records a local session writes — sample, forward-backward, optim-step, weights-sync, with their statuses,
error codes, losses, loss metrics, grad norms, clip and learning rates — and its mean reward logged per
step, so ``rlnb.compare``, the plots and a sweep's trial table read it as any run. Its numbers are those of
the same trial run alone (``rlnb.tasks.rl_step`` on ``connect("local", model=..., seed=seed)`` with sample
seed ``seed * SEED_STRIDE + step``), to float rounding, with the same sampled tokens. A member that fails
(a non-finite loss or gradient: ``NON_FINITE_LOSS``, with its weights and optimizer state untouched by the
failed step) leaves the ensemble alone; the others go on.

Which trials qualify: ``why_not_batched``. The step loop is ``rlnb.batched.ensemble``, the types
``rlnb.batched.members``.

    results = run_batched("tiny", "adam", [Member(AdamParams(learning_rate=lr), seed=0) for lr in (1e-3, 3e-3)],
                          steps=25, runs_dir="runs")
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from rlnb import wire
from rlnb._input.checks import check_bool, check_event, check_int, takes
from rlnb._input.options import refuse_unknown, take
from rlnb.batched.ensemble import Ensemble
from rlnb.batched.failures import own_errors
from rlnb.batched.members import Hooks, Member, MemberResult, OnStep
from rlnb.batched.options import ENGINE_OPTIONS, EngineOptions, StepOptions
from rlnb.engine.models.tiny import SIZES
from rlnb.engine.options import MuonOptions, refuse_muon_only
from rlnb.engine.threads import ThreadUse
from rlnb.history.recording import check_recording
from rlnb.history.runconfig import LOCAL, RUN_FIELDS
from rlnb.params import PARAMS
from rlnb.tasks import SEED_STRIDE, Task, check_steps, digits_task, seed_range
from rlnb.tasks.task import check_group_size
from rlnb.wire import MAX_NUM_SAMPLES, OptimizerKind

__all__ = ["BATCHABLE_OPTIONS", "SEED_STRIDE", "Member", "MemberResult", "OnStep", "run_batched", "why_not_batched"]

BATCHABLE_OPTIONS = frozenset({"model"} | ENGINE_OPTIONS)
"""The ``rlnb.connect`` options a batched trial honours; a trial with any other cannot be batched."""


def why_not_batched(target: str, options: Mapping[str, Any]) -> str | None:
    """Why a trial (``connect(target, **options)`` driven by ``rl_step``) cannot join an ensemble, or None
    if it can. Trials batch together when they also share the model, optimizer kind, step count, task
    and these options; only hyperparameters (a schedule included) and seeds may differ."""
    if target != LOCAL:
        return f"target {target!r} is not in this process (batched trials are local)"
    model = options.get("model", "tiny")
    if not (isinstance(model, str) and model in SIZES):
        return f"model {model!r} is not a built-in model ({' / '.join(SIZES)})"
    other = sorted(set(options) - BATCHABLE_OPTIONS)
    if other:
        return f"option(s) {', '.join(other)} are not supported by batched trials"
    return None


def run_batched(
    model: str,
    optimizer: OptimizerKind,
    members: Sequence[Member],
    *,
    steps: int,
    task: Task | None = None,
    runs_dir: str | Path | None = None,
    stop: threading.Event | None = None,
    on_step: OnStep | None = None,
    on_done: Callable[[int, MemberResult], None] | None = None,
    keep_weights: bool = False,
    **options: Any,
) -> list[MemberResult]:
    """Train every member for ``steps`` RL steps of ``task`` (default: the digits task, ``digits_task()``) as one
    ensemble; one result per member, in order.

    ``model`` is ``"tiny"`` or ``"small"``, ``optimizer`` ``"adam"`` or ``"muon"``. Each member's History
    records under ``runs_dir/<run_id>`` (in memory when ``runs_dir`` is None). ``on_step(i, report)`` follows
    each completed step of member i (a string answer prunes it: PRUNED with that reason) and
    ``on_done(i, result)`` its end. Setting ``stop`` ends the run before the next step (members end
    STOPPED); Ctrl-C does the same and leaves ``stop`` as it was. ``keep_weights`` returns each member's final weights.

    ``options`` are the fields of two groups, by name: ``StepOptions`` as for ``rl_step`` (``group_size``,
    default the task's; ``temperature``, ``loss``, ``loss_params``) and ``EngineOptions`` as for
    ``rlnb.connect`` (``device``, ``ns_dtype``, ``muon_scaling``, ``threads``: the ensemble is one worker of
    the engine's thread policy, on the calling thread, and its count is restored afterwards).
    """
    left = dict(options)
    step, engine = take(StepOptions, left), take(EngineOptions, left)
    if left:  # lora=True named nothing run_batched takes, nor that such a trial runs alone
        takes = ", ".join(f.name for group in (StepOptions, EngineOptions) for f in dataclasses.fields(group))
        refuse_unknown(left, f"run_batched() (options: {takes}; LoRA, resume_from and Hugging Face models run alone)")
    _check_args(task, stop, on_step, on_done, keep_weights)
    task = task or digits_task()
    steps, members = _check(model, optimizer, members, steps)
    refuse_muon_only(optimizer, MuonOptions(engine.muon_scaling, engine.ns_dtype))  # as an Adam session refuses them
    if runs_dir is not None:
        check_open_files(len(members))
    for m in members if runs_dir is not None else ():  # as connect checks it, before a model is built or a folder made
        check_recording(None, runs_dir, m.run_id, True)
    check_group_size(task.group_size if step.group_size is None else step.group_size, MAX_NUM_SAMPLES)
    use, previous = ThreadUse(engine.torch_device(), engine.threads), torch.get_num_threads()
    described = {**use.config(), "compile": False}  # as a session alone records it
    members = [replace(m, annotations={**described, **m.annotations}) for m in members]
    try:
        use.before(0)
        hooks = Hooks(stop or threading.Event(), on_step, on_done)
        ensemble = Ensemble(model, optimizer, list(members), steps=steps, task=task, runs_dir=runs_dir, hooks=hooks,
                            engine=engine, step=step, keep_weights=keep_weights)  # fmt: skip
        return ensemble.run()
    finally:
        use.after()
        use.restore(previous)
        use.close()


def _check_args(task: object, stop: object, on_step: object, on_done: object, keep_weights: object) -> None:
    """Before any model is built or run folder made: ``task="digits"`` and ``stop=True`` were an ``AttributeError``
    naming neither, ``on_step=5`` a ``TypeError`` after the first step had trained, ``keep_weights="no"`` kept them."""
    if task is not None and not isinstance(task, Task):
        raise TypeError(f"task must be None (the digits task) or a rlnb.tasks.Task, got {task!r}"[:300])
    check_event(stop, "the run")
    for name, value, second in (("on_step", on_step, "report"), ("on_done", on_done, "result")):
        if value is not None and not takes(value, 2):  # a lambda of no arguments failed after a step had trained
            raise TypeError(f"{name} must be None or a function (member index, {second}), got {value!r}"[:300])
    check_bool("keep_weights", keep_weights)  # as connect's record= is checked


def _check(model: str, optimizer: str, members: Iterable[Member], steps: int) -> tuple[int, list[Member]]:
    """``steps`` and the members, with plain int seeds, once everything is checked."""
    if not (isinstance(model, str) and model in SIZES):
        raise ValueError(f"model must be a built-in model ({' / '.join(SIZES)}), got {model!r}")
    wire.optimizer_kind(optimizer)
    if isinstance(members, Member | Mapping | str | bytes) or not isinstance(members, Iterable):  # a dict: its keys
        raise TypeError(f"members must be a list of Member objects, got {type(members).__name__}")
    members = list(members)  # a generator would be read by the run-id check, leaving no member: IndexError
    wrong = next((i for i, m in enumerate(members) if not isinstance(m, Member)), None)
    if wrong is not None:
        raise TypeError(f"members[{wrong}] must be a Member(params, seed), got {type(members[wrong]).__name__}")
    if not members:
        raise ValueError("members is empty: an ensemble needs at least one trial")
    steps = check_steps(steps, 0)
    ids = [m.run_id for m in members if m.run_id is not None]
    if len(set(ids)) != len(ids):
        raise ValueError(f"members' run_id must differ (each member records its own run): {sorted(ids)}")
    expected = PARAMS[wire.optimizer_kind(optimizer)]
    lowest, highest = seed_range(steps)  # a seed past it wrapped its step seeds; np.int64 overflowed in the sampler
    checked = []
    for i, m in enumerate(members):
        if not callable(m.params) and not isinstance(m.params, expected):
            raise ValueError(
                f"members[{i}].params must be {expected.__name__} (optimizer={optimizer!r}), "
                f"or a function of the step returning one; got {type(m.params).__name__}"
            )
        first = _first(m.params) if callable(m.params) else None  # the other kind failed it at step 0, models built
        if first is not None and not isinstance(first, expected):
            raise ValueError(f"members[{i}].params(0) returned {type(first).__name__}: optimizer={optimizer!r} takes "
                             f"{expected.__name__} at every step (a schedule for the other optimizer?)")  # fmt: skip
        if not isinstance(m.annotations, Mapping):  # None: "'NoneType' object is not a mapping", naming no member
            raise TypeError(f"members[{i}].annotations must be a dict of config fields, got {m.annotations!r}")
        bad = [k for k in m.annotations if not isinstance(k, str)]  # History.annotate(**fields) takes names only
        own = sorted(RUN_FIELDS & set(m.annotations) - set(bad))  # {"run_id": "x"} relabelled the run's folder
        if bad or own:
            what = f"key {bad[0]!r} is not a str" if bad else f"{', '.join(own)} is the run's own field"
            raise ValueError(f"members[{i}].annotations: {what}; pick another name, as History.annotate asks")
        checked.append(replace(m, seed=check_int(f"members[{i}].seed", m.seed, lowest, highest)))
    return steps, checked


FILES_PER_MEMBER, FILES_RESERVED = 4, 64
"""Files a recording member holds open for the ensemble's life (its run's lock and logs: measured on ``tiny``), and
those left to the rest of the process."""


def open_files_limit(wanted: int = 0) -> int | None:
    """How many files this process may open (``ulimit -n``), or None where it is not known (Windows): read once,
    after raising the soft limit toward the hard one where ``wanted`` files are more (macOS's soft 256, hard far
    above)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and wanted > soft:
        raised = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
            soft = raised
        except (ValueError, OSError):  # a limit this process may not raise: refused by the caller
            pass
    return None if soft == resource.RLIM_INFINITY else int(soft)


def most_members(wanted: int = 0) -> int | None:
    """The most recording members this process can hold the files of (None: no known limit), the soft ``ulimit -n``
    first raised for ``wanted`` members where it is lower."""
    limit = open_files_limit(wanted * FILES_PER_MEMBER + FILES_RESERVED)
    return None if limit is None else _members(limit)


def _members(limit: int) -> int:
    return max(0, (limit - FILES_RESERVED) // FILES_PER_MEMBER)


def check_open_files(members: int) -> None:
    """``ValueError`` naming the limit when ``members`` recording runs cannot all hold their files open: past it,
    ``OSError: Too many open files`` would come from some members' Histories, which go on in memory with a warning."""
    limit = open_files_limit(members * FILES_PER_MEMBER + FILES_RESERVED)
    if limit is not None and members > _members(limit):
        raise ValueError(f"members: {members} recording members hold ~{FILES_PER_MEMBER} files open each, and this "
                         f"process may open {limit} (ulimit -n): at most {_members(limit)} members here; pass "
                         "fewer, raise the limit, or runs_dir=None (in memory)")  # fmt: skip


def _first(params: Callable[[int], Any]) -> Any:
    """A member's ``params(0)``, or None where it raises: its own error fails that member at its step 0, as at
    any step (the ensemble's other members go on)."""
    try:
        return params(0)
    except own_errors():  # the member's own code, called again (and failed) at its step 0
        return None
