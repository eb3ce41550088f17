"""Which web pages may reach the server, and under which host names.

A browser lets any page it shows open a WebSocket to ``127.0.0.1`` and send it requests;
only the ``Origin`` header says which page. A DNS-rebinding page goes further: its own
name resolves to ``127.0.0.1``, so its requests are same-origin, and only the ``Host``
header gives it away. ``OriginPolicy`` checks both:

- ``Host`` must be one of ``allowed_hosts`` (``*``: any). A server bound to a loopback
  address answers only to loopback names by default (``localhost``, ``127.0.0.1``,
  ``::1``): nothing on the network can name it, and a rebinding page is refused.
- ``Origin``, when a request carries one (browsers; other clients send none), must be the
  server's own (the talk page at ``/``) or one of ``allowed_origins`` (``*``: any).

The same origins are what CORS lets read HTTP answers (``cors_origins``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _hostname(authority: str) -> str:
    """``host`` of ``host[:port]`` (IPv6 in brackets), lower case."""
    authority = authority.strip().lower()
    if authority.startswith("["):
        return authority[1 : authority.find("]")] if "]" in authority else authority
    return authority.rsplit(":", 1)[0] if authority.count(":") == 1 else authority


@dataclass(frozen=True, slots=True)
class OriginPolicy:
    allowed_hosts: frozenset[str]
    allowed_origins: frozenset[str]

    @classmethod
    def for_bind(
        cls,
        bind_host: str,
        *,
        allowed_hosts: Iterable[str] = (),
        allowed_origins: Iterable[str] = (),
    ) -> OriginPolicy:
        """The policy of a server bound to ``bind_host``: loopback names only when it is a
        loopback address (plus ``allowed_hosts``), any host otherwise."""
        hosts = {host.lower() for host in allowed_hosts}
        if not hosts:
            hosts = set(LOOPBACK_HOSTS) if _is_loopback(bind_host) else {"*"}
        origins = {origin.rstrip("/").lower() for origin in allowed_origins}
        return cls(frozenset(hosts), frozenset(origins))

    @classmethod
    def open(cls) -> OriginPolicy:
        """Any host, any origin (what an app built without a policy serves)."""
        return cls(frozenset({"*"}), frozenset({"*"}))

    def host_allowed(self, headers: Mapping[str, str]) -> bool:
        if "*" in self.allowed_hosts:
            return True
        host = headers.get("host")
        return host is not None and _hostname(host) in self.allowed_hosts

    def origin_allowed(self, headers: Mapping[str, str]) -> bool:
        origin = headers.get("origin")
        if origin is None or "*" in self.allowed_origins:
            return True
        origin = origin.rstrip("/").lower()
        if origin in self.allowed_origins:
            return True
        # The server's own page: the origin names the host the request was sent to.
        own = urlsplit(origin).netloc
        return bool(own) and own == headers.get("host", "").lower()

    @property
    def cors_origins(self) -> list[str]:
        return sorted(self.allowed_origins)
