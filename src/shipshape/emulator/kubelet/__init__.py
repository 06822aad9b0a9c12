"""The kubelet model: heartbeats, node status and the pods bound to each emulated node."""

from shipshape.emulator.kubelet.model import KubeletModel

__all__ = ["KubeletModel"]
