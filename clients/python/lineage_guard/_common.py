"""What the sync and the async client share: verdicts, errors, durations,
request ids, and how one HTTP answer is read. No I/O here."""

from __future__ import annotations

import json
import os
import re
import secrets
import urllib.parse
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Dict, Mapping, Optional, Tuple, Union

#: What ``wait=`` accepts: seconds as a number, a ``timedelta``, or a Go-style
#: duration string such as ``"30s"``, ``"1m30s"`` or ``"500ms"``.
Wait = Union[None, int, float, str, timedelta]

#: The longest ``?wait=`` the service holds a request (docs/service.md,
#: "Waiting for an approval"); a longer wait is several of them in a row.
MAX_SERVER_WAIT = 60.0

#: How many times one logical call is sent at most (the first try included)
#: after connection errors, 503s and 429s.
MAX_ATTEMPTS = 6

_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(h|ms|us|µs|ns|m|s)")
_UNIT = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def seconds(wait: Wait) -> float:
    """The number of seconds a ``wait=`` stands for (0 for None)."""
    if wait is None:
        return 0.0
    if isinstance(wait, bool):
        raise TypeError("wait must be a duration, not a bool")
    if isinstance(wait, timedelta):
        s = wait.total_seconds()
    elif isinstance(wait, (int, float)):
        s = float(wait)
    elif isinstance(wait, str):
        text = wait.strip()
        if text in ("0", ""):
            return 0.0
        pos, s = 0, 0.0
        for m in _DURATION.finditer(text):
            if m.start() != pos:
                break
            s += float(m.group(1)) * _UNIT[m.group(2)]
            pos = m.end()
        if pos != len(text) or pos == 0:
            raise ValueError(f"wait={wait!r}: a duration such as '30s', '2m' or '1m30s'")
    else:
        raise TypeError(f"wait must be seconds, a timedelta or a string such as '30s', not {type(wait).__name__}")
    if s < 0:
        raise ValueError(f"wait={wait!r}: a duration cannot be negative")
    return s


def go_duration(s: float) -> str:
    """A wait in the form the service parses (whole milliseconds)."""
    return f"{max(int(s * 1000), 0)}ms"


def new_id() -> str:
    """A fresh request id for one logical call (it is kept across its retries)."""
    return "py-" + secrets.token_hex(12)


@dataclass(frozen=True)
class Verdict:
    """The service's answer on one request (a denial is data, not an error)."""

    decision: str  # "allow" | "deny" | "pending"
    reason: str
    cost: int
    scar: Optional[Dict[str, Any]]  # {"severity", "weight"} or None
    terminated: Optional[str]  # None | "budget_exhausted" | "scar_limit_reached" | …
    request_id: str
    seq: int
    raw: Dict[str, Any]  # the verdict exactly as the service sent it

    @property
    def allowed(self) -> bool:
        return self.decision == "allow"

    @property
    def pending(self) -> bool:
        return self.decision == "pending"

    @property
    def denied(self) -> bool:
        return self.decision == "deny"

    @classmethod
    def from_json(cls, raw: Dict[str, Any]) -> "Verdict":
        if not isinstance(raw, dict) or raw.get("decision") not in ("allow", "deny", "pending"):
            raise GuardError(0, "bad_answer", f"the service's answer is not a verdict: {raw!r}")
        return cls(
            decision=raw["decision"],
            reason=str(raw.get("reason", "")),
            cost=int(raw.get("cost") or 0),
            scar=raw.get("scar"),
            terminated=raw.get("terminated"),
            request_id=str(raw.get("request_id", "")),
            seq=int(raw.get("seq") or 0),
            raw=raw,
        )

    def text(self, tool: str) -> str:
        """One sentence a model can act on."""
        if self.allowed:
            return f"lineage allowed the call to {tool!r} (cost {self.cost})."
        if self.pending:
            return (f"The call to {tool!r} waits for a person's approval (request {self.request_id}); "
                    "nothing has been done yet.")
        scar = f"a {self.scar['severity']} scar" if self.scar else "no scar"
        end = (f"; the agent is now terminated ({self.terminated})" if self.terminated else "")
        return f"lineage denied the call to {tool!r} (reason: {self.reason}); {scar}{end}."


class GuardError(Exception):
    """The service answered with an error (``status``, ``code``, ``message``), or
    its answer could not be read. Nothing was decided."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(f"{code}: {message}" if status == 0 else f"HTTP {status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message


class GuardUnavailable(GuardError):
    """The service could not be reached or could not decide (connection errors,
    503, 429 past the retries, a deadline): fail closed, the call is not made."""


class Denied(Exception):
    """``authorize`` got a deny verdict (``.verdict``)."""

    def __init__(self, tool: str, verdict: Verdict):
        super().__init__(verdict.text(tool))
        self.tool = tool
        self.verdict = verdict


class PendingTimeout(Exception):
    """``authorize`` waited and the request is still pending (``.request_id``);
    the same id later continues it."""

    def __init__(self, tool: str, verdict: Verdict):
        super().__init__(verdict.text(tool))
        self.tool = tool
        self.verdict = verdict
        self.request_id = verdict.request_id


def settings(url: Optional[str], token: Optional[str]) -> Tuple[urllib.parse.SplitResult, str]:
    """The service URL and token, from the arguments or the environment."""
    u = url if url is not None else os.environ.get("LINEAGE_SERVER", "")
    t = token if token is not None else os.environ.get("LINEAGE_TOKEN", "")
    if not u:
        raise ValueError("no guard service: pass url= or set $LINEAGE_SERVER")
    if not t:
        raise ValueError("no token: pass token= or set $LINEAGE_TOKEN")
    parts = urllib.parse.urlsplit(u.rstrip("/"))
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"url={u!r}: an http:// or https:// URL")
    return parts, t


def seg(s: str) -> str:
    """One path segment, escaped."""
    return urllib.parse.quote(s, safe="")


def encode(body: Any) -> bytes:
    # allow_nan=False: NaN and infinities are not JSON; the service would refuse them.
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


def retry_after(headers: Mapping[str, str], attempt: int) -> float:
    """How long to wait before the next try: Retry-After when the service says,
    else an exponential backoff (0.1 s, 0.2 s, … at most 2 s)."""
    ra = headers.get("retry-after")
    if ra:
        try:
            return min(max(float(ra), 0.0), 30.0)
        except ValueError:
            pass
    return min(0.1 * float(2 ** attempt), 2.0)


def retryable(status: int) -> bool:
    # 503: unavailable, unknown_outcome (retrying with the same id resolves it),
    # clock_unsynced; 429: the agent's request quota.
    return status in (429, 503)


def error_of(status: int, body: bytes) -> GuardError:
    code, message = "", ""
    try:
        doc = json.loads(body)
        if isinstance(doc, dict):
            code, message = str(doc.get("code", "")), str(doc.get("message", ""))
    except ValueError:
        pass
    if not code:
        code, message = f"http_{status}", body[:200].decode("utf-8", "replace").strip()
    if status in (429,) or status >= 500:
        return GuardUnavailable(status, code, message)
    return GuardError(status, code, message)


def decode(status: int, body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError as e:
        raise GuardError(status, "bad_answer", f"the service's answer is not JSON: {e}") from None


def check_args(args: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    if args is None:
        return {}
    if not isinstance(args, Mapping):
        raise TypeError(f"args must be a mapping (a JSON object), not {type(args).__name__}")
    return dict(args)
