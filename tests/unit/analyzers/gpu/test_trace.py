"""Parsing trace CSVs: columns, constraints, and errors that name the row and the column."""

from __future__ import annotations

import csv
import io

import pytest

from shipshape.analyzers.gpu import trace

from .builders import nodes, pods


def test_nodes_and_pods_parse_into_columns() -> None:
    cluster = nodes("n0,64000,262144,2,P100", "n1,96000,786432,8,G2", "cpu,32000,262144,0,")
    assert cluster.names == ("n0", "n1", "cpu")
    assert cluster.total_gpus == 10
    assert cluster.max_gpus == 8
    assert [cluster.models[m] for m in cluster.model] == ["P100", "G2", ""]
    workload = pods("a,6000,12288,1,460,", "b,12000,24576,2,1000,V100M16|V100M32", "c,4000,8192,0,0,")
    assert workload.gpu_milli.tolist() == [460, 1000, 0]
    assert workload.total_gpu_milli.tolist() == [460, 2000, 0]
    assert workload.specs[workload.spec[1]] == ("V100M16", "V100M32")
    allowed = workload.allowed(nodes("x,1,1,1,V100M32", "y,1,1,1,T4"))
    assert allowed[workload.spec[1]].tolist() == [True, False]
    assert allowed[workload.spec[0]].tolist() == [True, True]


def test_optional_pod_columns_may_be_absent() -> None:
    reader = csv.DictReader(io.StringIO("name,cpu_milli,num_gpu,gpu_milli\np,1000,1,250\n"))
    parsed = trace.parse_pods(reader, reader.fieldnames)
    assert parsed.memory_mib.tolist() == [0]
    assert parsed.specs[parsed.spec[0]] == ()


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("p,1000,1,1,1200,", "pods row 2: gpu_milli must be 1..1000 with num_gpu 1, got 1200"),
        (
            "p,1000,1,2,500,",
            "pods row 2: a pod with num_gpu 2 asks for whole GPUs: gpu_milli must be 1000, got 500",
        ),
        ("p,-5,1,1,500,", "pods row 2: column 'cpu_milli' must not be negative, got -5"),
        ("p,lots,1,1,500,", "pods row 2: column 'cpu_milli' is not a number: 'lots'"),
        ("p,1000,1,,500,", "pods row 2: column 'num_gpu' is missing or empty"),
    ],
)
def test_bad_pod_rows_name_row_and_column(row: str, message: str) -> None:
    with pytest.raises(trace.TraceError) as caught:
        pods(row)
    assert str(caught.value) == message


def test_bad_node_files() -> None:
    with pytest.raises(trace.TraceError, match="node 'n0' appears twice"):
        nodes("n0,1,1,1,T4", "n0,1,1,1,T4")
    with pytest.raises(trace.TraceError, match="no nodes"):
        nodes()
    reader = csv.DictReader(io.StringIO("sn,cpu_milli,gpu\nn0,1,1\n"))
    with pytest.raises(trace.TraceError, match=r"missing column\(s\) memory_mib, model"):
        trace.parse_nodes(reader, reader.fieldnames)
