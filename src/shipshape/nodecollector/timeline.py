"""From node log lines to the node start-up timeline: an explicit list of rules, first match wins.

The rules follow the EKS start-up timing table (awslabs/node-latency-for-k8s) and also accept the
newer systemd wording ("Started containerd.service - containerd container runtime.") found on
journald-only hosts.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from shipshape.analyzers.startup import nodes
from shipshape.kube.clock import rfc3339_micro
from shipshape.nodecollector.parsers import LogLine

SYSTEM_LOG = "system"  # /var/log/messages or the journal
CNI_LOG = "aws-node"  # the VPC CNI container's log


@dataclass(frozen=True, slots=True)
class EventRule:
    event: str  # one of nodes.NODE_EVENTS
    pattern: re.Pattern[str]
    idents: frozenset[str] = frozenset()  # programs whose lines may match; empty: any
    log: str = SYSTEM_LOG
    description: str = ""


def _rule(event: str, idents: str, pattern: str, log: str = SYSTEM_LOG) -> EventRule:
    return EventRule(event, re.compile(pattern), frozenset(idents.split()), log, pattern)


RULES: tuple[EventRule, ...] = (
    _rule(nodes.VM_INITIALIZED, "kernel", r"^Linux version"),
    _rule(nodes.NETWORK_START, "systemd", r"Reached target (?:Network \(Pre\)|network-pre\.target)"),
    _rule(nodes.NETWORK_READY, "systemd", r"Reached target (?:Network\.|network\.target)"),
    _rule(
        nodes.CONTAINERD_START, "systemd", r"Starting (?:containerd\.service - )?containerd container runtime"
    ),
    _rule(
        nodes.CONTAINERD_READY, "systemd", r"Started (?:containerd\.service - )?containerd container runtime"
    ),
    _rule(nodes.CLOUD_INIT_LOCAL, "cloud-init", r"Cloud-init v\..* running 'init-local'"),
    _rule(nodes.CLOUD_INIT_START, "cloud-init", r"Cloud-init v\..* running 'init'"),
    _rule(nodes.CLOUD_INIT_CONFIG, "cloud-init", r"Cloud-init v\..* running 'modules:config'"),
    _rule(nodes.CLOUD_INIT_FINAL, "cloud-init", r"Cloud-init v\..* running 'modules:final'"),
    _rule(nodes.CLOUD_INIT_FINISH, "cloud-init", r"Cloud-init v\..* finished"),
    _rule(nodes.KUBELET_START, "systemd", r"Starting (?:kubelet\.service - )?Kubernetes Kubelet"),
    _rule(nodes.KUBELET_INITIALIZED, "kubelet", r'"Started kubelet"'),
    _rule(nodes.REGISTERED, "kubelet", r"Successfully registered node"),
    _rule(
        nodes.KUBE_PROXY_START,
        "containerd",
        r"CreateContainer within sandbox .*Name:kube-proxy,.* returns container id",
    ),
    _rule(
        nodes.CNI_INIT_START,
        "containerd",
        r"CreateContainer within sandbox .*Name:aws-vpc-cni-init,.* returns container id",
    ),
    _rule(
        nodes.CNI_START,
        "containerd",
        r"CreateContainer within sandbox .*Name:aws-node,.* returns container id",
    ),
    _rule(nodes.CNI_READY, "", r"Successfully copied CNI plugin binary and config file", CNI_LOG),
    _rule(nodes.NODE_READY, "kubelet", r'event="NodeReady"'),
    _rule(
        nodes.FIRST_POD_STARTED,
        "kubelet",
        r'"SyncLoop \(PLEG\): event for pod" pod="(?!kube-system/)[^"]+" .*Type:ContainerStarted',
    ),
)


@dataclass(frozen=True, slots=True)
class LogEvent:
    event: str
    time: float
    line: str
    source: str
    precise: bool


@dataclass(slots=True)
class NodeLogTimeline:
    """What the node's own logs say about its start-up."""

    events: dict[str, LogEvent] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # why the timeline cannot be true

    def times(self) -> dict[str, float]:
        return {name: event.time for name, event in self.events.items()}

    def to_json(self) -> dict[str, Any]:
        origin = min((event.time for event in self.events.values()), default=0.0)
        ordered = sorted(self.events.values(), key=lambda event: (event.time, nodes.EVENT_ORDER[event.event]))
        return {
            "sources": list(self.sources),
            "events": [
                {
                    "event": event.event,
                    "title": nodes.EVENT_TITLES[event.event],
                    "time": rfc3339_micro(event.time),
                    "t": round(event.time - origin, 6),
                    "source": event.source,
                    "line": event.line,
                }
                for event in ordered
            ],
            "missing": dict(self.missing),
            "problems": list(self.problems),
        }


def match_events(
    logs: Mapping[str, Iterable[LogLine]], rules: Iterable[EventRule] = RULES
) -> NodeLogTimeline:
    """Find each rule's first matching line in the log it reads. `logs` maps SYSTEM_LOG / CNI_LOG
    to lines in time order; a rule whose log is absent is reported missing with that reason."""
    timeline = NodeLogTimeline(sources=sorted(logs))
    pending: dict[str, list[EventRule]] = {}
    for rule in rules:
        pending.setdefault(rule.log, []).append(rule)
    for log_name, log_rules in pending.items():
        lines = logs.get(log_name)
        if lines is None:
            for rule in log_rules:
                timeline.missing[rule.event] = f"no {log_name} log on this host"
            continue
        remaining = list(log_rules)
        for line in lines:
            if not remaining:
                break
            for rule in list(remaining):
                if rule.idents and line.ident not in rule.idents:
                    continue
                if rule.pattern.search(line.message):
                    timeline.events[rule.event] = LogEvent(
                        rule.event, line.time, line.text, line.source, line.precise
                    )
                    remaining.remove(rule)
        for rule in remaining:
            who = "/".join(sorted(rule.idents)) or log_name
            timeline.missing[rule.event] = f"not found: no {who} line matching /{rule.description}/"
    return timeline
