"""Small traces written as CSV text, parsed the way the CLI parses files."""

from __future__ import annotations

import csv
import io

from shipshape.analyzers.gpu import trace

NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model"
POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec"


def nodes(*rows: str) -> trace.Nodes:
    reader = csv.DictReader(io.StringIO("\n".join([NODE_HEADER, *rows])))
    return trace.parse_nodes(reader, reader.fieldnames)


def pods(*rows: str) -> trace.Pods:
    reader = csv.DictReader(io.StringIO("\n".join([POD_HEADER, *rows])))
    return trace.parse_pods(reader, reader.fieldnames)
