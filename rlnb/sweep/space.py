"""What a sweep varies: search spaces (floats, ints, choices), their fields and the most configs and trials a sweep
takes; ``applying`` makes a config validated optimizer params. Lists of configs (``grid``, ``random_search``, one
given to ``sweep``) are ``configs``'s.

Config keys are optimizer fields (``"learning_rate"``, ``"momentum"``, ...; ``"adam.learning_rate"`` for
Muon's AdamW sub-params) plus ``"optimizer"`` (``"adam"`` / ``"muon"``). A search space maps the same
keys to a dimension: ``Float(lo, hi, log=True)``, ``Int(lo, hi)``, ``Categorical([...])``, or the
shorthands ``(lo, hi)``, ``(lo, hi, "log")``, ``(lo, hi, "int")`` and ``[choices]``; ``(lo, hi)`` of an integer
field (``newton_schulz_steps``) is ``Int(lo, hi)``.
"""

from __future__ import annotations

import math
import numbers
import random
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any, get_args

from rlnb._input.checks import check_bool, is_integer
from rlnb._input.scalars import scalar
from rlnb.errors import InvalidParams
from rlnb.params import MUON_ADAM_FIELDS, PARAMS, OptimizerParams, kind_of

from .applying import applied


@dataclass(frozen=True)
class Float:
    """A real range; ``log=True`` samples evenly in log space (learning rates, eps, weight decay)."""

    low: float
    high: float
    log: bool = False


@dataclass(frozen=True)
class Int:
    """An integer range, both ends included (``newton_schulz_steps``)."""

    low: int
    high: int
    log: bool = False


@dataclass(frozen=True)
class Categorical:
    """One of a few values (``optimizer``, or a short list of learning rates)."""

    choices: tuple[Any, ...]


Dimension = Float | Int | Categorical


def points(dim: Dimension) -> Sequence[Any] | None:
    """Every value of a list or an Int range (a lazy ``range``: ``Int(1, 10**9)`` is not built); None for a Float
    range, which has no finite set of points."""
    if isinstance(dim, Int):
        return range(dim.low, dim.high + 1)
    return dim.choices if isinstance(dim, Categorical) else None


def dimension(name: str, spec: Any) -> Dimension:
    """A dimension from its object or shorthand; a malformed one raises naming ``name``. Numpy and torch scalars
    among its choices or ends are the Python numbers they hold."""
    if isinstance(spec, tuple):
        spec = tuple(scalar(v) for v in spec)
    dim: Dimension
    if isinstance(spec, Categorical):
        dim = Categorical(tuple(in_order(spec.choices, [scalar(c) for c in _choices(name, spec.choices)])))
    elif isinstance(spec, Float | Int):
        dim = spec
    elif isinstance(spec, list):
        dim = Categorical(tuple(scalar(c) for c in spec))
    elif isinstance(spec, tuple) and len(spec) == 3 and spec[2] in ("log", "int"):
        dim = Int(spec[0], spec[1]) if spec[2] == "int" else Float(spec[0], spec[1], log=True)
    elif isinstance(spec, tuple) and len(spec) == 2 and all(isinstance(v, int | float) for v in spec):
        dim = Float(spec[0], spec[1])
    else:
        raise ValueError(
            f"space[{name!r}] must be a list of choices, (lo, hi), (lo, hi, 'log'), (lo, hi, 'int'), "
            f"Float, Int or Categorical; got {spec!r}"
        )
    dim = _integer_field(name, spec, dim)
    if isinstance(dim, Float | Int):
        dim = _numeric_ends(name, dim)
        if not (math.isfinite(dim.low) and math.isfinite(dim.high) and dim.low < dim.high):
            raise ValueError(f"space[{name!r}]: need finite low < high, got {dim.low!r}, {dim.high!r}")
        if dim.log and dim.low <= 0:
            raise ValueError(f"space[{name!r}]: a log range needs low > 0, got {dim.low!r}")
    elif not dim.choices:
        raise ValueError(f"space[{name!r}]: no choices")
    else:
        check_once(f"space[{name!r}]", dim.choices)
    return dim


def _field_types(annotation: Any) -> set[type]:
    """The types a field's annotation names (``int`` of ``Optional[Annotated[int, ...]]``)."""
    if isinstance(annotation, type):
        return {annotation}
    return set().union(*(_field_types(a) for a in get_args(annotation)))


INT_FIELDS = frozenset(
    n for cls in PARAMS.values() for n, f in cls.model_fields.items() if int in _field_types(f.annotation)
)
"""The integer fields (``newton_schulz_steps``): a real range drew floats that every trial then refused."""


def _integer_field(name: str, spec: Any, dim: Dimension) -> Dimension:
    """``dim``, drawing integers for an integer field: ``(3, 6)`` is ``Int(3, 6)``; a range with a non-integer end,
    ``"log"`` or a ``Float`` is a ``ValueError`` naming the field (it drew floats, which the sweep refused)."""
    if name not in INT_FIELDS or not isinstance(dim, Float):
        return dim
    if isinstance(spec, tuple) and len(spec) == 2 and all(is_integer(v) for v in spec):
        return Int(int(spec[0]), int(spec[1]))
    raise ValueError(f"space[{name!r}]: {name} is an integer field: give an integer range, such as (3, 6, 'int') or "
                     f"Int(3, 6), got {spec!r}"[:300])  # fmt: skip


def _choices(name: str, choices: Any) -> Iterable[Any]:
    """A ``Categorical``'s choices, or a ``ValueError`` naming ``name``: else ``Categorical("adam")`` would try "a",
    "d", "a" and "m" (refused as "'a' more than once"), ``Categorical("12")`` the texts "1" and "2", ``Categorical(5)``
    be a bare "'int' object is not iterable"."""
    if isinstance(choices, str | bytes | Mapping) or not isinstance(choices, Iterable):
        raise ValueError(f"space[{name!r}]: Categorical takes a list of choices, such as "
                         f"Categorical(['adam', 'muon']), got {choices!r}"[:300])  # fmt: skip
    return choices


def in_order(given: Any, values: list[Any]) -> list[Any]:
    """``values`` (read from ``given``) sorted when ``given`` is a set, else as listed: a set's order is the hash
    seed's, another in each kernel, so the same cell would make other configs (or draws) and its ``resume=`` be
    refused."""
    if not isinstance(given, AbstractSet):
        return values
    try:
        return sorted(values)
    except TypeError:  # members of several types: an order all the same
        return sorted(values, key=repr)


def _numeric_ends(name: str, dim: Float | Int) -> Float | Int:
    """``dim`` with plain number ends, or a ``ValueError`` naming ``name``: ``(0.5, 0.9, "int")`` was truncated to
    ``Int(0, 0)``, ``Float("a", 1)`` was ``math.isfinite``'s bare TypeError."""
    log = check_bool(f"space[{name!r}].log", dim.log)  # log="no" is truthy: it searched in log space
    ends = (scalar(dim.low), scalar(dim.high))
    if isinstance(dim, Int):
        if not all(is_integer(v) or isinstance(v, float) and v.is_integer() for v in ends):
            raise ValueError(f"space[{name!r}]: an Int range needs integer ends, got {dim.low!r}, {dim.high!r}")
        return Int(int(ends[0]), int(ends[1]), log=log)
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in ends):
        raise ValueError(f"space[{name!r}]: a Float range needs number ends, got {dim.low!r}, {dim.high!r}")
    return Float(float(ends[0]), float(ends[1]), log=log)


def check_once(name: str, values: Sequence[Any]) -> None:
    """``ValueError`` naming ``name`` when ``values`` lists a value twice: the same config ran twice as two
    trials (and a grid point twice in Optuna's grid), which ``summarize`` counts as seeds that agree; or a NaN."""
    if any(isinstance(v, numbers.Real) and math.isnan(v) for v in values):  # NaN != NaN: two passed as distinct
        raise ValueError(f"{name} lists NaN, which is no value to try, got {list(values)!r}")
    seen: set[Any] = set()
    twice = []
    for i, v in enumerate(values):  # by hash: comparing each with every earlier one would take 7 s for 10,000 configs
        try:
            key = frozenset(v.items()) if isinstance(v, Mapping) else v
            if key in seen:
                twice.append(v)
            seen.add(key)
        except TypeError:  # unhashable (a list among a config's values): compared with every earlier one
            if v in values[:i]:
                twice.append(v)
    if twice:
        raise ValueError(f"{name} lists {', '.join(map(repr, twice))} more than once, got {list(values)!r}")


def parse_space(base: OptimizerParams, space: Mapping[str, Any]) -> dict[str, Dimension]:
    """Every dimension parsed, and its ends (or every choice) checked against the params rules of every
    optimizer the space can pick — a bad field name, a field the other optimizer lacks or an
    out-of-range bound raises ``InvalidParams`` before anything runs."""
    if not space:
        raise ValueError(
            "space is empty: give at least one field to search, e.g. {'learning_rate': (1e-5, 1e-1, 'log')}"
        )
    check_fields("space", [name for name in space if not isinstance(name, str)])  # 5: str.partition's AttributeError
    dims = {name: dimension(name, spec) for name, spec in space.items()}
    for name, dim in dims.items():  # each choice is validated below, and Optuna stores them all with every trial
        if isinstance(dim, Categorical) and len(dim.choices) > MAX_CONFIGS:
            raise ValueError(f"space[{name!r}] lists {len(dim.choices)} choices: at most {MAX_CONFIGS}, as many as a "
                             "search runs trials; use a range such as (lo, hi, 'log')")  # fmt: skip
    kinds = dims.pop("optimizer", Categorical((kind_of(base),)))
    if not isinstance(kinds, Categorical):
        raise ValueError(f"space['optimizer'] must be a list of 'adam' / 'muon', got {kinds}")
    for kind in kinds.choices:
        applied("space['optimizer']", base, {"optimizer": kind})
        for name, dim in dims.items():  # Adam's "momentum": named with the optimizer that lacks it
            where = f"space[{name!r}] with optimizer {kind!r}" if "optimizer" in space else f"space[{name!r}]"
            for value in dim.choices if isinstance(dim, Categorical) else (dim.low, dim.high):
                applied(where, base, {"optimizer": kind, name: value})
    return {name: kinds if name == "optimizer" else dims[name] for name in space}


def check_ends(name: str, dim: Dimension) -> None:
    """``InvalidParams`` naming ``space[name]`` and the field's rule where an end of a range breaks it in every
    optimizer that has the field: ``random_search(4, learning_rate=(-1, 0.1))`` drew negative rates, which the sweep
    refused as a random draw's ``configs[0]``. A choice is the sweep's to check, as it is sent (it names its config),
    and so is a rule of two fields (lr × wd), on its base."""
    if isinstance(dim, Categorical):
        return
    classes = [cls for cls in PARAMS.values() if name.partition(".")[0] in cls.model_fields]
    for value in (dim.low, dim.high):
        refused = []
        for cls in classes:
            try:
                applied(f"space[{name!r}]", cls(), {name: value})
            except InvalidParams as exc:
                if exc.errors[0][0] == name.rpartition(".")[2]:  # the field's own rule, not a pair's
                    refused.append(exc)
                    continue
            break
        if refused and len(refused) == len(classes):
            raise refused[0]


def sample(dims: Mapping[str, Dimension], rng: random.Random) -> dict[str, Any]:
    config: dict[str, Any] = {}
    for name, dim in dims.items():
        if isinstance(dim, Categorical):
            config[name] = rng.choice(dim.choices)
        elif isinstance(dim, Int) and dim.log:  # as Optuna draws one: each integer owns [v - 0.5, v + 0.5)
            x = math.exp(rng.uniform(math.log(dim.low - 0.5), math.log(dim.high + 0.5)))
            config[name] = min(max(round(x), dim.low), dim.high)
        elif isinstance(dim, Int):
            config[name] = rng.randint(dim.low, dim.high)
        elif dim.log:
            config[name] = math.exp(rng.uniform(math.log(dim.low), math.log(dim.high)))
        else:
            config[name] = rng.uniform(dim.low, dim.high)
    return config


MAX_CONFIGS = 10_000
"""The most configs ``grid`` and ``random_search`` make (as ``sampler='grid'`` runs at most 10,000 points): each is
a trial, and a list far longer is a mistake that fills memory (a grid) or draws for ever (each draw is compared)."""
MAX_TRIALS = 100_000
"""The most trials (configs × seeds) one sweep plans: each is a training run, and a plan of millions would take minutes
and gigabytes to build before the first trial runs."""


def check_fields(where: str, names: Iterable[str]) -> None:
    """``ValueError`` naming a field no optimizer has and the allowed ones: ``random_search(3, lr=...)`` built configs
    that every sweep then refused. Muon's ``adam.grad_clip_norm`` is none (a Muon step clips by its own)."""
    own = dict.fromkeys(f for cls in PARAMS.values() for f in cls.model_fields if f != "adam")
    allowed = ["optimizer", *own, *(f"adam.{f}" for f in MUON_ADAM_FIELDS)]
    unknown = [n for n in names if n not in allowed]
    if unknown:
        raise ValueError(f"{where}: unknown field {unknown[0]!r}; allowed fields are {', '.join(allowed)}")
