"""Lists of configs: made (``grid``: every combination; ``random_search``: distinct draws from a space), and those a
sweep is given (a list of dicts, and ``variants``, one name each): read once, each spelt as flat fields, checked before
the sweep folder is made — none twice in what it sends."""

from __future__ import annotations

import itertools
import json
import math
import random
from collections.abc import Collection, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from rlnb._input.checks import check_int, is_integer
from rlnb._input.scalars import scalar
from rlnb.params import OptimizerParams
from rlnb.text.prompts import check_text

from .applying import applied, meant
from .keys import config_key
from .space import MAX_CONFIGS, check_ends, check_fields, check_once, dimension, in_order, sample


def config_list(configs: Any) -> list[dict[str, Any]] | None:
    """``sweep``'s ``configs`` as a list of at most ``MAX_CONFIGS`` dicts, read once: else a generator would run
    its trials and be recorded in ``sweep.json`` as ``[]`` (read again, empty), and one dict, or a list holding a
    name, would be dict()'s "dictionary update sequence element #0 has length 1". Each config as ``flat_config`` spells
    it."""
    if configs is None:
        return None
    if isinstance(configs, Mapping | str | bytes) or not isinstance(configs, Iterable):
        raise TypeError(
            f"configs must be a list of dicts, such as grid(learning_rate=[1e-3, 1e-2]), got "
            f"{configs!r}{' (one config: put it in a list)' if isinstance(configs, Mapping) else ''}"
        )
    listed = list(
        itertools.islice(configs, MAX_CONFIGS + 1)
    )  # an endless generator would be read until memory runs out
    if len(listed) > MAX_CONFIGS:
        raise ValueError(
            f"configs holds more than {MAX_CONFIGS} configs: at most {MAX_CONFIGS}, each a trial per seed, as grid() "
            "and random_search() make (a list of 10,001 ran them all)"
        )
    for i, config in enumerate(listed):
        if not isinstance(config, Mapping):
            raise TypeError(f"configs[{i}] must be a dict of fields, such as {{'learning_rate': 1e-3}}, got {config!r}")
    return [flat_config(f"configs[{i}]", c) for i, c in enumerate(listed)]


def check_variants(variants: Any, configs: list[dict[str, Any]] | None) -> list[str] | None:
    """``sweep``'s ``variants``: one distinct name per config of a list (``ablate``'s), or None."""
    if variants is None:
        return None
    if configs is None:
        raise ValueError("variants names the configs one by one: pass configs (a list of dicts) with it")
    if isinstance(variants, Mapping | str | bytes) or not isinstance(variants, Iterable):
        raise TypeError(f"variants must be a list of names, one per config, got {variants!r}"[:300])
    if isinstance(variants, AbstractSet):  # each config took whichever name the hash seed put in its place
        raise TypeError(f"variants must be a list of names, one per config (a set has no order to pair them with the "
                        f"configs), got {variants!r}"[:300])  # fmt: skip
    names = list(variants)
    if len(names) != len(configs) or len(set(names)) != len(names) or not all(isinstance(n, str) and n for n in names):
        raise ValueError(f"variants must be {len(configs)} distinct names (non-empty strings), one per config, got "
                         f"{names!r}"[:300])  # fmt: skip
    for i, name in enumerate(names):  # the table's text column refused it once the sweep had run, its folder made
        check_text(name, f"variants[{i}] ({name!r})")
    return names


def flat_config(where: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """A config with a nested group spelt as its dotted fields (``{"adam": {"learning_rate": 1e-3}}`` is
    ``{"adam.learning_rate": 1e-3}``: its dict in a table column was unhashable to ``summarize``), each value a plain
    number (``np.float32`` went to JSON files as "0.001"). A field that is no text is refused naming ``where``
    (``{5: 0.1}`` was an ``AttributeError`` from deep in ``apply``), and so is one given in both spellings (one value
    was dropped without a word)."""
    check_fields(where, [key for key in config if not isinstance(key, str)])
    out: dict[str, Any] = {}
    for key, value in config.items():
        spelt = {f"{key}.{sub}": v for sub, v in value.items()} if isinstance(value, Mapping) else {key: value}
        for field, v in spelt.items():
            if field in out:
                group = field.partition(".")[0]
                raise ValueError(f"{where} gives {field} twice: as {field!r} and in {group!r}; give it once")
            out[field] = scalar(v)
    return out


def check_distinct_params(base: OptimizerParams, configs: Sequence[Mapping[str, Any]]) -> None:
    """``ValueError`` naming two configs that send the same params: ``{}`` and ``{"learning_rate": 1e-3}`` on a base
    at 1e-3 would run one trial twice under two labels, which ``check_once`` misses. Compared as sent
    (``request_body``): an unset field is the target's default, which a remote service may choose otherwise."""
    seen: dict[str, tuple[int, str]] = {}
    for i, config in enumerate(configs):
        body = applied(f"configs[{i}]", base, config).request_body()
        sent = json.dumps(body, sort_keys=True)
        j, first = seen.setdefault(json.dumps(meant(body), sort_keys=True), (i, sent))
        if j != i:  # an empty group ({"adam": {}}) sets nothing: the same params as none
            said = f"({sent})" if sent == first else f"({first} and {sent}: an empty group sets nothing)"
            raise ValueError(f"configs[{j}] {dict(configs[j])!r} and configs[{i}] {dict(config)!r} send the same "
                             f"params {said}: the same trial would run twice; drop one")  # fmt: skip


REDRAWS = 20
"""``random_search`` draws up to this many configs per one asked before it says the space is too small."""


def grid(**axes: Sequence[Any]) -> list[dict[str, Any]]:
    """Every combination: ``grid(learning_rate=[1e-3, 1e-2], momentum=[0.9, 0.95])`` → 4 configs."""
    check_fields("grid", axes)
    for name, values in axes.items():  # a string is a collection too: "0.001" would make 5 configs, one per character
        single = getattr(values, "ndim", 1) == 0  # a 0-d array or tensor: a Collection whose len() is a TypeError
        if single or isinstance(values, str | bytes | Mapping) or not isinstance(values, Collection):
            raise ValueError(f"grid: {name} must be a list of values, such as [1e-3, 1e-2], got {values!r}")
    empty = [name for name, values in axes.items() if not len(values)]
    if empty:  # an empty axis would make an empty grid: a sweep of nothing, silently
        raise ValueError(f"grid: {', '.join(empty)} has no values (give at least one per field)")
    size = math.prod(len(values) for values in axes.values())
    if size > MAX_CONFIGS:  # grid(a=range(1000), b=range(1000), c=range(1000)) built 10**9 dicts, filling memory
        each = " x ".join(f"{name} {len(values)}" for name, values in axes.items())
        raise ValueError(f"grid has {size} configs ({each}): at most {MAX_CONFIGS}, each a trial; use fewer values "
                         "or random_search(n, ...)")  # fmt: skip
    # np.arange's np.int64, a tensor's 0-d tensors: plain numbers for sweep.json, checked as such (a tensor's NaN is
    # no numbers.Real, and its values hash by identity: both were let through)
    plain = {name: in_order(values, [scalar(v) for v in values]) for name, values in axes.items()}
    for name, values in plain.items():
        check_once(f"grid: {name}", values)
    return [dict(zip(plain, combo, strict=True)) for combo in itertools.product(*plain.values())]


def random_search(n: int, seed: int = 0, **space: Any) -> list[dict[str, Any]]:
    """``n`` distinct configs drawn from ``space`` (dimensions or shorthands, see the module docstring). A draw
    that repeats an earlier one is drawn again: the same config twice ran as two trials that ``summarize``
    counted as seeds in perfect agreement (likely on a space of a few choices or integers)."""
    n = check_int("n", n, 1, MAX_CONFIGS)  # 2.5: range()'s bare TypeError, -1 [], True 1; 10**9 drew for ever
    check_fields("random_search", space)
    if not is_integer(seed):  # np.int64 was random's bare TypeError
        raise ValueError(f"random_search: seed must be an integer, got {seed!r}")
    dims = {name: dimension(name, spec) for name, spec in space.items()}
    for name, dim in dims.items():
        check_ends(name, dim)
    rng = random.Random(int(seed))
    configs: list[dict[str, Any]] = []
    seen: set[Any] = set()  # by hash: each draw compared with every config kept would take minutes for 10,000
    for _ in range(n * REDRAWS):
        config = sample(dims, rng)
        key = config_key(config)  # a choice that is a list: by its values
        if key not in seen:
            seen.add(key)
            configs.append(config)
        if len(configs) == n:
            return configs
    drawn_from = dict(space) or "an empty space"
    raise ValueError(f"random_search: {n} distinct configs asked, but {n * REDRAWS} draws from {drawn_from} gave "
                     f"{len(configs)}: draw fewer, or use grid(...)")  # fmt: skip
