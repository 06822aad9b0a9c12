"""What the controller process and its webhook process say to each other (`webhook.child`).

Small frozen dataclasses, pickled by `multiprocessing.connection`. Two pipes: the state pipe carries
informer deliveries (`StateChanges`) from the controller to the webhook only; the control pipe
carries the rest both ways: what the loops learnt that the placer reads (risk notices, shortages,
rebalance recommendations), the serving certificate, the metrics, and the stop.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Sample

from shipshape.controller.placement import Pool
from shipshape.controller.state.views import Change

# --- controller -> webhook --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Synced:
    """The end of what a new webhook process is sent before it serves (on each pipe)."""


@dataclass(frozen=True, slots=True)
class StateChanges:
    """Informer deliveries in the order the fan-out received them (a (re)start begins with one
    `replace` per kind: the whole state)."""

    changes: tuple[Change, ...]


@dataclass(frozen=True, slots=True)
class NoticeRecord:
    """One termination notice the risk model counts (`RiskModel.record_notice`)."""

    node: str
    pool: Pool
    at: float


@dataclass(frozen=True, slots=True)
class RiskNotices:
    """Every notice the loops' risk model holds now (it replaces the webhook's whole set)."""

    notices: tuple[NoticeRecord, ...]


@dataclass(frozen=True, slots=True)
class Shortages:
    """Spot pools without capacity now (the fallback loop's `ShortageTracker.shortages`)."""

    pools: frozenset[Pool]


@dataclass(frozen=True, slots=True)
class Recommendations:
    """Spot nodes under a rebalance recommendation and their pools (`NoticeBoard.recommended`)."""

    nodes: tuple[tuple[str, Pool | None], ...]

    @classmethod
    def of(cls, recommended: Mapping[str, Pool | None]) -> Recommendations:
        return cls(tuple(sorted(recommended.items(), key=lambda item: item[0])))

    def mapping(self) -> dict[str, Pool | None]:
        return dict(self.nodes)


@dataclass(frozen=True, slots=True)
class ServingCertificate:
    """Serve this certificate to new connections (after a rotation)."""

    cert_file: str
    key_file: str


@dataclass(frozen=True, slots=True)
class Stop:
    """Stop gracefully: answer the reviews in flight, then exit."""


@dataclass(frozen=True, slots=True)
class SamplesRequest:
    """Send the webhook's metrics now (a scrape of the controller's /metrics)."""

    request: int


@dataclass(frozen=True, slots=True)
class Exposition:
    """The whole process's metrics, text format, answering an `ExpositionRequest`."""

    request: int
    text: bytes


# --- webhook -> controller --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Serving:
    """The webhook process has the state and accepts connections."""

    pid: int


@dataclass(frozen=True, slots=True)
class MetricSample:
    name: str
    labels: tuple[tuple[str, str], ...]
    value: float


@dataclass(frozen=True, slots=True)
class MetricFamily:
    name: str
    documentation: str
    type: str
    unit: str
    samples: tuple[MetricSample, ...]

    @classmethod
    def of(cls, metric: Metric) -> MetricFamily:
        return cls(
            metric.name,
            metric.documentation,
            metric.type,
            metric.unit,
            tuple(
                MetricSample(s.name, tuple(sorted(s.labels.items())), float(s.value)) for s in metric.samples
            ),
        )

    def metric(self) -> Metric:
        metric = Metric(self.name, self.documentation, self.type, self.unit)
        metric.samples = [Sample(s.name, dict(s.labels), s.value) for s in self.samples]
        return metric


@dataclass(frozen=True, slots=True)
class Samples:
    """The webhook's metrics, answering a `SamplesRequest`."""

    request: int
    families: tuple[MetricFamily, ...]


@dataclass(frozen=True, slots=True)
class ExpositionRequest:
    """The webhook's /metrics was scraped: the controller answers with the whole process's metrics,
    these families of the webhook's merged in."""

    request: int
    families: tuple[MetricFamily, ...]


def families(metrics: Iterable[Metric]) -> tuple[MetricFamily, ...]:
    return tuple(MetricFamily.of(metric) for metric in metrics)


def merged(own: Iterable[Metric], other: Iterable[MetricFamily]) -> list[Metric]:
    """`own` with the samples of `other` added: counters and histograms of the two processes sum
    (each process counts what it does: the webhook its admissions, the controller its loops);
    `_created` keeps the earlier time. A family only `other` has is added whole."""
    result: list[Metric] = []
    extra = {family.name: family for family in other}
    for metric in own:
        family = extra.pop(metric.name, None)
        if family is not None:
            values = {(s.name, s.labels): s.value for s in family.samples}
            samples: list[Sample] = []
            for sample in metric.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                theirs = values.pop(key, None)
                if theirs is None:
                    samples.append(sample)
                elif sample.name.endswith("_created"):
                    samples.append(sample._replace(value=min(sample.value, theirs)))
                else:
                    samples.append(sample._replace(value=sample.value + theirs))
            samples.extend(Sample(name, dict(labels), value) for (name, labels), value in values.items())
            metric.samples = samples
        result.append(metric)
    result.extend(family.metric() for family in extra.values())
    return result
