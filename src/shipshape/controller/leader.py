"""The controller's leader Lease: `shipshape-controller` in the controller's namespace. Every replica
serves the webhook; the loops, the webhook registration and certificate rotation run on the holder.

The election itself is `kube/leader.py` (shared with the agent); this module names the controller's
Lease and keeps the names the controller's modules use.
"""

from __future__ import annotations

from dataclasses import dataclass

from shipshape.kube import leader
from shipshape.kube.leader import LeaseElector, Step, lease_body, lease_holder, lease_step

LEASE_NAME = "shipshape-controller"

__all__ = ["LEASE_NAME", "LeaseElector", "LeaseSettings", "Step", "lease_body", "lease_holder", "lease_step"]


@dataclass(frozen=True, slots=True)
class LeaseSettings(leader.LeaseSettings):
    """The controller's Lease (`shipshape-controller` unless told otherwise), client-go's timing."""

    name: str = LEASE_NAME
