"""Whether a host is this machine: one rule for the client (a key sent in clear, a proxy bypassed) and the server
(the names a token-less loopback server answers, the warning of ``rlnb serve`` on other interfaces)."""

from __future__ import annotations

import ipaddress
import socket


def loopback(host: str) -> bool:
    """Whether ``host`` (an address or name, IPv6 bare or in brackets) is this machine's loopback (``localhost``,
    ``127.0.0.0/8``, ``::1``): only this machine connects to it. A wildcard, or any other name, is not. A name may end
    in one dot, its fully-qualified form (``localhost.``, RFC 1034 3.1): the same name, which a resolver reads alike."""
    if host.lower().removesuffix(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]").split("%")[0]).is_loopback
    except ValueError:
        pass
    try:  # IPv4's short forms, which the socket layer binds: 127.1 and 2130706433 are 127.0.0.1
        return ipaddress.ip_address(socket.inet_aton(host)).is_loopback
    except OSError:
        return False


def stays_here(host: str) -> bool:
    """Whether a request to ``host`` never leaves this machine: its loopback, also as an IPv4-mapped IPv6 address
    (``[::ffff:127.0.0.1]``), or the unspecified address (``0.0.0.0``, ``[::]``: what a server bound to every interface
    prints, which the kernel routes here)."""
    try:
        address = ipaddress.ip_address(host.strip("[]").split("%")[0])
    except ValueError:
        return loopback(host)
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or address.is_unspecified or (mapped is not None and mapped.is_loopback)
