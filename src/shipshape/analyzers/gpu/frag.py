"""GPU fragmentation as the FGD paper measures it (Weng et al., "Beware of Fragmentation",
USENIX ATC'23), against the workload's typical pod shapes.

For one typical pod shape t, the idle GPU capacity of a node that t cannot use is a fragment:

- all of it when t asks for no GPU, when the node's model is not one t accepts, when the node
  lacks the CPU t asks for, or when fewer than `num_gpu(t)` of its GPUs have `gpu_milli(t)` free;
- otherwise the free capacity of the GPUs that each have less than `gpu_milli(t)` free.

A node's expected fragmentation is the average of that over the typical shapes weighted by how
often each occurs; the cluster's is the sum over nodes. Typical shapes are the most frequent
(CPU, GPU share, GPU count, model constraint) combinations of the workload that together make up
a share (95 % by default) of its pods, re-weighted to sum to one.

Computation. Group the GPU shapes by (share, count, constraint) = g; within a group shapes differ
only by their CPU. With `total` the node's free GPU milli, `u_g` the free milli of the GPUs with at
least the group's share free, `ok_g` whether the node takes the group's GPUs (model and count) and
`W_g(cpu)` the weight of the group's shapes whose CPU fits in the node's free CPU:

    F(node) = total - sum_g ok_g * W_g(cpu) * u_g

which is the weighted sum above with the CPU tests folded into a step function per group.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from shipshape.analyzers.gpu.trace import Nodes, Pods

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class TypicalPods:
    """The typical shapes and their weights (summing to one)."""

    cpu_milli: IntArray
    gpu_milli: IntArray
    num_gpu: IntArray
    spec: IntArray
    weight: FloatArray

    def __len__(self) -> int:
        return len(self.weight)


def typical_pods(pods: Pods, *, popularity: float = 0.95, include_cpu_pods: bool = True) -> TypicalPods:
    """The most frequent pod shapes that together make up `popularity` of the pods."""
    if not 0.0 < popularity <= 1.0:
        raise ValueError(f"popularity must be in (0, 1], got {popularity}")
    keep = np.ones(len(pods), dtype=np.bool_) if include_cpu_pods else pods.num_gpu > 0
    shapes = np.stack(
        [pods.cpu_milli[keep], pods.gpu_milli[keep], pods.num_gpu[keep], pods.spec[keep]], axis=1
    )
    if len(shapes) == 0:
        raise ValueError("no pods to take typical shapes from")
    unique, counts = np.unique(shapes, axis=0, return_counts=True)
    # Most frequent first; equal counts: the larger shape first (CPU, share, count, constraint).
    order = np.lexsort((-unique[:, 3], -unique[:, 2], -unique[:, 1], -unique[:, 0], -counts))
    unique, counts = unique[order], counts[order]
    cumulative = np.cumsum(counts)
    taken = int(np.searchsorted(cumulative, popularity * counts.sum() - 1e-9) + 1)
    unique, counts = unique[:taken], counts[:taken]
    weight = counts / counts.sum()
    return TypicalPods(
        cpu_milli=unique[:, 0].copy(),
        gpu_milli=unique[:, 1].copy(),
        num_gpu=unique[:, 2].copy(),
        spec=unique[:, 3].copy(),
        weight=weight.astype(np.float64),
    )


@dataclass(frozen=True)
class FragModel:
    """Typical shapes compiled for fast evaluation of F over many node states."""

    share: IntArray  # (G,) per-GPU milli of each GPU group
    count: IntArray  # (G,) GPUs each group asks for
    access: BoolArray  # (M, G) node model m gives group g the model it accepts
    thresholds: IntArray  # (U,) sorted distinct CPU asks of the GPU shapes
    weights: FloatArray  # (U + 1, G) weight of group g's shapes with CPU <= thresholds[k - 1]

    @property
    def groups(self) -> int:
        return len(self.share)

    def group_stats(self, free: IntArray) -> tuple[IntArray, IntArray]:
        """Per node state (rows of `free`, GPU milli left per GPU): GPUs with each group's share
        free, and their free milli. Shapes (K, G)."""
        fits = free[:, None, :] >= self.share[None, :, None]
        return fits.sum(axis=2), (free[:, None, :] * fits).sum(axis=2)

    def cpu_weights(self, cpu_left: IntArray) -> FloatArray:
        """W_g(cpu) for each state: shape (K, G)."""
        weights: FloatArray = self.weights[np.searchsorted(self.thresholds, cpu_left, side="right")]
        return weights

    def frag(
        self, total: IntArray, fitting: IntArray, usable: IntArray, cpu_left: IntArray, model: IntArray
    ) -> FloatArray:
        """Expected fragmentation (GPU milli) of each state from its group statistics."""
        ok = self.access[model] & (fitting >= self.count)
        result: FloatArray = total - (ok * self.cpu_weights(cpu_left) * usable).sum(axis=1)
        return result

    def node_frag(self, free: IntArray, cpu_left: IntArray, model: IntArray) -> FloatArray:
        """Expected fragmentation of nodes given their free GPU milli per GPU (K, J)."""
        fitting, usable = self.group_stats(free)
        return self.frag(free.sum(axis=1), fitting, usable, cpu_left, model)


def compile_model(typical: TypicalPods, pods: Pods, nodes: Nodes) -> FragModel:
    gpu = typical.num_gpu > 0
    keys = np.stack([typical.gpu_milli[gpu], typical.num_gpu[gpu], typical.spec[gpu]], axis=1)
    if len(keys):
        groups, member = np.unique(keys, axis=0, return_inverse=True)
        member = member.reshape(-1)
    else:
        groups, member = np.zeros((0, 3), dtype=np.int64), np.zeros(0, dtype=np.int64)
    cpu = typical.cpu_milli[gpu]
    thresholds = np.unique(cpu)
    rank = np.searchsorted(thresholds, cpu)
    weights = np.zeros((len(thresholds) + 1, len(groups)), dtype=np.float64)
    for g, k, w in zip(member.tolist(), rank.tolist(), typical.weight[gpu].tolist(), strict=True):
        weights[k + 1 :, g] += w
    allowed = pods.allowed(nodes)  # (S, M)
    access = allowed[groups[:, 2]].T if len(groups) else np.zeros((len(nodes.models), 0), dtype=np.bool_)
    return FragModel(
        share=groups[:, 0].astype(np.int64),
        count=groups[:, 1].astype(np.int64),
        access=np.ascontiguousarray(access),
        thresholds=thresholds.astype(np.int64),
        weights=weights,
    )
