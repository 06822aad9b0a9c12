"""The FGD paper's expected fragmentation: hand-computed values, and the vectorised closed form
against a direct transcription of the definition on many random node states."""

from __future__ import annotations

import numpy as np
import pytest

from shipshape.analyzers.gpu import frag

from .builders import nodes, pods


def test_typical_pods_are_the_most_frequent_shapes_up_to_the_popularity() -> None:
    workload = pods(
        *[f"a{i},1000,1,1,500," for i in range(6)],
        *[f"b{i},4000,1,1,1000," for i in range(3)],
        "c,2000,1,0,0,",
    )
    top = frag.typical_pods(workload, popularity=0.9)
    assert top.gpu_milli.tolist() == [500, 1000]
    assert top.weight.tolist() == pytest.approx([2 / 3, 1 / 3])
    every = frag.typical_pods(workload, popularity=1.0)
    assert every.cpu_milli.tolist() == [1000, 4000, 2000]
    assert every.weight.tolist() == pytest.approx([0.6, 0.3, 0.1])


def hand_model() -> tuple[frag.FragModel, np.ndarray]:
    # Shapes: half a GPU with 2 cores (weight 1/2), a whole GPU with 4 cores (1/4), 1 core and
    # no GPU (1/4).
    workload = pods("a1,2000,1,1,500,", "a2,2000,1,1,500,", "b,4000,1,1,1000,", "c,1000,1,0,0,")
    cluster = nodes("n,64000,1,2,T4")
    typical = frag.typical_pods(workload, popularity=1.0)
    return frag.compile_model(typical, workload, cluster), cluster.model


def test_node_fragmentation_by_hand() -> None:
    model, node_model = hand_model()
    free = np.array([[300, 1000]], dtype=np.int64)
    # 3 cores free: the half-GPU shape fits on the free GPU and the 300 left on the other GPU is
    # its fragment; the whole-GPU shape lacks CPU, the CPU-only shape uses no GPU: all 1300 each.
    # 1/2 * 300 + 1/4 * 1300 + 1/4 * 1300 = 800
    assert model.node_frag(free, np.array([3000]), node_model).tolist() == pytest.approx([800.0])
    # 5 cores free: the whole-GPU shape fits too and sees only the 300 as fragment.
    # 1/2 * 300 + 1/4 * 300 + 1/4 * 1300 = 550
    assert model.node_frag(free, np.array([5000]), node_model).tolist() == pytest.approx([550.0])
    # Nothing free, nothing fragmented.
    assert model.node_frag(np.array([[0, 0]]), np.array([5000]), node_model).tolist() == [0.0]


def reference_frag(
    free: list[int], cpu: int, model: str, typical: frag.TypicalPods, specs: tuple[tuple[str, ...], ...]
) -> float:
    """The paper's definition, one shape at a time."""
    total = sum(free)
    expected = 0.0
    for c, share, count, spec, weight in zip(
        typical.cpu_milli, typical.gpu_milli, typical.num_gpu, typical.spec, typical.weight, strict=True
    ):
        accepted = not specs[spec] or model in specs[spec]
        if share == 0 or not accepted:
            expected += weight * total
        elif sum(1 for f in free if f >= share) >= count and cpu >= c:
            expected += weight * sum(f for f in free if f < share)
        else:
            expected += weight * total
    return expected


def test_closed_form_matches_the_definition_on_random_states() -> None:
    rng = np.random.default_rng(7)
    rows = []
    for i in range(60):
        count = int(rng.choice([0, 1, 2, 4, 8]))
        share = int(rng.choice([100, 250, 460, 500, 810, 1000])) if count == 1 else (1000 if count else 0)
        spec = str(rng.choice(["", "T4", "V100M16|T4", "G2"])) if count else ""
        rows.append(f"p{i},{int(rng.integers(0, 16)) * 1000},1,{count},{share},{spec}")
    workload = pods(*rows)
    cluster = nodes("t4,96000,1,2,T4", "g2,96000,1,8,G2", "v,32000,1,4,V100M16")
    typical = frag.typical_pods(workload, popularity=1.0)
    model = frag.compile_model(typical, workload, cluster)
    for _ in range(200):
        node = int(rng.integers(3))
        gpus = int(cluster.gpus[node])
        free = np.zeros((1, 8), dtype=np.int64)
        free[0, :gpus] = rng.choice([0, 90, 200, 500, 540, 1000], size=gpus)
        cpu = int(rng.integers(0, 20)) * 1000
        got = model.node_frag(free, np.array([cpu]), cluster.model[node : node + 1])[0]
        want = reference_frag(
            free[0].tolist(), cpu, cluster.models[cluster.model[node]], typical, workload.specs
        )
        assert got == pytest.approx(want)
