"""The instance metadata endpoint and the control routes, through Starlette's test client."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from starlette.applications import Starlette

from shipshape.kube.clock import rfc3339

from .builders import Env, scenario, start


@pytest.fixture
def env() -> Env:
    return start(scenario(interruptions={"enabled": False}, autoscaler={"enabled": False}))


def _client(app: Starlette) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver")


@pytest.fixture
async def imds(env: Env) -> AsyncIterator[httpx.AsyncClient]:
    async with _client(env.cluster.services["metadata_app"]) as client:
        yield client


@pytest.fixture
async def control(env: Env) -> AsyncIterator[httpx.AsyncClient]:
    async with _client(Starlette(routes=env.cluster.services["http_routes"])) as client:
        yield client


async def test_instance_action_is_404_before_a_notice_and_json_after(
    env: Env, imds: httpx.AsyncClient
) -> None:
    node = env.nodes_of("spot-a")[0]
    path = f"/{node}/latest/meta-data/spot/instance-action"
    before = await imds.get(path)
    assert before.status_code == 404
    assert "404 - Not Found" in before.text
    env.cloud.interrupt(node=node, notice=120)
    after = await imds.get(path)
    assert after.status_code == 200
    assert after.json() == {"action": "terminate", "time": rfc3339(env.clock.now() + 120)}
    rebalance = await imds.get(f"/{node}/latest/meta-data/events/recommendations/rebalance")
    assert rebalance.json() == {"noticeTime": rfc3339(env.clock.now())}


async def test_plain_metadata_values(env: Env, imds: httpx.AsyncClient) -> None:
    node = env.nodes_of("od-b")[0]
    inst = env.cloud.instance_for(node)
    assert inst is not None
    assert (await imds.get(f"/{node}/latest/meta-data/instance-id")).text == inst.id
    assert (await imds.get(f"/{node}/latest/meta-data/instance-type")).text == "m5.xlarge"
    assert (await imds.get(f"/{node}/latest/meta-data/placement/availability-zone")).text == "us-east-1b"
    assert (await imds.get(f"/{node}/latest/meta-data/no-such-key")).status_code == 404
    listing = (await imds.get(f"/{node}/latest/meta-data/")).text.splitlines()
    assert {"instance-id", "instance-type", "placement/"} <= set(listing)
    assert "spot/" not in listing
    assert (await imds.get("/ip-9-9-9-9.ec2.internal/latest/meta-data/instance-id")).status_code == 404


async def test_imdsv2_token(imds: httpx.AsyncClient, env: Env) -> None:
    node = env.nodes_of("od-b")[0]
    token = await imds.put(
        f"/{node}/latest/api/token", headers={"X-aws-ec2-metadata-token-ttl-seconds": "21600"}
    )
    assert token.status_code == 200 and len(token.text) > 20
    assert (await imds.put(f"/{node}/latest/api/token")).status_code == 400


async def test_control_interrupt_and_shortage(env: Env, control: httpx.AsyncClient) -> None:
    response = await control.post("/emulator/v1/interrupt", json={"pool": "spot-a", "notice": "90s"})
    assert response.status_code == 200
    body = response.json()
    assert sorted(body["nodes"]) == env.nodes_of("spot-a")
    assert body["notice"] == 90
    assert body["terminationTime"] == rfc3339(env.clock.now() + 90)
    response = await control.post("/emulator/v1/shortage", json={"pool": "spot-b", "for": "10m"})
    assert response.status_code == 200
    assert response.json()["until"] == rfc3339(env.clock.now() + 600)
    assert env.cloud.in_shortage("spot-b")


async def test_control_cost_and_pools(env: Env, control: httpx.AsyncClient) -> None:
    env.run(3600)
    cost = (await control.get("/emulator/v1/cost")).json()
    assert cost["total"] == pytest.approx(env.cloud.cost()["total"])
    assert cost["nodeHours"] == pytest.approx(4.0)
    pools = (await control.get("/emulator/v1/pools")).json()["pools"]
    assert [p["name"] for p in pools] == ["spot-a", "spot-b", "od-b"]
    assert pools[0]["ready"] == 2 and pools[0]["capacityType"] == "spot"


@pytest.mark.parametrize(
    ("path", "payload", "status", "message"),
    [
        ("interrupt", {"pool": "nope"}, 404, "unknown pool 'nope'"),
        ("interrupt", {"zone": "mars-1a"}, 404, "unknown zone"),
        ("interrupt", {"pool": "spot-a", "zone": "us-east-1a"}, 400, "exactly one"),
        ("interrupt", {}, 400, "exactly one"),
        ("interrupt", {"pool": "spot-a", "notice": "soon"}, 400, "notice"),
        ("interrupt", {"pool": "spot-a", "extra": 1}, 400, "unknown field(s) extra"),
        ("interrupt", {"pool": "od-b"}, 400, "on-demand"),
        ("interrupt", ["spot-a"], 400, "JSON object"),
        ("shortage", {"pool": "spot-a"}, 400, "for"),
        ("shortage", {"pool": "nope", "for": "10m"}, 404, "unknown pool"),
        ("shortage", {"pool": "spot-a", "for": 0}, 400, "positive"),
        ("shortage", {"for": "10m"}, 400, "pool is required"),
    ],
)
async def test_bad_control_requests_are_refused_and_change_nothing(
    env: Env, control: httpx.AsyncClient, path: str, payload: object, status: int, message: str
) -> None:
    response = await control.post(f"/emulator/v1/{path}", json=payload)
    assert response.status_code == status
    body = response.json()
    assert body["kind"] == "Status" and body["code"] == status
    assert message in body["message"]
    assert all(i.notice is None for i in env.cloud.instances.values())
    assert not any(env.cloud.in_shortage(p) for p in env.cloud.pools)


async def test_malformed_json_is_a_400(control: httpx.AsyncClient) -> None:
    response = await control.post(
        "/emulator/v1/interrupt", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    assert "not valid JSON" in response.json()["message"]
