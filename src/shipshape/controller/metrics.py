"""The controller's Prometheus metrics, registered on a registry the caller owns (never the global one)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

# Admission latency buckets in seconds: the webhook's budget is a few milliseconds.
WEBHOOK_BUCKETS = (0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
REPLACEMENT_BUCKETS = (5.0, 10.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 180.0, 300.0)


class ControllerMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.decisions = Counter(
            "shipshape_placement_decisions",
            "Placement decisions made by the webhook, by capacity type and reason.",
            ["capacity_type", "reason"],
            registry=registry,
        )
        self.packed = Counter(
            "shipshape_packing_preferences",
            "Pods given preferences for the fullest nodes that fit them, by capacity type "
            "(a pod with no node to fill counts under packed=false).",
            ["capacity_type", "packed"],
            registry=registry,
        )
        self.skipped = Counter(
            "shipshape_webhook_skipped",
            "Pods admitted without a placement decision, by cause.",
            ["cause"],
            registry=registry,
        )
        self.invalid_policies = Counter(
            "shipshape_invalid_policies",
            "Admissions of pods whose workload carries invalid placement annotations, by annotation.",
            ["annotation"],
            registry=registry,
        )
        self.webhook_errors = Counter(
            "shipshape_webhook_errors",
            "Internal errors in the webhook (the pod is admitted unmodified), by stage.",
            ["stage"],
            registry=registry,
        )
        self.webhook_latency = Histogram(
            "shipshape_webhook_duration_seconds",
            "Time to answer one AdmissionReview.",
            buckets=WEBHOOK_BUCKETS,
            registry=registry,
        )
        self.notices = Counter(
            "shipshape_interruption_notices",
            "Termination notices handled, by source.",
            ["source"],
            registry=registry,
        )
        self.queue_messages = Counter(
            "shipshape_notice_queue_messages",
            "Event-queue messages read, by kind (unknown: no event a parser exists for; foreign: about "
            "no node of this cluster).",
            ["kind"],
            registry=registry,
        )
        self.notice_to_ready = Histogram(
            "shipshape_notice_to_replacement_ready_seconds",
            "Time from a termination notice to the replacement pod being Ready.",
            buckets=REPLACEMENT_BUCKETS,
            registry=registry,
        )
        self.rebalances = Counter(
            "shipshape_rebalance_moves",
            "Pods moved by the rebalancer, by direction.",
            ["direction"],
            registry=registry,
        )
        self.actions = Counter(
            "shipshape_actions",
            "Writes the loops made (dry_run=true: recommended only, not sent), by action.",
            ["action", "dry_run"],
            registry=registry,
        )
        self.fallbacks = Counter(
            "shipshape_spot_fallbacks",
            "Spot fallbacks to on-demand and returns to spot.",
            ["direction"],
            registry=registry,
        )
