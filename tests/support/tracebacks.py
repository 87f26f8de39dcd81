"""A traceback rendered with every frame's locals, as the stdlib, IPython and rich render it (where a key would
show)."""

import io
import os
import traceback
from pathlib import Path

import rlnb

RLNB = str(Path(rlnb.__file__).parent) + os.sep


def with_locals(exc: BaseException) -> str:
    """``exc``'s traceback (its chain too) with every frame's locals, as the stdlib, IPython and rich render it, from
    rlnb's first frame (the test's own hold the key as it wrote it)."""
    tb = exc.__traceback__
    while tb is not None and not tb.tb_frame.f_code.co_filename.startswith(RLNB):
        tb = tb.tb_next
    texts = ["".join(traceback.TracebackException(type(exc), exc, tb, capture_locals=True).format())]
    try:
        from IPython.core.ultratb import VerboseTB
    except ImportError:
        pass
    else:
        texts.append(VerboseTB(theme_name="nocolor").text(type(exc), exc, tb))
    try:
        from rich.console import Console
        from rich.traceback import Traceback
    except ImportError:
        pass
    else:
        console = Console(file=io.StringIO(), width=240, color_system=None)
        console.print(Traceback.from_exception(type(exc), exc, tb, show_locals=True, locals_max_string=400))
        texts.append(console.file.getvalue())  # type: ignore[attr-defined]
    return "\n".join(texts)
