"""``rlnb demo``: the RL loop end to end on the in-process torch backend, in one command.

Its arguments, their checks and the run itself (``demo``) live here, apart from the server's, so a change to the demo
touches one module; the files it writes in ``--out``, and the earlier output it replaces, are ``demo_files``'s.
torch, the tasks, the plots and the run store are imported when it runs (``rlnb --help`` imports none of them).
"""

from __future__ import annotations

import argparse
import math
import signal
import sys
import time
from pathlib import Path
from typing import Any

from rlnb.cli.interrupts import ignored
from rlnb.cli.options import device_argument, dtype_argument, integer, number
from rlnb.cli.output import quiet, say

_ADAM: dict[str, Any] = {
    "learning_rate": 2e-3,
    "beta1": 0.9,
    "beta2": 0.95,
    "eps": 1e-8,
    "weight_decay": 0.0,
    "grad_clip_norm": 1.0,
}
DEMO_PARAMS: dict[str, dict[str, Any]] = {
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


def demo(
    optimizer: str = "adam",
    steps: int = 40,
    out: str | Path = "rlnb-demo",
    seed: int = 0,
    device: str = "auto",
    model: str = "tiny",
    lr: float | None = None,
    lora: int = 0,
    dtype: str = "auto",
    task_name: str = "first_letter",
    force: bool = False,
) -> int:
    """Train ``model`` (built-in, or a Hugging Face directory / cached hub id) on the task ``task_name``
    (``rlnb.tasks.TASKS``) with GRPO; print a table and, for a verifiable task, the held-out accuracy
    before and after; write CSV + PNG, and keep the run folder (``out/run``, loadable with
    ``rlnb.History.load``, its completions in ``completions.jsonl``), replacing what an earlier demo wrote there
    (other files of those names only with ``force``). ``lr`` replaces the learning rate (Muon's for a Muon run);
    ``lora`` > 0 trains a LoRA adapter of that rank instead of all weights."""
    import rlnb
    from rlnb.cli.demo_files import OUTPUTS, check_out, clear_earlier_output, note_own_files
    from rlnb.engine.backend import LocalBackend
    from rlnb.tasks import EVAL_EVERY, SEED_STRIDE, TASKS, VerifiedTask, rl_step
    from rlnb.tasks.lesson import log_accuracy
    from rlnb.viz import plots

    task = TASKS[task_name]()
    verified = task if isinstance(task, VerifiedTask) else None
    values = dict(DEMO_PARAMS[optimizer])
    if lr is not None:
        values["learning_rate"] = lr
    params = (rlnb.AdamParams if optimizer == "adam" else rlnb.MuonParams).from_dict(values)
    out = Path(out)
    check_out(out, force)
    adapter = {"rank": lora, "alpha": 2 * lora} if lora else None
    kind = rlnb.wire.optimizer_kind(optimizer)
    backend = LocalBackend(kind, seed=seed, device=device, model=model, dtype=dtype, lora=adapter)
    try:  # out and run/ are made once the params fit: --lr 1e308 was refused with an empty run/ left behind
        _check_fits(backend, params, lr)
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ValueError(f"cannot write the demo's files in {out}: {exc}") from None
        removed = clear_earlier_output(out, force)
        if removed:
            print(f"rlnb demo: replacing the earlier output in {out}: {', '.join(removed)}", file=sys.stderr)
        session = rlnb.Session(backend, runs_dir=out, run_id="run")
    except BaseException:
        backend.close()
        raise
    start = time.perf_counter()
    with session:
        print(
            f"rlnb demo: task={task.name} model={model} optimizer={optimizer} steps={steps} "
            f"params={params.request_body()}{f' lora rank {lora}' if lora else ''}"
        )
        before = after = log_accuracy(session, verified) if verified else math.nan
        if verified:
            print(f"held-out accuracy before training: {before:.3f} ({len(verified.eval_prompts)} prompts, greedy)")
        print(f"{'step':>4}  {'loss':>8}  {'reward':>6}  {'grad norm':>9}  {'time':>6}  status")
        failure = None  # the first failure's reason, said once: a step that failed says why, not only its code
        completed = 0
        for i in range(steps):
            try:
                r = rl_step(session, task, params, seed=seed * SEED_STRIDE + i)
            except rlnb.OperationFailed as exc:
                said = "" if failure else f": {exc.message}"
                failure = failure or f"{exc.code}: {exc.message}"
                elapsed = time.perf_counter() - start
                print(f"{i + 1:>4}  {'':>8}  {'':>6}  {'':>9}  {elapsed:>5.1f}s  FAILED {exc.code}{said}")
                continue
            completed += 1
            status = rlnb.wire.short_name(r.status)
            gn = f"{r.grad_norm:9.3f}" if not math.isnan(r.grad_norm) else f"{'n/a':>9}"
            elapsed = time.perf_counter() - start
            print(f"{r.step:>4}  {r.loss:8.4f}  {r.reward:6.3f}  {gn}  {elapsed:5.1f}s  {status}", flush=True)
            if verified and (r.step % EVAL_EVERY == 0 or i + 1 == steps):
                after = log_accuracy(session, verified)
                print(f"      held-out accuracy at step {r.step}: {after:.3f}", flush=True)
        if verified:
            print(
                f"held-out accuracy: before {before:.3f} -> after {after:.3f}"
                f" (a constant answer scores {verified.chance:.2f})"
            )
        history = session.history
    history.to_csv(out / "history.csv")
    logged = history.logged
    logged.to_csv(out / "rewards.csv", index=False)
    plots.overview(history).savefig(out / "demo.png", dpi=110)  # reward first; rl_step logged the RL metrics
    note_own_files(out, ["run/", *OUTPUTS])
    if "reward" in logged:
        rewards = logged["reward"].dropna()  # the eval/accuracy rows have no reward
        k = max(1, min(5, len(rewards) // 4))
        first, last = rewards[:k].mean(), rewards[-k:].mean()
        print(f"mean reward: first {k} steps {first:.3f} -> last {k} steps {last:.3f}")
    print(
        f"wrote {out / 'history.csv'}, {out / 'rewards.csv'}, {out / 'demo.png'} in {time.perf_counter() - start:.0f}s;"
        f" the completions are in {out / 'run' / 'completions.jsonl'}"
    )
    if not completed:  # nothing trained: say so and fail, so a script does not take the run for a success
        print(f"rlnb demo: none of the {steps} steps completed; the first failed {failure}", file=sys.stderr)
        return 1
    return 0


def _check_fits(backend: Any, params: Any, lr: float | None) -> None:
    """A ``ValueError`` when ``params`` do not fit the model's weights, by the engine's own check of each optim-step
    (``TrainerOptimizer.check``), before training: ``--lr 1e308`` sampled and failed all its steps INVALID_INPUT."""
    try:
        backend.optim.check(params.resolved())
    except ValueError as exc:
        given = f" (--lr {lr:g})" if lr is not None else ""
        raise ValueError(f"the optimizer's params do not fit this model{given}: {exc}") from None


def arguments(p: argparse.ArgumentParser) -> None:
    """``rlnb demo``'s options, on its subcommand's parser."""
    p.add_argument(
        "--task",
        choices=["first_letter", "addition", "digits"],
        default="first_letter",
        help="first_letter: copy the first letter (exact match, held-out accuracy); addition: "
        "single-digit sums; digits: reward = fraction of digits (gameable: '88888888' scores 1) "
        "(default: %(default)s)",
    )
    p.add_argument("--optimizer", choices=["adam", "muon"], default="adam", help="(default: %(default)s)")
    p.add_argument("--steps", type=integer, default=40, help="RL steps, 1-1000003 (default: %(default)s)")
    p.add_argument(
        "--out",
        default="rlnb-demo",
        help="folder for history.csv, rewards.csv, demo.png and run/ (default: %(default)s)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="replace files of the demo's names in --out that no earlier demo wrote there",
    )
    p.add_argument(
        "--seed",
        type=integer,
        default=0,
        help="model and sampling seed, about -9.2e12 to 9.2e12 (step i samples with seed * 1000003 + i, "
        "an int64; the exact range for --steps is said when one is out) (default: %(default)s)",
    )
    device_argument(p)
    p.add_argument(
        "--model",
        default="tiny",
        help="tiny, small, or a Hugging Face model directory / hub id in the local cache (default: %(default)s)",
    )
    p.add_argument(
        "--lr", type=number, default=None, help="learning rate, a finite number > 0 (default: tuned for the built-ins)"
    )
    p.add_argument(
        "--lora",
        type=integer,
        default=0,
        metavar="RANK",
        help="train a LoRA adapter of this rank, 0 or more, up to what the model's layers can use "
        "(default: %(default)s: all weights)",
    )
    dtype_argument(p)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``rlnb demo``: its arguments checked, then ``demo``; a bad argument or a failure is one line ``rlnb demo: ...``
    (argparse's usage and "rlnb: error:" were printed for some options, as ``rlnb serve``'s were), exit 2."""
    hangup = [signal.SIGHUP] if hasattr(signal, "SIGHUP") and not ignored(signal.SIGHUP) else []  # POSIX; nohup
    stops = [signal.SIGTERM, *hangup]
    previous = {signum: signal.signal(signum, _terminated) for signum in stops}
    try:
        _check_arguments(args)
        return demo(
            args.optimizer,
            args.steps,
            args.out,
            args.seed,
            args.device,
            args.model,
            args.lr,
            args.lora,
            args.dtype,
            args.task,
            args.force,
        )
    # A model that cannot load, a device that is not there, an --out that cannot take the run.
    except (ValueError, ImportError) as exc:
        print(f"rlnb demo: {exc}", file=sys.stderr)
        return 2
    except Terminated as stop:  # `timeout`, a scheduler, `kill`, a closed terminal: it died at once, without a word
        signum = stop.args[0]
        say(f"rlnb demo: stopped ({signal.Signals(signum).name}){_kept(args.out)}")
        return 128 + signum  # 143 for SIGTERM, 129 for SIGHUP, as a shell reports a process they ended
    except KeyboardInterrupt:  # Ctrl-C: a traceback through torch, and no word of what was kept
        say(f"rlnb demo: interrupted{_kept(args.out)}")
        return 130
    except BrokenPipeError:  # `rlnb demo | head`: a traceback, and another at exit (flushing into the closed pipe)
        quiet(sys.stdout)
        say(f"rlnb demo: stopped, its output was closed{_kept(args.out)}")
        return 141  # 128 + SIGPIPE, as a shell reports a process its pipe ended
    finally:  # an in-process caller (a test, a notebook) keeps its own
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP (its number the argument), raised where the demo runs so that it stops as at Ctrl-C: the run
    folder's steps kept and said."""


def _terminated(signum: int, _frame: object) -> None:
    raise Terminated(signum)


def _check_arguments(args: argparse.Namespace) -> None:
    """A ``ValueError`` naming the first option out of its range, before anything is written or a model loads."""
    for option, value, what in (("--out", args.out, "a folder"), ("--model", args.model, "a folder or a model")):
        if not value.strip():  # an unset variable: '' is the working folder (its files overwritten) for either
            raise ValueError(f"{option} is empty (an unset variable?): give {what}")
    from rlnb.engine.options import check_device
    from rlnb.tasks import check_steps, seed_range

    check_steps(args.steps, name="--steps")  # past 2**63, seed_range turned over: "--seed must be in [-9e12, -9e13]"
    if args.lora < 0:
        raise ValueError(f"--lora must be >= 0 (0 = train all weights), got {args.lora}")
    if args.lr is not None and not (args.lr > 0 and math.isfinite(args.lr)):
        raise ValueError(f"--lr must be a finite number > 0, got {args.lr}")
    lowest, highest = seed_range(args.steps)
    if not lowest <= args.seed <= highest:
        raise ValueError(f"--seed must be in [{lowest}, {highest}] for {args.steps} steps, got {args.seed}")
    check_device(args.device)  # "meta" trained a session whose every operation failed, then a traceback


def _kept(out: str) -> str:
    """Where the steps of a demo that stopped early are, when its run folder was written."""
    from rlnb.history.store import OPS_FILE

    folder = Path(out) / "run"
    return f"; the steps so far are in {folder} (rlnb.History.load)" if (folder / OPS_FILE).exists() else ""
