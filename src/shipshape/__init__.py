"""Shipshape: cheaper, faster-starting Kubernetes clusters without interruptions."""

__version__ = "0.1.0"
