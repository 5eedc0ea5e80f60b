"""A network namespace of the run's own, to cut one agent off from the broker.

The agent runs inside the namespace (``ip netns exec``); a veth pair links it to
the host. The broker advertises ``127.0.0.1:<port>``, which inside the
namespace is the namespace's own loopback, so two TCP forwarders carry the
agent's connections: one inside the namespace (``127.0.0.1:<port>`` ->
the host end of the veth) and one on the host (the host end -> the real
``127.0.0.1:<port>``). The Docker socket is a file and needs no network. A
partition is the host end of the veth taken down: packets are dropped, not
refused, exactly as when a link fails; healing is setting it up again.

``python -m services.chaos.netns forward LISTEN TARGET`` is the forwarder.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from dataclasses import dataclass


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def serve_forward(listen: tuple[str, int], target: tuple[str, int]) -> asyncio.Server:
    """Accept on ``listen`` and relay each connection to ``target``, both ways."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*target)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    return await asyncio.start_server(handle, *listen)


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


@dataclass
class Namespace:
    """``ip netns`` plumbing for one run: create, partition, heal, delete."""

    tag: str
    subnet: int
    """Third octet of 10.231.<subnet>.0/30."""

    @property
    def name(self) -> str:
        """The namespace's name."""
        return f"gl{self.tag}"

    @property
    def host_if(self) -> str:
        """The host end of the veth pair."""
        return f"glh{self.tag}"

    @property
    def ns_if(self) -> str:
        """The namespace's end of the veth pair."""
        return f"gln{self.tag}"

    @property
    def host_ip(self) -> str:
        """The host's address on the pair."""
        return f"10.231.{self.subnet}.1"

    @property
    def ns_ip(self) -> str:
        """The namespace's address on the pair."""
        return f"10.231.{self.subnet}.2"

    def create(self) -> None:
        """Create the namespace and its veth pair, addressed and up."""
        for args in (
            ["ip", "netns", "add", self.name],
            ["ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if],
            ["ip", "link", "set", self.ns_if, "netns", self.name],
            ["ip", "addr", "add", f"{self.host_ip}/30", "dev", self.host_if],
            ["ip", "link", "set", self.host_if, "up"],
            *(
                ["ip", "netns", "exec", self.name, *cmd]
                for cmd in (
                    ["ip", "link", "set", "lo", "up"],
                    ["ip", "addr", "add", f"{self.ns_ip}/30", "dev", self.ns_if],
                    ["ip", "link", "set", self.ns_if, "up"],
                )
            ),
        ):
            subprocess.run(args, check=True, capture_output=True, text=True)

    def wrapper(self) -> list[str]:
        """Prefix that runs a command inside the namespace."""
        return ["ip", "netns", "exec", self.name]

    def partition(self) -> None:
        """Take the host end down: the namespace is cut off, its sockets kept."""
        subprocess.run(["ip", "link", "set", self.host_if, "down"], check=True)

    def heal(self) -> None:
        """Bring the host end up again."""
        subprocess.run(["ip", "link", "set", self.host_if, "up"], check=True)

    def delete(self) -> None:
        """Remove the pair and the namespace; what is already gone is fine."""
        subprocess.run(["ip", "link", "del", self.host_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)


def available() -> str | None:
    """Why a namespace cannot be made here, or None when it can (tried for real)."""
    probe = Namespace("probe0", 250)
    try:
        probe.create()
    except (subprocess.CalledProcessError, FileNotFoundError) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        return f"`ip netns`/veth not possible here: {detail.strip()}"
    finally:
        probe.delete()
    return None


def main(argv: list[str]) -> int:
    """``python -m services.chaos.netns forward LISTEN TARGET``: a TCP forwarder run inside a
    namespace."""
    if len(argv) != 3 or argv[0] != "forward":
        print("usage: python -m services.chaos.netns forward LISTEN_HOST:PORT TARGET_HOST:PORT")
        return 2

    async def run() -> None:
        server = await serve_forward(_address(argv[1]), _address(argv[2]))
        async with server:
            await server.serve_forever()

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
