"""Tools for testing code that uses rlnb (and rlnb itself): no model, no network beyond loopback.

* ``FakeBackend``: a ``Backend`` without torch: the in-process engine's own worker (submission order, the
  API's PENDING → RUNNING → COMPLETED / FAILED transitions, closing and failure rules) running fake
  operations that refuse what the engine refuses and return the engine's result fields, so a ``Session``, its
  history, widgets and sweeps can be tested in milliseconds: ``rlnb.Session(FakeBackend(), record=False)``.
* ``ServerProcess`` / ``free_port``: a server (``rlnb serve`` or any command) in a child process on
  127.0.0.1, started and stopped with deadlines.
"""

from rlnb.testing.fake import Failure, FakeBackend
from rlnb.testing.servers import ServerProcess, free_port

__all__ = ["Failure", "FakeBackend", "ServerProcess", "free_port"]
