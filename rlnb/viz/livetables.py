"""The HTML tables of the live view: the latest steps and operations, and what RL runs add: the RL metrics of the
latest steps and one step's completions. A completion is any text a model wrote, so every cell is escaped
and control characters are shown as escapes."""

from __future__ import annotations

import html
import math
import time
from typing import Any

from matplotlib.colors import to_hex

from rlnb._input.shown import printable
from rlnb.history import Record
from rlnb.history.figures import RL_METRICS, RLMetric, StepRow
from rlnb.viz.draw import STATUS_COLORS, short
from rlnb.viz.names import long_name, short_name
from rlnb.viz.texts import shortened

MAX_COMPLETIONS = 64
"""Completions shown at most (a step's, in prompt order); the run folder keeps them all."""
MAX_CHARS = 200
"""Characters of a completion shown (the whole text is in ``history.completions``)."""
RL_TABLE = tuple(m for m in RL_METRICS if m != RLMetric.REWARD)
"""The RL metrics of the RL tab (reward is in the steps table); they get no panel of their own in the
live view's automatic mode (``metrics=None``) unless named."""
TABLE_STYLE = "font-size:small;line-height:1.25;border-collapse:collapse"
"""The style of every table of the live view."""
CELL_STYLE = "text-align:right;padding:1px 4px"
"""A cell's style: 4 px each side (at 8, seven columns take 335 px, past the 320 px a 352 px panel's tab has)."""
VALUE_STYLE = f"{CELL_STYLE};white-space:nowrap"
"""A figure's cell: never broken (``12.35 s`` was broken over two lines, the table twice as tall), its header may be."""
NARROW_PX = 360
"""Below this width, a steps table's text is ``x-small`` (a CSS container query on its box)."""
NARROW = "<style>@container rlnb-table (max-width: %dpx) { table.%s { font-size: x-small !important } }</style>"
"""A steps table's own style, for its own class alone (``steps_html``'s ``scope``): a page's ``<style>`` is global,
and ``table.rlnb-steps`` shrank every steps table of the page in a narrow box (another version's saved output's too)."""
HEADER_CHARS = 18
"""The most characters of a figure's name in the steps table's header (its start and end, "…" between, as its plot's
title is cut; the whole name its tooltip): a 75-character name made the column ~600 px wide, the others past a
narrow panel's edge."""
OP_HEADERS = ("seq", "kind", "status", "error", "step", "wait", "time")
"""Columns of the table of raw operations: ``wait`` is submitted → started, ``time`` started → finished."""


def number(value: float | None) -> str:
    """A figure in a table cell: four significant digits, empty when missing."""
    return "" if value is None or math.isnan(value) else f"{value:.4g}"


def seconds(value: float) -> str:
    """A duration in a table cell, empty when missing."""
    return "" if math.isnan(value) else f"{value:.2f} s"


def rl_html(latest: list[tuple[StepRow, dict[str, float]]]) -> str:
    """The RL metrics of the latest steps, newest first (a column per metric logged), each headed by its short name
    (``rlnb.viz.names``), its long name and key on hover: under their keys, 13 columns took 1810 px."""
    cols = [m for m in RL_TABLE if any(m in user for _, user in latest)]
    if not cols:
        return "<i>no RL metrics logged yet (rlnb.tasks.rl_step logs them)</i>"
    named = "".join(
        f"<th style='{CELL_STYLE}' title='{html.escape(f'{long_name(c)} ({c})')}'>{html.escape(short_name(c))}</th>"
        for c in cols
    )
    head = f"<th style='{CELL_STYLE}'>step</th>{named}"
    body = "".join(
        "<tr>"
        + "".join(f"<td style='{CELL_STYLE}'>{c}</td>" for c in [str(row.step), *(number(user.get(m)) for m in cols)])
        + "</tr>"
        for row, user in reversed(latest)
    )
    return f"<table class='rlnb-rl' style='{TABLE_STYLE}'><tr>{head}</tr>{body}</table>"


def _header(name: str) -> str:
    """A steps-table column's header: a long name cut to ``HEADER_CHARS``, the whole of it its tooltip."""
    text = printable(name)
    shown = shortened(text, lambda t: len(t) <= HEADER_CHARS)
    tip = "" if shown == text else f" title='{html.escape(text)}'"
    return f"<th style='{CELL_STYLE}'{tip}>{html.escape(shown)}</th>"


def visible(text: str, limit: int = MAX_CHARS) -> str:
    """``text`` safe in HTML and readable: control characters as escapes (``\\n``, ``\\x00``), at most
    ``limit`` characters (then an ellipsis), HTML-escaped."""
    return html.escape(printable(text[:limit])) + ("…" if len(text) > limit else "")


def completions_html(rows: list[dict[str, Any]]) -> str:
    """One step's completions: prompt, completion, reward and advantage, in prompt order."""
    headers = ("prompt", "completion", "reward", "adv.")
    head = "".join(f"<th style='{CELL_STYLE};text-align:left'>{h}</th>" for h in headers)
    body = []
    for r in rows[:MAX_COMPLETIONS]:
        cells = (
            f"<code>{visible(str(r['prompt']))}</code>",
            f"<code style='white-space:pre'>{visible(str(r['completion']))}</code>",
            number(r["reward"]),
            number(r["advantage"]),
        )
        body.append("<tr>" + "".join(f"<td style='{CELL_STYLE};text-align:left'>{c}</td>" for c in cells) + "</tr>")
    more = len(rows) - MAX_COMPLETIONS
    if more > 0:
        body.append(f"<tr><td colspan='4'><i>{more} more in history.completions</i></td></tr>")
    return f"<table class='rlnb-completions' style='{TABLE_STYLE}'><tr>{head}</tr>{''.join(body)}</table>"


def ops_html(records: list[Record]) -> str:
    """The latest operations, newest first: kind, status, error code (its message on hover), the wait
    (submitted → started) and the time (started → finished); "…" while it goes on."""
    now = time.time()
    cells = "".join(f"<th style='{CELL_STYLE};text-align:left'>{h}</th>" for h in OP_HEADERS)
    body = []
    for r in reversed(records):
        started, finished = r.started_at, r.finished_at
        wait = seconds((now if math.isnan(started) else started) - r.submitted_at)
        wait += " …" if math.isnan(started) else ""
        took = "" if math.isnan(started) else seconds((now if math.isnan(finished) else finished) - started)
        took += " …" if took and math.isnan(finished) else ""
        color = to_hex(STATUS_COLORS.get(r.status, "0.5"))
        row = (
            str(r.seq),
            html.escape(r.kind),
            f"<span style='color:{color}'>&#9632;</span> {html.escape(short(r.status).lower())}",
            f"<span title='{html.escape(r.error_message or '')}'>{html.escape(short(r.error_code))}</span>",
            "" if r.step is None else str(r.step),
            wait,
            took,
        )
        body.append("<tr>" + "".join(f"<td style='{CELL_STYLE};text-align:left'>{c}</td>" for c in row) + "</tr>")
    return f"<table class='rlnb-ops' style='{TABLE_STYLE}'><tr>{cells}</tr>{''.join(body)}</table>"


def steps_html(latest: list[tuple[StepRow, dict[str, float]]], metrics: list[str], loss: bool, scope: str) -> str:
    """The latest steps, newest first, with the figures ``metrics`` logged at each: ``time`` is the step's compute
    time, ``wait`` its time queued behind other operations (``rlnb.history.timing``). Below ``NARROW_PX`` its text is
    smaller, so that seven columns fit a 264 px box and eight a 320 px one: a rule for the class ``scope`` alone (a
    view's own, unique on the page)."""
    cols = ["step", *metrics, *(["loss"] if loss else [])]
    cols += ["grad norm", "clip", "lr", "time", "wait"]
    head = "".join(map(_header, cols))
    body = []
    for row, user in reversed(latest):
        cells = [
            str(row.step),
            *(number(user.get(m)) for m in metrics),
            *([number(row.loss)] if loss else []),
            number(row.grad_norm),
            "off" if row.grad_clip_norm == 0 else number(row.grad_clip_norm),
            number(row.learning_rate),
            seconds(row.run_s),
            seconds(row.queue_s),
        ]
        body.append("<tr>" + "".join(f"<td style='{VALUE_STYLE}'>{c}</td>" for c in cells) + "</tr>")
    if not body:
        body.append(f"<tr><td colspan='{len(cols)}'><i>no completed optimizer step yet</i></td></tr>")
    table = f"<table class='rlnb-steps {scope}' style='{TABLE_STYLE}'><tr>{head}</tr>{''.join(body)}</table>"
    return f"<div style='container:rlnb-table / inline-size'>{NARROW % (NARROW_PX, scope)}{table}</div>"
