"""The emulator's kube-scheduler: the model, and the pure decision code it shares with simulations.

`SchedulerModel` runs in the emulated cluster. `schedule_one(pod, snapshot)` and `fits(pod, node,
pods_on_node)` are pure and reusable by the what-if simulator and the autoscaler.
"""

from shipshape.emulator.scheduler.framework import Decision, assume, fits, schedule_all, schedule_one
from shipshape.emulator.scheduler.model import SchedulerModel
from shipshape.emulator.scheduler.plugins import Profile
from shipshape.emulator.scheduler.preemption import Budget
from shipshape.emulator.scheduler.snapshot import ClusterSnapshot, NodeInfo, PodInfo, pod_info

__all__ = [
    "Budget",
    "ClusterSnapshot",
    "Decision",
    "NodeInfo",
    "PodInfo",
    "Profile",
    "SchedulerModel",
    "assume",
    "fits",
    "pod_info",
    "schedule_all",
    "schedule_one",
]
