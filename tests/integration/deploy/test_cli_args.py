"""The arguments the chart gives each container are ones the `shipshape` command accepts: parsed by the
real command-line parser (nothing runs), so a renamed flag fails here rather than in a crash-looping pod."""

from __future__ import annotations

from typing import Any

import pytest
import typer

from shipshape.cli.main import app

from .chart import Obj, by_key, helm_binary, render

HELM = helm_binary()
pytestmark = pytest.mark.skipif(
    HELM is None, reason="helm is not installed (scripts/ensure-helm.sh fetches it)"
)


def container_args(*values: str) -> dict[str, list[str]]:
    assert HELM is not None
    objects = by_key(render(HELM, *values))
    out: dict[str, list[str]] = {}
    for key in (("Deployment", "shipshape-controller"), ("DaemonSet", "shipshape-node-notices")):
        obj: Obj = objects[key]
        args = [
            a.replace("$(POD_NAME)", "pod-0").replace("$(NODE_NAME)", "node-0")
            for a in obj["spec"]["template"]["spec"]["containers"][0]["args"]
        ]
        out[args[0]] = args[1:]
    return out


def command(name: str) -> Any:
    """The sub-command as the `shipshape` group resolves it (typer's own click types)."""
    root: Any = typer.main.get_command(app)
    with root.context_class(root) as ctx:
        return root.get_command(ctx, name)


def options_of(cmd: Any) -> set[str]:
    return {opt for param in cmd.params for opt in (*param.opts, *param.secondary_opts)}


def parses(cmd: Any, name: str, args: list[str]) -> None:
    with cmd.make_context(name, list(args), resilient_parsing=False) as ctx:
        assert ctx.params  # parsed into the command's parameters


def test_the_controller_accepts_the_default_arguments() -> None:
    args = container_args()["controller"]
    controller = command("controller")
    assert controller is not None
    parses(controller, "controller", args)


def test_the_controller_accepts_the_switches_of_the_values() -> None:
    args = container_args(
        "--set",
        "controller.dryRun=true",
        "--set",
        "controller.rebalanceEvictions=false",
        "--set",
        "controller.noticeQueueUrl=https://sqs.us-east-1.amazonaws.com/1/q",
    )["controller"]
    controller = command("controller")
    assert controller is not None
    wanted = {a.split("=", 1)[0] for a in args}
    assert wanted <= options_of(controller), sorted(wanted - options_of(controller))
    parses(controller, "controller", args)


def test_the_node_poller_accepts_its_arguments() -> None:
    args = container_args()["node-notices"]
    poller = command("node-notices")
    assert poller is not None, "`shipshape node-notices` is not registered"
    parses(poller, "node-notices", args)
