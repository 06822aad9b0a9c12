"""The informer's list + watch cycle against a scripted API: watch from the list's version, relist on
410 Gone, retry after the API server cannot be reached."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

from kubernetes.client import ApiException

from shipshape.controller.policy import ControllerConfig
from shipshape.controller.state import ClusterState
from shipshape.controller.state.views import Fanout, Replica
from shipshape.kube.informers import NOT_SERVED_RETRY_SECONDS, Informer, Source

Obj = dict[str, Any]


def node(name: str, rv: str) -> Obj:
    return {"metadata": {"name": name, "resourceVersion": rv, "labels": {}}, "spec": {}}


class ListResponse:
    def __init__(self, items: list[Obj], rv: str) -> None:
        self.data = json.dumps({"metadata": {"resourceVersion": rv}, "items": items}).encode()


class WatchResponse:
    def __init__(self, events: list[Obj], after: threading.Event | None = None) -> None:
        self.events = events
        self.after = after

    def stream(self, amt: Any = None, decode_content: bool = False) -> Iterator[bytes]:
        for event in self.events:
            yield (json.dumps(event) + "\n").encode()
        if self.after is not None:
            self.after.set()

    def release_conn(self) -> None:
        pass

    def close(self) -> None:
        pass


class ScriptedApi:
    """Answers list and watch calls from a script; records the calls' versions."""

    def __init__(self, script: list[Any]) -> None:
        self.script = script
        self.calls: list[tuple[str, str | None]] = []

    def __call__(self, **kwargs: Any) -> Any:
        self.calls.append(("watch" if kwargs.get("watch") else "list", kwargs.get("resource_version")))
        answer = self.script.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_lists_watches_relists_on_gone_and_retries_when_unreachable() -> None:
    stop = threading.Event()
    api = ScriptedApi(
        [
            ListResponse([node("a", "10")], "10"),
            WatchResponse(
                [
                    {"type": "ADDED", "object": node("b", "11")},
                    {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}},
                ]
            ),
            WatchResponse(
                [{"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}}]
            ),
            ConnectionRefusedError("the API server is down"),
            ListResponse([node("b", "20"), node("c", "21")], "21"),
            WatchResponse([{"type": "DELETED", "object": node("b", "22")}], after=stop),
        ]
    )
    cache = ClusterState(ControllerConfig())
    informer = Informer(Source("Node", api), Fanout(Replica(cache)), stop, backoff_max=0.01)
    informer._run()  # on this thread: returns once the script is played and `stop` is set

    assert api.calls == [
        ("list", None),
        ("watch", "10"),
        ("watch", "15"),  # resumed from the bookmark
        ("list", None),  # 410 Gone: list again...
        ("list", None),  # ...after the API server came back
        ("watch", "21"),
    ]
    assert sorted(n["metadata"]["name"] for n in cache.objects("Node")) == ["c"]
    assert informer.relists == 2 and informer.synced.is_set()


class RecordingStop(threading.Event):
    """A stop event whose waits return at once and are recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        return self.is_set()


def test_an_optional_kind_the_server_does_not_serve_counts_as_none_and_is_listed_again_later() -> None:
    stop = RecordingStop()
    nodepool = {"metadata": {"name": "spot", "resourceVersion": "3"}, "spec": {}}
    api = ScriptedApi([ApiException(status=404, reason="Not Found"), ListResponse([nodepool], "3")])
    watch = WatchResponse([], after=stop)
    cache = ClusterState(ControllerConfig())

    def answer(**kwargs: Any) -> Any:
        return watch if kwargs.get("watch") else api(**kwargs)

    informer = Informer(Source("NodePool", answer, optional=True), Fanout(Replica(cache)), stop)
    informer._run()
    assert informer.synced.is_set() and stop.waits == [NOT_SERVED_RETRY_SECONDS]
    assert [n["metadata"]["name"] for n in cache.objects("NodePool")] == ["spot"]
