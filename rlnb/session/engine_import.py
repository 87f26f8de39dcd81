"""The in-process engine's import (torch's, seconds the first time: the first ``connect("local")``), whole or not at
all.

A Ctrl-C inside torch's import leaves it half-imported for good once its C part is initialised (``torch._C``
without ``torch`` in ``sys.modules``): the next import, or a call after it, fails with an ``AttributeError`` (``module
'torch' has no attribute '_utils'``), a ``SystemError`` or a segmentation fault, which says nothing of why. So a
Ctrl-C there is held until the import is done, then raised (the command line holds one inside imports too:
``rlnb.cli.interrupts``); a torch found half-imported (an interrupted ``import torch`` of the user's) is one clear
error.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from rlnb.lifecycle import ctrl_c

if TYPE_CHECKING:
    from rlnb.engine.backend import LocalBackend

HALF_IMPORTED = (
    "torch's import was interrupted earlier in this process (a Ctrl-C during the first connect('local') or an import "
    "torch), which leaves torch broken here: restart the kernel (or the Python process)"
)


def local_backend() -> type[LocalBackend]:
    """``rlnb.engine.backend.LocalBackend``, imported with a Ctrl-C held until the import is done (``ctrl_c.held``: on
    the main thread under Python's own SIGINT handler; elsewhere no Ctrl-C comes, or its handler is another's)."""
    if "torch._C" in sys.modules and "torch" not in sys.modules:  # its C part initialised, once only
        raise RuntimeError(HALF_IMPORTED)
    with ctrl_c.held():
        from rlnb.engine.backend import LocalBackend
    return LocalBackend
