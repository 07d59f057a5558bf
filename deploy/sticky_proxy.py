"""A tiny sticky TCP proxy: the stand-in for nginx's ``hash $remote_addr consistent`` where no container
runtime is at hand (``tests/test_deploy.py`` starts N real dashboard processes behind it).

    python deploy/sticky_proxy.py --listen 127.0.0.1:8080 --backend 127.0.0.1:8501 --backend 127.0.0.1:8502

Every connection from one client address goes to the same backend (CRC-32 of the address, modulo the
number of backends), so a browser's page, websocket, uploads and reconnects all reach the process that
holds its Streamlit session. Bytes are passed through untouched (HTTP and websocket alike).
"""

from __future__ import annotations

import argparse
import asyncio
import zlib


def pick(client_ip: str, backends: list[tuple[str, int]]) -> tuple[str, int]:
    """The backend for a client address: the same address always gets the same backend."""
    return backends[zlib.crc32(client_ip.encode()) % len(backends)]


class StickyProxy:
    def __init__(self, backends: list[tuple[str, int]]):
        if not backends:
            raise ValueError("give at least one backend")
        self.backends = backends
        self.routes: list[tuple[str, tuple[str, int]]] = []  # (client address, backend) per connection

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            try:
                writer.close()
            except Exception:  # noqa: BLE001 - already closed
                pass

    async def handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        ip = client_w.get_extra_info("peername")[0]
        host, port = pick(ip, self.backends)
        self.routes.append((ip, (host, port)))
        try:
            up_r, up_w = await asyncio.open_connection(host, port)
        except OSError:
            client_w.close()
            return
        await asyncio.gather(self._pipe(client_r, up_w), self._pipe(up_r, client_w))

    async def serve(self, host: str, port: int) -> asyncio.base_events.Server:
        return await asyncio.start_server(self.handle, host, port)


def _addr(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host or "127.0.0.1", int(port)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--listen", default="127.0.0.1:8080")
    ap.add_argument("--backend", action="append", required=True, help="host:port, repeat for each replica")
    a = ap.parse_args()
    proxy = StickyProxy([_addr(b) for b in a.backend])

    async def run() -> None:
        server = await proxy.serve(*_addr(a.listen))
        async with server:
            await server.serve_forever()

    asyncio.run(run())


if __name__ == "__main__":
    main()
