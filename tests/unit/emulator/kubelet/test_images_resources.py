import pytest

from shipshape.emulator.engine import Engine
from shipshape.emulator.kubelet import images
from shipshape.emulator.kubelet.resources import admission_check
from shipshape.kube.clock import VirtualClock
from shipshape.kube.scheduling import pod_requests, qos_class


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("nginx", "docker.io/library/nginx:latest"),
        ("nginx:1.25", "docker.io/library/nginx:1.25"),
        ("bitnami/redis:7", "docker.io/bitnami/redis:7"),
        ("registry.k8s.io/pause:3.10", "registry.k8s.io/pause:3.10"),
        ("localhost:5000/app", "localhost:5000/app:latest"),
        ("ghcr.io/org/app@sha256:abc", "ghcr.io/org/app@sha256:abc"),
    ],
)
def test_normalize_like_containerd(image: str, expected: str) -> None:
    assert images.normalize(image) == expected


def test_image_id_is_a_stable_digest_of_the_repository() -> None:
    first = images.image_id("nginx:1.25")
    assert first.startswith("docker.io/library/nginx@sha256:")
    assert first == images.image_id("docker.io/library/nginx:1.25")
    assert first != images.image_id("nginx:1.26")


def test_default_pull_policy() -> None:
    assert images.default_pull_policy("nginx") == "Always"
    assert images.default_pull_policy("nginx:latest") == "Always"
    assert images.default_pull_policy("nginx:1.25") == "IfNotPresent"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (0.5242, "524ms"), (1.2345, "1.234s"), (2.0, "2s"), (62.5, "1m2.5s"), (3600.25, "1h0m0.25s")],
)
def test_go_duration(seconds: float, text: str) -> None:
    assert images.go_duration(seconds) == text


def _puller(max_parallel: int | None) -> tuple[VirtualClock, Engine, images.ImagePuller]:
    clock = VirtualClock(1000.0)
    engine = Engine(clock)
    return clock, engine, images.ImagePuller(engine, 100e6, max_parallel)


def test_serial_puller_runs_one_pull_at_a_time_in_fifo_order() -> None:
    _clock, engine, puller = _puller(1)
    done: dict[str, tuple[float, float]] = {}
    puller.pull("a", 200_000_000, lambda s, f: done.__setitem__("a", (s, f)))
    puller.pull("b", 100_000_000, lambda s, f: done.__setitem__("b", (s, f)))
    engine.run_until(1100.0)
    assert done["a"] == pytest.approx((1000.0, 1002.0))
    assert done["b"] == pytest.approx((1002.0, 1003.0))


def test_parallel_pulls_share_the_bandwidth() -> None:
    _clock, engine, puller = _puller(None)
    done: dict[str, tuple[float, float]] = {}
    puller.pull("a", 200_000_000, lambda s, f: done.__setitem__("a", (s, f)))
    puller.pull("b", 100_000_000, lambda s, f: done.__setitem__("b", (s, f)))
    engine.run_until(1100.0)
    # Both at 50 MB/s until b finishes at 2 s; a then has 100 MB left at the full 100 MB/s.
    assert done["b"] == pytest.approx((1000.0, 1002.0))
    assert done["a"] == pytest.approx((1000.0, 1003.0))


def test_parallel_limit_queues_the_rest() -> None:
    _clock, engine, puller = _puller(2)
    done: dict[str, float] = {}

    def finished(name: str) -> images.PullDone:
        return lambda _started, end: done.__setitem__(name, end)

    for name in "abc":
        puller.pull(name, 100_000_000, finished(name))
    engine.run_until(1100.0)
    assert done["a"] == pytest.approx(1002.0)
    assert done["b"] == pytest.approx(1002.0)
    assert done["c"] == pytest.approx(1003.0)


def test_a_second_request_for_the_same_image_joins_the_running_pull() -> None:
    _clock, engine, puller = _puller(1)
    done: list[tuple[float, float]] = []
    puller.pull("a", 100_000_000, lambda s, f: done.append((s, f)))
    engine.run_until(1000.5)
    puller.pull("a", 100_000_000, lambda s, f: done.append((s, f)))
    engine.run_until(1100.0)
    assert done == [pytest.approx((1000.0, 1001.0)), pytest.approx((1000.5, 1001.0))]
    assert puller.active == 0 and puller.queued == 0


def _pod(*containers: dict[str, object], init: list[dict[str, object]] | None = None) -> dict[str, object]:
    return {"spec": {"containers": list(containers), "initContainers": init or []}}


def _c(requests: dict[str, str] | None = None, limits: dict[str, str] | None = None) -> dict[str, object]:
    return {"name": "c", "image": "x", "resources": {"requests": requests or {}, "limits": limits or {}}}


def test_qos_classes() -> None:
    assert qos_class(_pod(_c())) == "BestEffort"
    assert qos_class(_pod(_c(limits={"cpu": "1", "memory": "1Gi"}))) == "Guaranteed"
    assert qos_class(_pod(_c({"cpu": "1", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"}))) == "Guaranteed"
    assert qos_class(_pod(_c({"cpu": "500m"}, {"cpu": "1", "memory": "1Gi"}))) == "Burstable"
    assert qos_class(_pod(_c({"memory": "1Gi"}))) == "Burstable"


def test_effective_requests_take_the_init_peak_and_sidecars() -> None:
    pod = _pod(
        _c({"cpu": "100m"}),
        _c({"cpu": "200m"}),
        init=[_c({"cpu": "1"}), {**_c({"cpu": "50m"}), "restartPolicy": "Always"}],
    )
    # containers 300m + sidecar 50m = 350m; the init container alone needs 1000m (no sidecar before it).
    assert pod_requests(pod)["cpu"] == 1000
    pod2 = _pod(
        _c({"cpu": "900m"}), init=[{**_c({"cpu": "50m"}), "restartPolicy": "Always"}, _c({"cpu": "500m"})]
    )
    assert pod_requests(pod2)["cpu"] == 950


def test_admission_reports_the_first_resource_that_does_not_fit() -> None:
    running = [_pod(_c({"cpu": "3", "memory": "1Gi"}))]
    rejection = admission_check(_pod(_c({"cpu": "2"})), {"cpu": "4", "memory": "8Gi", "pods": "110"}, running)
    assert rejection is not None
    assert rejection.reason == "OutOfcpu"
    assert (
        rejection.message
        == "Node didn't have enough resource: cpu, requested: 2000, used: 3000, capacity: 4000"
    )
    assert admission_check(_pod(_c({"cpu": "1"})), {"cpu": "4", "memory": "8Gi"}, running) is None
    too_many = admission_check(_pod(_c()), {"cpu": "4", "pods": "1"}, running)
    assert too_many is not None and too_many.reason == "OutOfpods"
    gpu = admission_check(_pod(_c({"nvidia.com/gpu": "1"})), {"cpu": "4"}, [])
    assert gpu is not None and gpu.reason == "OutOfnvidia.com/gpu"
