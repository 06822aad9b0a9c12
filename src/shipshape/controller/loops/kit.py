"""The reconcile kit every loop and the scheduler use: time always passed in, nothing read from a clock.

- `Expectations`: writes a loop sent and has not seen in the cache yet (controller-runtime's
  expectations). A loop records what it wrote for a key; until the cache shows the write (the loop
  calls `observed`) or the expectation's time runs out, the loop does not write for that key again.
- `Unchanged`: what a loop concluded for each key last round and from which inputs, so that a key
  whose inputs are the same objects (or equal values) is not worked out again.
- `Every`: a step taken at most every so many seconds inside a round (the metadata poll, the guards).
- `DirtyQueue`: keys (the scheduler's lanes; a loop's workloads) with the time each is next due,
  whether something it watches changed since its last round, and a back-off for a key whose round
  failed.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class Expected(Generic[V]):
    """One write in flight: what was written (`value`), from when, and for how long it may stay unseen."""

    value: V
    since: float
    ttl: float

    def live(self, now: float) -> bool:
        return now - self.since < self.ttl


class Expectations(Generic[K, V]):
    """Writes sent and not yet seen in the cache, by key (a workload, a pod, a node and taint).

    `expect` after sending a write (or just before: a write whose answer was lost counts as sent);
    `get`/`pending` while deciding whether to write again; `observed` once the cache shows the write
    (or the loop learns it did not happen, e.g. an eviction a PDB blocked). An expectation older than
    its `ttl` no longer holds, whether or not the cache caught up: the loop may write again.
    """

    def __init__(self) -> None:
        self._items: dict[K, Expected[V]] = {}

    def expect(self, key: K, value: V, since: float, ttl: float) -> None:
        self._items[key] = Expected(value, since, ttl)

    def get(self, key: K, now: float) -> Expected[V] | None:
        """The write in flight for `key` at `now`, if any."""
        item = self._items.get(key)
        return item if item is not None and item.live(now) else None

    def pending(self, key: K, now: float) -> bool:
        return self.get(key, now) is not None

    def observed(self, key: K) -> None:
        """The cache shows the write (or it will never happen): nothing in flight for `key` any more."""
        self._items.pop(key, None)

    def expire(self, now: float) -> None:
        """Forget the expectations whose time ran out (they no longer count anyway)."""
        self._items = {key: item for key, item in self._items.items() if item.live(now)}

    def __len__(self) -> int:
        return len(self._items)


Inputs = tuple[object, ...]


def same_inputs(a: Inputs, b: Inputs) -> bool:
    """Element by element: the same object, or an equal value."""
    return len(a) == len(b) and all(x is y or x == y for x, y in zip(a, b, strict=True))


class Unchanged(Generic[K, V]):
    """What a loop concluded for each key, and the inputs it concluded it from.

    `recall(key, inputs)` answers the kept conclusion when the inputs are the same as when it was
    kept; `keep` records one. Inside `with memo.round():` only the keys recalled or kept during the
    round survive it, so a workload that went away is forgotten with its round.
    """

    def __init__(self) -> None:
        self._kept: dict[K, tuple[Inputs, V]] = {}
        self._next: dict[K, tuple[Inputs, V]] | None = None

    def recall(self, key: K, inputs: Inputs) -> V | None:
        kept = self._kept.get(key)
        if kept is None or not same_inputs(kept[0], inputs):
            return None
        if self._next is not None:
            self._next[key] = kept
        return kept[1]

    def keep(self, key: K, inputs: Inputs, value: V) -> None:
        if self._next is not None:
            self._next[key] = (inputs, value)
        else:
            self._kept[key] = (inputs, value)

    @contextlib.contextmanager
    def round(self) -> Iterator[None]:
        self._next = {}
        try:
            yield
            self._kept = self._next
        finally:
            self._next = None

    def __len__(self) -> int:
        return len(self._kept)


@dataclass(slots=True)
class Every:
    """A step taken at most every `seconds`: `due(now)`, then `ran(now)` when it was taken."""

    seconds: float
    last: float = -math.inf

    def due(self, now: float) -> bool:
        return now - self.last >= self.seconds

    def ran(self, now: float) -> None:
        self.last = now

    @property
    def next_due(self) -> float:
        return self.last + self.seconds


@dataclass(slots=True)
class _Entry:
    due: float
    failures: int = 0


class DirtyQueue(Generic[K]):
    """Keys waiting for a round, in the order they were added.

    Each key has the time it is next due (`schedule`, `wake`) and a dirty flag: something it watches
    changed since its last round (`mark`; `take` reads and clears it when a round starts). A key whose
    round failed is due again after a back-off that doubles from `base_backoff` up to `max_backoff`
    (`failed`), reset by a round that succeeds (`succeeded`). The dirty keys are kept apart, so that
    a round over thousands of keys of which a few changed finds those few without a scan
    (`dirty_keys`).
    """

    def __init__(self, base_backoff: float = 1.0, max_backoff: float = 300.0) -> None:
        if base_backoff <= 0 or max_backoff < base_backoff:
            raise ValueError("back-off must be > 0 and its cap at least its base")
        self.base_backoff = base_backoff
        self.max_backoff = max_backoff
        self._entries: dict[K, _Entry] = {}
        self._dirty: dict[K, None] = {}  # in the order they were marked

    def add(self, key: K, due: float) -> None:
        """A new key, dirty, due at `due` (an existing key keeps its state)."""
        if key not in self._entries:
            self._entries[key] = _Entry(due)
            self._dirty[key] = None

    def discard(self, key: K) -> None:
        """Forget a key (its object is gone); nothing if it is not there."""
        self._entries.pop(key, None)
        self._dirty.pop(key, None)

    def schedule(self, key: K, due: float) -> None:
        self._entries[key].due = due

    def wake(self, key: K, due: float) -> bool:
        """Due no later than `due`; True when that moved the key earlier."""
        entry = self._entries[key]
        if entry.due <= due:
            return False
        entry.due = due
        return True

    def mark(self, key: K) -> None:
        if key not in self._entries:
            raise KeyError(key)
        self._dirty[key] = None

    def mark_all(self) -> None:
        if len(self._dirty) != len(self._entries):
            self._dirty.update(dict.fromkeys(self._entries))

    def dirty(self, key: K) -> bool:
        return key in self._dirty

    def dirty_keys(self) -> list[K]:
        """The dirty keys, in the order they were marked."""
        return list(self._dirty)

    def take(self, key: K) -> bool:
        """Whether the key was dirty; it is clean from now on (a round starts)."""
        if key not in self._entries:
            raise KeyError(key)
        return self._dirty.pop(key, False) is None

    def due(self, key: K) -> float:
        return self._entries[key].due

    def failed(self, key: K) -> float:
        """The key's round failed: it stays dirty; the back-off to wait before its next round."""
        entry = self._entries[key]
        self._dirty[key] = None
        entry.failures += 1
        return min(self.max_backoff, self.base_backoff * 2.0 ** (entry.failures - 1))

    def succeeded(self, key: K) -> None:
        self._entries[key].failures = 0

    def failures(self, key: K) -> int:
        return self._entries[key].failures

    def ready(self, now: float) -> list[K]:
        """The keys due at `now`, in the order they were added."""
        return [key for key, entry in self._entries.items() if entry.due <= now]

    def next_due(self) -> float | None:
        return min((entry.due for entry in self._entries.values()), default=None)

    def __iter__(self) -> Iterator[K]:
        return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries
