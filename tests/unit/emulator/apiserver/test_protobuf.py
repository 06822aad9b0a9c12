"""Protobuf request bodies as kubectl v1.32 sends them decode to the JSON kubectl would have sent."""

from __future__ import annotations

import pytest

from shipshape.emulator.apiserver import codec, protobuf
from shipshape.kube import errors

# Captured from `kubectl create deployment d1 --image=nginx:1.27 --replicas=3 --port=8080`.
DEPLOYMENT = (
    b'k8s\x00\n\x15\n\x07apps/v1\x12\nDeployment\x12\xba\x01\n\x1d\n\x02d1\x12\x00\x1a\x00"\x00*\x002\x008\x00'
    b"B\x00Z\t\n\x03app\x12\x02d1\x12\x8a\x01\x08\x03\x12\x0b\n\t\n\x03app\x12\x02d1\x1aq\n\x1b\n\x00\x12\x00"
    b'\x1a\x00"\x00*\x002\x008\x00B\x00Z\t\n\x03app\x12\x02d1\x12R\x124\n\x05nginx\x12\nnginx:1.27*\x002\x0b'
    b'\n\x00\x10\x00\x18\x90?"\x00*\x00B\x00j\x00r\x00\x80\x01\x00\x88\x01\x00\x90\x01\x00\xa2\x01\x00\x1a\x00'
    b'2\x00B\x00J\x00R\x00X\x00`\x00h\x00\x82\x01\x00\x8a\x01\x00\x9a\x01\x00\xc2\x01\x00"\x02\n\x00(\x008\x00'
    b'\x1a\x0c\x08\x00\x10\x00\x18\x00 \x00(\x008\x00\x1a\x00"\x00'
)
# `kubectl create deployment d0 --image=nginx --replicas=0`: an explicit zero that must survive.
DEPLOYMENT_ZERO = (
    b'k8s\x00\n\x15\n\x07apps/v1\x12\nDeployment\x12\xa7\x01\n\x1d\n\x02d0\x12\x00\x1a\x00"\x00*\x002\x008\x00'
    b"B\x00Z\t\n\x03app\x12\x02d0\x12x\x08\x00\x12\x0b\n\t\n\x03app\x12\x02d0\x1a_\n\x1b\n\x00\x12\x00\x1a\x00"
    b'"\x00*\x002\x008\x00B\x00Z\t\n\x03app\x12\x02d0\x12@\x12"\n\x05nginx\x12\x05nginx*\x00B\x00j\x00r\x00'
    b"\x80\x01\x00\x88\x01\x00\x90\x01\x00\xa2\x01\x00\x1a\x002\x00B\x00J\x00R\x00X\x00`\x00h\x00\x82\x01\x00"
    b'\x8a\x01\x00\x9a\x01\x00\xc2\x01\x00"\x02\n\x00(\x008\x00'
    b'\x1a\x0c\x08\x00\x10\x00\x18\x00 \x00(\x008\x00\x1a\x00"\x00'
)
# `kubectl create secret generic s1 --from-literal=k=v`.
SECRET = (
    b'k8s\x00\n\x0c\n\x02v1\x12\x06Secret\x12\x1e\n\x12\n\x02s1\x12\x00\x1a\x00"\x00*\x002\x008\x00B\x00\x12'
    b'\x06\n\x01k\x12\x01v\x1a\x00\x1a\x00"\x00'
)
# `kubectl create pdb p1 --selector=app=x --max-unavailable=25%`.
PDB = (
    b"k8s\x00\n \n\tpolicy/v1\x12\x13PodDisruptionBudget\x129\n\x12\n\x02p1\x12\x00\x1a\x00"
    b'"\x00*\x002\x008\x00'
    b"B\x00\x12\x17\x12\n\n\x08\n\x03app\x12\x01x\x1a\t\x08\x01\x10\x00\x1a\x0325%\x1a\n\x08\x00\x18\x00 \x00"
    b'(\x000\x00\x1a\x00"\x00'
)


def test_deployment() -> None:
    assert protobuf.decode(DEPLOYMENT) == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d1", "labels": {"app": "d1"}},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "d1"}},
            "template": {
                "metadata": {"labels": {"app": "d1"}},
                "spec": {
                    "containers": [
                        {"name": "nginx", "image": "nginx:1.27", "ports": [{"containerPort": 8080}]}
                    ]
                },
            },
        },
    }
    assert protobuf.decode(DEPLOYMENT_ZERO)["spec"]["replicas"] == 0


def test_secret_bytes_and_pdb_int_or_string() -> None:
    secret = codec.loads_body(SECRET, "application/vnd.kubernetes.protobuf")
    assert secret == {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s1"}, "data": {"k": "dg=="}}
    pdb = protobuf.decode(PDB)
    assert pdb["spec"] == {"maxUnavailable": "25%", "selector": {"matchLabels": {"app": "x"}}}


def test_unknown_kinds_and_fields_are_refused_not_lost() -> None:
    pod = b"k8s\x00\n\x09\n\x02v1\x12\x03Pod\x12\x00"
    with pytest.raises(errors.UnsupportedMediaType):
        protobuf.decode(pod)
    # A ConfigMap with a non-zero field 9 the table does not know.
    unknown = b"k8s\x00\n\x0f\n\x02v1\x12\tConfigMap\x12\x02H\x01"
    with pytest.raises(errors.UnsupportedMediaType, match="field 9 of ConfigMap"):
        protobuf.decode(unknown)
    zero_unknown = b"k8s\x00\n\x0f\n\x02v1\x12\tConfigMap\x12\x02H\x00"
    assert protobuf.decode(zero_unknown) == {"apiVersion": "v1", "kind": "ConfigMap"}


@pytest.mark.parametrize("body", [b"\x0a\x02", b"k8s\x00\n\xff", SECRET[:-9]])
def test_malformed_protobuf_is_bad_request(body: bytes) -> None:
    with pytest.raises(errors.BadRequest):
        protobuf.decode(body)
