"""CPU time of the small figures drawn while a person edits a config or watches a run, in one process
(``time.process_time``: this machine's other load moves it less than wall time), with counted text layouts.

(a) the builder's schedule PNG (``describe.schedule_png``): --n distinct schedules, the cache cleared, CPU per PNG;
    against the same figure laid out by matplotlib's constrained layout, in the same run, the pairs interleaved.
(b) a live view's panels drawn whole (``Panel.render`` with a stale background, as after an axis limit moved) and a
    ``LiveView`` made and drawn once (what each notebook cell run, and each test of one, pays): CPU per call.
Each line also counts matplotlib's text layouts (``Text._get_layout``) per call; (b) also the ticks and the
``Text`` objects made per call.

    python bench/bench_plotspeed.py [--n 40] [--profile] [--part schedule|live]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from collections.abc import Callable
from typing import Any
from unittest import mock

from matplotlib.axis import Tick
from matplotlib.figure import Figure
from matplotlib.text import Text

from rlnb import wire
from rlnb.history import History
from rlnb.params.schedule import Schedule
from rlnb.viz.draw import png
from rlnb.viz.live import LiveView
from rlnb.widgets import describe

T0 = 1_700_000_000.0


def constrained_png(schedule: Schedule, base_lr: float) -> bytes:
    """The schedule's PNG laid out by constrained layout (the reference the fixed margins are timed against)."""
    steps = describe.plot_steps(schedule)
    fig = Figure(figsize=(3.75, 1.6), dpi=80, layout="constrained")
    ax = fig.add_subplot()
    ax.plot(list(steps), [schedule(s, base_lr) for s in steps], color="C0")
    ax.set(xlabel="step", ylabel="learning rate", title=f"{schedule.kind}, warmup {schedule.warmup_steps}")
    ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 2))
    return png(fig)


def schedules(n: int) -> list[tuple[Schedule, float]]:
    kinds = ("constant", "linear", "cosine")
    return [(Schedule(kinds[i % 3], warmup_steps=i % 7, total_steps=20 + 13 * i), 10.0 ** -(i % 9)) for i in range(n)]


def counting(cls: type, name: str, counts: dict[str, int]) -> Any:
    """``cls.name`` patched to count its calls in ``counts[cls.__name__ + "." + name]``."""
    real, key = getattr(cls, name), f"{cls.__name__}.{name}"
    counts[key] = 0

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        counts[key] += 1
        return real(self, *args, **kwargs)

    return mock.patch.object(cls, name, counted)


def per_call(fn: Callable[[Any], Any], args: list[Any]) -> tuple[float, float, float, float]:
    """CPU seconds per call of ``fn`` over ``args``; text layouts, ticks made and ``Text`` objects made per call."""
    counts: dict[str, int] = {}
    with counting(Text, "_get_layout", counts), counting(Tick, "__init__", counts), counting(Text, "__init__", counts):
        start = time.process_time()
        for a in args:
            fn(a)
        cpu = time.process_time() - start
    n = len(args)
    return cpu / n, counts["Text._get_layout"] / n, counts["Tick.__init__"] / n, counts["Text.__init__"] / n


def bench_schedule(n: int) -> None:
    cases = schedules(n)
    new, old = [], []
    for _ in range(3):  # interleaved: the machine's load moves both alike
        describe.schedule_png.cache_clear()
        new.append(per_call(lambda c: describe.schedule_png(*c), cases))
        old.append(per_call(lambda c: constrained_png(*c), cases))
    (t_new, l_new, *_), (t_old, l_old, *_) = min(new), min(old)
    print(f"(a) schedule PNG, {n} distinct schedules, best of 3 (CPU per PNG; text layouts per PNG)")
    print(f"    schedule_png     {1e3 * t_new:6.1f} ms  {l_new:5.1f} layouts")
    print(f"    constrained      {1e3 * t_old:6.1f} ms  {l_old:5.1f} layouts   ratio {t_old / t_new:.2f}x")


def hand_history(steps: int) -> History:
    """A run of ``steps`` optimizer steps, each with a loss, a gradient norm and a logged reward."""
    h = History(config={"optimizer": "adam"})
    for i in range(steps):
        for j, (kind, out) in enumerate(
            (
                ("forward-backward", wire.ForwardBackwardResult(loss=1.0 / (i + 1))),
                ("optim-step", wire.OptimStepResult(step=i + 1, metrics={"grad_norm": 0.3, "learning_rate": 1e-3})),
            )
        ):
            at = T0 + 2 * i + j
            rec = h.new(kind, i, {"learning_rate": 1e-3} if j else None, at=at)
            h.update(rec, wire.Operation(id=f"op-{i}-{j}", status=wire.OperationStatus.COMPLETED, output=out), at)
        h.log(i + 1, reward=0.1 * i)
    return h


def bench_live(n: int) -> None:
    h = hand_history(30)
    view = LiveView(h, metrics=("reward",), every=0)

    def full(_: object) -> None:
        for panel in view.panels.values():
            panel._stale = True
            panel.render()

    full_draw = per_call(full, list(range(n)))
    view.close()
    views: list[LiveView] = []
    made = per_call(lambda _: views.append(LiveView(h, metrics=("reward",), every=0)), list(range(n // 4 or 1)))
    for v in views:
        v.close()
    print("(b) live view of 30 steps, 4 panels (CPU per call; text layouts, ticks made, Text objects made per call)")
    for name, (cpu, layouts, ticks, texts) in (("4 panels drawn whole", full_draw), ("LiveView made, drawn", made)):
        print(f"    {name}  {1e3 * cpu:6.1f} ms  {layouts:5.1f} layouts  {ticks:4.1f} ticks  {texts:5.1f} texts")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=40)
    parser.add_argument("--profile", action="store_true", help="print cProfile's top calls of each part")
    parser.add_argument("--part", choices=("schedule", "live"), help="only this part")
    args = parser.parse_args()
    for part in [p for p in (bench_schedule, bench_live) if args.part in (None, p.__name__.removeprefix("bench_"))]:
        if args.profile:
            prof = cProfile.Profile()
            prof.runcall(part, args.n)
            pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
        else:
            part(args.n)


if __name__ == "__main__":
    main()
