"""The blocking client: ``Guard`` (http.client, one connection per exchange,
so one Guard may be shared by threads)."""

from __future__ import annotations

import functools
import http.client
import inspect
import ssl
import time
from typing import Any, Awaitable, Callable, Dict, Mapping, Optional, Tuple, TypeVar, cast

from ._common import (
    MAX_ATTEMPTS, MAX_SERVER_WAIT, Denied, GuardError, GuardUnavailable, PendingTimeout, Verdict,
    Wait, check_args, decode, encode, error_of, go_duration, new_id, retry_after, retryable,
    seconds, seg, settings,
)

F = TypeVar("F", bound=Callable[..., Any])


def call_args(fn: Callable[..., Any], args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """The args of a guarded call: its arguments by parameter name, defaults
    filled in (what the function runs with is what the guard decides on)."""
    sig = inspect.signature(fn)
    bound = sig.bind(*args, **kwargs)
    bound.apply_defaults()
    out: Dict[str, Any] = {}
    for name, value in bound.arguments.items():
        kind = sig.parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            if value:
                raise TypeError(f"{fn.__name__}: a guarded function's *{name} cannot be args of a request; pass keywords")
        elif kind is inspect.Parameter.VAR_KEYWORD:
            out.update(value)
        else:
            out[name] = value
    return out


class Guard:
    """A client of the guard service for one agent (the token's).

    ``url`` and ``token`` default to ``$LINEAGE_SERVER`` and ``$LINEAGE_TOKEN``.
    ``timeout`` bounds every call (seconds, its retries included), on top of
    the ``wait`` a call asks for. ``agent`` is needed only with an admin's
    token; an agent's token names its agent (``GET /v1/whoami``).
    """

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None, *,
                 timeout: float = 30.0, agent: Optional[str] = None,
                 ssl_context: Optional[ssl.SSLContext] = None):
        self._url, self._token = settings(url, token)
        self.timeout = float(timeout)
        self._agent = agent
        self._ssl = ssl_context

    # -- the API ---------------------------------------------------------

    def whoami(self) -> Dict[str, Any]:
        """The caller's principal: ``{"name", "role", "agent"?}``."""
        return cast(Dict[str, Any], self._call("GET", "/v1/whoami", None, time.monotonic() + self.timeout))

    @property
    def agent(self) -> str:
        """The agent id, from the token (asked once)."""
        if self._agent is None:
            who = self.whoami()
            if not who.get("agent"):
                raise GuardError(0, "no_agent", f"the token is a {who.get('role')}'s, not an agent's: pass agent=")
            self._agent = str(who["agent"])
        return self._agent

    def request(self, tool: str, args: Optional[Mapping[str, Any]] = None, id: Optional[str] = None,
                wait: Wait = None) -> Verdict:
        """Decide one call: the verdict, whatever the decision. A pending one is
        waited for up to ``wait`` (longer than the service's 60 s is several
        waits in a row). ``id`` is the idempotency key; without one a fresh id
        is made, and kept across the retries of this call."""
        w = seconds(wait)
        rid = id if id is not None else new_id()
        body = {"id": rid, "tool": tool, "args": check_args(args)}
        start = time.monotonic()
        deadline = start + self.timeout + w
        base = f"/v1/agents/{seg(self.agent)}/requests"
        v = Verdict.from_json(self._call("POST", base, body, deadline))
        end = start + w
        while v.pending:
            rem = end - time.monotonic()
            if rem < 0.001:
                break
            q = "?wait=" + go_duration(min(rem, MAX_SERVER_WAIT))
            v = Verdict.from_json(self._call("GET", f"{base}/{seg(v.request_id)}{q}", None, deadline))
        return v

    def verdict(self, request_id: str, wait: Wait = None) -> Verdict:
        """A request's current verdict, a pending one waited for up to ``wait``."""
        w = seconds(wait)
        start = time.monotonic()
        deadline = start + self.timeout + w
        path = f"/v1/agents/{seg(self.agent)}/requests/{seg(request_id)}"
        v = Verdict.from_json(self._call("GET", path, None, deadline))
        while v.pending:
            rem = start + w - time.monotonic()
            if rem < 0.001:
                break
            q = "?wait=" + go_duration(min(rem, MAX_SERVER_WAIT))
            v = Verdict.from_json(self._call("GET", path + q, None, deadline))
        return v

    def authorize(self, tool: str, args: Optional[Mapping[str, Any]] = None, id: Optional[str] = None,
                  wait: Wait = None) -> Verdict:
        """The allow verdict, or raises ``Denied`` (a deny), ``PendingTimeout``
        (still pending after ``wait``), ``GuardUnavailable`` or ``GuardError``."""
        v = self.request(tool, args, id=id, wait=wait)
        if v.allowed:
            return v
        if v.pending:
            raise PendingTimeout(tool, v)
        raise Denied(tool, v)

    def state(self) -> Dict[str, Any]:
        """The agent's folded state (budget, spent, remaining, scars, calls, …)."""
        return cast(Dict[str, Any], self._call("GET", f"/v1/agents/{seg(self.agent)}", None,
                                               time.monotonic() + self.timeout))

    def guarded(self, tool: str, *, wait: Wait = None) -> Callable[[F], F]:
        """A decorator: every call of the function is first a request of
        ``tool`` whose args are the call's arguments by name; it runs only when
        allowed, and raises ``Denied``, ``PendingTimeout`` or
        ``GuardUnavailable`` otherwise. Works on ``async def`` functions too
        (the guard's exchange then blocks the event loop: use ``AsyncGuard``
        in async code)."""

        def decorate(fn: F) -> F:
            if inspect.iscoroutinefunction(fn):
                @functools.wraps(fn)
                async def run_async(*a: Any, **kw: Any) -> Any:
                    self.authorize(tool, call_args(fn, a, kw), wait=wait)
                    return await cast(Callable[..., Awaitable[Any]], fn)(*a, **kw)
                return cast(F, run_async)

            @functools.wraps(fn)
            def run(*a: Any, **kw: Any) -> Any:
                self.authorize(tool, call_args(fn, a, kw), wait=wait)
                return fn(*a, **kw)
            return cast(F, run)
        return decorate

    # -- HTTP ------------------------------------------------------------

    def _call(self, method: str, path: str, body: Any, deadline: float) -> Any:
        """One logical exchange, tried again after connection errors, 503s and
        429s (every call here is idempotent: requests carry their id) until
        MAX_ATTEMPTS or the deadline."""
        payload = encode(body) if body is not None else None
        headers = {"Authorization": "Bearer " + self._token, "Accept": "application/json"}
        if payload is not None:
            headers["Content-Type"] = "application/json"
        last: GuardError = GuardUnavailable(0, "unavailable", "no attempt")
        for attempt in range(MAX_ATTEMPTS):
            rem = deadline - time.monotonic()
            if rem <= 0:
                break
            pause = retry_after({}, attempt)
            try:
                status, hdrs, data = self._exchange(method, path, payload, headers, rem)
            except (OSError, http.client.HTTPException) as e:
                last = GuardUnavailable(0, "unavailable", f"{method} {self._url.geturl()}{path.split('?')[0]}: {e}")
            else:
                if 200 <= status < 300:
                    return decode(status, data)
                last = error_of(status, data)
                if not retryable(status):
                    raise last
                pause = retry_after(hdrs, attempt)
            if attempt + 1 < MAX_ATTEMPTS:
                time.sleep(max(min(pause, deadline - time.monotonic()), 0))
        if time.monotonic() >= deadline and not isinstance(last, GuardUnavailable):
            last = GuardUnavailable(0, "deadline", f"{method} {path}: no answer within the deadline")
        raise last

    def _exchange(self, method: str, path: str, payload: Optional[bytes], headers: Dict[str, str],
                  timeout: float) -> Tuple[int, Dict[str, str], bytes]:
        u = self._url
        conn: http.client.HTTPConnection
        if u.scheme == "https":
            conn = http.client.HTTPSConnection(u.hostname or "", u.port, timeout=timeout,
                                               context=self._ssl or ssl.create_default_context())
        else:
            conn = http.client.HTTPConnection(u.hostname or "", u.port, timeout=timeout)
        try:
            conn.request(method, u.path + path, body=payload, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            hdrs = {k.lower(): v for k, v in resp.getheaders()}
            return resp.status, hdrs, data
        finally:
            conn.close()


__all__ = ["Guard", "Verdict", "Denied", "PendingTimeout", "GuardUnavailable", "GuardError"]
