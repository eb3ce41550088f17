"""Which MCP server URLs a session may make the server connect to.

A client names the MCP server URL, and the server connects to it: without a rule, any
client could make the server reach the operator's internal network (a metadata service at
169.254.169.254, an admin port on localhost). So, with no ``mcp.allowed_urls``, a URL is
reached only when every address its host resolves to is public; an operator who runs MCP
servers inside the network lists them as URL prefixes, which may then be private or
loopback. Prefixes are compared on the normalised URL (scheme and host lower-cased, the
port explicit, the path starting with ``/``), and a prefix's path matches whole path
segments, so ``http://127.0.0.1:8123/`` admits neither ``http://127.0.0.1:81234/`` nor
``http://127.0.0.1:8123.evil.com/``.

The check resolves the host once; the connection resolves it again, so a name whose
records change in between (DNS rebinding) is not caught here.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

_DEFAULT_PORTS = {"http": 80, "https": 443}


_PRIVATE = (
    "the MCP server URL's host is a private, loopback or reserved address; "
    "the server's operator must list it in mcp.allowed_urls"
)


class McpUrlRefused(Exception):
    """A session named an MCP server URL this deployment does not reach."""


@dataclass(frozen=True, slots=True)
class NormalisedUrl:
    scheme: str
    host: str  # lower-case, no trailing dot, IPv6 without brackets
    port: int
    path: str  # starts with "/"

    @property
    def origin(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    def within(self, prefix: NormalisedUrl) -> bool:
        if (self.scheme, self.host, self.port) != (prefix.scheme, prefix.host, prefix.port):
            return False
        if self.path == prefix.path or prefix.path.endswith("/"):
            return self.path.startswith(prefix.path)
        return self.path.startswith(prefix.path + "/")


def normalise_url(url: str) -> NormalisedUrl:
    """The parts of ``url`` the policy compares; ``McpUrlRefused`` if it is not one it reads."""
    if not isinstance(url, str):
        raise McpUrlRefused("the MCP server URL must be a string")
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        raise McpUrlRefused("the MCP server URL is not a valid URL") from None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise McpUrlRefused("the MCP server URL must be http:// or https://")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise McpUrlRefused("the MCP server URL has no host")
    path = parts.path or "/"
    # ".." would let a URL under an allowed prefix reach a path outside it once the
    # server at the other end resolves it; no MCP endpoint needs one.
    if any(segment in (".", "..") for segment in unquote(path).split("/")):
        raise McpUrlRefused("the MCP server URL's path may not contain . or .. segments")
    return NormalisedUrl(scheme, host, port or _DEFAULT_PORTS[scheme], path)


def _refused_address(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return (
        address.is_private
        or address.is_loopback
        or address.is_link_local
        or address.is_multicast
        or address.is_reserved
        or address.is_unspecified
        or not address.is_global
    )


class McpUrlPolicy:
    """Refuses the MCP server URLs this deployment does not reach (see the module docstring)."""

    def __init__(self, allowed_urls: Iterable[str] = ()) -> None:
        self._prefixes = tuple(normalise_url(url) for url in allowed_urls)

    def check_form(self, url: str) -> NormalisedUrl:
        """What can be refused without resolving the host (the URL's form, the prefixes,
        an address or ``localhost`` written in it): ``session.update`` refuses it at once."""
        target = normalise_url(url)
        if self._prefixes:
            if not any(target.within(prefix) for prefix in self._prefixes):
                raise McpUrlRefused("the MCP server URL is not in this server's mcp.allowed_urls")
            return target
        try:
            literal = ipaddress.ip_address(target.host)
        except ValueError:
            literal = None
        if target.host == "localhost" or target.host.endswith(".localhost"):
            literal = ipaddress.ip_address("127.0.0.1")
        if literal is not None and _refused_address(literal):
            raise McpUrlRefused(_PRIVATE)
        return target

    async def check(self, url: str) -> None:
        target = self.check_form(url)
        if self._prefixes:
            return
        for address in await self._addresses(target):
            if _refused_address(address):
                raise McpUrlRefused(_PRIVATE)

    @staticmethod
    async def _addresses(
        target: NormalisedUrl,
    ) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
        try:
            return [ipaddress.ip_address(target.host)]
        except ValueError:
            pass
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                target.host, target.port, type=socket.SOCK_STREAM
            )
        except (OSError, UnicodeError):
            raise McpUrlRefused(
                f"the MCP server host {target.host!r} could not be resolved"
            ) from None
        if not infos:
            raise McpUrlRefused(f"the MCP server host {target.host!r} could not be resolved")
        # An IPv6 scope ("fe80::1%eth0") is not part of the address.
        return [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]
