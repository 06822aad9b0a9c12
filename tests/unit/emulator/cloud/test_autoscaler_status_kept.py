"""The autoscaler's kept status document equals the one worked out anew after every step of random
pool changes (launches, boots, interruptions, scale-ins, shortages, unschedulable pods)."""

from __future__ import annotations

import random

from shipshape.emulator.cloud.autoscaler import ClusterAutoscaler

from .builders import ON_DEMAND_B, SPOT_A, add_unschedulable, scenario, start


def test_the_kept_status_equals_the_status_worked_out_anew() -> None:
    rng = random.Random(14)
    pools = [{**SPOT_A, "initialSize": 2}, {**ON_DEMAND_B, "initialSize": 1}]
    # The scenario's own autoscaler is off: the test starts the one it reads.
    env = start(
        scenario(
            pools, interruptions={"enabled": False}, autoscaler={"enabled": False, "scaleUpAfter": "10s"}
        )
    )
    scaler = ClusterAutoscaler(env.cloud)
    scaler.start()
    names = list(env.cloud.pools)
    for step in range(1500):
        action = rng.randrange(7)
        pool = rng.choice(names)
        if action == 0:
            env.cloud.set_desired(pool, rng.randrange(0, 5))
        elif action == 1 and rng.random() < 0.2:
            env.cloud.shortage(pool, rng.choice([30.0, 120.0, 900.0]))
        elif action == 2:
            live = env.cloud.active_instances(pool)
            if live:
                env.cloud.remove_node(rng.choice(live).node_name, "test")
        elif action == 3:
            live = [
                i.node_name
                for i in env.cloud.active_instances()
                if i.registered and env.cloud.pools[i.pool].spot
            ]
            if live:
                env.cloud.interrupt(node=rng.choice(live), notice=rng.choice([5.0, 60.0]))
        elif action == 4 and rng.random() < 0.3:
            add_unschedulable(env, f"p{step}", cpu=rng.choice(["500m", "1500m", "3"]))
        else:
            env.run(rng.choice([1.0, 5.0, 10.0, 40.0]))
        now = env.clock.now()
        backoffs = tuple(
            state.shortage_until > now and scaler._failure_reported.get(state.name) == state.shortage_until
            for state in env.cloud.pools.values()
        )
        assert scaler.status() == scaler._status(backoffs), step
