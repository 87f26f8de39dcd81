"""``rlnb`` command line: a thin layer over the public API.

rlnb demo [--task first_letter|addition|digits] [--optimizer adam|muon] [--steps N] [--model ...]  the RL loop
rlnb serve [--host 127.0.0.1] [--port 8000] [--token TOKEN]  a Together-compatible local server
"""

from __future__ import annotations

import argparse
import math
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rlnb.errors import RunLocked
from rlnb.history.store import COMPLETIONS_FILE, CONFIG_FILE, LOCK_FILE, METRICS_FILE, OPS_FILE, lock_run

RUN_FILES = {OPS_FILE, METRICS_FILE, COMPLETIONS_FILE, CONFIG_FILE, CONFIG_FILE + ".tmp", LOCK_FILE}
"""Every file rlnb writes in a run folder: the demo replaces a ``run/`` that holds nothing else."""

DEMO_PARAMS: dict[str, dict[str, Any]] = {
    # The builder's "Learns in 40 steps" preset (its lesson is measured on seeds 0-9 by bench/bench_lessons.py).
    # Together's documented Adam default (1e-4) is meant for large pretrained models: it barely moves a
    # 100k-parameter model.
    "adam": {"learning_rate": 2e-3, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.0,
             "grad_clip_norm": 1.0},
    "muon": {"learning_rate": 0.05, "momentum": 0.95, "newton_schulz_steps": 5, "weight_decay": 0.0,
             "grad_clip_norm": 1.0,
             "adam": {"learning_rate": 2e-3, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.0,
                      "grad_clip_norm": 1.0}},
}


def _clear_previous_run(run: Path) -> None:
    """Delete ``run`` only when it is a run folder that rlnb wrote (rlnb's run files and nothing else) that no
    live session holds; anything else there may be the user's, so refuse with ``ValueError`` naming it."""
    if not run.exists() and not run.is_symlink():
        return
    refuse = f"{run} is not an rlnb run folder (it holds other files); move it away or pick another --out"
    if run.is_symlink() or not run.is_dir():
        raise ValueError(refuse)
    names = {p.name for p in run.iterdir()}
    if not names:  # an empty folder: the run is written into it, nothing is lost
        return
    if OPS_FILE not in names or not names <= RUN_FILES:
        raise ValueError(refuse)
    try:
        held = lock_run(run)
    except RunLocked as exc:
        busy = f"{run} is being written by another rlnb session (pid {exc.holder}); wait for it or pick another --out"
        raise ValueError(busy) from None
    with held:
        shutil.rmtree(run)


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
) -> int:
    """Train ``model`` (built-in, or a Hugging Face directory / cached hub id) on the task ``task_name``
    (``rlnb.tasks.TASKS``) with GRPO; print a table and, for a verifiable task, the held-out accuracy
    before and after; write CSV + PNG, and keep the run folder (``out/run``, loadable with
    ``rlnb.History.load``, its completions in ``completions.jsonl``). ``lr`` replaces the learning rate
    (Muon's for a Muon run); ``lora`` > 0 trains a LoRA adapter of that rank instead of all weights."""
    import rlnb
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
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"cannot write the demo's files in {out}: {exc}") from None
    _clear_previous_run(out / "run")  # a run id that exists would be continued: start afresh
    adapter = {"rank": lora, "alpha": 2 * lora} if lora else None
    options: dict[str, Any] = {"model": model, "dtype": dtype, "lora": adapter}
    session = rlnb.connect(
        "local", optimizer=optimizer, seed=seed, device=device, runs_dir=out, run_id="run", **options
    )
    print(
        f"rlnb demo: task={task.name} model={model} optimizer={optimizer} steps={steps} "
        f"params={params.request_body()}{f' lora rank {lora}' if lora else ''}"
    )
    start = time.perf_counter()
    with session:
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
            print(f"held-out accuracy: before {before:.3f} -> after {after:.3f}"
                  f" (a constant answer scores {verified.chance:.2f})")
        history = session.history
    history.to_csv(out / "history.csv")
    logged = history.logged
    logged.to_csv(out / "rewards.csv", index=False)
    plots.overview(history).savefig(out / "demo.png", dpi=110)  # reward first; rl_step logged the RL metrics
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rlnb", description="rlnb command line: a thin layer over the public API.")
    sub = parser.add_subparsers(dest="command", required=True)
    _demo_arguments(sub.add_parser("demo", help="run the RL loop on the in-process torch backend"))
    _serve_arguments(sub.add_parser("serve", help="serve the Together RL API on the in-process backend"))
    args = parser.parse_args(argv)
    return COMMANDS[args.command](args, parser)


DTYPE_HELP = "weights' dtype; auto: the checkpoint's own, float32 for the built-ins (default: auto)"


def _demo_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--task", choices=["first_letter", "addition", "digits"], default="first_letter",
                   help="first_letter: copy the first letter (exact match, held-out accuracy); addition: "
                   "single-digit sums; digits: reward = fraction of digits (gameable: '88888888' scores 1)")
    p.add_argument("--optimizer", choices=["adam", "muon"], default="adam", help="(default: adam)")
    p.add_argument("--steps", type=int, default=40, help="RL steps (default: 40)")
    p.add_argument("--out", default="rlnb-demo", help="folder for history.csv, rewards.csv and demo.png")
    p.add_argument("--seed", type=int, default=0, help="model and sampling seed (default: 0)")
    p.add_argument("--device", default="auto", help="auto (CUDA when available), cpu, cuda")
    p.add_argument(
        "--model", default="tiny", help="tiny, small, or a Hugging Face model directory / hub id in the local cache"
    )
    p.add_argument("--lr", type=float, default=None, help="learning rate (default: tuned for the built-ins)")
    p.add_argument("--lora", type=int, default=0, metavar="RANK", help="train a LoRA adapter of this rank")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"], help=DTYPE_HELP)


def _serve_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback only)")
    p.add_argument("--port", type=_port, default=8000, help="1-65535 (default: 8000)")
    p.add_argument("--token", default=None, help="require this bearer token (default: no auth)")
    p.add_argument("--device", default="auto", help="auto (CUDA when available), cpu, cuda")
    p.add_argument("--op-delay", type=float, default=0.0, help="simulated compute seconds per operation")
    p.add_argument(
        "--checkpoint-dir",
        default=None,
        help="where checkpoints go (default: a temporary folder, removed at the stop unless --state-dir is given)",
    )
    p.add_argument("--fail-rate", type=float, default=0.0, help="fault injection: fraction of answers lost")
    p.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="NAME=PATH_OR_ID",
        help="serve a Hugging Face model (folder or cached hub id) as base_model NAME; repeatable",
    )
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"], help=DTYPE_HELP)
    p.add_argument(
        "--offload-results-over",
        type=int,
        default=None,
        metavar="BYTES",
        help="send larger results through the payload side channel, as the service may (default: never)",
    )
    p.add_argument("--state-dir", default=None, help="keep the registry here: it survives a restart")
    p.add_argument("--public-url", default=None, help="the address presigned URLs use (default: host:port)")
    p.add_argument(
        "--limit", action="append", default=[], metavar="NAME=VALUE", help="change a limit, e.g. max_body_bytes=1e8"
    )


def _port(text: str) -> int:
    """A TCP port to listen on. Port 0 (any free port) is refused: the announced address and presigned URLs
    need the real port, which is known only once bound; past 65535 the socket layer wraps it silently."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"must be 1-65535, got {port}")
    return port


def _serve(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from rlnb.server.settings import parse_limits

    for option, value in (("--state-dir", args.state_dir), ("--checkpoint-dir", args.checkpoint_dir)):
        if value is not None and not value.strip():  # "" was the working folder, or (checkpoints) ignored
            print(f"rlnb serve: {option} is empty (an unset variable?): give a folder or leave it out", file=sys.stderr)
            return 2
    try:
        limits = parse_limits(args.limit)
    except ValueError as exc:
        parser.error(str(exc))
    extra = {"state_dir": args.state_dir, **({"public_url": args.public_url} if args.public_url else {})}
    try:
        models = _served_models(args.model, parser)
    except (ValueError, ImportError) as exc:
        print(f"rlnb serve: {exc}", file=sys.stderr)
        return 2
    scratch = None  # no --checkpoint-dir or --state-dir: checkpoints live as long as the server, as its registry
    if args.checkpoint_dir is None and args.state_dir is None:
        scratch = tempfile.mkdtemp(prefix="rlnb-serve-checkpoints-")
    try:
        return _serve_app(args, models, scratch, extra, limits)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def _serve_app(
    args: argparse.Namespace, models: dict[str, str], scratch: str | None, extra: dict[str, Any],
    limits: dict[str, Any],
) -> int:
    from rlnb.server.app import app_for, bind, run
    from rlnb.server.state import StateDirError

    try:
        app = app_for(
            args.host,
            args.port,
            token=args.token,
            device=args.device,
            op_delay=args.op_delay,
            checkpoint_dir=args.checkpoint_dir or scratch,
            fail_rate=args.fail_rate,
            result_offload_bytes=args.offload_results_over,
            models=models,
            dtype=args.dtype,
            **extra,
            **limits,
        )
        sock = bind(args.host, args.port)  # a port in use, said before the address is announced
    # A setting out of range; a state directory that is locked, is a file, or has a bad signing key; an address
    # that cannot be listened on.
    except (ValueError, StateDirError) as exc:
        print(f"rlnb serve: {exc}", file=sys.stderr)
        return 2
    print(f"rlnb serve: http://{args.host}:{args.port}/v1/rl (OpenAPI at /openapi.json)", flush=True)
    print(f"rlnb serve: models {', '.join(models)}", flush=True)
    # uvicorn re-raises SIGTERM once it has shut down: exit through the finally blocks (the checkpoints'
    # temporary folder), not by the default handler
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    run(app, sock)
    return 0


def _served_models(options: list[str], parser: argparse.ArgumentParser) -> dict[str, str]:
    """The built-in models and each ``--model NAME=PATH_OR_ID``; a model that cannot be found stops here."""
    from rlnb.server.models import model_info, parse_model_option
    from rlnb.server.settings import DEFAULT_MODELS

    models = dict(DEFAULT_MODELS)
    for option in options:
        name, spec = parse_model_option(option)
        if name in models:
            parser.error(f"--model {name}: the name is already served")
        model_info(spec)
        models[name] = spec
    return models


def _demo(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    for option, value, what in (("--out", args.out, "a folder"), ("--model", args.model, "a folder or a model")):
        if not value.strip():  # an unset variable: '' is the working folder (its files overwritten) for either
            parser.error(f"{option} is empty (an unset variable?): give {what}")
    if args.steps < 1:
        parser.error(f"--steps must be >= 1, got {args.steps}")
    if args.lora < 0:
        parser.error(f"--lora must be >= 0 (0 = train all weights), got {args.lora}")
    if args.lr is not None and not (args.lr > 0 and math.isfinite(args.lr)):
        parser.error(f"--lr must be a finite number > 0, got {args.lr}")
    from rlnb.tasks import seed_range

    lowest, highest = seed_range(args.steps)
    if not lowest <= args.seed <= highest:
        parser.error(f"--seed must be in [{lowest}, {highest}] for {args.steps} steps, got {args.seed}")
    try:
        return demo(
            args.optimizer, args.steps, args.out, args.seed, args.device, args.model, args.lr, args.lora, args.dtype,
            args.task,
        )
    # A model that cannot load, a device that is not there, an --out that cannot take the run.
    except (ValueError, ImportError) as exc:
        print(f"rlnb demo: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: a traceback through torch, and no word of what was kept
        run = Path(args.out) / "run"
        kept = f"; the steps so far are in {run} (rlnb.History.load)" if (run / OPS_FILE).exists() else ""
        print(f"rlnb demo: interrupted{kept}", file=sys.stderr)
        return 130


COMMANDS: dict[str, Callable[[argparse.Namespace, argparse.ArgumentParser], int]] = {"demo": _demo, "serve": _serve}
"""Each subcommand's runner: parsed arguments in, exit status out."""


if __name__ == "__main__":
    sys.exit(main())
