"""What every workload controller shares: store access, Events under its component name, status writes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shipshape.emulator.resources import ResourceType
from shipshape.emulator.runtime import Reconciler
from shipshape.emulator.store import Obj, Store, WatchEvent

# Upstream workqueue's default per-item backoff: 5 ms doubling up to 1000 s.
BACKOFF_BASE = 0.005
BACKOFF_MAX = 1000.0


class Controller(Reconciler):
    """A watch-driven controller; `component` (default: `name`) reports its Events."""

    component = ""

    def __init__(self) -> None:
        super().__init__()
        self._failures: dict[Any, int] = {}
        self._watched = frozenset(rt.key for rt in self.watches)

    def _on_event(self, event: WatchEvent) -> None:
        # Every store change reaches every controller: a set lookup instead of comparing types.
        if event.resource.key in self._watched:
            for key in self.keys_for(event):
                self.enqueue(key)

    def retry_later(self, key: Any) -> None:
        """Requeue a key that failed, with exponential backoff as a rate-limited workqueue would."""
        count = self._failures.get(key, 0)
        self._failures[key] = count + 1
        self.enqueue(key, after=min(BACKOFF_BASE * 2**count, BACKOFF_MAX))

    def forget(self, key: Any) -> None:
        """The key synced cleanly: its backoff starts over."""
        self._failures.pop(key, None)

    @property
    def store(self) -> Store:
        return self.c.store

    def now(self) -> float:
        return self.c.clock.now()

    def event(self, obj: Mapping[str, Any], reason: str, message: str, *, type: str = "Normal") -> None:
        self.c.recorder.record(dict(obj), reason, message, type=type, component=self.component or self.name)

    def write_status(self, rt: ResourceType, obj: Mapping[str, Any], status: Obj) -> Obj | None:
        """Replace `.status` when it differs (no write, no new resourceVersion otherwise)."""
        if obj.get("status") == status:
            return None
        md = obj["metadata"]

        def replace(new: Obj) -> None:
            new["status"] = status

        return self.store.mutate(rt, md.get("namespace", ""), md["name"], replace, subresource="status")
