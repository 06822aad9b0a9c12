"""The scale-down placer's free-room matrix places pods as a first-fit scan of every destination does.

`ScanPlacer` is the placer as it was before the matrix (free room in a dict per destination, each
destination checked in turn); both go through the same random plans of placements, rollbacks and
exclusions, and must place every pod on the same node and leave the same room behind.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Sequence
from typing import Any

from shipshape.emulator.cloud import scaledown
from shipshape.emulator.cloud.scaledown import FitsWithPods, NodeView, Placer, PodFacts, StaticOk, Used

Obj = dict[str, Any]


class ScanPlacer:
    """First fit over every destination, one `_room` check each (the reference)."""

    def __init__(self, dests: Sequence[NodeView], static_ok: StaticOk, fits_with_pods: FitsWithPods) -> None:
        self.dests = list(dests)
        self.index = {d.name: i for i, d in enumerate(self.dests)}
        self.static_ok = static_ok
        self.fits_with_pods = fits_with_pods
        self.free: list[dict[str, int]] = []
        for d in self.dests:
            free = {name: amount - d.used.get(name, 0) for name, amount in d.allocatable.items()}
            free["pods"] = d.allocatable.get("pods", 110) - d.used.get("pods", 0)
            self.free.append(free)
        self.excluded: set[int] = set()
        self.received: set[str] = set()
        self.added: dict[int, list[Obj]] = {}
        self.cursor: dict[bytes, int] = {}
        self._journal: list[tuple[int, PodFacts]] | None = None
        self._saved_cursor: dict[bytes, int] = {}
        self._saved_received: set[str] = set()

    def _room(self, i: int, pod: PodFacts) -> bool:
        free = self.free[i]
        if free.get("pods", 0) < 1:
            return False
        return all(not amount or free.get(name, 0) >= amount for name, amount in pod.requests.items())

    def _take(self, i: int, pod: PodFacts) -> None:
        free = self.free[i]
        free["pods"] = free.get("pods", 0) - 1
        for name, amount in pod.requests.items():
            free[name] = free.get(name, 0) - amount
        self.received.add(self.dests[i].name)
        if pod.needs_others:
            self.added.setdefault(i, []).append(pod.obj)
        if self._journal is not None:
            self._journal.append((i, pod))

    def place(self, pod: PodFacts) -> str | None:
        if pod.needs_others:
            for i, dest in enumerate(self.dests):
                if i in self.excluded or not self._room(i, pod) or not self.static_ok(pod, dest):
                    continue
                if not self.fits_with_pods(pod, dest, [p.obj for p in dest.pods] + self.added.get(i, [])):
                    continue
                self._take(i, pod)
                return dest.name
            return None
        shape = pod.shape
        for i in range(self.cursor.get(shape, 0), len(self.dests)):
            if i in self.excluded or not self._room(i, pod) or not self.static_ok(pod, self.dests[i]):
                continue
            self.cursor[shape] = i
            self._take(i, pod)
            return self.dests[i].name
        self.cursor[shape] = len(self.dests)
        return None

    def begin(self) -> None:
        self._journal = []
        self._saved_cursor = dict(self.cursor)
        self._saved_received = set(self.received)

    def commit(self) -> None:
        self._journal = None

    def rollback(self) -> None:
        for i, pod in reversed(self._journal or []):
            free = self.free[i]
            free["pods"] += 1
            for name, amount in pod.requests.items():
                free[name] += amount
            if pod.needs_others:
                self.added[i].remove(pod.obj)
        self._journal = None
        self.cursor = self._saved_cursor
        self.received = self._saved_received

    def exclude(self, name: str) -> None:
        i = self.index.get(name)
        if i is not None:
            self.excluded.add(i)

    def include(self, name: str) -> None:
        i = self.index.get(name)
        if i is not None:
            self.excluded.discard(i)


SHAPES = [
    {"cpu": 100, "memory": 128 << 20},
    {"cpu": 500, "memory": 1 << 30},
    {"cpu": 1000, "memory": 2 << 30},
    {"cpu": 250},
    {"cpu": 0, "memory": 64 << 20},
    {"cpu": 1000, "memory": 4 << 30, "nvidia.com/gpu": 1},
    {"cpu": 100, "example.com/dongle": 1},  # no destination has any
    {"cpu": 100, "pods": 2},
]


def pod(rng: random.Random, n: int) -> PodFacts:
    requests = dict(rng.choice(SHAPES))
    spec: Obj = {
        "containers": [{"name": "c", "resources": {"requests": {k: str(v) for k, v in requests.items()}}}]
    }
    if rng.random() < 0.2:
        spec["topologySpreadConstraints"] = [
            {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}
        ]
    body = {"metadata": {"name": f"p{n}", "namespace": "default", "uid": f"u{n}"}, "spec": spec}
    return scaledown.pod_facts(body, requests)


def dest(rng: random.Random, n: int) -> NodeView:
    allocatable = {"cpu": rng.choice([1930, 3920, 7910]), "memory": rng.choice([4, 8, 16]) << 30, "pods": 110}
    if rng.random() < 0.2:
        allocatable["nvidia.com/gpu"] = rng.choice([1, 4])
    if rng.random() < 0.1:
        allocatable["pods"] = rng.choice([1, 2, 3])
    used = {k: rng.randrange(0, v + 1) for k, v in allocatable.items() if rng.random() < 0.8}
    if rng.random() < 0.05:
        used["cpu"] = allocatable["cpu"] + 10  # overcommitted
    return NodeView(f"n{n}", "pool", {"metadata": {"name": f"n{n}"}}, allocatable, Used(used), [])


def static_ok(pod: PodFacts, node: NodeView) -> bool:
    return zlib.crc32(pod.shape + node.name.encode()) % 5 != 0


def fits_with_pods(pod: PodFacts, node: NodeView, others: list[Obj]) -> bool:
    return zlib.crc32(f"{pod.name}/{node.name}/{len(others)}".encode()) % 3 != 0


def free_of(placer: Placer, i: int) -> dict[str, int]:
    return {name: int(placer.free[i, j]) for name, j in placer.columns.items()}


def test_the_matrix_places_as_the_scan_does() -> None:
    rng = random.Random(5)
    placed = unplaced = 0
    for _ in range(60):
        dests = [dest(rng, n) for n in range(rng.randrange(0, 40))]
        fast = Placer(dests, static_ok, fits_with_pods)
        slow = ScanPlacer(dests, static_ok, fits_with_pods)
        pods = [pod(rng, n) for n in range(30)]
        for _ in range(200):
            roll = rng.random()
            name = f"n{rng.randrange(45)}"
            if roll < 0.6:
                p = rng.choice(pods)
                got = fast.place(p)
                assert got == slow.place(p)
                placed += got is not None
                unplaced += got is None
            elif roll < 0.7:
                for placer in (fast, slow):
                    placer.begin()
            elif roll < 0.8:
                for placer in (fast, slow):
                    placer.commit()
            elif roll < 0.87:
                for placer in (fast, slow):
                    placer.rollback()
            elif roll < 0.95:
                for placer in (fast, slow):
                    placer.exclude(name)
            else:
                for placer in (fast, slow):
                    placer.include(name)
            assert fast.cursor == slow.cursor
            assert fast.received == slow.received
            assert fast.excluded == slow.excluded
            assert fast.added == slow.added
            for i, free in enumerate(slow.free):
                assert free_of(fast, i) == {name: free.get(name, 0) for name in fast.columns}
    assert placed > 1000 and unplaced > 1000
