"""A loopback TCP proxy that passes, delays or drops traffic (a dependency that is slow or down).

It runs its own event loop in a thread, so it works under any test loop:

    proxy = TcpProxy(target_port).start()
    proxy.mode = "delay"   # every chunk waits `delay` seconds each way
    proxy.mode = "drop"    # open connections are cut, new ones closed at once
    proxy.mode = "pass"
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Literal

Mode = Literal["pass", "delay", "drop"]


class TcpProxy:
    def __init__(self, target_port: int, *, delay: float = 5.0) -> None:
        self.target_port = target_port
        self.delay = delay
        self._mode: Mode = "pass"
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._writers: set[asyncio.StreamWriter] = set()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._server: asyncio.AbstractServer | None = None

    @property
    def mode(self) -> Mode:
        return self._mode

    @mode.setter
    def mode(self, mode: Mode) -> None:
        self._mode = mode
        if mode == "drop":
            asyncio.run_coroutine_threadsafe(self._cut(), self._loop).result(5)

    def start(self) -> TcpProxy:
        self._thread.start()
        self._ready.wait(5)
        return self

    def stop(self) -> None:
        async def close() -> None:
            await self._cut()
            if self._server is not None:
                self._server.close()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    @property
    def url_host_port(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def serve() -> None:
            self._server = await asyncio.start_server(self._client, "127.0.0.1", 0)
            self.port = self._server.sockets[0].getsockname()[1]
            self._ready.set()

        self._loop.run_until_complete(serve())
        self._loop.run_forever()

    async def _cut(self) -> None:
        for writer in list(self._writers):
            with contextlib.suppress(Exception):
                writer.transport.abort()
        self._writers.clear()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._mode == "drop":
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True)
        for w in (writer, up_writer):
            self._writers.discard(w)
            with contextlib.suppress(Exception):
                w.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            if self._mode == "delay":
                await asyncio.sleep(self.delay)
            if self._mode == "drop":
                writer.transport.abort()
                return
            writer.write(data)
            await writer.drain()
        with contextlib.suppress(Exception):
            writer.write_eof()
