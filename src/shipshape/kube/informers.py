"""List + watch, one thread per kind, through the official client: the informer kit every process
that follows a cluster uses (the controller's cache, the agent's mirror, `startup serve`).

An informer lists its kind (paged) and hands the whole list to its sink (`replace`), then watches
from the list's resourceVersion with bookmarks and hands each event to the sink (`apply`). A 410
Gone (the version is too old) lists again; an API server that cannot be reached is retried with an
exponential back-off (0.5 s doubling up to `backoff_max`), so an outage is ridden out and the sink
catches up from where it stopped. Sinks do their own locking: the informer calls them from its
thread.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import urllib3
from kubernetes import client as k8s
from kubernetes.watch.watch import iter_resp_lines

from shipshape.kube import client

Obj = dict[str, Any]
LOG = logging.getLogger("shipshape.kube.informers")
PAGE_SIZE = 500
# Seconds one watch request lasts before the server closes it (the informer then re-watches).
WATCH_SECONDS = 60
BACKOFF_START, BACKOFF_MAX = 0.5, 30.0
# Seconds a list call may take (connect, read).
REQUEST_TIMEOUT = (5.0, 30.0)


class Sink(Protocol):
    """Where an informer delivers: the full list after each (re)list, then each watch event."""

    def replace(self, kind: str, items: list[Obj]) -> None: ...

    def apply(self, event: Obj, kind: str) -> None: ...


@runtime_checkable
class PagedSink(Sink, Protocol):
    """A sink that takes a (re)list page by page, as the pages arrive, so that a long list (30,000
    pods, 100,000 events) is never held whole: `replace_pages` consumes `pages` once, holding no lock
    while it does (a page is fetched from the API server on each step), and a failed fetch raises
    from it, before anything was replaced."""

    def replace_pages(self, kind: str, pages: Iterator[list[Obj]]) -> None: ...


class Gone(Exception):
    """The watch's resourceVersion is too old: list again."""


class NotServed(Exception):
    """The API server does not serve this kind (404 on the list: an API group the cluster lacks), or an
    optional kind may not be read (403)."""


# Seconds between lists of a kind that is not served (or, optional, not readable): a CRD installed
# later (Karpenter's NodePools) is picked up within this time.
NOT_SERVED_RETRY_SECONDS = 60.0


class WatchFailed(Exception):
    """The API server answered the list or watch with an error (retried after a back-off)."""


@dataclass(frozen=True, slots=True)
class Source:
    """A kind and the client's list function for it (`CoreV1Api.list_node`, …)."""

    kind: str
    list_function: Callable[..., Any]
    # A kind the caller may not be allowed to read: a 403 counts as none of it, like a 404.
    optional: bool = False


class Informer:
    """Keeps one kind of a sink in step with the API server until `stop` is set."""

    def __init__(
        self, source: Source, sink: Sink, stop: threading.Event, backoff_max: float = BACKOFF_MAX
    ) -> None:
        self.source = source
        self.sink = sink
        self.stop = stop
        self.backoff_max = backoff_max
        self.synced = threading.Event()
        self.relists = 0
        self._response: Any = None
        self.thread = threading.Thread(target=self._run, name=f"informer-{source.kind}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        """Break a watch that is waiting for events (called after `stop` is set)."""
        response = self._response
        if response is not None:
            try:
                # urllib3's shutdown() interrupts a read blocked in another thread; close() does not.
                shutdown = getattr(response, "shutdown", None)
                if shutdown is not None:
                    shutdown()
                response.close()
            except Exception:  # closing from another thread may race the reader; it stops either way
                LOG.debug("closing the %s watch", self.source.kind, exc_info=True)

    def _run(self) -> None:
        backoff = BACKOFF_START
        version: str | None = None
        while not self.stop.is_set():
            try:
                if version is None:
                    version = self._list()
                    self.synced.set()
                version = self._watch(version)
                backoff = BACKOFF_START
            except Gone:
                LOG.info("%s watch expired; listing again", self.source.kind)
                version = None
            except NotServed:
                # Counts as an empty kind (synced), asked again now and then (an API group installed later).
                if not self.synced.is_set():
                    LOG.info("%s is not served by this cluster; treating it as empty", self.source.kind)
                self.sink.replace(self.source.kind, [])  # (gone again: whatever was there is gone)
                self.synced.set()
                version = None
                self.stop.wait(NOT_SERVED_RETRY_SECONDS)
            except Exception as error:  # unreachable, an error status, a broken stream: retry
                if self.stop.is_set():
                    break
                LOG.warning("%s informer: %s; retrying in %.1fs", self.source.kind, error, backoff)
                self.stop.wait(backoff)
                backoff = min(self.backoff_max, backoff * 2)

    def _list(self) -> str:
        versions: list[str] = []
        if isinstance(self.sink, PagedSink):
            self.sink.replace_pages(self.source.kind, self._pages(versions))
        else:
            self.sink.replace(self.source.kind, [item for page in self._pages(versions) for item in page])
        if not versions:
            raise WatchFailed(f"list of {self.source.kind} was not read to its end")
        self.relists += 1
        return versions[0]

    def _pages(self, versions: list[str]) -> Iterator[list[Obj]]:
        """The list's pages; once the last one is read, its resourceVersion goes in `versions`."""
        token: str | None = None
        while True:
            extra: dict[str, Any] = {"limit": PAGE_SIZE}
            if token:
                extra["_continue"] = token
            body = _call(self.source, **extra)
            metadata = body.get("metadata") or {}
            token = metadata.get("continue")
            yield body.get("items") or []
            if not token:
                versions.append(str(metadata.get("resourceVersion") or ""))
                return

    def _watch(self, version: str) -> str:
        try:
            response = self.source.list_function(
                watch=True,
                resource_version=version,
                allow_watch_bookmarks=True,
                timeout_seconds=WATCH_SECONDS,
                _preload_content=False,
                _request_timeout=(REQUEST_TIMEOUT[0], WATCH_SECONDS + 30),
            )
        except k8s.ApiException as error:
            if error.status == 410:
                raise Gone() from error
            raise WatchFailed(f"watch of {self.source.kind}: {error.status} {error.reason}") from error
        self._response = response
        try:
            for event in _events(response):
                if self.stop.is_set():
                    break
                kind = event.get("type")
                obj = event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise Gone()
                    raise WatchFailed(f"watch of {self.source.kind}: {obj.get('message')}")
                version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                if kind == "BOOKMARK":
                    continue
                self.sink.apply(event, self.source.kind)
        finally:
            self._response = None
            response.release_conn()
        return version


def _call(source: Source, **kwargs: Any) -> Obj:
    try:
        response = source.list_function(_preload_content=False, _request_timeout=REQUEST_TIMEOUT, **kwargs)
    except k8s.ApiException as error:
        if error.status == 410:
            raise Gone() from error
        if error.status == 404 or (error.status == 403 and source.optional):
            raise NotServed() from error
        raise WatchFailed(f"list of {source.kind}: {error.status} {error.reason}") from error
    except (OSError, urllib3.exceptions.HTTPError) as error:  # connection refused, TLS, timeouts
        raise WatchFailed(client.unreachable(error)) from error
    raw = response.data
    body = json.loads(raw) if raw else {}
    return body if isinstance(body, dict) else {}


def _events(response: Any) -> Iterator[Obj]:
    for line in iter_resp_lines(response):  # type: ignore[no-untyped-call]
        if not line.strip():
            continue
        event = json.loads(line)
        if isinstance(event, dict):
            yield event


class Informers:
    """Several kinds watched together into one sink."""

    def __init__(self, sources: Sequence[Source], sink: Sink, backoff_max: float = BACKOFF_MAX) -> None:
        self.stop_event = threading.Event()
        self.informers = [Informer(source, sink, self.stop_event, backoff_max) for source in sources]

    def start(self) -> None:
        for informer in self.informers:
            informer.start()

    def wait_synced(self, timeout: float) -> bool:
        """Whether every kind was listed once within `timeout` real seconds."""
        deadline = threading.Event()
        timer = threading.Timer(timeout, deadline.set)
        timer.start()
        try:
            for informer in self.informers:
                while not informer.synced.wait(0.05):
                    if deadline.is_set() or self.stop_event.is_set():
                        return False
            return True
        finally:
            timer.cancel()

    def stop(self) -> None:
        self.stop_event.set()
        for informer in self.informers:
            informer.close()
        for informer in self.informers:
            if informer.thread.ident is not None:  # started (a process may stop before it started them)
                informer.thread.join(5)
