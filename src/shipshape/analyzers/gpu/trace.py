"""A GPU cluster trace as typed columns: the node list and the pod list of the Alibaba GPU trace
(cluster-trace-gpu-v2023, "openb") or any CSV with the same columns.

Nodes: `sn, cpu_milli, memory_mib, gpu, model`. Pods: `name, cpu_milli, memory_mib, num_gpu,
gpu_milli[, gpu_spec]` (extra columns are ignored; `memory_mib` may be absent, `gpu_spec` too).
`gpu_milli` is the share of one GPU in thousandths and applies when `num_gpu == 1`; a pod asking
for several GPUs asks for whole ones (1000 each). `gpu_spec` lists the GPU models a pod accepts,
separated by `|`; empty means any model.

Parsing is pure: it takes rows (mappings of column to text) and gives arrays or a `TraceError`
naming the row and the column.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

MILLI = 1000
MAX_GPUS_PER_NODE = 64
NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "num_gpu", "gpu_milli")

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


class TraceError(ValueError):
    """A trace file that cannot be replayed: the message names the row and the column."""


@dataclass(frozen=True)
class Nodes:
    """The cluster: one entry per node, GPU models as indices into `models` ('' is no GPU)."""

    names: tuple[str, ...]
    cpu_milli: IntArray
    memory_mib: IntArray
    gpus: IntArray
    model: IntArray
    models: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.names)

    @property
    def total_gpus(self) -> int:
        return int(self.gpus.sum())

    @property
    def max_gpus(self) -> int:
        return int(self.gpus.max()) if len(self.gpus) else 0


@dataclass(frozen=True)
class Pods:
    """Pods in trace order. `gpu_milli` is per GPU (1000 for whole GPUs, 0 without GPU);
    `spec` indexes `specs`, the distinct model constraints (() accepts any model)."""

    names: tuple[str, ...]
    cpu_milli: IntArray
    memory_mib: IntArray
    num_gpu: IntArray
    gpu_milli: IntArray
    spec: IntArray
    specs: tuple[tuple[str, ...], ...]

    def __len__(self) -> int:
        return len(self.names)

    @property
    def total_gpu_milli(self) -> IntArray:
        return self.num_gpu * self.gpu_milli

    def take(self, order: IntArray) -> Pods:
        """The pods at `order` (repeats allowed), keeping the constraint table."""
        return Pods(
            names=tuple(self.names[i] for i in order.tolist()),
            cpu_milli=self.cpu_milli[order],
            memory_mib=self.memory_mib[order],
            num_gpu=self.num_gpu[order],
            gpu_milli=self.gpu_milli[order],
            spec=self.spec[order],
            specs=self.specs,
        )

    def allowed(self, nodes: Nodes) -> BoolArray:
        """`allowed[s, m]`: constraint `s` accepts GPU model `m` of `nodes.models`."""
        table = np.zeros((len(self.specs), len(nodes.models)), dtype=np.bool_)
        for s, spec in enumerate(self.specs):
            for m, model in enumerate(nodes.models):
                table[s, m] = not spec or model in spec
        return table


def _int(row: Mapping[str, str], column: str, where: str, *, default: int | None = None) -> int:
    text = row.get(column)
    if text is None or text.strip() == "":
        if default is not None:
            return default
        raise TraceError(f"{where}: column {column!r} is missing or empty")
    try:
        value = int(text.strip())
    except ValueError:
        try:
            number = float(text.strip())
        except ValueError:
            raise TraceError(f"{where}: column {column!r} is not a number: {text!r}") from None
        if not number.is_integer():
            raise TraceError(f"{where}: column {column!r} must be a whole number, got {text!r}") from None
        value = int(number)
    if value < 0:
        raise TraceError(f"{where}: column {column!r} must not be negative, got {value}")
    return value


def _check_columns(columns: Iterable[str] | None, required: tuple[str, ...], what: str) -> None:
    present = set(columns or ())
    missing = [c for c in required if c not in present]
    if missing:
        raise TraceError(f"{what}: missing column(s) {', '.join(missing)} (need {', '.join(required)})")


def parse_nodes(
    rows: Iterable[Mapping[str, str]], columns: Iterable[str] | None, *, source: str = "nodes"
) -> Nodes:
    """Nodes from CSV rows (`columns` is the header). Row numbers in errors count the header as 1."""
    _check_columns(columns, NODE_COLUMNS, source)
    names: list[str] = []
    cpu: list[int] = []
    memory: list[int] = []
    gpus: list[int] = []
    model_index: list[int] = []
    models: dict[str, int] = {}
    seen: set[str] = set()
    for number, row in enumerate(rows, start=2):
        where = f"{source} row {number}"
        name = (row.get("sn") or "").strip()
        if not name:
            raise TraceError(f"{where}: column 'sn' is empty")
        if name in seen:
            raise TraceError(f"{where}: node {name!r} appears twice")
        seen.add(name)
        count = _int(row, "gpu", where)
        if count > MAX_GPUS_PER_NODE:
            raise TraceError(f"{where}: {count} GPUs on one node is more than {MAX_GPUS_PER_NODE}")
        model = (row.get("model") or "").strip() if count else ""
        names.append(name)
        cpu.append(_int(row, "cpu_milli", where))
        memory.append(_int(row, "memory_mib", where))
        gpus.append(count)
        model_index.append(models.setdefault(model, len(models)))
    if not names:
        raise TraceError(f"{source}: no nodes")
    return Nodes(
        names=tuple(names),
        cpu_milli=np.array(cpu, dtype=np.int64),
        memory_mib=np.array(memory, dtype=np.int64),
        gpus=np.array(gpus, dtype=np.int64),
        model=np.array(model_index, dtype=np.int64),
        models=tuple(models),
    )


def parse_pods(
    rows: Iterable[Mapping[str, str]], columns: Iterable[str] | None, *, source: str = "pods"
) -> Pods:
    """Pods from CSV rows (`columns` is the header)."""
    _check_columns(columns, POD_COLUMNS, source)
    names: list[str] = []
    cpu: list[int] = []
    memory: list[int] = []
    num_gpu: list[int] = []
    gpu_milli: list[int] = []
    spec_index: list[int] = []
    specs: dict[tuple[str, ...], int] = {(): 0}
    for number, row in enumerate(rows, start=2):
        where = f"{source} row {number}"
        name = (row.get("name") or "").strip() or f"pod-{number - 1}"
        count = _int(row, "num_gpu", where)
        milli = _int(row, "gpu_milli", where, default=0)
        if count == 0:
            milli = 0
        elif count == 1:
            if milli == 0 or milli > MILLI:
                raise TraceError(f"{where}: gpu_milli must be 1..{MILLI} with num_gpu 1, got {milli}")
        elif milli != MILLI:
            raise TraceError(
                f"{where}: a pod with num_gpu {count} asks for whole GPUs: "
                f"gpu_milli must be {MILLI}, got {milli}"
            )
        spec = tuple(sorted({p.strip() for p in (row.get("gpu_spec") or "").split("|") if p.strip()}))
        names.append(name)
        cpu.append(_int(row, "cpu_milli", where))
        memory.append(_int(row, "memory_mib", where, default=0))
        num_gpu.append(count)
        gpu_milli.append(milli)
        spec_index.append(specs.setdefault(spec if count else (), len(specs)))
    if not names:
        raise TraceError(f"{source}: no pods")
    return Pods(
        names=tuple(names),
        cpu_milli=np.array(cpu, dtype=np.int64),
        memory_mib=np.array(memory, dtype=np.int64),
        num_gpu=np.array(num_gpu, dtype=np.int64),
        gpu_milli=np.array(gpu_milli, dtype=np.int64),
        spec=np.array(spec_index, dtype=np.int64),
        specs=tuple(specs),
    )
