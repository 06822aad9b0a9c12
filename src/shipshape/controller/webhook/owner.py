"""The leader's hold on the webhook registration: one writer, drift repaired, every replica serving.

`WebhookOwner` has a loop's shape (`name`, `interval`, `observe`, `reconcile`) and runs in the loops'
scheduler:

- `reconcile` (leader only) compares the MutatingWebhookConfiguration with what this replica serves
  (`desired()`: its caBundle and clientConfig, the rules, failurePolicy, selectors) every
  `resync_seconds` and at once after the Lease changed hands (`request()`), and writes it back when it
  differs or is gone. Replicas that do not hold the Lease never write it, so a replica that starts for a
  few seconds cannot re-point it at itself; the next leader re-points it at once.
- `observe` (every replica) follows the serving certificate when it comes from the shared Secret: a
  certificate rotated by the leader is loaded for new connections (`reload`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from shipshape.controller.webhook.registration import WebhookConfigurations, ensure_webhook_configuration
from shipshape.kube.clock import Clock

Obj = dict[str, Any]
LOG = logging.getLogger("shipshape.controller.webhook.owner")


class WebhookOwner:
    name = "webhook-owner"

    def __init__(
        self,
        clock: Clock,
        configurations: WebhookConfigurations,
        desired: Callable[[], Obj],
        resync_seconds: float = 30.0,
        certificates: Callable[[float], None] | None = None,
        certificate_check_seconds: float = 60.0,
    ) -> None:
        self.clock = clock
        self.configurations = configurations
        self.desired = desired
        self.resync_seconds = resync_seconds
        self.certificates = certificates
        self.certificate_check_seconds = certificate_check_seconds
        self._next = float("-inf")
        self._next_certificate_check = float("-inf")
        self.writes = 0

    @property
    def interval(self) -> float:
        # Looked at every second; the API is read only every `resync_seconds` or when asked.
        return min(1.0, self.resync_seconds)

    def request(self) -> None:
        """Check at the next round (the Lease changed hands)."""
        self._next = float("-inf")

    def observe(self, now: float) -> None:
        if self.certificates is None or now < self._next_certificate_check:
            return
        self._next_certificate_check = now + self.certificate_check_seconds
        self.certificates(now)

    def reconcile(self, now: float) -> None:
        if now < self._next:
            return
        self._next = now + self.resync_seconds
        self.ensure()

    def ensure(self) -> str:
        """Write the configuration when it differs from what this replica serves; the outcome."""
        outcome = ensure_webhook_configuration(self.configurations, self.desired())
        if outcome != "unchanged":
            self.writes += 1
            LOG.info("webhook configuration %s", outcome, extra={"action": f"webhook-{outcome}"})
        return outcome
