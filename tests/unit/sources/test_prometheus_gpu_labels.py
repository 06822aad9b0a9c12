"""dcgm-exporter's pod attribution as real Prometheus setups store it: scraped without honor_labels
(the kube-prometheus and GPU Operator default), the series' `namespace`/`pod` are the exporter's own
pod and the workload's are `exported_namespace`/`exported_pod`."""

from __future__ import annotations

import httpx

from shipshape.sources.prometheus import PrometheusSettings, PrometheusSource

EXPORTER = {
    "namespace": "gpu-operator",
    "pod": "nvidia-dcgm-exporter-x7k2p",
    "Hostname": "nvidia-dcgm-exporter-x7k2p",
}


def answer(request: httpx.Request) -> httpx.Response:
    query = request.url.params["query"]
    assert "exported_pod" in query  # grouped by both names, or the renamed labels would be summed away
    results = []
    if "ENGINE_ACTIVE" in query:
        for gpu, owner in (("0", {"exported_namespace": "ml", "exported_pod": "train-0"}), ("1", {})):
            for stat, value in (("avg", "0.02"), ("max", "0.04"), ("count", "10")):
                labels = {**EXPORTER, **owner, "gpu": gpu, "modelName": "Tesla T4", "shipshape_stat": stat}
                results.append({"metric": labels, "value": [1000.0, value]})
    body = {"status": "success", "data": {"resultType": "vector", "result": results}}
    return httpx.Response(200, json=body)


def test_the_workload_pod_comes_from_the_exported_labels() -> None:
    client = httpx.Client(base_url="http://prometheus", transport=httpx.MockTransport(answer))
    with PrometheusSource(PrometheusSettings("http://prometheus"), client) as source:
        samples = source.gpu_activity(1000.0, 300.0)
    attributed = {(s.namespace, s.pod, s.gpu) for s in samples}
    # gpu 0 is the workload's; gpu 1, held by no pod, reads as the exporter's pod (which holds no GPU)
    assert ("ml", "train-0", "0") in attributed
    assert ("gpu-operator", "train-0", "0") not in attributed
    assert ("gpu-operator", "nvidia-dcgm-exporter-x7k2p", "0") not in attributed
    (train,) = [s for s in samples if s.pod == "train-0"]
    assert (train.mean, train.high, train.samples, train.model) == (0.02, 0.04, 10, "Tesla T4")
