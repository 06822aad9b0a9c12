"""The poller's rounds: read the metadata, publish what is new on the Node, acknowledge it.

A notice is published once per run (its `event_id` is remembered) and at most once per cluster: `plan`
reads the Node back, so a restarted poller finds the taint and condition there and the Event's name
taken. Errors of one round (metadata unreachable, API server refusing) are logged once per distinct
message and the next round tries again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from shipshape.kube.client import KubeClientError
from shipshape.nodecollector.notices import publish
from shipshape.nodecollector.notices.model import MetadataError, NodeNotice

LOG = logging.getLogger("shipshape.nodecollector.notices")


class Source(Protocol):
    """One cloud's metadata client."""

    cloud: str
    # True when `poll` waits (up to `wait_seconds`) for a change itself: no sleep between rounds.
    long_polls: bool

    def poll(self, clock: Callable[[], float], wait_seconds: float = 0.0) -> list[NodeNotice]: ...

    def published(self, notice: NodeNotice) -> None: ...

    def probe(self) -> bool: ...


class Writer(Protocol):
    def read(self) -> dict[str, Any]: ...

    def apply(self, node: Mapping[str, Any], writes: publish.Writes) -> list[str]: ...


@dataclass(slots=True)
class NoticePoller:
    source: Source
    writer: Writer
    clock: Callable[[], float]
    interval: float = 2.0
    _done: set[str] = field(default_factory=set)
    _last_error: str = ""

    def round(self) -> list[NodeNotice]:
        """One poll; returns the notices published in it (raises what the round could not do)."""
        wait = self.interval if self.source.long_polls else 0.0
        published: list[NodeNotice] = []
        for notice in self.source.poll(self.clock, wait):
            if notice.event_id in self._done:
                continue
            node = self.writer.read()
            done = self.writer.apply(node, publish.plan(node, notice, self.clock()))
            self.source.published(notice)
            self._done.add(notice.event_id)
            published.append(notice)
            LOG.info(
                "%s notice %s published (%s): %s",
                notice.cloud,
                notice.event_id,
                ", ".join(done) or "already on the node",
                publish.message_of(notice),
            )
        return published

    def step(self) -> bool:
        """A round whose errors are logged; True when it went through."""
        try:
            self.round()
        except (MetadataError, KubeClientError) as error:
            message = str(error)
            if message != self._last_error:
                LOG.warning("notice poll failed (retrying every %.0fs): %s", self.interval, message)
            self._last_error = message
            return False
        if self._last_error:
            LOG.info("notice poll works again")
        self._last_error = ""
        return True

    def run(self, stop: Callable[[], bool], sleep: Callable[[float], object]) -> None:
        """Rounds until `stop()`, one per interval: a round that took less (a short poll, a long poll
        answered at once, an error) is followed by a sleep for the rest of it."""
        while not stop():
            started = self.clock()
            self.step()
            rest = self.interval - (self.clock() - started)
            if rest > 0:
                sleep(rest)
