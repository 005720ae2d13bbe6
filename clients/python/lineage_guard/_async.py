"""The asyncio client: ``AsyncGuard``. HTTP/1.1 over asyncio streams, one
connection per exchange (``Connection: close``): no thread is ever started,
so none can be left behind, and cancelling a task closes its socket."""

from __future__ import annotations

import asyncio
import functools
import inspect
import ssl
import time
from typing import Any, Awaitable, Callable, Dict, List, Mapping, Optional, Tuple, TypeVar, cast

from ._common import (
    MAX_ATTEMPTS, MAX_SERVER_WAIT, Denied, GuardError, GuardUnavailable, PendingTimeout, Verdict,
    Wait, check_args, decode, encode, error_of, go_duration, new_id, retry_after, retryable,
    seconds, seg, settings,
)
from ._sync import call_args

F = TypeVar("F", bound=Callable[..., Any])

#: The most a header block or a body may hold (the service's verdicts are small).
MAX_ANSWER = 16 << 20


class AsyncGuard:
    """``Guard`` with ``async def`` methods, for asyncio agents."""

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None, *,
                 timeout: float = 30.0, agent: Optional[str] = None,
                 ssl_context: Optional[ssl.SSLContext] = None):
        self._url, self._token = settings(url, token)
        self.timeout = float(timeout)
        self._agent = agent
        self._ssl = ssl_context
        self._agent_lock: Optional[asyncio.Lock] = None

    async def whoami(self) -> Dict[str, Any]:
        return cast(Dict[str, Any], await self._call("GET", "/v1/whoami", None, time.monotonic() + self.timeout))

    async def agent(self) -> str:
        """The agent id, from the token (asked once)."""
        if self._agent is None:
            if self._agent_lock is None:
                self._agent_lock = asyncio.Lock()
            async with self._agent_lock:
                if self._agent is None:
                    who = await self.whoami()
                    if not who.get("agent"):
                        raise GuardError(0, "no_agent", f"the token is a {who.get('role')}'s, not an agent's: pass agent=")
                    self._agent = str(who["agent"])
        return self._agent

    async def request(self, tool: str, args: Optional[Mapping[str, Any]] = None, id: Optional[str] = None,
                      wait: Wait = None) -> Verdict:
        """As ``Guard.request``."""
        w = seconds(wait)
        rid = id if id is not None else new_id()
        body = {"id": rid, "tool": tool, "args": check_args(args)}
        start = time.monotonic()
        deadline = start + self.timeout + w
        base = f"/v1/agents/{seg(await self.agent())}/requests"
        v = Verdict.from_json(await self._call("POST", base, body, deadline))
        while v.pending:
            rem = start + w - time.monotonic()
            if rem < 0.001:
                break
            q = "?wait=" + go_duration(min(rem, MAX_SERVER_WAIT))
            v = Verdict.from_json(await self._call("GET", f"{base}/{seg(v.request_id)}{q}", None, deadline))
        return v

    async def verdict(self, request_id: str, wait: Wait = None) -> Verdict:
        """As ``Guard.verdict``."""
        w = seconds(wait)
        start = time.monotonic()
        deadline = start + self.timeout + w
        path = f"/v1/agents/{seg(await self.agent())}/requests/{seg(request_id)}"
        v = Verdict.from_json(await self._call("GET", path, None, deadline))
        while v.pending:
            rem = start + w - time.monotonic()
            if rem < 0.001:
                break
            q = "?wait=" + go_duration(min(rem, MAX_SERVER_WAIT))
            v = Verdict.from_json(await self._call("GET", path + q, None, deadline))
        return v

    async def authorize(self, tool: str, args: Optional[Mapping[str, Any]] = None, id: Optional[str] = None,
                        wait: Wait = None) -> Verdict:
        """As ``Guard.authorize``."""
        v = await self.request(tool, args, id=id, wait=wait)
        if v.allowed:
            return v
        if v.pending:
            raise PendingTimeout(tool, v)
        raise Denied(tool, v)

    async def state(self) -> Dict[str, Any]:
        path = f"/v1/agents/{seg(await self.agent())}"
        return cast(Dict[str, Any], await self._call("GET", path, None, time.monotonic() + self.timeout))

    def guarded(self, tool: str, *, wait: Wait = None) -> Callable[[F], Callable[..., Awaitable[Any]]]:
        """As ``Guard.guarded``; the decorated function is a coroutine function
        (a plain function runs, after the guard allowed it, inside it)."""

        def decorate(fn: F) -> Callable[..., Awaitable[Any]]:
            is_async = inspect.iscoroutinefunction(fn)

            @functools.wraps(fn)
            async def run(*a: Any, **kw: Any) -> Any:
                await self.authorize(tool, call_args(fn, a, kw), wait=wait)
                if is_async:
                    return await fn(*a, **kw)
                return fn(*a, **kw)
            return run
        return decorate

    # -- HTTP ------------------------------------------------------------

    async def _call(self, method: str, path: str, body: Any, deadline: float) -> Any:
        payload = encode(body) if body is not None else b""
        last: GuardError = GuardUnavailable(0, "unavailable", "no attempt")
        for attempt in range(MAX_ATTEMPTS):
            rem = deadline - time.monotonic()
            if rem <= 0:
                break
            pause = retry_after({}, attempt)
            try:
                status, hdrs, data = await asyncio.wait_for(
                    self._exchange(method, path, payload, body is not None), rem)
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                    ValueError) as e:
                last = GuardUnavailable(0, "unavailable",
                                        f"{method} {self._url.geturl()}{path.split('?')[0]}: {e or type(e).__name__}")
            else:
                if 200 <= status < 300:
                    return decode(status, data)
                last = error_of(status, data)
                if not retryable(status):
                    raise last
                pause = retry_after(hdrs, attempt)
            if attempt + 1 < MAX_ATTEMPTS:
                await asyncio.sleep(max(min(pause, deadline - time.monotonic()), 0))
        raise last

    async def _exchange(self, method: str, path: str, payload: bytes, has_body: bool) -> Tuple[int, Dict[str, str], bytes]:
        u = self._url
        tls = u.scheme == "https"
        port = u.port or (443 if tls else 80)
        ctx = (self._ssl or ssl.create_default_context()) if tls else None
        reader, writer = await asyncio.open_connection(u.hostname, port, ssl=ctx, limit=1 << 16)
        try:
            host = u.netloc.rsplit("@", 1)[-1]
            lines = [f"{method} {u.path}{path} HTTP/1.1", f"Host: {host}", "Connection: close",
                     "Accept: application/json", "Authorization: Bearer " + self._token]
            if has_body:
                lines += ["Content-Type: application/json", f"Content-Length: {len(payload)}"]
            writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + payload)
            await writer.drain()
            status_line = await reader.readline()
            parts = status_line.decode("latin-1").split(" ", 2)
            if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
                raise ValueError(f"not an HTTP answer: {status_line[:80]!r}")
            status = int(parts[1])
            headers: Dict[str, str] = {}
            size = 0
            while True:
                line = await reader.readline()
                size += len(line)
                if size > MAX_ANSWER:
                    raise ValueError("the answer's headers are too large")
                if line in (b"\r\n", b"\n", b""):
                    break
                k, _, v = line.decode("latin-1").partition(":")
                headers[k.strip().lower()] = v.strip()
            if headers.get("transfer-encoding", "").lower() == "chunked":
                chunks = []
                total = 0
                while True:
                    n = int((await reader.readline()).split(b";")[0].strip(), 16)
                    if n == 0:
                        break
                    total += n
                    if total > MAX_ANSWER:
                        raise ValueError("the answer is too large")
                    chunks.append(await reader.readexactly(n))
                    await reader.readexactly(2)
                data = b"".join(chunks)
            elif "content-length" in headers:
                n = int(headers["content-length"])
                if n > MAX_ANSWER:
                    raise ValueError("the answer is too large")
                data = await reader.readexactly(n)
            else:  # the body runs to the end of the connection
                rest: List[bytes] = []
                total = 0
                while chunk := await reader.read(1 << 16):
                    total += len(chunk)
                    if total > MAX_ANSWER:
                        raise ValueError("the answer is too large")
                    rest.append(chunk)
                data = b"".join(rest)
            return status, headers, data
        finally:
            writer.close()
            try:
                await writer.wait_closed()
            except OSError:
                pass


__all__ = ["AsyncGuard"]
