"""What ``executor="ray"`` checks before it starts anything: that the trials are local, that Ray is installed,
``resources_per_trial``, that a trial can travel to a worker, that a Ray answers at ``address``, and that an
``address`` given to a process already connected to a Ray is that Ray's (else a warning). Each failure names
the option."""

from __future__ import annotations

import math
import numbers
import os
import socket
import warnings
from collections.abc import Mapping
from typing import Any

from rlnb._extras import need
from rlnb.errors import describe
from rlnb.history.runconfig import LOCAL

RESOURCE_KEYS = ("cpu", "gpu")


def import_ray() -> Any:
    return need("ray", "ray", "executor='ray'")


def refuse_remote(target: str) -> None:
    """``ValueError`` naming both options for a remote ``target``: its trials' compute is the provider's, so they run
    on threads in this process, and ``executor="ray"`` started (or joined) a Ray that ran none of them."""
    if target != LOCAL:
        raise ValueError(f"executor='ray' runs local trials as Ray tasks; the trials of target={target!r} train on the "
                         "provider and run on threads in this process, so no Ray would run any: use "
                         "executor='threads' (max_concurrent= trials at once)")  # fmt: skip


def check_picklable(task: Any, options: dict[str, Any]) -> None:
    """``TypeError`` naming the part of a local trial that cannot travel to a Ray worker (a reward closing over a lock),
    before the sweep folder is made: Ray refused the first trial's task, and its error ended the sweep."""
    ray = import_ray()
    for name, value in (("task", task), *((f"option {k}=", v) for k, v in options.items())):
        try:
            ray.cloudpickle.dumps(value)
        except Exception as exc:  # noqa: BLE001 - pickling raises TypeError, PicklingError, AttributeError, ...
            why = f"{type(exc).__name__}: {exc}"
            raise TypeError(f"executor='ray' sends each trial to a worker pickled, and its {name} cannot be pickled "
                            f"({why}); use executor='threads', or make it picklable") from exc  # fmt: skip


CONNECT_TIMEOUT = 10.0
"""Seconds a Ray at a ``host:port`` address gets to answer a TCP connect before the sweep is refused."""


def check_reachable(address: str) -> None:
    """``ConnectionError`` naming ``address`` unless something listens at its ``host:port`` (``"auto"`` and other
    names are Ray's to find; ``ValueError`` for a port that is no port): ``ray.init`` waited minutes for a GCS that was
    not there (a mistyped host or port)."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return
    if not port.isascii() or int(port) > 65535:  # "²" is a str.isdigit digit that int() refuses; the socket raised
        raise ValueError(f"address={address!r}: the port must be a whole number 0-65535")  # OverflowError past 65535
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT).close()
    except OSError as exc:
        raise ConnectionError(f"address={address!r}: no Ray answers there ({exc}); start one (ray start --head) or "
                              "fix the address") from None  # fmt: skip


def check_resources(resources_per_trial: dict[str, float] | None) -> tuple[float, float]:
    """``(cpu, gpu)`` per trial (default 1 CPU, no GPU), checked before anything starts."""
    if not isinstance(resources_per_trial, Mapping | None):  # a list was dict()'s "update sequence element #0"
        raise ValueError(f"resources_per_trial must be a dict such as {{'cpu': 1, 'gpu': 0}}, got "
                         f"{resources_per_trial!r}")  # fmt: skip
    resources = dict(resources_per_trial or {})
    unknown = set(resources) - set(RESOURCE_KEYS)
    if unknown:
        raise ValueError(f"resources_per_trial keys must be {RESOURCE_KEYS}, got {sorted(unknown)}")
    for key, value in resources.items():  # NaN passed `< 0`, and failed after Ray started and the folder was made
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= value < math.inf:
            raise ValueError(f"resources_per_trial[{key!r}] must be a finite number >= 0, got {value!r}")
    return float(resources.get("cpu", 1)), float(resources.get("gpu", 0))


def warn_unused_address(ray: Any, address: str | None) -> None:
    """Warn, naming both, when ``address`` (else ``$RAY_ADDRESS``) is not the Ray this process is already connected
    to: the trials run on that one (``ray.init`` ran before the sweep), and ``address="ray://cluster:10001"`` (or a
    ``RAY_ADDRESS`` set for the sweep) would be ignored without a word. ``"auto"`` is the Ray already running. Connected
    through Ray Client, the address it was given is compared (``client_address``)."""
    name = "address"
    if address is None and os.environ.get("RAY_ADDRESS"):
        name, address = "RAY_ADDRESS", os.environ["RAY_ADDRESS"]
    if address is None or address == "auto":
        return
    unknown = ""
    try:
        if ray.util.client.ray.is_connected():  # ray.init("ray://head:10001"): the GCS's address is the cluster's inner
            here, unknown = client_address(ray)
        else:
            here = ray.get_runtime_context().gcs_address
    except Exception as exc:  # noqa: BLE001 - a Ray that does not say: the warning says why it names no address
        here, unknown = None, f"; the address of the Ray it is connected to could not be read ({describe(exc)})"
    if here is not None and here.removeprefix("ray://") == address.removeprefix("ray://"):
        return
    where = f"the Ray at {here}" if here else "the Ray that ray.init(...) connected it to"
    verb = "may not be" if unknown else "is not"  # not compared: it may be the same Ray
    warnings.warn(f"executor='ray': {name}={address!r} {verb} used: this process is already connected to {where} "
                  f"(ray.init ran before the sweep), and the trials run there{unknown}; call ray.shutdown() before the "
                  f"sweep to run them at {name}", stacklevel=5)  # fmt: skip


def client_address(ray: Any) -> tuple[str | None, str]:
    """(``"ray://host:port"``, "") of the Ray Client connection this process has, or (None, why it is not known).
    Ray (checked to 2.60) names that address in no public API (``ray.init``'s ``ClientContext``, the runtime context
    and ``connection_info()`` do not; the runtime context's ``gcs_address`` is the cluster's inner one): it is read
    from its client worker's private ``_conn_str``, and a Ray without it is said, naming its version, not compared
    as if it were another address in silence."""
    worker = getattr(ray.util.client.ray.get_context(), "client_worker", None)
    conn = getattr(worker, "_conn_str", None)
    if isinstance(conn, str) and conn:
        return "ray://" + conn.removeprefix("ray://"), ""
    version = getattr(ray, "__version__", "?")
    return None, (f"; Ray {version} does not say the address of a Ray Client connection (rlnb reads its client "
                  "worker's private _conn_str, which this Ray has not), so the two were not compared")  # fmt: skip
