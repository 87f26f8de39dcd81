"""What the widgets show about a config: the builder's one-line summary (its title while folded), its
schedule's plot, and where a session is on that schedule (``ScheduleNote``, the run panel's line)."""

from __future__ import annotations

import functools
import html

import ipywidgets as W
import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from rlnb.errors import InvalidParams
from rlnb.params import MuonHyperparams, OptimizerParams
from rlnb.params.schedule import Schedule, rate
from rlnb.viz.draw import png
from rlnb.widgets.controls import TEXT

PLOT_STEPS = 601
"""Steps the schedule's plot evaluates (evenly spaced, and its corners: the warmup's end and total steps). One
per step would take 0.65 s at a million total steps and hang the kernel at a billion, a finger held on 0."""


def base_rates(params: OptimizerParams) -> tuple[float, ...]:
    """The rates a config sends before its schedule: its own, and Muon's AdamW rate too (defaults filled in)."""
    resolved = params.resolved()
    if isinstance(resolved, MuonHyperparams):
        return resolved.learning_rate, resolved.adam.learning_rate
    return (resolved.learning_rate,)


def schedule_text(schedule: Schedule) -> str:
    """``cosine to 0.1× after step 30, warmup 3`` / ``constant``. Steps numbered from 1, as the run panel and
    ``history.steps`` number them: step 30 (optim-step 29) still decays, and the floor is every step's from step 31
    (``Schedule.past_end``), so a 30-step run ends at the schedule's end (``Schedule.misfit``)."""
    warmup = f", warmup {schedule.warmup_steps}" if schedule.warmup_steps else ""
    if schedule.kind == "constant":
        return f"constant{warmup}"
    return f"{schedule.kind} to {rate(schedule.min_lr_ratio)}× after step {schedule.total_steps}{warmup}"


def summary(kind: str, params: OptimizerParams | None, schedule: Schedule | None, preset: str, errors: int) -> str:
    """The builder folded: ``muon · lr 0.05, AdamW 0.002 · cosine to 0.1× after step 30 · preset Learns in 40
    steps (modified)``; with ``✗ N problems`` first while it is invalid."""
    parts = [f"✗ {errors} problem{'s' if errors != 1 else ''} — open to fix"] if errors else []
    parts.append(kind)
    if params is not None:
        parts.append("lr " + ", AdamW ".join(map(rate, base_rates(params))))
    if schedule is not None:
        parts.append(schedule_text(schedule))
    parts.append(f"preset {preset}")
    return " · ".join(parts)


def check_rates(schedule: Schedule, params: OptimizerParams) -> None:
    """``ValueError`` naming the schedule's field when its smallest rate with ``params`` (the floor, or the first
    warmup step's) is 0 in float, which no optim-step takes: a min lr ratio of 1e-320, or 1e30 warmup steps."""
    floor = schedule.min_lr_ratio if schedule.kind != "constant" else 1.0
    first = schedule.multiplier(0)
    try:
        params.scaled(min(floor, first))
    except InvalidParams:
        if floor <= first:
            raise ValueError(
                f"Schedule.min_lr_ratio = {rate(floor)} is invalid: times the learning rate it is 0 in float, which "
                "no optim-step takes; raise it"
            ) from None
        raise ValueError(
            f"Schedule.warmup_steps = {schedule.warmup_steps} is invalid: the first step's rate, the learning rate / "
            f"{schedule.warmup_steps}, is 0 in float, which no optim-step takes; shorten it"
        ) from None


def scheduled_rate(value: float) -> str:
    """A rate a schedule computed: as sent (``rate``) where that takes at most 10 significant figures, else ``≈`` and
    4 of them (``≈0.04864``, not ``0.04864308396768294``, which filled the panel's line)."""
    exact = rate(value)
    if len(exact.partition("e")[0].lstrip("-").replace(".", "").strip("0")) <= 10:
        return exact
    return "≈" + rate(float(f"{value:.4g}"))


def rates_at(schedule: Schedule, step: int, rates: tuple[float, ...]) -> str:
    """The rates step ``step`` sends, as the summary writes them: ``lr 0.0031``; Muon's ``lr 0.031, AdamW 0.0012``
    (both, since both are scheduled and sent); a computed one rounded, said so (``≈``)."""
    return "lr " + ", AdamW ".join(scheduled_rate(schedule(step, r)) for r in rates)


def position(schedule: Schedule, step: int, rates: tuple[float, ...]) -> tuple[str, bool]:
    """Where the next step sent is on ``schedule`` and the rates it gets (``rates``: ``base_rates``), ``step`` the
    steps done (the schedule's step, from 0): ``step 12 / 30 of the cosine schedule · lr 0.0031``, numbered as the
    steps table and ``history.steps`` will number it, from 1 (``step`` + 1: the line said "step 5 / 5" at the floor's
    rate beside the table's step 5, sent above it), each rate as sent (``rate``: two significant figures would show as
    0.0013 a 0.00125 that the summary shows exactly). The flag says the step is past the end of a decaying schedule,
    where every step gets the floor."""
    lr, shown = rates_at(schedule, step, rates), step + 1
    if step < schedule.warmup_steps:
        return f"step {shown} / warmup {schedule.warmup_steps} · {lr}", False
    if schedule.kind == "constant":
        return f"constant schedule · {lr}", False
    past = bool(schedule.past_end(step))
    return f"step {shown} / {schedule.total_steps} of the {schedule.kind} schedule · {lr}", past


ORANGE = "#b45309"
"""A warning's colour: past the schedule's end, an edit the run does not send."""


class ScheduleNote:
    """A run panel's line saying where the next step is on the schedule and the rate it gets, and the orange
    warning shown on passing the end of a decaying schedule: once, and said anew whenever the schedule or the rate
    changes while past it (not the old total steps, floor and rate); hidden while not past, or while there is no
    valid schedule. ``warnings`` holds the warning shown now, if any, not every version said while a person edits
    the form (a new one per keystroke in a field), stale figures among them, without bound."""

    def __init__(self) -> None:
        self.line = W.HTML()
        self.line.add_class("rlnb-schedule")
        self.line.add_class(TEXT)
        self.warning = W.HTML(layout=W.Layout(display="none"))
        self.warning.add_class("rlnb-warning")
        self.warning.add_class(TEXT)
        self.warnings: list[str] = []
        self._warned: tuple[Schedule, tuple[float, ...]] | None = None  # what the warning shown is about

    def show(self, schedule: Schedule | None, rates: tuple[float, ...], held: str = "", *, step: int) -> None:
        """Where ``step`` is on ``schedule`` with base ``rates`` (None: no valid schedule, an empty line and no
        warning); ``held``: why this is not the form's schedule (a run's, while an edit is not used), said after."""
        if schedule is None:
            self.line.value = ""
            past = False
        else:
            text, past = position(schedule, step, rates)
            color = ORANGE if past else "#555"
            said = f" · <span style='color:{ORANGE}'>⚠ {html.escape(held, quote=False)}</span>" if held else ""
            self.line.value = f"<span style='color:{color}'>{html.escape(text)}</span>{said}"
        if schedule is None or not past:
            self.warning.layout.display = "none"
            self.warnings.clear()  # in place: a RunPanel's ``warnings`` is this list
            self._warned = None
        elif self._warned != (schedule, rates):
            said = (
                f"⚠ step {step + 1} is {schedule.past_end(step)} ({rates_at(schedule, step, rates)}). To keep "
                "decaying, raise total steps in the optimizer form."
            )  # numbered as ``position`` numbers it
            self.warnings[:] = [said]
            self.warning.value = f"<span style='color:{ORANGE}'>{html.escape(said)}</span>"
            self.warning.layout.display = None
            self._warned = (schedule, rates)


def plot_steps(schedule: Schedule) -> list[int]:
    """The steps the plot evaluates: ``PLOT_STEPS`` evenly spaced to a tenth past the end, and the warmup's end and
    the total. Spaced as floats, rounded as Python ints: numpy's int64 cast wrapped a total near 2**63 to negative
    steps, and a total past it (10**30, which the box and ``Schedule`` take) raised from the field's observer."""
    end = int(schedule.total_steps * 1.1)
    corners = {schedule.warmup_steps, schedule.total_steps}
    return sorted({*(round(x) for x in np.linspace(0.0, float(end), PLOT_STEPS).tolist()), *corners})


SCHEDULE_PX = (300, 128)
"""The schedule plot's width and height in pixels at 80 dpi (the form's image is 300 px wide)."""
MARGINS_PX = (60, 38, 22, 20)
"""Pixels left of the axes (the y label, the widest y tick label), under them (the x tick labels and label), right of
them (half the last step number) and above them (the title): the most any schedule and rate needs, fixed. Constrained
layout sized them for each figure, two thirds of its CPU; ``tests/widgets/test_schedule_plot.py`` checks every text
inside the figure and clear of the others over the extremes (rates 1e-9 to 1e300, a million steps)."""


def schedule_figure(schedule: Schedule, base_lr: float) -> Figure:
    """The schedule's rate over its steps and a tenth past them, on fixed margins (``MARGINS_PX``), at most five
    step numbers along the x axis (six digits each, with a gap)."""
    steps = plot_steps(schedule)
    (width, height), dpi = SCHEDULE_PX, 80
    left, bottom, right, top = MARGINS_PX
    fig = Figure(figsize=(width / dpi, height / dpi), dpi=dpi)
    fig.subplots_adjust(left=left / width, bottom=bottom / height, right=1 - right / width, top=1 - top / height)
    ax = fig.add_subplot()
    ax.plot(steps, [schedule(s, base_lr) for s in steps], color="C0")
    ax.set(xlabel="step", ylabel="learning rate", title=f"{schedule.kind}, warmup {schedule.warmup_steps}")
    ax.title.set_fontsize("medium")  # at "large", a million steps' warmup reached over the offset text (``1e−9``)
    ax.xaxis.set_major_locator(MaxNLocator(nbins=4, integer=True))  # five six-digit ones overlap at this width
    ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 2))
    return fig


@functools.lru_cache(maxsize=32)
def schedule_png(schedule: Schedule, base_lr: float) -> bytes:
    """``schedule_figure`` as a small PNG. Cached: the builder asks again on every edit, and most edits (betas, eps,
    clipping) leave the schedule and the rate as they were, while a PNG costs a few hundredths of a second of CPU."""
    return png(schedule_figure(schedule, base_lr))
