"""`GET /api/v1/clusters/{id}/series`: a cluster's time series of key figures (`series.py`), averaged
per step, for the caller's tenant only.

No `from __future__ import annotations` here: the handler's dependency is a local of `router`, which
FastAPI can only see in an annotation evaluated when the handler is defined.
"""

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query
from pydantic import BaseModel, Field

from shipshape.backend import series
from shipshape.backend.store import repository as repo
from shipshape.backend.store import series as store

if TYPE_CHECKING:
    from shipshape.backend.app import Backend

# At most this many buckets in one answer (ask for a larger step over a long range).
MAX_POINTS = 10_000
MAX_STEP = 31 * 86_400
DEFAULT_RANGE = timedelta(days=1)


class SeriesPointOut(BaseModel):
    """The averages of one step-aligned bucket; null where no point in it had the figure."""

    at: datetime = Field(description="start of the bucket (UTC, aligned to multiples of the step)")
    nodes: float | None = Field(description="nodes in the cluster")
    pods: float | None = Field(description="pods in the cluster")
    usd_per_hour: float | None = Field(description="what the nodes cost per hour (spot at spot prices)")
    on_demand_usd_per_hour: float | None = Field(description="what the same nodes cost all on-demand")
    spot_share_pct: float | None = Field(description="share of workload replicas on spot nodes, in %")
    startup_p50_seconds: float | None = Field(description="pod start-up (created → Ready), median")
    startup_p99_seconds: float | None = Field(description="pod start-up (created → Ready), 99th percentile")
    cpu_requested_ratio: float | None = Field(description="CPU requested by running pods over allocatable")
    memory_requested_ratio: float | None = Field(
        description="memory requested by running pods over allocatable"
    )
    cpu_used_ratio: float | None = Field(
        description="the nodes' mean CPU use in the newest usage slot (metrics.k8s.io NodeMetrics) over "
        "the allocatable of the nodes sampled; null without current usage"
    )
    memory_used_ratio: float | None = Field(
        description="the nodes' highest memory working set in the newest usage slot over the allocatable "
        "of the nodes sampled; null without current usage"
    )


class SeriesOut(BaseModel):
    cluster_id: str
    since: datetime
    until: datetime
    step_seconds: int
    points: list[SeriesPointOut]


def _utc(name: str, moment: datetime) -> datetime:
    try:
        return series.utc(moment)
    except OverflowError:
        raise HTTPException(400, f"{name} is out of range") from None


def _window(
    now: datetime, since: datetime | None, until: datetime | None, step: int | None
) -> tuple[datetime, datetime, int]:
    end = _utc("until", until) if until is not None else now
    if since is not None:
        start = _utc("since", since)
    else:
        try:
            start = end - DEFAULT_RANGE
        except OverflowError:
            start = datetime.min.replace(tzinfo=UTC)
    if start >= end:
        raise HTTPException(400, "since must be before until")
    chosen = step if step is not None else series.default_step(start, end)
    if (end - start).total_seconds() / chosen > MAX_POINTS:
        raise HTTPException(400, f"more than {MAX_POINTS} points: ask for a larger step or a shorter range")
    return start, end, chosen


def router(backend: "Backend", user: Callable[..., Any]) -> APIRouter:
    """The series endpoint over `backend`; `user` is the API's dependency for a user API key."""
    from shipshape.backend.app import ErrorOut  # the API's own error body (app.py includes this router)

    routes = APIRouter()

    @routes.get(
        "/api/v1/clusters/{cluster_id}/series",
        response_model=SeriesOut,
        responses={400: {"model": ErrorOut}, 404: {"model": ErrorOut}},
    )
    def cluster_series(
        cluster_id: str,
        principal: Annotated[repo.UserPrincipal, Depends(user)],
        since: Annotated[
            datetime | None, Query(description="from this time (RFC 3339; default: a day before until)")
        ] = None,
        until: Annotated[
            datetime | None, Query(description="up to this time, excluded (default: now)")
        ] = None,
        step: Annotated[
            int | None,
            Query(
                ge=60,
                le=MAX_STEP,
                multiple_of=60,
                description="seconds per point, a multiple of 60 (default: the smallest of 1 min, "
                "5 min, 15 min, 1 h, 6 h, 1 day giving at most 1,440 points)",
            ),
        ] = None,
    ) -> SeriesOut:
        """The cluster's key figures over time: one average per `step`, for the buckets that have
        data (a point is written per minute in which a push was applied; after the minute window
        only hourly averages are kept)."""
        start, end, chosen = _window(backend.now(), since, until, step)
        with backend.transaction() as session:
            rows = store.points(session, principal.org_id, cluster_id, start, end)
            found = series.buckets(rows, chosen)
        return SeriesOut(
            cluster_id=cluster_id,
            since=start,
            until=end,
            step_seconds=chosen,
            points=[SeriesPointOut(at=b.at, **b.figures) for b in found],
        )

    return routes
