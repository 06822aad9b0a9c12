"""`framework.fits` with each pod body compiled once (`PodInfos`, what the scheduler model gives the
cluster-autoscaler) answers as `fits` compiling every body afresh, over random pods, nodes and pods
already on them, each body asked about many times."""

from __future__ import annotations

import copy
import random

from shipshape.emulator.scheduler import framework
from tests.unit.emulator.scheduler.builders import pod
from tests.unit.emulator.scheduler.test_snapshot_caches import node_body, templates


def test_fits_with_compiled_bodies_answers_as_fits_compiling_afresh() -> None:
    rng = random.Random(14)
    infos = framework.PodInfos(limit=50)  # small: the memory starts over during the test
    bodies = []
    for i in range(40):
        body = copy.deepcopy(rng.choice(templates()))
        body["metadata"]["name"] = f"p{i}"
        bodies.append(body)
    bodies += [pod(f"anti-{i}", cpu="500m", labels={"app": "web"}) for i in range(3)]
    nodes = [node_body(f"n{i}", rng) for i in range(8)]
    for _ in range(3000):
        candidate = rng.choice(bodies)
        node = rng.choice(nodes)
        others = rng.sample(bodies, rng.randrange(0, 6))
        assert framework.fits(candidate, node, others, infos) == framework.fits(candidate, node, others)
