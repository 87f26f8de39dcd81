"""What a person sees of a run: matplotlib figures (``plots``) and the live view (``live``, drawn by
``livefig``) that a notebook refreshes as operations finish."""

from importlib import import_module as _import_module

_SUBMODULES = frozenset(
    {
        "cells",
        "comparison",
        "draw",
        "glyphs",
        "lines",
        "live",
        "livefig",
        "livepanels",
        "livetables",
        "outputs",
        "overview",
        "plots",
        "texts",
        "throttle",
        "timeline",
    }
)


def __getattr__(name: str) -> object:
    """``rlnb.viz.plots`` works after a bare ``import rlnb``; matplotlib loads on first use."""
    if name in _SUBMODULES:
        return _import_module(f"rlnb.viz.{name}")
    raise AttributeError(f"module 'rlnb.viz' has no attribute {name!r}")
