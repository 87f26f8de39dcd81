"""The repository's root and rlnb read from its source (griffe, not imported), shared by the docs tests."""

import functools
from pathlib import Path

import griffe

ROOT = Path(__file__).resolve().parents[2]


@functools.cache
def package() -> griffe.Module:
    """rlnb read from its source (not imported), as mkdocstrings reads it."""
    return griffe.load("rlnb", search_paths=[str(ROOT)], resolve_aliases=True)
