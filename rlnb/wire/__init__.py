"""Typed models of Together's RL training-session API, newest revision ("R-new", SDK ``together`` 3.1.1).

This is the one schema in rlnb: the remote client serialises requests with it and ``rlnb serve``
parses them with it. Names and enum strings are the spec's, verbatim. Operation kinds, statuses and
error codes are ``StrEnum``s (``OperationKind``, ``OperationStatus``, ``OperationErrorCode``, ...):
each member is its string, so it compares, hashes and serialises as the API's, and the rest of rlnb
names members instead of spelling strings; the other enums are ``Literal`` aliases, as in the
Stainless-generated SDK. Responses are parsed leniently (``extra="allow"``) so a new server field never
breaks an old client; top-level request bodies are strict (types, ranges, required fields, no unknown
fields).

int64 fields are ``Int64``: they accept ``123`` or ``"123"`` and serialise to JSON as strings, the
protobuf-JSON convention the service uses (``"step": "42"``). Number fields, and the elements of a tensor's data list
(``TensorData``, ``GradientTensor``), take Python ints and floats only when a model is built by hand: a 0-d tensor, a
numpy float32 or a ``Decimal`` is refused (``float_type``, naming ``data.N``); ``rlnb.samples`` and rlnb's other entry
points convert arrays, tensors and numpy scalars first.

One catalogue per idea: ``LOSSES`` (short name, wire type, params model with bounds, rlnb defaults,
inputs), the statuses and error codes of ``status`` with their groups (``TERMINAL_STATUSES``,
``error_code``, ``short_name``), the per-kind tables of ``operations`` (``REQUEST_TYPES``, ``RESULT_TYPES``,
``ENVELOPES``) and of ``payloads`` (``UPLOADED_MEMBERS``), and ``OPTIMIZERS`` (kinds, their optim-step field,
``optimizer_config``). One module per resource: ``base``, ``status``, ``losses`` (its params models in
``loss_params``), ``optim``, ``checkpoints``, ``inputs``, ``sampling``, ``operations``, ``payloads`` (the side
channel of large bodies and results), ``sessions``, ``resources`` (model resources), ``paths`` (each endpoint's path,
for the server and the client), ``rules`` (a field's bounds in words, from its model's metadata: the one-line refusals
of a bad params field); ``lists`` has the C-speed token id and log-prob lists of ``inputs`` and ``sampling``.

No torch, no httpx, no I/O here, so importing this package is cheap everywhere.
"""

from rlnb.wire import (
    base,
    checkpoints,
    inputs,
    lists,
    losses,
    operations,
    optim,
    payloads,
    resources,
    rules,
    sampling,
    sessions,
    status,
)
from rlnb.wire.base import *  # noqa: F403
from rlnb.wire.checkpoints import *  # noqa: F403
from rlnb.wire.inputs import *  # noqa: F403
from rlnb.wire.lists import *  # noqa: F403
from rlnb.wire.losses import *  # noqa: F403
from rlnb.wire.operations import *  # noqa: F403
from rlnb.wire.optim import *  # noqa: F403
from rlnb.wire.payloads import *  # noqa: F403
from rlnb.wire.resources import *  # noqa: F403
from rlnb.wire.rules import *  # noqa: F403
from rlnb.wire.sampling import *  # noqa: F403
from rlnb.wire.sessions import *  # noqa: F403
from rlnb.wire.status import *  # noqa: F403

__all__ = sorted(
    {
        *base.__all__,
        *status.__all__,
        *losses.__all__,
        *optim.__all__,
        *checkpoints.__all__,
        *inputs.__all__,
        *lists.__all__,
        *operations.__all__,
        *payloads.__all__,
        *sampling.__all__,
        *sessions.__all__,
        *resources.__all__,
        *rules.__all__,
    }
)
