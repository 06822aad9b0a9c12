"""Client-side rate limits of the control plane's components, as client-go applies them.

kube-controller-manager's controllers and kube-scheduler send their requests through a client with a
token bucket (`--kube-api-qps`, `--kube-api-burst`): the bucket starts full, holds at most `burst`
tokens and refills at `qps` per second; a request that finds it empty waits for its token (client-go's
`tokenBucketRateLimiter.Wait`, a reservation on `golang.org/x/time/rate`). Here the bucket runs on the
cluster's clock, so waiting is a timer on the engine and costs no wall time in discrete-event mode.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Requests that wait for tokens are released on this grid of the cluster's clock (seconds): those
# whose tokens fall in one step go together at its end, never earlier than their tokens allow. One
# engine turn then carries several requests, and the models react to them in one sync, instead of
# one turn per request (20 or 50 a second), at a cost of at most one step of delay.
RELEASE_STEP = 0.5


def release_time(when: float, now: float) -> float:
    """When a request whose token comes at `when` goes: `now` if it is there, else the grid step
    that holds `when`."""
    if when <= now:
        return now
    return max(when, math.ceil(when / RELEASE_STEP - 1e-9) * RELEASE_STEP)


@dataclass(slots=True)
class TokenBucket:
    """`qps` tokens per second, at most `burst`; full at `now`."""

    qps: float
    burst: int
    tokens: float
    last: float

    @classmethod
    def full(cls, qps: float, burst: int, now: float) -> TokenBucket:
        if qps <= 0 or burst < 1:
            raise ValueError(f"a token bucket needs qps > 0 and burst >= 1, got {qps} and {burst}")
        return cls(qps, burst, float(burst), now)

    def _refill(self, now: float) -> None:
        if now > self.last:
            self.tokens = min(float(self.burst), self.tokens + (now - self.last) * self.qps)
            self.last = now

    def reserve(self, now: float) -> float:
        """Take a token; the time the request may go (`now` when one was there)."""
        self._refill(now)
        self.tokens -= 1.0
        if self.tokens >= 0.0:
            return now
        return now + (-self.tokens) / self.qps

    def available_at(self, now: float) -> float:
        """When the next token is there, without taking it (`now` when one is)."""
        self._refill(now)
        if self.tokens >= 1.0:
            return now
        return now + (1.0 - self.tokens) / self.qps


def bucket_for(qps: float, burst: int, now: float) -> TokenBucket | None:
    """A full bucket, or None where `qps` is 0 or less (no client-side limit)."""
    return TokenBucket.full(qps, burst, now) if qps > 0 else None
