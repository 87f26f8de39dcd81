"""``rlnb demo``: the RL loop end to end on the in-process torch backend, in one command.

Its arguments and the run itself (``demo``) live here, apart from the server's; what a run takes and its checks are
``options``' (``DemoOptions``), the files it writes in ``--out``, and the earlier output it replaces, ``files``',
and the words of a demo stopped early, ``stops``'.
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

from rlnb.cli.demo.options import DEMO_DTYPES, DEMO_PARAMS, TASK_NAMES, DemoOptions, as_option, check_loaded
from rlnb.cli.demo.stops import RECORDING, RESTORED, Terminated, kept, restored, terminated
from rlnb.cli.interrupts import ignored
from rlnb.cli.options import device_argument, dtype_argument, integer, number, threads_argument, threads_said
from rlnb.cli.output import quiet, say, show


def demo(options: DemoOptions | None = None) -> int:
    """Train ``options.model`` (built-in, or a Hugging Face directory / cached hub id) on the task ``options.task``
    (``rlnb.tasks.TASKS``) with GRPO; print a table and, for a verifiable task, the held-out accuracy before and
    after; write CSV + PNG, and keep the run folder (``out/run``, loadable with ``rlnb.History.load``, its
    completions in ``completions.jsonl``). What an earlier demo wrote in ``out`` (other files of those names only
    with ``force``) is set aside while it trains and deleted once a step completed; a run that stops before it
    recorded anything puts it back, one that stops later keeps it aside (``files``). One options object, not a
    parameter list: the demo takes a dozen."""
    import rlnb
    from rlnb._files import release
    from rlnb.cli.demo.aside import asides, first_lines, hold_out, recover
    from rlnb.cli.demo.files import check_out, restore_earlier_output, set_aside_earlier_output
    from rlnb.engine.backend import LocalBackend

    o = options if options is not None else DemoOptions()
    kind = rlnb.wire.optimizer_kind(o.optimizer)
    values = dict(DEMO_PARAMS[kind])
    if o.lr is not None:
        values["learning_rate"] = o.lr
    params = rlnb.params.PARAMS[kind].from_dict(values)
    out = Path(o.out)
    said = check_out(out, o.force)
    adapter = {"rank": o.lora, "alpha": 2 * o.lora} if o.lora else None
    try:
        backend = LocalBackend(
            kind, seed=o.seed, device=o.device, model=o.model, dtype=o.dtype, lora=adapter, threads=o.threads
        )
    except ValueError as exc:
        raise as_option(exc) from None
    held = aside = None
    set_aside = False
    try:  # out and run/ are made once the params fit: --lr 1e308 is refused with no empty run/ left behind
        check_loaded(backend, o, params)
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ValueError(f"cannot write the demo's files in {out}: {exc}") from None
        held = hold_out(out)  # until it returns: a second demo here is told that this one runs
        said += recover(out)  # a demo killed while this one loaded its model
        kept = asides(out)  # what stopped demos set aside stays; this run's earlier output goes into the next free
        aside, removed = set_aside_earlier_output(out, o.force)
        set_aside = True
        session = rlnb.Session(backend, runs_dir=out, run_id="run")
    except BaseException as exc:
        backend.close()
        if set_aside and restore_earlier_output(out, aside):
            exc.add_note(RESTORED)
        release(held)
        raise
    try:
        return _replace(session, o, params, aside, [*said, *first_lines(out, kept, aside, removed)])
    finally:
        release(held)


def _replace(session: Any, o: DemoOptions, params: Any, aside: Path | None, lines: list[str]) -> int:
    """The run over the earlier output set aside in ``aside``, the demo's ``lines`` said first; what it set aside is
    deleted once a step completed, put back when it recorded nothing."""
    from rlnb.cli.demo.aside import asides, drop, kept_words
    from rlnb.cli.demo.files import restore_earlier_output

    out = Path(o.out)
    try:  # the earlier output comes back when the run stops before it recorded anything (a Ctrl-C)
        for line in lines:  # in the block: a Ctrl-C while a pager holds stderr would leave it aside beside an empty run
            print(line, file=sys.stderr)
        completed, failure = _train(session, o, params, out)
    except BaseException as exc:
        if not session.closed:  # stopped before _train's block: its run folder is let go before it is deleted
            session.close()
        if restore_earlier_output(out, aside):
            exc.add_note(RESTORED)  # run() says so: OUT/run is the earlier run again, not this one's steps
        else:
            exc.add_note(RECORDING)  # run() names OUT/run: its steps are this run's
        raise
    if not completed:  # nothing trained: say so and fail, so a script does not take the run for a success
        restore_earlier_output(out, aside)
        print(f"rlnb demo: none of the {o.steps} steps completed; the first failed {failure}"
              f"{kept_words(asides(out))}", file=sys.stderr)  # fmt: skip
        return 1
    try:
        problem = drop(out, aside)  # a failure here is said, not raised: the run wrote its files
    except KeyboardInterrupt:  # SIGTERM too: it completed (not 130, "the steps so far"); the next demo resumes it
        where = (
            f"stays in {aside}: delete it" if aside and aside.is_dir() else f"the next demo in {out} deletes the rest"
        )
        problem = f"rlnb demo: the run completed and wrote its files; stopped deleting the output it replaced: {where}"
    if problem:
        print(problem, file=sys.stderr)
    return 0


def _train(session: Any, o: DemoOptions, params: Any, out: Path) -> tuple[int, str | None]:
    """The run itself, its table and its files: (how many steps completed, the first failure's reason)."""
    import rlnb
    from rlnb.cli.demo.files import write_outputs
    from rlnb.tasks import EVAL_EVERY, SEED_STRIDE, TASKS, VerifiedTask, rl_step
    from rlnb.tasks.lesson import log_accuracy

    task = TASKS[o.task]()
    verified = task if isinstance(task, VerifiedTask) else None
    start = time.perf_counter()
    with session:
        show(
            f"rlnb demo: task={task.name} model={o.model} optimizer={o.optimizer} steps={o.steps} "
            f"threads={_threads(session.history.config)} "
            f"params={params.request_body()}{f' lora rank {o.lora}' if o.lora else ''}"
        )
        before = after = log_accuracy(session, verified) if verified else math.nan
        if verified:
            show(f"held-out accuracy before training: {before:.3f} ({len(verified.eval_prompts)} prompts, greedy)")
        show(f"{'step':>4}  {'loss':>8}  {'reward':>6}  {'grad norm':>9}  {'time':>6}  status")
        failure = None  # the first failure's reason, said once: a step that failed says why, not only its code
        completed = 0
        for i in range(o.steps):
            try:
                r = rl_step(session, task, params, seed=o.seed * SEED_STRIDE + i)
            except rlnb.OperationFailed as exc:
                said = "" if failure else f": {exc.message}"
                failure = failure or f"{exc.code}: {exc.message}"
                elapsed = time.perf_counter() - start
                show(f"{i + 1:>4}  {'':>8}  {'':>6}  {'':>9}  {elapsed:>5.1f}s  FAILED {exc.code}{said}")
                continue
            completed += 1
            status = rlnb.wire.short_name(r.status)
            # 3 significant figures: 3 decimals would print 0.000 for the tiny model's 0.00043, as if nothing trained
            gn = f"{r.grad_norm:9.3g}" if not math.isnan(r.grad_norm) else f"{'n/a':>9}"
            elapsed = time.perf_counter() - start
            show(f"{r.step:>4}  {r.loss:8.4f}  {r.reward:6.3f}  {gn}  {elapsed:5.1f}s  {status}")
            if verified and (r.step % EVAL_EVERY == 0 or i + 1 == o.steps):
                after = log_accuracy(session, verified)
                show(f"      held-out accuracy at step {r.step}: {after:.3f}")
        if verified:
            show(
                f"held-out accuracy: before {before:.3f} -> after {after:.3f}"
                f" (a constant answer scores {verified.chance:.2f})"
            )
        history = session.history
    logged = write_outputs(history, out)
    if "reward" in logged:
        rewards = logged["reward"].dropna()  # the eval/accuracy rows have no reward
        k = max(1, min(5, len(rewards) // 4))
        first, last = rewards[:k].mean(), rewards[-k:].mean()
        steps = "step" if k == 1 else f"{k} steps"
        show(f"mean reward: first {steps} {first:.3f} -> last {steps} {last:.3f}")
    show(
        f"wrote {out / 'history.csv'}, {out / 'rewards.csv'}, {out / 'demo.png'} in {time.perf_counter() - start:.0f}s;"
        f" the completions are in {out / 'run' / 'completions.jsonl'}"
    )
    return completed, failure


def _threads(config: dict[str, Any]) -> str:
    """The intra-op thread count the run's operations started with, as its ``config.json`` records it."""
    policy = config.get("thread_policy")
    if policy not in ("fixed", "auto"):
        return "n/a (on the GPU)"
    return threads_said(config["threads"] if policy == "fixed" else None, config["threads"])


def arguments(p: argparse.ArgumentParser) -> None:
    """``rlnb demo``'s options, on its subcommand's parser."""
    p.add_argument(
        "--task",
        choices=TASK_NAMES,
        default="first_letter",
        help="first_letter: copy the first letter (exact match, held-out accuracy); addition: "
        "single-digit sums; digits: reward = fraction of digits (gameable: '88888888' scores 1) "
        "(default: %(default)s)",
    )
    p.add_argument("--optimizer", choices=tuple(DEMO_PARAMS), default="adam", help="(default: %(default)s)")
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
    dtype_argument(p, DEMO_DTYPES, "; float16 is for rlnb serve: its backward is not loss-scaled")
    threads_argument(p, "a seeded run repeats bit for bit only at a fixed count")


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``rlnb demo``: its arguments checked, then ``demo``; a bad argument or a failure is one line ``rlnb demo: ...``
    (never argparse's usage and "rlnb: error:", as for ``rlnb serve``), exit 2; a file it
    cannot write once it trains (a full disk), one line saying where the steps are, exit 1."""
    hangup = [signal.SIGHUP] if hasattr(signal, "SIGHUP") and not ignored(signal.SIGHUP) else []  # POSIX; nohup
    stops = [signal.SIGTERM, *hangup]
    previous = {signum: signal.signal(signum, terminated) for signum in stops}
    out: str | Path = args.out  # the checked options' (its ~ expanded) once they are made: where the steps are
    try:
        options = DemoOptions(
            task=args.task,
            optimizer=args.optimizer,
            steps=args.steps,
            out=args.out,
            force=args.force,
            seed=args.seed,
            device=args.device,
            model=args.model,
            lr=args.lr,
            lora=args.lora,
            dtype=args.dtype,
            threads=args.threads,
        )
        out = options.out
        return demo(options)
    # A model that cannot load, a device that is not there, an --out that cannot take the run.
    except (ValueError, ImportError) as exc:
        print(f"rlnb demo: {exc}{restored(out, exc)}", file=sys.stderr)
        return 2
    except Terminated as stop:  # `timeout`, a scheduler, `kill`, a closed terminal: it died at once, without a word
        signum = stop.args[0]
        say(f"rlnb demo: stopped ({signal.Signals(signum).name}){kept(out, stop)}")
        return 128 + signum  # 143 for SIGTERM, 129 for SIGHUP, as a shell reports a process they ended
    except KeyboardInterrupt as stop:  # Ctrl-C: one line saying what is kept, not a traceback through torch
        say(f"rlnb demo: interrupted{kept(out, stop)}")
        return 130
    except BrokenPipeError as stop:  # `rlnb demo | head`: a traceback, and another at exit (flushing into the pipe)
        quiet(sys.stdout)
        say(f"rlnb demo: stopped, its output was closed{kept(out, stop)}")
        return 141  # 128 + SIGPIPE, as a shell reports a process its pipe ended
    except OSError as exc:  # a full disk once steps are recorded: one line saying where they are kept, no traceback
        say(f"rlnb demo: {exc}{kept(out, exc)}")
        return 1
    finally:  # an in-process caller (a test, a notebook) keeps its own
        for signum, handler in previous.items():
            signal.signal(signum, handler)
