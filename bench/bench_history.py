"""Time the History at 100k operations and a 100k-point plot; print ratios and PASS/FAIL. Writes nothing
to the repository (the on-disk run goes to a temporary folder).

(a) N operations recorded the way a backend records them: ``History.new`` at submission, then
    ``History.update`` with real ``wire.Operation`` envelopes PENDING, RUNNING, COMPLETED (alternating
    forward-backward / optim-step outputs), then ``History.df`` built. In memory, and with a run store
    on disk (one JSON line per change). Target: total < 1 s. Ratio: ``History.df`` against building the
    same DataFrame from one-row frames and ``pd.concat`` (timed on --concat-n records, checked equal
    to ``History.df`` there, and extrapolated linearly to N).
    The envelopes are built before timing and frozen out of the garbage collector (``gc.freeze``):
    they are the harness's, not the History's; the History's own objects are collected as usual.
(b) a loss plot of N steps (``plots.loss`` on a steps table) built and rendered on the Agg canvas.
    Target < 0.5 s. Ratio: the same call with decimation switched off.
(c) the live view during a run, at --sizes operations (default 2,500 / 10,000 / 100,000; half of them
    optim-steps, a reward logged per step): one more step is recorded (forward-backward, optim-step, a
    logged reward), then ``LiveView.refresh()`` is timed; --steps times per size, median and p90.
    Target: median <= 50 ms at every size, and no slower at the largest size than at the smallest
    (ratio <= 1.2, the noise of this shared machine). Ratio: the obvious alternative, what the live
    view did before (rebuild ``History.df`` and the steps table, then draw a 3-panel figure and render
    it to PNG), timed the same way. Also ``History.steps`` and a second ``History.df`` after one new
    operation, against building each from scratch.
Info lines (no target): ``plots.overview`` and ``plots.timeline`` on the history of (a); in (a), the
in-memory run again with the garbage collector off.

    python bench/bench_history.py [--n 100000] [--concat-n 5000] [--reps 3] [--profile]
                                  [--sizes 2500 10000 100000] [--steps 40]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import os
import pstats
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict
from typing import Any
from unittest import mock

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg

from rlnb import wire
from rlnb.history import History
from rlnb.history.record import CATEGORIES as _CATEGORIES
from rlnb.history.record import COLUMNS, Record
from rlnb.history.record import FLOATS as _FLOATS
from rlnb.history.tables import _columns, _ops_frame
from rlnb.viz import plots
from rlnb.viz.live import LiveView

PENDING, RUNNING = "TRAINING_OPERATION_STATUS_PENDING", "TRAINING_OPERATION_STATUS_RUNNING"
COMPLETED = "TRAINING_OPERATION_STATUS_COMPLETED"
T0 = 1_700_000_000.0
Envelopes = list[tuple[str, dict[str, Any] | None, tuple[wire.Operation[Any], ...]]]


def envelopes(n: int) -> Envelopes:
    """(kind, params, (PENDING, RUNNING, COMPLETED)) per operation, as the local backend sends them."""
    ops: Envelopes = []
    for i in range(n):
        op_id = f"op-{i:08d}"
        if i % 2:
            kind, params = "optim-step", {"learning_rate": 1e-3}
            metrics = {"grad_norm": 1.0 + i * 1e-6, "grad_clip_norm": 1.0, "learning_rate": 1e-3}
            out: Any = wire.OptimStepResult(step=i // 2 + 1, metrics=metrics)
        else:
            kind, params, out = "forward-backward", None, wire.ForwardBackwardResult(loss=2.0 - i * 1e-6)
        statuses = (
            wire.Operation(id=op_id, status=PENDING),
            wire.Operation(id=op_id, status=RUNNING),
            wire.Operation(id=op_id, status=COMPLETED, output=out),
        )
        ops.append((kind, params, statuses))
    return ops


def record(history: History, ops: Envelopes) -> None:
    for i, (kind, params, (pending, running, done)) in enumerate(ops):
        at = T0 + i * 0.01
        rec = history.new(kind, i // 2, params, at=at)
        history.update(rec, pending, at)
        history.update(rec, running, at + 0.001)
        history.update(rec, done, at + 0.005)


def df_by_concat(records: list[Record]) -> pd.DataFrame:
    """``History.df`` built the slow way: a one-row frame per record, concatenated, then typed alike."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # concat of all-NA columns
        frame = pd.concat([pd.DataFrame([asdict(r)], columns=list(COLUMNS)) for r in records], ignore_index=True)
    for col in _CATEGORIES:
        frame[col] = frame[col].astype("category")
    for col in _FLOATS:
        frame[col] = frame[col].astype("float64")
    for col in ("step", "weights_version", "seq"):
        frame[col] = frame[col].astype("Int64")
    times = {c: frame[c].astype("float64") for c in ("submitted_at", "started_at", "finished_at")}
    frame["queue_s"] = times["started_at"] - times["submitted_at"]
    frame["run_s"] = times["finished_at"] - times["started_at"]
    for col, values in times.items():
        frame[col] = pd.to_datetime(values, unit="s", utc=True)
    return frame


def best_of(reps: int, fn: Callable[[], Any]) -> tuple[float, Any]:
    """Median wall time of ``reps`` calls, and the last result."""
    times, result = [], None
    for _ in range(reps):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def bench_history(n: int, concat_n: int, reps: int, profile: bool) -> History:
    ops = envelopes(n)
    gc.collect()
    gc.freeze()
    print(f"(a) {n:,} operations: History.new + 3 x History.update (PENDING, RUNNING, COMPLETED), then .df")
    result: History | None = None
    for where in ("in memory", "run store on disk"):
        appends, dfs, totals = [], [], []
        for _ in range(reps):
            with tempfile.TemporaryDirectory() as tmp:
                h = History.create({"optimizer": "adam"}, tmp, "bench") if where != "in memory" else History()
                start = time.perf_counter()
                record(h, ops)
                mid = time.perf_counter()
                frame = h.df
                end = time.perf_counter()
                h.close()
            assert len(frame) == n
            appends.append(mid - start)
            dfs.append(end - mid)
            totals.append(end - start)
            result = h
            del frame
            gc.collect()
        total = statistics.median(totals)
        print(
            f"    {where:18s} total {total:6.3f} s  (record {statistics.median(appends):.3f} s"
            f" + .df {statistics.median(dfs):.3f} s)   target < 1 s: {verdict(total < 1.0)}"
        )
        if where == "in memory":

            def in_memory() -> pd.DataFrame:
                fresh = History()
                record(fresh, ops)
                return fresh.df

            gc.disable()
            t_nogc, _ = best_of(reps, in_memory)
            gc.enable()
            print(f"    info: in memory with the garbage collector off: {t_nogc:.3f} s")
    assert result is not None

    if profile:
        with tempfile.TemporaryDirectory() as tmp:
            h = History.create({"optimizer": "adam"}, tmp, "profile")
            prof = cProfile.Profile()
            prof.runcall(lambda: (record(h, ops), h.df))
            h.close()
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(15)
        print("    profile (run store on disk), by own time:")
        print("\n".join("      " + line for line in out.getvalue().splitlines() if line.strip()))

    small = History()
    record(small, ops[:concat_n])
    pd.testing.assert_frame_equal(df_by_concat(small.records), small.df)  # the same DataFrame
    t_concat, _ = best_of(1, lambda: df_by_concat(small.records))
    t_concat_n = t_concat * n / concat_n
    t_df, _ = best_of(reps, lambda: _ops_frame(_columns(result.records)))  # built whole, as a first .df is
    print(
        f"    .df of {n:,} records {t_df:.3f} s; one-row frames + pd.concat: {t_concat:.2f} s for {concat_n:,}"
        f" records -> {t_concat_n:.1f} s for {n:,} (linear extrapolation)   ratio {t_concat_n / t_df:.0f}x faster"
    )
    t_again, _ = best_of(reps, lambda: result.df)
    print(f"    info: .df again, nothing changed (rows of finished operations kept): {1e3 * t_again:.1f} ms")
    return result


def render(ax: Any) -> None:
    FigureCanvasAgg(ax.figure).draw()


def bench_plot(n: int, reps: int, history: History) -> None:
    rng = np.random.default_rng(0)
    step = np.arange(1, n + 1)
    steps = pd.DataFrame({"step": step, "loss": 3.0 / np.sqrt(step) + rng.normal(0, 0.05, n)})
    render(plots.loss(steps.head(10)))  # warm-up: fonts, caches
    points = len(plots.loss(steps).lines[0].get_xydata())
    t_fast, _ = best_of(reps, lambda: render(plots.loss(steps)))

    def no_decimation(x: Any, y: Any, cap: int = 0) -> tuple[np.ndarray, np.ndarray]:
        return np.asarray(x, dtype=float), np.asarray(y, dtype=float)

    with mock.patch.object(plots, "decimate", no_decimation):
        t_full, _ = best_of(reps, lambda: render(plots.loss(steps)))
    print(f"(b) loss plot of {n:,} steps, built + rendered on Agg ({points:,} points drawn, min/max decimation)")
    print(
        f"    {t_fast:.3f} s; without decimation {t_full:.3f} s   ratio {t_full / t_fast:.1f}x faster"
        f"   target < 0.5 s: {verdict(t_fast < 0.5)}"
    )
    t_over, _ = best_of(reps, lambda: FigureCanvasAgg(plots.overview(history)).draw())
    print(f"    info: plots.overview(History of {len(history):,} operations) incl. .df and .steps: {t_over:.3f} s")
    ops = history.df
    t_timeline, _ = best_of(reps, lambda: render(plots.timeline(ops)))
    print(f"    info: plots.timeline of {len(ops):,} operations, built + rendered: {t_timeline:.3f} s")


def rebuilt_steps_table(ops: pd.DataFrame, logged: pd.DataFrame | None = None) -> pd.DataFrame:
    """The steps table rebuilt from a whole operations table with pandas group-bys: what a refresh did
    before ``StepLog`` kept it up to date (the baseline of the ``.steps`` figure)."""
    done = ops[ops.status == wire.OperationStatus.COMPLETED]
    opt = done[done.kind == wire.OperationKind.OPTIM_STEP]
    cols = ["step", "grad_norm", "grad_norm_muon", "grad_norm_adam", "grad_clip_norm", "learning_rate", "finished_at"]
    table = opt[cols].copy()
    table["step"] = table["step"].astype("int64")
    fb = done[done.kind == wire.OperationKind.FORWARD_BACKWARD]
    loss = fb.groupby(fb["step"].astype("int64") + 1)["loss"].sum(min_count=1)
    table["loss"] = table["step"].map(loss)
    finished = table["finished_at"]
    table["step_time_s"] = finished.diff().dt.total_seconds()
    sync = done[done.kind == wire.OperationKind.WEIGHTS_SYNC]
    table["weights_version"] = (
        table["step"]
        .map(sync.dropna(subset=["weights_version"]).groupby("weights_version")["weights_version"].first())
        .astype("Int64")
    )
    table = table.drop(columns="finished_at").reset_index(drop=True)
    if logged is not None and len(logged) and "step" in logged:
        user = logged.groupby("step").last()
        table = table.join(user, on="step")
    order = [
        "step",
        "loss",
        "grad_norm",
        "grad_norm_muon",
        "grad_norm_adam",
        "grad_clip_norm",
        "learning_rate",
        "step_time_s",
        "weights_version",
    ]
    return table[order + [c for c in table.columns if c not in order]]


def one_step(h: History, i: int) -> None:
    """Record step ``i + 1`` as the local backend would (PENDING, RUNNING, COMPLETED), and its reward."""
    at = T0 + i * 0.01
    for kind, out in (
        ("forward-backward", wire.ForwardBackwardResult(loss=2.0 / (1 + i) ** 0.5)),
        (
            "optim-step",
            wire.OptimStepResult(
                step=i + 1, metrics={"grad_norm": 1.0 + (i % 7) * 0.01, "grad_clip_norm": 1.0, "learning_rate": 1e-3}
            ),
        ),
    ):
        rec = h.new(kind, i, None, at=at)
        h.update(rec, wire.Operation(id=f"op-{rec.seq}", status=RUNNING), at)
        h.update(rec, wire.Operation(id=f"op-{rec.seq}", status=COMPLETED, output=out), at + 0.005)
    h.log(i + 1, reward=min(1.0, i * 1e-4))


def rebuild_refresh(h: History, fig: Any) -> bytes:
    """What LiveView.refresh() did before: rebuild .df and the steps table, redraw a figure, PNG."""
    ops, logged = h.df, h.logged
    steps = rebuilt_steps_table(ops, logged)
    axes = fig.axes
    for ax in axes:
        for ln in list(ax.lines):
            ln.remove()
    axes[0].plot(*plots.decimate(steps["step"], steps["loss"]), color="C0")
    axes[1].plot(*plots.decimate(steps["step"], steps["grad_norm"]), color="C1")
    axes[2].plot(*plots.decimate(logged["step"], logged["reward"]), color="C2")
    for ax in axes:
        ax.relim()
        ax.autoscale_view()
    return plots.png(fig)


def timed_steps(h: History, start: int, steps: int, refresh: Callable[[], Any]) -> list[float]:
    times = []
    for i in range(start, start + steps):
        one_step(h, i)
        t0 = time.perf_counter()
        refresh()
        times.append(time.perf_counter() - t0)
    return times


def live_at(n: int, steps: int) -> float:
    """Part (c) at one size; returns the median refresh time."""
    from matplotlib.figure import Figure

    h = History(config={"optimizer": "adam"})
    for i in range(n // 2):
        one_step(h, i)
    view = LiveView(h, metrics=("reward",))  # builds its series from the history once
    timed_steps(h, n // 2, 3, view.refresh)  # warm-up
    live = timed_steps(h, n // 2 + 3, steps, view.refresh)
    idle = statistics.median(best_of(1, view.refresh)[0] for _ in range(5))
    draws = sum(p.full_draws for p in view.panels.values())
    view.close()
    fig = Figure(figsize=(12.6, 3.0), dpi=80, layout="constrained")
    FigureCanvasAgg(fig)
    fig.subplots(1, 3)
    before = statistics.median(timed_steps(h, n // 2 + 3 + steps, max(3, steps // 4), lambda: rebuild_refresh(h, fig)))
    m, p90 = statistics.median(live), float(np.percentile(live, 90))
    print(
        f"    {n:>7,} ops  refresh {1e3 * m:5.1f} ms (p90 {1e3 * p90:5.1f}; nothing new {1e3 * idle:4.1f})"
        f"  vs rebuild {1e3 * before:6.1f} ms  ratio {before / m:5.1f}x faster  target <= 50 ms: {verdict(m <= 0.05)}"
        f"  ({draws} full panel draws in {steps + 4} redraws of 4 panels)"
    )
    t_steps = best_of(3, lambda: h.steps)[0]
    t_steps_old = best_of(3, lambda: rebuilt_steps_table(h.df, h.logged))[0]
    assert len(h.df) == h.step_log.frame().shape[0] * 2  # and the cache of finished rows is filled
    one_step(h, n)
    t_df = best_of(1, lambda: h.df)[0]
    t_df_full = best_of(3, lambda: _ops_frame(_columns(h.records)))[0]
    print(
        f"             .steps {1e3 * t_steps:6.1f} ms vs steps_table(.df) {1e3 * t_steps_old:6.1f} ms"
        f" ({t_steps_old / t_steps:.0f}x);  .df after one step {1e3 * t_df:6.1f} ms vs built whole"
        f" {1e3 * t_df_full:6.1f} ms ({t_df_full / t_df:.1f}x)"
    )
    return m


def bench_live(sizes: list[int], steps: int) -> None:
    print(f"(c) live view during a run: one step recorded, then refresh() timed; {steps} steps per size")
    medians = {n: live_at(n, steps) for n in sizes}
    small, large = medians[min(sizes)], medians[max(sizes)]
    print(
        f"    {max(sizes):,} vs {min(sizes):,} operations: {large / small:.2f}x the time"
        f"   target no slower (<= 1.2): {verdict(large / small <= 1.2)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--concat-n", type=int, default=5_000, help="records for the pd.concat baseline")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="print a cProfile of (a) with the run store")
    parser.add_argument("--sizes", type=int, nargs="+", default=[2_500, 10_000, 100_000], help="operations, (c)")
    parser.add_argument("--steps", type=int, default=40, help="timed steps per size, (c)")
    parser.add_argument("--parts", default="abc", help="which parts to run")
    args = parser.parse_args()
    print("command: python " + " ".join(sys.argv))
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    if "a" in args.parts or "b" in args.parts:
        history = bench_history(args.n, min(args.concat_n, args.n), args.reps, args.profile)
        bench_plot(args.n, args.reps, history)
    if "c" in args.parts:
        bench_live(sorted(args.sizes), args.steps)


if __name__ == "__main__":
    main()
