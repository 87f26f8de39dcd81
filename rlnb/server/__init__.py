"""``rlnb serve``: a Together-compatible RL training-session server on the in-process backend.

Serves the R-new paths under ``/v1/rl`` with request and response bodies from ``rlnb.wire`` (no second
schema), so clients written for Together — rlnb's remote backend, the official ``together`` SDK — work
offline. Each training session is a ``LocalBackend``; model resources are READY at once (there is no GPU
queue here) and stop after ``inactive_timeout`` seconds without activity, expiring their sessions.

Layout: ``settings`` (every limit), ``limits`` (checking them on each request), ``models`` (served models),
``errors`` (``ServerError`` and the one error body), ``registry`` (all state, one lock, the one place
backends are built; ``resources`` and ``ops``: its model-resources and operations / checkpoints halves),
``records`` (what it keeps per object, pagination), ``state`` (the journal of ``--state-dir``), ``links``
(presigned URLs), ``payloads`` (the large-body side channel), ``routes/`` (one router per resource,
``Depends`` for state and token), ``openapi``, ``hosts`` (the ``Host`` names a loopback server without a token
answers), ``app`` (``create_app``, ``serve``).

Beyond Together's API it offers a long-poll (``GET .../operations/{kind}/{id}?wait=S``), advertised with
the ``rlnb-long-poll-max-wait`` and ``rlnb-in-order`` headers, and ``metrics`` on optim-step results.
"""

from rlnb.server.app import create_app, serve
from rlnb.server.errors import ServerError
from rlnb.server.registry import Registry
from rlnb.server.settings import ServerSettings

__all__ = ["Registry", "ServerError", "ServerSettings", "create_app", "serve"]
