"""lineage_guard: a client of the lineage guard service for Python agents.

    from lineage_guard import Guard, Denied
    guard = Guard()                     # $LINEAGE_SERVER, $LINEAGE_TOKEN
    v = guard.request("pay", {"amount": 5})          # a Verdict, whatever the decision
    guard.authorize("pay", {"amount": 5}, wait="30s")  # the allow verdict, or raises

    @guard.guarded("send_email")
    def send_email(to: str, subject: str) -> None: ...

Standard library only. See the repository's README ("Agents in Python").
"""

from ._async import AsyncGuard
from ._common import Denied, GuardError, GuardUnavailable, PendingTimeout, Verdict
from ._sync import Guard

__all__ = ["Guard", "AsyncGuard", "Verdict", "Denied", "PendingTimeout", "GuardUnavailable", "GuardError"]
__version__ = "0.1.0"
