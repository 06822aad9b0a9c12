"""The in-process API's fixtures (`tests/unit/emulator/api/conftest.py`), for the tests here that add a
real HTTPS webhook server to it."""

from tests.unit.emulator.api.conftest import api, cluster

__all__ = ["api", "cluster"]
