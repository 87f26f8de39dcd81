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
Info lines (no target): ``plots.overview``, ``LiveView.refresh()`` and ``plots.timeline`` on the
history of (a); in (a), the in-memory run again with the garbage collector off.

    python bench/bench_history.py [--n 100000] [--concat-n 5000] [--reps 3] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
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

from rlnb import plots, wire
from rlnb.history import _CATEGORIES, _FLOATS, COLUMNS, History, Record
from rlnb.live import LiveView

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
    t_df, _ = best_of(reps, lambda: result.df)
    print(
        f"    .df of {n:,} records {t_df:.3f} s; one-row frames + pd.concat: {t_concat:.2f} s for {concat_n:,}"
        f" records -> {t_concat_n:.1f} s for {n:,} (linear extrapolation)   ratio {t_concat_n / t_df:.0f}x faster"
    )
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
    view = LiveView(history)
    t_live, _ = best_of(reps, view.refresh)
    view.close()
    print(f"    info: plots.overview(History of {len(history):,} operations) incl. .df and .steps: {t_over:.3f} s")
    print(f"    info: LiveView.refresh() on the same history (.df + .steps + PNG): {t_live:.3f} s")
    ops = history.df
    t_timeline, _ = best_of(reps, lambda: render(plots.timeline(ops)))
    print(f"    info: plots.timeline of {len(ops):,} operations, built + rendered: {t_timeline:.3f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--concat-n", type=int, default=5_000, help="records for the pd.concat baseline")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="print a cProfile of (a) with the run store")
    args = parser.parse_args()
    print("command: python " + " ".join(sys.argv))
    history = bench_history(args.n, min(args.concat_n, args.n), args.reps, args.profile)
    bench_plot(args.n, args.reps, history)


if __name__ == "__main__":
    main()
