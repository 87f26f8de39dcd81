"""Muon's learning rate in its two scaling conventions ("original": spectral-norm units, KJ;
"match_adam": the RMS of an AdamW update, Moonshot), converted for the shapes of the matrices Muon
updates: a built-in model's, an ``nn.Module``'s, or a session's own."""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np
from torch import nn

from rlnb import wire
from rlnb._input.checks import is_integer
from rlnb._input.scalars import scalar
from rlnb.engine.models.factory import roles
from rlnb.engine.models.tiny import SIZES, build_model
from rlnb.engine.optim.muon import shape_scale
from rlnb.engine.optim.split import split_params
from rlnb.session import Session

Shapes = Sequence[tuple[int, int]]


def muon_shapes(model: str | nn.Module | Session = "tiny") -> list[tuple[int, int]]:
    """The shapes (rows, cols) = (fan_out, fan_in) of the matrices Muon updates (a GPT-2 layer stored [in, out]
    counts as the nn.Linear it is, ``ParamSplit.fan_shape``): in a built-in model (by name), an
    ``nn.Module``, or a session — a local one's own optimizer split (a Hugging Face model, LoRA and
    ``muon_split`` included), a remote one's built-in model. A remote session on another model raises
    ``ValueError``: its shapes are not known here (pass the shapes, or the module)."""
    if isinstance(model, Session):
        optim = getattr(model.backend, "optim", None)
        if optim is not None:
            return optim.split.muon_shapes()
        name = str(model.history.config.get("model", "")).removeprefix("rlnb/")
        if name not in SIZES:
            raise ValueError(
                f"the Muon matrix shapes of {name or 'this session'}'s model are not known here: pass shapes "
                "(a list of (rows, cols)) or the model as an nn.Module"
            )
        model = name
    if not isinstance(model, str | nn.Module):  # 5 or a path object: AttributeError "no attribute 'parameters'"
        raise TypeError(f"model must be a built-in model's name {sorted(SIZES)}, an nn.Module or a session, "
                        f"got {type(model).__name__} {model!r}")  # fmt: skip
    if isinstance(model, str):
        return list(_built_in_shapes(model))
    return split_params(model, roles(model)).muon_shapes()


@functools.cache
def _built_in_shapes(name: str) -> tuple[tuple[int, int], ...]:
    """A built-in model's shapes, built once per name: every optimizer builder asks for them (its Muon units), and
    building the model and probing it cost each builder about 0.05 s of CPU."""
    module = build_model(name, seed=0)
    return tuple(split_params(module, roles(module)).muon_shapes())


def _scale(convention: str, rows: int, cols: int) -> float:
    """The optimizer's own scale (``shape_scale``), its convention checked: a rate converted by another formula
    would drift from the updates it claims to match."""
    return shape_scale(rows, cols, wire.muon_scaling(convention, "Muon scaling"))


def convert_muon_lr(lr: float, from_: str, to: str, shapes: Shapes | str | nn.Module | Any = "tiny") -> float:
    """A Muon learning rate in convention ``from_`` → the rate giving the same updates in ``to``.

    ``shapes``: a list of (rows, cols), or anything ``muon_shapes`` takes (a built-in model's name, an
    ``nn.Module``, a ``Session``). A matrix (rows × cols) moves by lr·s per step, s = max(1, rows/cols)^½
    ("original") or 0.2·max(rows, cols)^½ ("match_adam"). One rate cannot match every shape when the
    ratio differs between matrices, so the factor is the geometric mean of s_from/s_to weighted by each
    matrix's number of elements: the typical weight moves as before.
    """
    lr = scalar(lr)  # a 0-d tensor (a rate read off a schedule) was "invalid: must be a finite number > 0"
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real) or not (lr > 0 and math.isfinite(lr)):
        raise ValueError(f"learning_rate = {lr!r} is invalid: must be a finite number > 0")
    converted = float(lr) * muon_lr_factor(from_, to, shapes)
    if not (converted > 0 and math.isfinite(converted)):  # 1e308 came back as inf, 5e-324 as 0.0, in silence
        raise ValueError(f"learning_rate = {lr!r} in {from_!r} units is {converted!r} in {to!r} units, no rate a "
                         "float can hold (past 1.8e308, or under 5e-324)")  # fmt: skip
    return converted


def muon_lr_factor(from_: str, to: str, shapes: Shapes | str | nn.Module | Any = "tiny") -> float:
    """The factor ``convert_muon_lr`` multiplies a rate by (``shapes`` as it takes them), for a caller that must show
    a converted rate past what a float holds instead of refusing it (the builder's units switch marks it invalid)."""
    dims = muon_shapes(shapes) if isinstance(shapes, str | nn.Module | Session) else _dims(shapes)
    if not dims:
        raise ValueError(f"shapes holds no Muon matrix to weigh the rate by: give at least one (rows, cols) of a "
                         f"hidden matrix, a model's name, an nn.Module or a Session, got {shapes!r}"[:300])  # fmt: skip
    weights = np.array([r * c for r, c in dims], dtype=float)
    logs = np.array([math.log(_scale(from_, r, c) / _scale(to, r, c)) for r, c in dims])
    return math.exp(float(weights @ logs / weights.sum()))


def _dims(shapes: Any) -> list[tuple[int, int]]:
    """``shapes`` as (rows, cols) pairs of integers >= 1: (4, 0) divided by zero, (-4, 4) weighed a matrix
    negatively, 5 was "'int' object is not iterable"."""
    try:
        given = list(shapes)  # once: a generator of shapes is spent by the first pass
        dims = [(int(r), int(c)) for r, c in given if is_integer(r) and is_integer(c) and r >= 1 and c >= 1]
        if len(dims) == len(given):
            return dims
    except (TypeError, ValueError):
        pass
    raise ValueError(f"shapes must be a list of (rows, cols), integers >= 1 (or a model's name, an nn.Module, a "
                     f"Session), got {shapes!r}")  # fmt: skip
