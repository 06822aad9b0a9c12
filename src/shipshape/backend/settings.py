"""The backend's settings: flags, then `SHIPSHAPE_BACKEND_*` environment variables, then a YAML file,
then the defaults below (the embedded ones: SQLite and the in-process queue in the working folder)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_DB = "sqlite:///.shipshape/backend.db"


class SettingsError(Exception):
    """The settings file or a value is invalid."""


class BackendSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SHIPSHAPE_BACKEND_", extra="forbid", frozen=True)

    db: str = Field(default=DEFAULT_DB, description="database URL: postgresql://… or sqlite:///path")
    queue: str = Field(
        default="memory://", description="work queue: memory:// (in-process workers) or nats://host:port"
    )
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    # HTTPS in the API process itself (PEM files, as uvicorn's --ssl-certfile/--ssl-keyfile); at
    # scale TLS usually ends at the ingress instead. Both or neither.
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    # A push as sent (gzip or not) and once inflated; bigger ones get 413 and store nothing.
    max_push_bytes: int = Field(default=16 * 1024 * 1024, gt=0)
    max_inflated_bytes: int = Field(default=256 * 1024 * 1024, gt=0)
    # Requests per minute per credential (a token bucket of this size, refilled continuously).
    rate_limit_per_minute: int = Field(default=1200, gt=0)
    # Raw pushes are kept this long after they are processed; the cluster state is kept.
    retention_hours: float = Field(default=72.0, gt=0)
    # How often workers look for pushes stored but never queued (an API process killed in between).
    sweep_seconds: float = Field(default=10.0, gt=0)
    # A cluster's analyzers run at most this often (seconds), after a push changed its state.
    analysis_seconds: float = Field(default=10.0, ge=0)
    # The nice value of the workers' analyses thread (Linux: that thread's alone), so that analyses give
    # way to applying pushes and to the API when the CPUs are busy; None: the process's own.
    analysis_nice: int | None = Field(default=10, ge=0, le=19)
    # How long an instruction handed to an agent is its own before it is offered again.
    instruction_lease_seconds: float = Field(default=120.0, gt=0)
    # Objects of the clusters a worker process analyses, kept between analyses so that each reads only
    # the rows written since the one before (`store.objects.ObjectsCache`): at most this many in all
    # (a parsed pod takes a few KiB).
    kept_objects: int = Field(default=60_000, ge=0)
    # In-process workers with the memory queue (the API runs them itself); with NATS a worker process
    # runs a consumer per partition it holds instead (`partitions.py`).
    workers: int = Field(default=2, ge=1, le=64)
    # `shipshape worker`: serve /metrics, /healthz and /readyz on this port (on `host`); None: none.
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    # Usage (metrics.k8s.io, from the agents): stored on slots of this many seconds (an agent's bucket
    # must divide it), analysed over a window back from the cluster's newest sample, kept for the
    # retention (counted the same way), analysed at most this often per cluster.
    usage_step_seconds: int = Field(default=300, ge=10, le=3600)
    usage_window_hours: float = Field(default=168.0, gt=0)
    usage_retention_hours: float = Field(default=192.0, gt=0)
    usage_analysis_seconds: float = Field(default=900.0, ge=0)
    # A workload container is right-sized only with this much usage (hours of slots with samples).
    usage_min_history_hours: float = Field(default=24.0, ge=0)
    usage_strategy: Literal["simple", "vpa"] = "simple"

    # Per-cluster time series (`series.py`): a point a minute per cluster, kept this many days, then
    # averaged into a point an hour; the hourly points are deleted after `series_retention_days`.
    series_minute_days: float = Field(default=7.0, gt=0)
    series_retention_days: float = Field(default=400.0, gt=0)
    # Bring the database schema to the newest migration when the process starts. Off where a
    # migrations Job runs before the rollout (`shipshape admin migrate`): the processes then only
    # check it (`/readyz` answers 503 until the schema is current).
    migrate: bool = True

    @model_validator(mode="after")
    def _consistent(self) -> BackendSettings:
        if self.series_minute_days > self.series_retention_days:
            raise ValueError("series_minute_days must not exceed series_retention_days")
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            raise ValueError("ssl_certfile and ssl_keyfile go together")
        for tls_file in (self.ssl_certfile, self.ssl_keyfile):
            if tls_file is not None and not tls_file.is_file():
                raise ValueError(f"{tls_file} is not a file")
        if self.usage_retention_hours < self.usage_window_hours:
            raise ValueError("usage_retention_hours must be at least usage_window_hours")
        return self

    @property
    def usage_fresh(self) -> timedelta:
        """How recent a cluster's newest usage report must be for the cluster page and the series to
        show used ratios: three usage steps (an agent reports once a bucket, a bucket is at most a
        step, and a report may come a little late)."""
        return timedelta(seconds=3 * self.usage_step_seconds)


def load(file: Path | None = None, **flags: Any) -> BackendSettings:
    """Settings from `flags` (those not None), the environment, `file`, the defaults."""
    from_file: dict[str, Any] = {}
    if file is not None:
        try:
            data = yaml.safe_load(file.read_text(encoding="utf-8")) or {}
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
            raise SettingsError(f"cannot read {file}: {error}") from error
        if not isinstance(data, dict):
            raise SettingsError(f"{file}: expected a mapping of settings")
        from_file = data
    given = {k: v for k, v in flags.items() if v is not None}
    try:
        env_and_defaults = BackendSettings()
        merged = {**from_file, **_from_environment(env_and_defaults), **given}
        return BackendSettings.model_validate(merged)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors())
        raise SettingsError(f"invalid backend settings: {problems}") from error


def _from_environment(settings: BackendSettings) -> dict[str, Any]:
    """The fields the environment set (they win over the file)."""
    return {name: getattr(settings, name) for name in settings.model_fields_set}
