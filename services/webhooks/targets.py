"""Where a webhook may be sent: the URL rule and the address rule, checked twice.

A webhook URL is the tenant's and hostile until proven otherwise: it could name the
platform's own internal addresses (the API's or Postgres's loopback ports, the cloud
metadata address 169.254.169.254, a private network) and make the delivery service a
proxy into them (SSRF). So:

- :func:`url_problem`: http or https, a host, no credentials in it, at most
  :data:`MAX_URL_CHARS` printable ASCII characters;
- :func:`address_problem`: only public (globally routable) unicast addresses, IPv4
  inside IPv6 (``::ffff:a.b.c.d``, NAT64) judged as the IPv4 it carries; loopback only
  when the operator allows it (``GRIDLEDGER_WEBHOOKS_ALLOW_LOOPBACK``, local use and tests);
- when a subscription is added, :func:`target_problem` resolves the host and refuses it
  when any address it resolves to is refused; at every delivery :class:`GuardedResolver`
  (the HTTP client's resolver) and :func:`literal_problem` check the addresses the request
  really connects to, so a name that later resolves elsewhere (DNS rebinding) is refused
  at that delivery, named in its log.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import socket

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver
from yarl import URL

MAX_URL_CHARS = 2048
RESOLVE_TIMEOUT_S = 5.0
_NAT64 = ipaddress.ip_network("64:ff9b::/96")

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def url_problem(text: str) -> str | None:
    """Why ``text`` is not an acceptable webhook URL (None: it is); addresses aside."""
    if not 0 < len(text) <= MAX_URL_CHARS:
        return f"is {len(text)} characters; a webhook URL is 1 to {MAX_URL_CHARS}"
    if not text.isascii() or not text.isprintable():
        return "holds a non-printable or non-ASCII character (percent-encode it)"
    try:
        url = URL(text)
    except ValueError as exc:
        return f"does not parse as a URL ({exc})"
    if url.scheme not in ("http", "https"):
        return f"has scheme {url.scheme!r}; a webhook URL is http:// or https://"
    if not url.host:
        return "has no host"
    if url.user is not None or url.password is not None:
        return "holds credentials (user:password@); authenticate the sender by the signature"
    return None


def address_problem(address: Address, allow_loopback: bool) -> str | None:
    """Why a delivery may not connect to ``address`` (None: it may)."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        elif address in _NAT64:
            address = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address.is_loopback:
        if allow_loopback:
            return None
        return f"{address} is a loopback address (this installation's own services)"
    if address.is_multicast or not address.is_global:
        return f"{address} is not a public address (private, link-local, reserved or metadata)"
    return None


def _literal(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def literal_problem(url: str, allow_loopback: bool) -> str | None:
    """The address rule for a URL whose host is an IP literal (the HTTP client does not
    resolve those, so :class:`GuardedResolver` never sees them)."""
    host = URL(url).host or ""
    address = _literal(host)
    return None if address is None else address_problem(address, allow_loopback)


async def target_problem(url: str, allow_loopback: bool) -> str | None:
    """The URL rule, then the address rule for every address the host resolves to now."""
    problem = url_problem(url)
    if problem:
        return problem
    host = URL(url).host or ""
    if _literal(host) is not None:
        return literal_problem(url, allow_loopback)
    loop = asyncio.get_running_loop()
    try:
        infos = await asyncio.wait_for(
            loop.getaddrinfo(host, None, type=socket.SOCK_STREAM), RESOLVE_TIMEOUT_S
        )
    except (OSError, TimeoutError) as exc:
        return f"host {host!r} does not resolve ({exc or 'timed out'})"
    for info in infos:
        refused = address_problem(ipaddress.ip_address(info[4][0]), allow_loopback)
        if refused:
            return f"host {host!r} resolves to {refused}"
    return None


class RefusedAddressError(OSError):
    """Every address a webhook's host resolved to is refused by the address rule."""


class GuardedResolver(AbstractResolver):
    """The delivery client's resolver: the default one, keeping only allowed addresses."""

    def __init__(self, allow_loopback: bool) -> None:
        self.allow_loopback = allow_loopback
        self._inner = DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        """The host's addresses the address rule allows; RefusedAddressError if none."""
        found = await self._inner.resolve(host, port, family)
        kept: list[ResolveResult] = []
        refused: list[str] = []
        for result in found:
            problem = address_problem(ipaddress.ip_address(result["host"]), self.allow_loopback)
            if problem:
                refused.append(problem)
            else:
                kept.append(result)
        if not kept:
            # errno and text: the HTTP client quotes the text in the error it raises.
            raise RefusedAddressError(
                errno.EACCES, f"host {host!r} resolves to {refused[0]}: not delivered"
            )
        return kept

    async def close(self) -> None:
        """Close the inner resolver."""
        await self._inner.close()
