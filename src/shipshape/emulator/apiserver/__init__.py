"""The emulator's Kubernetes-compatible HTTPS API server (kubectl and client libraries talk to it)."""

from shipshape.emulator.apiserver.app import ApiServer, ServerSettings
from shipshape.emulator.apiserver.runner import Served, serve

__all__ = ["ApiServer", "Served", "ServerSettings", "serve"]
