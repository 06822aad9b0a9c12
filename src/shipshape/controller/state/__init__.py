"""The controller's state: the cluster objects it watches, kept incrementally from informer events.

- `cluster.ClusterState`: objects by kind and key and their indexes (pods per group, ReplicaSets per
  Deployment, unbound pods), per-node facts and request sums, in-flight assumptions (placements the
  webhook decided for pods not seen yet), and per-workload state (`records.WorkloadState`) kept until
  one of its inputs changes. Every answer the state keeps is a typed field of the state itself.
- `records`: the frozen records it hands out; `workloads`: the pure derivations it keeps answers of.
- `views`: how threads share it. In the controller process the webhook and the loops each read their
  own replica, fed by the same informer events without waiting, so the webhook never waits behind a
  planning pass; `view(now)` takes the replica's short lock and applies what arrived meanwhile.

Single-threaded users (the simulator, tests) use a `ClusterState` directly.
"""

from shipshape.controller.state.cluster import (
    KINDS,
    NOTICE_TAINTS,
    QUEUE_NOTICE_TAINT,
    QUEUE_REBALANCE_TAINT,
    REBALANCE_TAINTS,
    SPOT_NOTICE_TAINTS,
    SPOT_TAINT_KEYS,
    ClusterState,
    DirtyWorkloads,
    NodeSummary,
    PodUsage,
    node_capacity,
    node_pool,
    read_decision,
    summarize_nodes,
    taint_keys,
)
from shipshape.controller.state.records import (
    Assumption,
    GroupKey,
    Managed,
    PodState,
    WorkloadRef,
    WorkloadState,
)
from shipshape.controller.state.workloads import workload_ref
from shipshape.kube.objects import controller_ref, is_active, pod_ready

__all__ = [
    "KINDS",
    "NOTICE_TAINTS",
    "QUEUE_NOTICE_TAINT",
    "QUEUE_REBALANCE_TAINT",
    "REBALANCE_TAINTS",
    "SPOT_NOTICE_TAINTS",
    "SPOT_TAINT_KEYS",
    "Assumption",
    "ClusterState",
    "DirtyWorkloads",
    "GroupKey",
    "Managed",
    "NodeSummary",
    "PodState",
    "PodUsage",
    "WorkloadRef",
    "WorkloadState",
    "controller_ref",
    "is_active",
    "node_capacity",
    "node_pool",
    "pod_ready",
    "read_decision",
    "summarize_nodes",
    "taint_keys",
    "workload_ref",
]
