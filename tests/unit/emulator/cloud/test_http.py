"""The instance metadata endpoint and the control routes, through Starlette's test client."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
from starlette.applications import Starlette

from shipshape.kube.clock import rfc1123, rfc3339

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


async def token_of(imds: httpx.AsyncClient, node: str, ttl: int = 21600) -> dict[str, str]:
    answer = await imds.put(
        f"/{node}/latest/api/token", headers={"X-aws-ec2-metadata-token-ttl-seconds": str(ttl)}
    )
    assert answer.status_code == 200 and len(answer.text) > 20
    assert answer.headers["x-aws-ec2-metadata-token-ttl-seconds"] == str(ttl)
    return {"X-aws-ec2-metadata-token": answer.text}


async def test_instance_action_is_404_before_a_notice_and_json_after(
    env: Env, imds: httpx.AsyncClient
) -> None:
    node = env.nodes_of("spot-a")[0]
    path = f"/{node}/latest/meta-data/spot/instance-action"
    token = await token_of(imds, node)
    before = await imds.get(path, headers=token)
    assert before.status_code == 404
    assert "404 - Not Found" in before.text
    env.cloud.interrupt(node=node, notice=120)
    after = await imds.get(path, headers=token)
    assert after.status_code == 200
    assert after.json() == {"action": "terminate", "time": rfc3339(env.clock.now() + 120)}
    rebalance = await imds.get(f"/{node}/latest/meta-data/events/recommendations/rebalance", headers=token)
    assert rebalance.json() == {"noticeTime": rfc3339(env.clock.now())}


async def test_plain_metadata_values(env: Env, imds: httpx.AsyncClient) -> None:
    node = env.nodes_of("od-b")[0]
    inst = env.cloud.instance_for(node)
    assert inst is not None
    token = await token_of(imds, node)

    async def get(path: str) -> httpx.Response:
        return await imds.get(f"/{node}/latest/meta-data/{path}", headers=token)

    assert (await get("instance-id")).text == inst.id
    assert (await get("instance-type")).text == "m5.xlarge"
    assert (await get("placement/availability-zone")).text == "us-east-1b"
    assert (await get("no-such-key")).status_code == 404
    listing = (await get("")).text.splitlines()
    assert {"instance-id", "instance-type", "placement/"} <= set(listing)
    assert "spot/" not in listing
    unknown = await imds.get("/ip-9-9-9-9.ec2.internal/latest/meta-data/instance-id", headers=token)
    assert unknown.status_code == 404


async def test_imdsv2_token_semantics(imds: httpx.AsyncClient, env: Env) -> None:
    node = env.nodes_of("od-b")[0]
    path = f"/{node}/latest/meta-data/instance-id"
    assert (await imds.put(f"/{node}/latest/api/token")).status_code == 400  # no TTL
    assert (
        await imds.put(f"/{node}/latest/api/token", headers={"X-aws-ec2-metadata-token-ttl-seconds": "21601"})
    ).status_code == 400
    versioned = await imds.put(
        f"/{node}/2021-03-23/api/token", headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"}
    )
    assert versioned.status_code == 403
    forwarded = await imds.put(
        f"/{node}/latest/api/token",
        headers={"X-aws-ec2-metadata-token-ttl-seconds": "60", "X-Forwarded-For": "10.0.0.1"},
    )
    assert forwarded.status_code == 403
    # IMDSv1 (no token) and unknown tokens: 401.
    assert (await imds.get(path)).status_code == 401
    assert (await imds.get(path, headers={"X-aws-ec2-metadata-token": "made-up"})).status_code == 401
    token = await token_of(imds, node, ttl=60)
    other = env.nodes_of("spot-a")[0]
    assert (await imds.get(f"/{other}/latest/meta-data/instance-id", headers=token)).status_code == 401
    answer = await imds.get(path, headers=token)
    assert answer.status_code == 200 and int(answer.headers["x-aws-ec2-metadata-token-ttl-seconds"]) <= 60
    env.run(61)  # the token expires on the cloud's clock
    assert (await imds.get(path, headers=token)).status_code == 401


async def test_gce_metadata_server() -> None:
    env = start(scenario(cloud="gcp", interruptions={"enabled": False}, autoscaler={"enabled": False}))
    assert env.cloud.interruption_settings.notice == 30  # the cloud's lead
    node = env.nodes_of("spot-a")[0]
    flavor = {"Metadata-Flavor": "Google"}
    async with _client(env.cluster.services["metadata_app"]) as gce:
        base = f"/{node}/computeMetadata/v1/instance"
        refused = await gce.get(f"{base}/preempted")
        assert refused.status_code == 403 and "Missing Metadata-Flavor:Google header" in refused.text
        first = await gce.get(f"{base}/preempted", headers=flavor)
        assert (first.status_code, first.text, first.headers["metadata-flavor"]) == (200, "FALSE", "Google")
        etag = first.headers["etag"]
        assert (await gce.get(f"{base}/maintenance-event", headers=flavor)).text == "NONE"
        assert (await gce.get(f"{base}/no-such-key", headers=flavor)).status_code == 404
        # Other clouds' paths are not there.
        assert (
            await gce.put(f"/{node}/latest/api/token", headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"})
        ).status_code == 404
        # wait_for_change holds the request until the value changes.
        waiting = asyncio.create_task(
            gce.get(
                f"{base}/preempted", params={"wait_for_change": "true", "last_etag": etag}, headers=flavor
            )
        )
        await asyncio.sleep(0.2)
        assert not waiting.done()
        env.cloud.interrupt(node=node)
        changed = await asyncio.wait_for(waiting, 5)
        assert changed.text == "TRUE" and changed.headers["etag"] != etag
        # A stale ETag answers at once; timeout_sec bounds a wait on an unchanged value.
        stale = await gce.get(
            f"{base}/preempted", params={"wait_for_change": "true", "last_etag": etag}, headers=flavor
        )
        assert stale.text == "TRUE"
        bounded = await gce.get(
            f"{base}/preempted",
            params={"wait_for_change": "true", "last_etag": changed.headers["etag"], "timeout_sec": "0"},
            headers=flavor,
        )
        assert bounded.text == "TRUE"
    inst = env.cloud.instance_for(node)
    assert inst is not None and inst.notice is not None
    assert inst.notice.action_time - inst.notice.issued == 30


async def test_azure_scheduled_events() -> None:
    env = start(scenario(cloud="azure", interruptions={"enabled": False}, autoscaler={"enabled": False}))
    node = env.nodes_of("spot-a")[0]
    header = {"Metadata": "true"}
    version = {"api-version": "2020-07-01"}
    async with _client(env.cluster.services["metadata_app"]) as azure:
        url = f"/{node}/metadata/scheduledevents"
        assert (await azure.get(url, params=version)).status_code == 400  # no Metadata header
        assert (await azure.get(url, headers=header)).status_code == 400  # no api-version
        assert (await azure.get(url, params=version, headers=header)).json() == {
            "DocumentIncarnation": 1,
            "Events": [],
        }
        name = (
            await azure.get(
                f"/{node}/metadata/instance/compute/name",
                params={"api-version": "2021-02-01", "format": "text"},
                headers=header,
            )
        ).text
        env.cloud.interrupt(node=node)
        document = (await azure.get(url, params=version, headers=header)).json()
        (event,) = document["Events"]
        assert document["DocumentIncarnation"] == 2
        assert {k: event[k] for k in ("EventType", "EventStatus", "Resources", "DurationInSeconds")} == {
            "EventType": "Preempt",
            "EventStatus": "Scheduled",
            "Resources": [name],
            "DurationInSeconds": -1,
        }
        assert event["NotBefore"] == rfc1123(env.clock.now() + 30)
        bad = await azure.post(url, params=version, headers=header, json={"StartRequests": "not-a-list"})
        assert bad.status_code == 400
        ack = await azure.post(
            url, params=version, headers=header, json={"StartRequests": [{"EventId": event["EventId"]}]}
        )
        assert ack.status_code == 200
        (started,) = (await azure.get(url, params=version, headers=header)).json()["Events"]
        assert (started["EventStatus"], started["NotBefore"]) == ("Started", "")


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
