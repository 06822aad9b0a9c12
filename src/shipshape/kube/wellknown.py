"""Kubernetes' well-known labels, annotations and taints that Shipshape reads or writes: one constant each.

Upstream names only (`k8s.io/api/core/v1/well_known_labels.go`, `well_known_taints.go`, the
`kubectl` and controller annotations). The capacity-type labels of every cloud and provisioner live
in `kube.capacity` (a table of conventions); Shipshape's own names (`spot.shipshape.dev/...`,
`startup.shipshape.dev/...`) are wire contracts between its processes and live in
`contracts.annotations`.
"""

from __future__ import annotations

from typing import Final

# ---- node labels ------------------------------------------------------------------------------
INSTANCE_TYPE_LABEL: Final = "node.kubernetes.io/instance-type"
# Deprecated since 1.17 and still set by some clouds on old node images: read after the GA label.
BETA_INSTANCE_TYPE_LABEL: Final = "beta.kubernetes.io/instance-type"
INSTANCE_TYPE_LABELS: Final = (INSTANCE_TYPE_LABEL, BETA_INSTANCE_TYPE_LABEL)
ZONE_LABEL: Final = "topology.kubernetes.io/zone"
BETA_ZONE_LABEL: Final = "failure-domain.beta.kubernetes.io/zone"
ZONE_LABELS: Final = (ZONE_LABEL, BETA_ZONE_LABEL)
REGION_LABEL: Final = "topology.kubernetes.io/region"
HOSTNAME_LABEL: Final = "kubernetes.io/hostname"

# ---- pod labels and annotations ---------------------------------------------------------------
# The Deployment controller's hash of a pod template, on a ReplicaSet and its pods (and the suffix of
# the ReplicaSet's name).
POD_TEMPLATE_HASH_LABEL: Final = "pod-template-hash"
# Which pods of a ReplicaSet go first on a scale-down (an int32; lower goes first).
POD_DELETION_COST: Final = "controller.kubernetes.io/pod-deletion-cost"
# `kubectl rollout restart` stamps a pod template with it; a new value rolls the pods.
RESTARTED_AT: Final = "kubectl.kubernetes.io/restartedAt"

# ---- node taints ------------------------------------------------------------------------------
UNSCHEDULABLE_TAINT: Final = "node.kubernetes.io/unschedulable"
NOT_READY_TAINT: Final = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT: Final = "node.kubernetes.io/unreachable"
# What interruption handlers put on a node that is going away: aws-node-termination-handler for a
# spot notice, an ASG lifecycle termination or scheduled maintenance; Karpenter v1 (`disrupted`) and
# v1beta1 (`disruption=disrupting`) for a node it removes.
AWS_NTH_SPOT_ITN_TAINT: Final = "aws-node-termination-handler/spot-itn"
AWS_NTH_ASG_LIFECYCLE_TAINT: Final = "aws-node-termination-handler/asg-lifecycle-termination"
AWS_NTH_SCHEDULED_MAINTENANCE_TAINT: Final = "aws-node-termination-handler/scheduled-maintenance"
KARPENTER_DISRUPTED_TAINT: Final = "karpenter.sh/disrupted"
KARPENTER_DISRUPTION_TAINT: Final = "karpenter.sh/disruption"
# aws-node-termination-handler's rebalance recommendation: move off without draining.
AWS_NTH_REBALANCE_TAINT: Final = "aws-node-termination-handler/rebalance-recommendation"
