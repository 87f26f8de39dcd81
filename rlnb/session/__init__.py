"""A training session: submit operations, get ``Operation`` handles, record them in a ``History``.

``Session`` is the same object whatever runs the operations: the in-process engine (``rlnb.engine``)
or a remote server (``rlnb.remote``), both behind the small ``Backend`` protocol.
"""

from rlnb.session.backend import Backend
from rlnb.session.connect import connect
from rlnb.session.operation import Operation
from rlnb.session.session import Prompt, Session

__all__ = ["Backend", "Operation", "Prompt", "Session", "connect"]
