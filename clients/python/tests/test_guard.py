"""Tests of lineage_guard against a real guard service.

clients/python/python_test.go starts the service (`go test ./clients/python`)
and runs these with LINEAGE_TEST_SERVER, LINEAGE_TEST_ADMIN_TOKEN and
LINEAGE_TEST_APPROVER_TOKEN set. The stub tests (429, 503 unknown_outcome)
run a tiny local HTTP server of their own, for what the real one cannot be
made to answer yet.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request
from typing import Any, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)
sys.path.insert(0, PKG)

import lineage_guard  # noqa: E402
from lineage_guard import (  # noqa: E402
    AsyncGuard, Denied, Guard, GuardError, GuardUnavailable, PendingTimeout, Verdict,
)

SERVER = os.environ.get("LINEAGE_TEST_SERVER", "")
ADMIN = os.environ.get("LINEAGE_TEST_ADMIN_TOKEN", "")
APPROVER = os.environ.get("LINEAGE_TEST_APPROVER_TOKEN", "")
need_server = unittest.skipUnless(SERVER, "no guard service: run these with `go test ./clients/python`")


def api(method: str, path: str, token: str, body: Any = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(SERVER + path, data=data, method=method,
                                 headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as e:
        raise AssertionError(f"{method} {path}: HTTP {e.code}: {e.read().decode()}") from None


def agent(policy: Dict[str, Any]) -> Tuple[str, str]:
    """A new agent under policy: (id, token)."""
    created = api("POST", "/v1/agents", ADMIN, {"policy": policy, "name": "py-test"})
    return created["agent"], created["token"]


def guard(policy: Dict[str, Any], **kw: Any) -> Guard:
    _, token = agent(policy)
    return Guard(SERVER, token, **kw)


def approve(agent_id: str, request_id: str) -> Dict[str, Any]:
    return api("POST", f"/v1/agents/{agent_id}/requests/{request_id}/approve", APPROVER)  # type: ignore[no-any-return]


def reject(agent_id: str, request_id: str) -> Dict[str, Any]:
    return api("POST", f"/v1/agents/{agent_id}/requests/{request_id}/reject", APPROVER)  # type: ignore[no-any-return]


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@need_server
class RealServiceTest(unittest.TestCase):
    def test_allow(self) -> None:
        g = guard({"budget": 10, "tools": {"search": {"cost": 3}}})
        v = g.request("search", {"q": "lineage"})
        self.assertIsInstance(v, Verdict)
        self.assertEqual((v.decision, v.reason, v.cost, v.scar, v.terminated), ("allow", "ok", 3, None, None))
        self.assertTrue(v.allowed and not v.denied and not v.pending)
        self.assertEqual(v.raw["decision"], "allow")
        self.assertTrue(v.request_id.startswith("py-"), v.request_id)  # every call has an id of its own
        self.assertEqual(g.authorize("search", {"q": "x"}).decision, "allow")
        st = g.state()
        self.assertEqual((st["spent"], st["remaining"]), (6, 4))
        self.assertEqual(g.whoami()["role"], "agent")

    def test_every_deny_reason(self) -> None:
        """Each reason of the decision order the client surfaces, with its scar,
        as a verdict from request() and as Denied from authorize()."""
        ext = ('package lineage.ext.files\n'
               'deny contains {"reason": "secret_path", "scar": "severe"} if { startswith(input.request.args.path, "/etc") }\n'
               'deny contains {"reason": "x"} if { to_number(input.request.args.n) > 1 }\n')
        cases: List[Tuple[str, Dict[str, Any], List[Tuple[str, Dict[str, Any]]], Optional[str]]] = [
            ("unlisted_tool", {"budget": 10, "tools": {}}, [("nope", {})], "moderate"),
            ("rate_limited", {"budget": 10, "rate_limit": {"max_actions": 1, "window_secs": 3600},
                              "tools": {"t": {"cost": 0}}}, [("t", {}), ("t", {})], "minor"),
            ("max_calls_exceeded", {"budget": 10, "tools": {"t": {"cost": 0, "max_calls": 1}}},
             [("t", {}), ("t", {})], "minor"),
            ("invalid_args", {"budget": 10, "tools": {"send": {"cost": 0, "args_schema": {
                "type": "object", "properties": {"to": {"type": "string"}}, "required": ["to"]}}}},
             [("send", {"to": ["evil"]})], "minor"),
            # too_many_pending (max_pending): add its case here.
            ("amount_over_limit", {"budget": 100, "tools": {"pay": {"cost": 1, "when": [
                {"expr": "args.amount <= 5", "reason": "amount_over_limit", "scar": "moderate"}]}}},
             [("pay", {"amount": 6})], "moderate"),
            ("secret_path", {"budget": 10, "tools": {"read": {"cost": 0}}, "rego": [{"source": ext}]},
             [("read", {"path": "/etc/shadow", "n": "0"})], "severe"),
            ("extension_error", {"budget": 10, "tools": {"read": {"cost": 0}}, "rego": [{"source": ext}]},
             [("read", {"path": "/tmp", "n": "abc"})], None),
            ("insufficient_budget", {"budget": 1, "tools": {"t": {"cost": 2}}}, [("t", {})], None),
            ("terminated", {"budget": 10, "tools": {"t": {"cost": 0, "when": [
                {"expr": "false", "reason": "never", "scar": "severe"}]}}}, [("t", {}), ("t", {})], None),
        ]
        for reason, policy, calls, scar in cases:
            with self.subTest(reason=reason):
                g = guard(policy)
                for tool, args in calls[:-1]:
                    g.request(tool, args)
                tool, args = calls[-1]
                v = g.request(tool, args)
                self.assertEqual((v.decision, v.reason), ("deny", reason), v.raw)
                self.assertEqual(v.scar["severity"] if v.scar else None, scar, v.raw)
                with self.assertRaises(Denied) as cm:
                    g.authorize(tool, args)
                self.assertEqual(cm.exception.verdict.decision, "deny")
                self.assertIn(tool, str(cm.exception))
        # approval_rejected: a person rejects a pending call.
        agent_id, token = agent({"budget": 10, "tools": {"deploy": {"cost": 0, "requires_approval": True}}})
        g = Guard(SERVER, token)
        v = g.request("deploy", {"env": "prod"})
        self.assertEqual(v.decision, "pending")
        reject(agent_id, v.request_id)
        v = g.verdict(v.request_id)
        self.assertEqual((v.decision, v.reason, v.scar), ("deny", "approval_rejected", None))
        # scar_limit_reached shows in .terminated.
        g = guard({"budget": 10, "tools": {"t": {"cost": 0, "when": [{"expr": "false", "reason": "never", "scar": "severe"}]}}})
        self.assertEqual(g.request("t").terminated, "scar_limit_reached")

    def test_pending_then_approved(self) -> None:
        agent_id, token = agent({"budget": 10, "tools": {"deploy": {"cost": 4, "requires_approval": True}}})
        g = Guard(SERVER, token)
        got: List[Any] = []
        t = threading.Thread(target=lambda: got.append(g.authorize("deploy", {"env": "prod"}, id="deploy-1", wait="20s")))
        t.start()
        pend: List[Dict[str, Any]] = []
        for _ in range(200):
            pend = api("GET", "/v1/pending", APPROVER)["pending"]
            if any(p["agent"] == agent_id for p in pend):
                break
            time.sleep(0.05)
        start = time.monotonic()
        self.assertEqual(approve(agent_id, "deploy-1")["decision"], "allow")
        t.join(20)
        self.assertLess(time.monotonic() - start, 5, "the waiting call did not return when approved")
        self.assertEqual(len(got), 1)
        self.assertEqual((got[0].decision, got[0].cost, got[0].request_id), ("allow", 4, "deploy-1"))
        self.assertEqual(g.state()["spent"], 4)

    def test_pending_timeout(self) -> None:
        g = guard({"budget": 10, "tools": {"deploy": {"cost": 0, "requires_approval": True}}})
        start = time.monotonic()
        with self.assertRaises(PendingTimeout) as cm:
            g.authorize("deploy", {"env": "prod"}, wait=1.0)
        took = time.monotonic() - start
        self.assertGreaterEqual(took, 0.9)
        self.assertLess(took, 10)
        rid = cm.exception.request_id
        self.assertTrue(rid)
        self.assertIn(rid, str(cm.exception))
        # The same id continues the same request: still pending, nothing new recorded.
        seq = cm.exception.verdict.seq
        v = g.request("deploy", {"env": "prod"}, id=rid)
        self.assertEqual((v.decision, v.seq), ("pending", seq))

    def test_wait_is_looped_past_the_service_cap(self) -> None:
        """A wait longer than the service holds one ?wait= is several of them:
        shown with the cap lowered to 0.4 s and a 1.5 s wait."""
        from lineage_guard import _sync
        g = guard({"budget": 10, "tools": {"deploy": {"cost": 0, "requires_approval": True}}})
        calls: List[str] = []
        real = g._call

        def spy(method: str, path: str, body: Any, deadline: float) -> Any:
            calls.append(method + " " + path)
            return real(method, path, body, deadline)
        g._call = spy  # type: ignore
        old = _sync.MAX_SERVER_WAIT
        _sync.MAX_SERVER_WAIT = 0.4
        try:
            start = time.monotonic()
            v = g.request("deploy", {}, wait="1.5s")
            took = time.monotonic() - start
        finally:
            _sync.MAX_SERVER_WAIT = old
        self.assertEqual(v.decision, "pending")
        self.assertGreaterEqual(took, 1.4)
        gets = [c for c in calls if c.startswith("GET") and "?wait=" in c]
        self.assertGreaterEqual(len(gets), 4, calls)
        self.assertTrue(all(c.endswith("wait=400ms") for c in gets[:3]), calls)

    def test_idempotent_retry_with_an_id(self) -> None:
        g = guard({"budget": 10, "tools": {"pay": {"cost": 2}}})
        a = g.request("pay", {"amount": 1.0}, id="pay-7")
        b = g.request("pay", {"amount": 1}, id="pay-7")  # 1.0 and 1 are the same number
        self.assertEqual(a.raw, b.raw)
        self.assertEqual(g.state()["spent"], 2)
        with self.assertRaises(GuardError) as cm:
            g.request("pay", {"amount": 2}, id="pay-7")
        self.assertEqual((cm.exception.status, cm.exception.code), (409, "id_conflict"))
        self.assertNotIsInstance(cm.exception, GuardUnavailable)

    def test_malformed_and_bad_token(self) -> None:
        g = guard({"budget": 10, "tools": {"t": {"cost": 0}}})
        with self.assertRaises(GuardError) as cm:
            g.request("bad tool name!", {})
        self.assertEqual((cm.exception.status, cm.exception.code), (400, "bad_request"))
        bad = Guard(SERVER, "lga_not-a-token")
        ran: List[int] = []

        @bad.guarded("t")
        def t() -> None:
            ran.append(1)
        with self.assertRaises(GuardError) as cm2:
            t()
        self.assertEqual(cm2.exception.status, 401)
        self.assertEqual(ran, [])

    def test_guarded(self) -> None:
        g = guard({"budget": 100, "tools": {"pay": {"cost": 1, "when": [
            {"expr": "args.amount <= 50 && args.currency == 'EUR'", "reason": "amount_over_limit", "scar": "minor"}]}}})
        ran: List[Tuple[int, str]] = []

        @g.guarded("pay")
        def pay(amount: int, currency: str = "EUR") -> str:
            ran.append((amount, currency))
            return "paid"

        self.assertEqual(pay(amount=10), "paid")  # the default is part of the args
        self.assertEqual(pay(20, currency="EUR"), "paid")
        with self.assertRaises(Denied) as cm:
            pay(amount=60)
        self.assertEqual(cm.exception.verdict.reason, "amount_over_limit")
        with self.assertRaises(Denied):
            pay(amount=10, currency="USD")
        self.assertEqual(ran, [(10, "EUR"), (20, "EUR")])
        self.assertEqual(pay.__name__, "pay")

        @g.guarded("pay")
        async def apay(amount: int, currency: str = "EUR") -> str:
            ran.append((amount, currency))
            return "apaid"
        self.assertEqual(asyncio.run(apay(amount=5)), "apaid")
        with self.assertRaises(Denied):
            asyncio.run(apay(amount=500))
        self.assertEqual(ran[-1], (5, "EUR"))
        self.assertEqual(len(ran), 3)

    def test_async_50_concurrent_budget_exact(self) -> None:
        agent_id, token = agent({"budget": 30, "tools": {"step": {"cost": 1}}})
        threads = threading.active_count()
        ag = AsyncGuard(SERVER, token)

        async def main() -> List[Verdict]:
            return await asyncio.gather(*(ag.request("step", {"i": i}) for i in range(50)))
        verdicts = asyncio.run(main())
        allowed = [v for v in verdicts if v.allowed]
        self.assertEqual(len(allowed), 30, [v.reason for v in verdicts])
        self.assertEqual(len({v.request_id for v in verdicts}), 50)
        self.assertTrue(all(v.reason in ("insufficient_budget", "terminated") for v in verdicts if not v.allowed))
        st = api("GET", f"/v1/agents/{agent_id}", ADMIN)
        self.assertEqual((st["spent"], st["remaining"], st["calls"]["step"]), (30, 0, 30))
        self.assertEqual(threading.active_count(), threads, "AsyncGuard left threads behind")

    def test_async_guarded_and_pending(self) -> None:
        agent_id, token = agent({"budget": 10, "tools": {
            "send": {"cost": 1}, "deploy": {"cost": 0, "requires_approval": True}}})
        ag = AsyncGuard(SERVER, token)
        ran: List[str] = []

        @ag.guarded("send")
        def send(to: str) -> str:  # a plain function: the decorated one is awaited
            ran.append(to)
            return "sent"

        @ag.guarded("nope")
        async def nope() -> None:
            ran.append("nope")

        async def main() -> None:
            self.assertEqual(await send(to="bob"), "sent")
            with self.assertRaises(Denied):
                await nope()
            with self.assertRaises(PendingTimeout) as cm:
                await ag.authorize("deploy", {"env": "prod"}, wait="0.5s")
            rid = cm.exception.request_id
            approve(agent_id, rid)
            v = await ag.verdict(rid, wait="5s")
            self.assertEqual(v.decision, "allow")
        asyncio.run(main())
        self.assertEqual(ran, ["bob"])

    def test_service_down(self) -> None:
        url = f"http://127.0.0.1:{closed_port()}"
        g = Guard(url, "lga_x", timeout=3)
        ran: List[int] = []

        @g.guarded("t")
        def t() -> None:
            ran.append(1)
        start = time.monotonic()
        with self.assertRaises(GuardUnavailable):
            t()
        with self.assertRaises(GuardUnavailable):
            Guard(url, "lga_x", agent="agt_1", timeout=3).authorize("t")
        ag = AsyncGuard(url, "lga_x", agent="agt_1", timeout=3)

        @ag.guarded("t")
        async def at() -> None:
            ran.append(2)

        async def main() -> None:
            with self.assertRaises(GuardUnavailable):
                await at()
        asyncio.run(main())
        self.assertEqual(ran, [])
        self.assertLess(time.monotonic() - start, 15, "the deadline did not bound the retries")


@need_server
class ExampleTest(unittest.TestCase):
    def test_examples_python_agent(self) -> None:
        """examples/python/agent.py runs as its docstring says, against an agent
        of examples/python/policy.json."""
        root = os.path.dirname(os.path.dirname(PKG))
        with open(os.path.join(root, "examples", "python", "policy.json")) as f:
            policy = json.load(f)
        _, token = agent(policy)
        env = dict(os.environ, LINEAGE_SERVER=SERVER, LINEAGE_TOKEN=token, PYTHONPATH=PKG)
        out = subprocess.run([sys.executable, os.path.join(root, "examples", "python", "agent.py")],
                             capture_output=True, text=True, env=env, timeout=60)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        lines = out.stdout.splitlines()
        self.assertEqual(lines[:5], [
            "search: 3 results for 'invoices due this week'",
            "send_email: sent 'invoices due' to ap@acme.example",
            "send_email: denied: recipient_not_allowed",
            lines[3],
            "run_shell: denied: unlisted_tool",
        ], out.stdout)
        self.assertRegex(lines[3], r"^pay: waiting for approval: request py-[0-9a-f]{24}$")
        self.assertEqual(lines[5], "spent 3 of 20, scar score 6")


class StubTest(unittest.TestCase):
    """429 (the agent's request quota) and 503 unknown_outcome: the client waits
    Retry-After and sends the same request, with the same id, again."""

    def serve(self, answers: List[Tuple[int, Dict[str, str], Dict[str, Any]]]) -> Tuple[str, List[Dict[str, Any]]]:
        seen: List[Dict[str, Any]] = []
        queue = list(answers)

        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:
                pass

            def do_GET(self) -> None:
                if self.path == "/v1/whoami":
                    self.answer(200, {}, {"name": "agt_1", "role": "agent", "agent": "agt_1"})
                else:
                    self.answer(404, {}, {"code": "not_found", "message": "no"})

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length", "0"))
                seen.append(json.loads(self.rfile.read(n)))
                self.answer(*queue.pop(0))

            def answer(self, status: int, headers: Dict[str, str], body: Dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/json")
                if "X-To-Eof" not in headers:  # else: HTTP/1.0, the body ends with the connection
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        th = threading.Thread(target=srv.serve_forever, daemon=True)
        th.start()

        def stop() -> None:
            srv.shutdown()
            srv.server_close()
            th.join()
        self.addCleanup(stop)
        return f"http://127.0.0.1:{srv.server_address[1]}", seen

    ALLOW = {"decision": "allow", "reason": "ok", "cost": 1, "scar": None, "terminated": None,
             "request_id": "x", "seq": 2}

    def answers(self) -> List[Tuple[int, Dict[str, str], Dict[str, Any]]]:
        return [(429, {"Retry-After": "0"}, {"code": "too_many_requests", "message": "slow down"}),
                (503, {}, {"code": "unknown_outcome", "message": "commit not confirmed"}),
                (200, {}, self.ALLOW)]

    def test_retry_same_id(self) -> None:
        url, seen = self.serve(self.answers())
        v = Guard(url, "lga_x").request("t", {"a": 1})
        self.assertEqual(v.decision, "allow")
        self.assertEqual(len(seen), 3)
        self.assertEqual(len({s["id"] for s in seen}), 1, seen)

    def test_async_retry_same_id(self) -> None:
        url, seen = self.serve(self.answers())
        v = asyncio.run(AsyncGuard(url, "lga_x").request("t", {"a": 1}, id="mine"))
        self.assertEqual(v.decision, "allow")
        self.assertEqual([s["id"] for s in seen], ["mine"] * 3)

    def test_async_body_to_eof(self) -> None:
        """An answer with neither Content-Length nor chunks runs to the end of
        the connection (read whole, even when larger than one read)."""
        big = dict(self.ALLOW, pad="x" * 300000)
        url, seen = self.serve([(200, {"X-To-Eof": "1"}, big)])
        v = asyncio.run(AsyncGuard(url, "lga_x").request("t"))
        self.assertEqual(v.raw["pad"], big["pad"])

    def test_429_bounded(self) -> None:
        slow = (429, {"Retry-After": "0"}, {"code": "too_many_requests", "message": "slow down"})
        url, seen = self.serve([slow] * 10)
        with self.assertRaises(GuardUnavailable) as cm:
            Guard(url, "lga_x").request("t")
        self.assertEqual((cm.exception.status, cm.exception.code), (429, "too_many_requests"))
        self.assertEqual(len(seen), lineage_guard._common.MAX_ATTEMPTS)


class InstallTest(unittest.TestCase):
    def test_pip_install_offline(self) -> None:
        """pip installs the package with no index (the build backend is in the tree)."""
        try:
            import pip  # noqa: F401
        except ImportError:
            if os.environ.get("CI") == "true":
                raise
            self.skipTest("this python has no pip")
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "src")
            shutil.copytree(PKG, src, ignore=shutil.ignore_patterns("__pycache__", ".mypy_cache", "tests"))
            target = os.path.join(tmp, "target")
            out = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps",
                                  "--disable-pip-version-check", "--target", target, src],
                                 capture_output=True, text=True, timeout=300)
            self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
            env = dict(os.environ, PYTHONPATH=target)
            got = subprocess.run([sys.executable, "-c", "import lineage_guard as g; print(g.__file__); g.Guard"],
                                 capture_output=True, text=True, env=env, cwd=tmp, timeout=60)
            self.assertEqual(got.returncode, 0, got.stderr)
            self.assertTrue(got.stdout.startswith(target), got.stdout)


if __name__ == "__main__":
    unittest.main()
