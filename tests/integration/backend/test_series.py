"""Per-cluster time series: the workers write a point a minute from the dashboard's own summary, once
per (cluster, minute) whoever writes it; the API averages per step for the caller's tenant only;
retention averages old minutes into hours and deletes what is past it. SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import event, func, select

from shipshape.backend import analysis, series, service, summary
from shipshape.backend.app import create_app
from shipshape.backend.settings import BackendSettings
from shipshape.backend.store import repository as repo
from shipshape.backend.store.models import Push, SeriesPoint
from shipshape.contracts.usage import USAGE_SCHEMA
from tests.integration.backend.conftest import Harness, delta

pytestmark = pytest.mark.integration
T0 = datetime(2026, 11, 20, 9, 30, 12, tzinfo=UTC)


class Clock:
    def __init__(self, moment: datetime) -> None:
        self.moment = moment

    def __call__(self) -> datetime:
        return self.moment


@contextlib.asynccontextmanager
async def clocked(settings: BackendSettings, clock: Clock) -> AsyncIterator[Harness]:
    """As `conftest.harness`, on `clock`."""
    backend = await service.build(settings)
    backend.now = clock
    workers = service.workers_for(backend)
    app = create_app(backend)
    try:
        async with (
            workers.running(2),
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://backend") as client,
        ):
            yield Harness(backend, workers, client)
    finally:
        await backend.queue.close()
        backend.engine.dispose()


def node(name: str, capacity: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "node.kubernetes.io/instance-type": "m5.large",
                "topology.kubernetes.io/zone": "us-east-1a",
                "node.kubernetes.io/capacity": capacity,
            },
        },
        "status": {
            "allocatable": {"cpu": "2", "memory": "8Gi"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod(name: str, node_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "shop",
            "ownerReferences": [{"kind": "ReplicaSet", "name": "web-1", "controller": True}],
        },
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "app", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}],
        },
        "status": {"phase": "Running"},
    }


def state(sequence: int, pods: int) -> dict[str, Any]:
    """Two nodes (one spot), `pods` pods of one workload spread over them."""
    return {
        "schema": "shipshape.dev/snapshot/v1",
        "sequence": sequence,
        "taken_at": T0.isoformat(),
        "objects": {
            "nodes": [node("spot-1", "spot"), node("od-1", "on-demand")],
            "pods": [pod(f"web-{i}", "spot-1" if i % 2 else "od-1") for i in range(pods)],
        },
    }


def stored_points(h: Harness, cluster_id: str) -> list[SeriesPoint]:
    with h.backend.transaction() as session:
        return list(
            session.scalars(
                select(SeriesPoint).where(SeriesPoint.cluster_id == cluster_id).order_by(SeriesPoint.at)
            )
        )


async def points_once(h: Harness, cluster_id: str, count: int, within: float = 20.0) -> list[SeriesPoint]:
    """The cluster's points once there are `count` (the workers write them after applying a push)."""
    deadline = asyncio.get_running_loop().time() + within
    while len(found := stored_points(h, cluster_id)) < count:
        assert asyncio.get_running_loop().time() < deadline, f"{len(found)} points, not {count}"
        await asyncio.sleep(0.02)
    return found


async def test_a_point_a_minute_from_the_summary_and_idempotent_per_minute(database_url: str) -> None:
    clock = Clock(T0)
    async with clocked(BackendSettings(db=database_url, analysis_seconds=0), clock) as h:
        t = h.tenant("acme")
        assert (await h.push(t.agent_token, state(1, pods=4))).status_code == 202
        await h.settled(t.cluster_id, 1)
        # The point is taken soon after the push, apart from its apply (in the analyses' thread).
        await points_once(h, t.cluster_id, 1)
        # Another push in the same minute: still one point, the minute's first.
        clock.moment = T0 + timedelta(seconds=30)
        changes = [("ADDED", "pods", pod("web-9", "spot-1"))]
        assert (await h.push(t.agent_token, delta(2, 1, changes))).status_code == 202
        await h.settled(t.cluster_id, 2)
        await asyncio.sleep(0.2)  # time enough for a second point, if one were written
        (point,) = await points_once(h, t.cluster_id, 1)
        assert series.utc(point.at) == datetime(2026, 11, 20, 9, 30, tzinfo=UTC)
        assert point.resolution_seconds == 60

        # The point holds the summary's figures of the state it was taken from.
        objects = {"nodes": [node("spot-1", "spot"), node("od-1", "on-demand")]}
        objects["pods"] = [pod(f"web-{i}", "spot-1" if i % 2 else "od-1") for i in range(4)]
        figures = summary.summarize(objects)
        assert point.usd_per_hour == figures["cost"]["usd_per_hour"] > 0
        assert point.on_demand_usd_per_hour == figures["cost"]["on_demand_usd_per_hour"]
        assert point.spot_share_pct == 50.0
        assert (point.cpu_requested_ratio, point.memory_requested_ratio) == (0.5, 0.25)
        assert point.cpu_used_ratio is None and point.memory_used_ratio is None
        assert (point.nodes, point.pods) == (2, 4)

        # The next minute gets its own point, of the state then.
        clock.moment = T0 + timedelta(minutes=1)
        changes = [("ADDED", "pods", pod("web-10", "spot-1"))]
        assert (await h.push(t.agent_token, delta(3, 2, changes))).status_code == 202
        await h.settled(t.cluster_id, 3)
        points = await points_once(h, t.cluster_id, 2)
        assert [p.pods for p in points] == [4, 6]
        assert points[1].spot_share_pct == round(100 * 4 / 6, 1)

        # A second writer of the same minute (another worker process) adds nothing, and reads none of
        # the cluster's objects to find that out.
        other = series.Recorder(h.backend.sessions, clock)
        statements: list[str] = []

        def seen(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
            # this thread's statements only: the workers' analyses read the cluster's objects meanwhile
            if threading.get_ident() == caller:
                statements.append(statement)

        caller = threading.get_ident()

        event.listen(h.backend.engine, "before_cursor_execute", seen)
        try:
            assert other.record_if_due(t.cluster_id) is False
        finally:
            event.remove(h.backend.engine, "before_cursor_execute", seen)
        assert not [s for s in statements if "cluster_objects" in s], statements
        assert len(stored_points(h, t.cluster_id)) == 2


async def test_a_clusters_point_waits_for_its_analysis_and_reads_the_state_it_read(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both read the cluster's whole state: the point comes right after the analysis that is waiting
    (then the worker's copy of the objects is current, and the point takes no object again)."""
    order: list[str] = []

    def watched(what: str, original: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            order.append(what)
            return original(*args, **kwargs)

        return call

    monkeypatch.setattr(analysis, "analyze_cluster", watched("analysis", analysis.analyze_cluster))
    monkeypatch.setattr(series.Recorder, "record", watched("point", series.Recorder.record))
    clock = Clock(T0)
    async with clocked(BackendSettings(db=sqlite_url, analysis_seconds=1.5), clock) as h:
        assert h.workers.kept is not None
        t = h.tenant("acme")
        assert (await h.push(t.agent_token, state(1, pods=4))).status_code == 202
        await points_once(h, t.cluster_id, 1)
        assert order == ["analysis", "point"]
        # The next minute, inside the analysis window: the point waits for the analysis.
        clock.moment = T0 + timedelta(minutes=1)
        read, noted = h.workers.kept.bodies_read, h.workers.kept.objects_noted
        changes = [("ADDED", "pods", pod("web-9", "spot-1"))]
        assert (await h.push(t.agent_token, delta(2, 1, changes))).status_code == 202
        points = await points_once(h, t.cluster_id, 2)
        assert order == ["analysis", "point", "analysis", "point"]
        assert [p.pods for p in points] == [4, 5]
        # The new pod, once, from the apply of this process (`ObjectsCache.note`): nothing parsed.
        assert (h.workers.kept.bodies_read, h.workers.kept.objects_noted) == (read, noted + 1)


async def usage_applied(h: Harness, cluster_id: str, count: int, within: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while True:
        with h.backend.transaction() as session:
            applied = session.scalar(
                select(func.count())
                .select_from(Push)
                .where(
                    Push.cluster_id == cluster_id, Push.schema_name == USAGE_SCHEMA, Push.outcome == "applied"
                )
            )
        if applied == count:
            return
        assert asyncio.get_running_loop().time() < deadline, f"{applied} usage reports applied, not {count}"
        await asyncio.sleep(0.02)


def usage(start: datetime, nodes: dict[str, tuple[float, float]]) -> dict[str, Any]:
    """A usage report of one 5-minute bucket (the cluster's clock) with these nodes' (CPU mean in
    cores, memory peak in GiB)."""
    return {
        "schema": "shipshape.dev/usage/v1",
        "bucket_start": start.isoformat(),
        "bucket_seconds": 300,
        "taken_at": (start + timedelta(seconds=300)).isoformat(),
        "nodes": [
            {"name": name, "samples": 10, "cpu_mean": cpu, "cpu_max": cpu, "memory_max": memory * 2**30}
            for name, (cpu, memory) in nodes.items()
        ],
    }


async def test_used_ratios_are_the_newest_usage_slot_of_the_nodes_over_their_allocatable(
    database_url: str,
) -> None:
    clock = Clock(T0)
    async with clocked(BackendSettings(db=database_url, analysis_seconds=0), clock) as h:
        t = h.tenant("acme")
        user = {"Authorization": f"Bearer {t.api_key}"}
        assert (await h.push(t.agent_token, state(1, pods=4))).status_code == 202
        await h.settled(t.cluster_id, 1)
        (first,) = await points_once(h, t.cluster_id, 1)
        assert first.cpu_used_ratio is None and first.memory_used_ratio is None  # no usage yet

        # Two buckets of the cluster's clock (hours behind the backend's: only the order counts); a
        # node the state does not hold ("gone-1") adds neither usage nor allocatable.
        u0 = datetime(2026, 11, 20, 6, 0, tzinfo=UTC)
        older = usage(u0, {"spot-1": (1.9, 7.5), "od-1": (1.9, 7.5)})
        newer = usage(
            u0 + timedelta(minutes=5), {"spot-1": (0.5, 2.0), "od-1": (0.3, 1.0), "gone-1": (4.0, 9.0)}
        )
        for report in (newer, older):  # out of order: the newest slot wins all the same
            key = f"usage-{int(datetime.fromisoformat(report['bucket_start']).timestamp())}"
            assert (await h.push(t.agent_token, report, key)).status_code == 202
        await usage_applied(h, t.cluster_id, 2)
        # A push in the next minute writes its point, with both reports stored.
        clock.moment = T0 + timedelta(minutes=1)
        assert (await h.push(t.agent_token, delta(2, 1, []))).status_code == 202
        await h.settled(t.cluster_id, 2)
        second = (await points_once(h, t.cluster_id, 2))[1]
        # (0.5 + 0.3) cores of 2 + 2; (2 + 1) GiB of 8 + 8
        assert (second.cpu_used_ratio, second.memory_used_ratio) == (0.2, 0.1875)
        assert (second.cpu_requested_ratio, second.memory_requested_ratio) == (0.5, 0.25)

        # The cluster page computes the same figures (one computation for both).
        page = (await h.client.get(f"/api/v1/clusters/{t.cluster_id}/summary", headers=user)).json()
        assert page["utilisation"]["cpu_used_ratio"] == 0.2
        assert page["utilisation"]["memory_used_ratio"] == 0.1875
        body = (await h.client.get(f"/api/v1/clusters/{t.cluster_id}/series", headers=user)).json()
        assert [p["cpu_used_ratio"] for p in body["points"]] == [None, 0.2]

        # Usage that stopped coming (no report in three usage steps, the backend's clock) is not current.
        clock.moment = T0 + timedelta(minutes=17)
        assert (await h.push(t.agent_token, delta(3, 2, []))).status_code == 202
        await h.settled(t.cluster_id, 3)
        third = (await points_once(h, t.cluster_id, 3))[2]
        assert third.cpu_used_ratio is None and third.memory_used_ratio is None
        assert third.cpu_requested_ratio == 0.5


async def test_the_api_averages_per_step_for_the_tenant_only(database_url: str) -> None:
    clock = Clock(T0)
    async with clocked(BackendSettings(db=database_url), clock) as h:
        a, b = h.tenant("acme"), h.tenant("globex")
        start = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)
        with h.backend.transaction() as session:
            for minute in range(10):
                row = {name: None for name in series.FIGURES}
                row.update(nodes=2.0, pods=float(minute), usd_per_hour=1.0 + minute, spot_share_pct=50.0)
                at = start + timedelta(minutes=minute)
                series.store.add_points(
                    session, [{"cluster_id": a.cluster_id, "at": at, "resolution_seconds": 60, **row}]
                )
        user = {"Authorization": f"Bearer {a.api_key}"}
        path = f"/api/v1/clusters/{a.cluster_id}/series"
        window = {"since": start.isoformat(), "until": (start + timedelta(minutes=10)).isoformat()}

        minutes = await h.client.get(path, params=window, headers=user)
        assert minutes.status_code == 200, minutes.text
        body = minutes.json()
        assert body["step_seconds"] == 60 and len(body["points"]) == 10
        assert [p["usd_per_hour"] for p in body["points"]] == [1.0 + m for m in range(10)]
        assert body["points"][0]["startup_p99_seconds"] is None

        fives = (await h.client.get(path, params={**window, "step": 300}, headers=user)).json()
        assert [p["usd_per_hour"] for p in fives["points"]] == [3.0, 8.0]
        assert [p["at"] for p in fives["points"]] == ["2026-11-20T09:00:00Z", "2026-11-20T09:05:00Z"]

        # Defaults: the last day up to now, by the minute.
        recent = (await h.client.get(path, headers=user)).json()
        assert recent["step_seconds"] == 60 and len(recent["points"]) == 10

        # Another tenant's cluster does not exist for this key; an agent token is not a user.
        other = f"/api/v1/clusters/{b.cluster_id}/series"
        assert (await h.client.get(other, headers=user)).status_code == 404
        assert (await h.client.get(path, headers={"Authorization": f"Bearer {b.api_key}"})).status_code == 404
        assert (
            await h.client.get(path, headers={"Authorization": f"Bearer {a.agent_token}"})
        ).status_code == 403
        assert (await h.client.get(path)).status_code == 401

        # Bad windows and steps.
        backwards = {"since": window["until"], "until": window["since"]}
        assert (await h.client.get(path, params=backwards, headers=user)).status_code == 400
        assert (await h.client.get(path, params={"step": 90}, headers=user)).status_code == 422
        assert (await h.client.get(path, params={"step": 0}, headers=user)).status_code == 422
        year = {"since": "2020-01-01T00:00:00Z", "until": "2026-01-01T00:00:00Z", "step": 60}
        assert (await h.client.get(path, params=year, headers=user)).status_code == 400
        edge = {"since": "0001-01-01T00:00:00+05:00"}
        assert (await h.client.get(path, params=edge, headers=user)).status_code == 400

        paths = (await h.client.get("/openapi.json")).json()["paths"]
        operation = paths["/api/v1/clusters/{cluster_id}/series"]["get"]
        assert {p["name"] for p in operation["parameters"]} >= {"cluster_id", "since", "until", "step"}


async def test_adding_points_counts_the_new_ones_only(database_url: str) -> None:
    clock = Clock(T0)
    async with clocked(BackendSettings(db=database_url), clock) as h:
        t = h.tenant("acme")
        start = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)

        def row(minute: int) -> dict[str, Any]:
            figures: dict[str, Any] = {name: None for name in series.FIGURES} | {"nodes": 1.0, "pods": 1.0}
            at = start + timedelta(minutes=minute)
            return {"cluster_id": t.cluster_id, "at": at, "resolution_seconds": 60, **figures}

        with h.backend.transaction() as session:
            assert series.store.add_points(session, [row(0), row(1)]) == 2
        with h.backend.transaction() as session:
            # One stored already, one new: the count says what was written.
            assert series.store.add_points(session, [row(1), row(2)]) == 1
            assert series.store.add_points(session, [row(2)]) == 0
        assert len(stored_points(h, t.cluster_id)) == 3


async def test_retention_averages_old_minutes_into_hours_and_deletes_the_oldest(database_url: str) -> None:
    clock = Clock(T0)
    settings = BackendSettings(db=database_url, series_minute_days=1, series_retention_days=30)
    async with clocked(settings, clock) as h:
        t = h.tenant("acme")
        old_hour = datetime(2026, 11, 18, 5, 0, tzinfo=UTC)  # older than a day: averaged
        recent = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)  # inside the day: kept by the minute
        ancient = datetime(2026, 9, 1, 0, 0, tzinfo=UTC)  # past the retention: deleted
        rows = []
        for at, values in (
            *((old_hour + timedelta(minutes=m), m) for m in range(60)),
            *((old_hour + timedelta(hours=1, minutes=m), 100) for m in range(3)),
            *((recent + timedelta(minutes=m), 7) for m in range(5)),
        ):
            row: dict[str, Any] = {name: None for name in series.FIGURES}
            row.update(nodes=1.0, pods=float(values), usd_per_hour=float(values))
            rows.append({"cluster_id": t.cluster_id, "at": at, "resolution_seconds": 60, **row})
        ancient_row = {name: None for name in series.FIGURES} | {"nodes": 1.0, "pods": 1.0}
        rows.append({"cluster_id": t.cluster_id, "at": ancient, "resolution_seconds": 3600, **ancient_row})
        with h.backend.transaction() as session:
            series.store.add_points(session, rows)

        recorder = series.Recorder(
            h.backend.sessions, clock, minute_window=timedelta(days=1), retention=timedelta(days=30)
        )
        pruned = recorder.prune(clock())
        assert pruned == series.Pruned(downsampled=63, deleted=1)
        points = stored_points(h, t.cluster_id)
        hourly = [(series.utc(p.at), p.pods) for p in points if p.resolution_seconds == 3600]
        assert hourly == [(old_hour, 29.5), (old_hour + timedelta(hours=1), 100.0)]
        assert [p.pods for p in points if p.resolution_seconds == 60] == [7.0] * 5
        # Again: nothing more to do, nothing changes.
        assert recorder.prune(clock()) == series.Pruned(0, 0)
        assert len(stored_points(h, t.cluster_id)) == 7

        # The API serves hours and minutes side by side.
        user = {"Authorization": f"Bearer {t.api_key}"}
        params = {"since": "2026-11-18T00:00:00Z", "until": "2026-11-21T00:00:00Z", "step": 3600}
        body = (
            await h.client.get(f"/api/v1/clusters/{t.cluster_id}/series", params=params, headers=user)
        ).json()
        assert [(p["at"], p["pods"]) for p in body["points"]] == [
            ("2026-11-18T05:00:00Z", 29.5),
            ("2026-11-18T06:00:00Z", 100.0),
            ("2026-11-20T08:00:00Z", 7.0),
        ]
        # Deleting the cluster deletes its series.
        with h.backend.transaction() as session:
            session.delete(repo.get_cluster(session, t.org_id, t.cluster_id))
        with h.backend.transaction() as session:
            assert session.scalar(select(func.count()).select_from(SeriesPoint)) == 0


@pytest.mark.integration
def test_a_point_another_process_is_computing_is_not_computed_again() -> None:
    """On PostgreSQL a worker process claims the minute's point of a cluster while it computes it
    (an advisory lock for its transaction): another process asking for the same point meanwhile gets
    False without reading the cluster, and once the first is done, finds the point written."""
    from shipshape.backend.store import engine as store_engine
    from shipshape.backend.store import series as store
    from tests.integration.backend.conftest import postgres_database

    with postgres_database() as url:
        engine = store_engine.create(url)
        store_engine.migrate(engine)
        sessions = store_engine.sessions(engine)
        try:
            with sessions.begin() as session:
                org, _ = repo.create_organization(session, "acme", T0)
                cluster_id = repo.create_cluster(session, org.id, "prod", T0)[0].id
            minute = series.floor(T0, series.MINUTE)
            recorder = series.Recorder(sessions, lambda: T0)
            with sessions.begin() as first:
                assert store.claim_point(first, cluster_id, minute)
                with sessions.begin() as second:
                    assert recorder.record(second, cluster_id, minute) is False
                    assert not store.has_point(second, cluster_id, minute, series.MINUTE)  # not computed
                    # another minute is not claimed
                    assert store.claim_point(second, cluster_id, minute + timedelta(minutes=1))
                recorder.record(first, cluster_id, minute)
            with sessions.begin() as session:
                assert session.scalar(select(func.count()).select_from(SeriesPoint)) == 1
                assert recorder.record(session, cluster_id, minute) is False
                assert session.scalar(select(func.count()).select_from(SeriesPoint)) == 1
        finally:
            engine.dispose()
