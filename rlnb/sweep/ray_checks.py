"""What ``executor="ray"`` checks before it starts anything: that the trials are local, that Ray is installed,
``resources_per_trial``, that a trial can travel to a worker, and that a Ray answers at ``address``. Each failure names
the option."""

from __future__ import annotations

import math
import numbers
import socket
from collections.abc import Mapping
from typing import Any

from rlnb._extras import need

RESOURCE_KEYS = ("cpu", "gpu")


def import_ray() -> Any:
    return need("ray", "ray", "executor='ray'")


def refuse_remote(target: str) -> None:
    """``ValueError`` naming both options for a remote ``target``: its trials' compute is the provider's, so they run
    on threads in this process, and ``executor="ray"`` started (or joined) a Ray that ran none of them."""
    if target != "local":
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
    names are Ray's to find): ``ray.init`` waited minutes for a GCS that was not there (a mistyped host or port)."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return
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
