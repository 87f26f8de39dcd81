"""A figure's long name in the steps table's header is shortened as its plot's title is (its start and end, "…"
between), the whole name its tooltip: at 691 px of Voila, a 75-character name made its column ~600 px wide, and every
other column lay past the panel's right edge."""

import html
import math
import re

from rlnb.history.figures import StepRow
from rlnb.viz.livetables import HEADER_CHARS, steps_html

ROW = StepRow(seq=1, step=1, grad_norm=1.0, grad_norm_muon=math.nan, grad_norm_adam=math.nan, grad_clip_norm=1.0,
              learning_rate=1e-3, finished_at=0.0)  # fmt: skip


def headers(table: str) -> list[tuple[str, str]]:
    """Each header's tooltip ("" if none) and text."""
    out = []
    for attrs, text in re.findall(r"<th([^>]*)>([^<]*)</th>", table):
        tip = re.search(r"title='([^']*)'", attrs)
        out.append((html.unescape(tip.group(1)) if tip else "", html.unescape(text)))
    return out


def test_a_long_figure_name_is_shortened_in_the_header_with_the_whole_name_as_its_tooltip():
    name = "eval/exact_match_<b>" + "x" * 55  # 75 characters, one that HTML would read as markup
    shown = headers(steps_html([(ROW, {name: 0.5, "reward": 1.0})], ["reward", name], False, "v1"))
    assert shown[:2] == [("", "step"), ("", "reward")]  # a short one as it is, with no tooltip
    tip, text = shown[2]
    assert tip == name and len(text) == HEADER_CHARS and "…" in text
    assert text.startswith("eval/exac") and text.endswith("xxx")
    assert [t for _, t in shown[3:]] == ["grad norm", "clip", "lr", "time", "wait"]
