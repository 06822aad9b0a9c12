"""The emulator's cloud: node pools, instance boot, autoscaling, cost and spot interruptions."""

from shipshape.emulator.cloud.errors import CloudError, UnknownTarget
from shipshape.emulator.cloud.http import control_routes, metadata_app
from shipshape.emulator.cloud.model import CloudModel

__all__ = ["CloudError", "CloudModel", "UnknownTarget", "control_routes", "metadata_app"]
