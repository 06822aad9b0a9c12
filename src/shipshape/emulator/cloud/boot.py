"""Node boot timelines (instance launch -> Ready) and the logs a real EKS node writes meanwhile.

`draw_timeline` turns the scenario's `nodeBoot` milestones into exact per-node times with seeded
jitter (each gap between milestones varies, so the order always holds). `render_messages` and
`render_cni_log` write what `/var/log/messages` and the aws-node container log of an Amazon Linux
EKS node contain at those times, with the message shapes of real nodes, so a log parser written
for real nodes finds the same milestones in the emulator's logs.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from datetime import UTC, datetime

from shipshape.emulator.scenario import NodeBoot

# Milestones in boot order, with the NodeBoot field that gives each one's offset from launch.
MILESTONES: tuple[str, ...] = (
    "vmInitialized",
    "cloudInitStart",
    "networkReady",
    "containerdStart",
    "kubeletStart",
    "registered",
    "cniReady",
    "ready",
)
_FIELDS = {
    "vmInitialized": "vm_initialized",
    "cloudInitStart": "cloud_init_start",
    "networkReady": "network_ready",
    "containerdStart": "containerd_start",
    "kubeletStart": "kubelet_start",
    "registered": "registered",
    "cniReady": "cni_ready",
    "ready": "ready",
}

_INDEX = {milestone: i for i, milestone in enumerate(MILESTONES)}


@dataclass(frozen=True, slots=True)
class BootTimeline:
    """Exact POSIX times of one instance's boot milestones."""

    launched: float
    times: tuple[float, ...]  # in MILESTONES order

    def at(self, milestone: str) -> float:
        return self.times[_INDEX[milestone]]

    @property
    def registered(self) -> float:
        return self.at("registered")

    @property
    def ready(self) -> float:
        return self.at("ready")

    def as_dict(self) -> dict[str, float]:
        return {"launched": self.launched, **dict(zip(MILESTONES, self.times, strict=True))}


def draw_timeline(settings: NodeBoot, launched: float, rng: random.Random) -> BootTimeline:
    """Milestone times: each gap from the previous milestone scaled by 1 +/- jitter (uniform)."""
    offsets = [float(getattr(settings, _FIELDS[m])) for m in MILESTONES]
    times: list[float] = []
    previous_offset = 0.0
    previous_time = launched
    for offset in offsets:
        gap = max(0.0, offset - previous_offset)
        factor = 1.0 + settings.jitter * rng.uniform(-1.0, 1.0)
        previous_time += gap * factor
        previous_offset = offset
        times.append(previous_time)
    return BootTimeline(launched=launched, times=tuple(times))


# ---- logs ---------------------------------------------------------------------------------------
KERNEL = "5.10.227-219.884.amzn2.x86_64"
CLOUD_INIT = "19.3-46.amzn2.0.2"
CONTAINERD = "1.7.22"


def _syslog(ts: float) -> str:
    """The syslog stamp "Jan 2 15:04:05" (no year, day not padded), as log parsers expect it."""
    d = datetime.fromtimestamp(ts, UTC)
    return f"{d:%b} {d.day} {d:%H:%M:%S}"


def _klog(ts: float) -> str:
    d = datetime.fromtimestamp(ts, UTC)
    return d.strftime("%m%d %H:%M:%S.%f")


def _nano(ts: float) -> str:
    d = datetime.fromtimestamp(ts, UTC)
    nanos = round((ts - int(ts)) * 1e9) % 1_000_000_000
    return d.strftime("%Y-%m-%dT%H:%M:%S.") + f"{nanos:09d}Z"


def _cloud_init_stamp(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%a, %d %b %Y %H:%M:%S +0000")


def _hex_id(seed: str, n: int = 64) -> str:
    out = ""
    counter = 0
    while len(out) < n:
        out += hashlib.sha256(f"{seed}:{counter}".encode()).hexdigest()
        counter += 1
    return out[:n]


@dataclass(frozen=True, slots=True)
class LogIdentity:
    node_name: str  # e.g. ip-10-0-12-34.ec2.internal
    region: str
    kubelet_version: str = "v1.32.0"

    @property
    def host(self) -> str:
        return self.node_name.split(".", 1)[0]


@dataclass(frozen=True, slots=True)
class PodStart:
    """A pod the kubelet started on the node: its first container's start time."""

    started: float
    namespace: str
    name: str
    uid: str
    container_id: str


def render_messages(
    ident: LogIdentity,
    timeline: BootTimeline,
    until: float | None = None,
    pod_starts: tuple[PodStart, ...] = (),
) -> str:
    """/var/log/messages of the node from kernel boot to NodeReady, plus the start of the pods in
    `pod_starts` (sandbox and PLEG ContainerStarted lines), keeping only lines up to `until`."""
    t = timeline.as_dict()
    host = ident.host
    node = ident.node_name
    uptime0 = t["vmInitialized"]
    pid = 2000 + int(_hex_id(node, 4), 16) % 4000
    lines: list[tuple[float, str]] = []

    def add(ts: float, proc: str, msg: str) -> None:
        lines.append((ts, f"{_syslog(ts)} {host} {proc}: {msg}"))

    def klog(ts: float, level: str, src: str, msg: str) -> None:
        add(ts, "kubelet", f"{level}{_klog(ts)} {pid:>8} {src}] {msg}")

    def ctrd(ts: float, msg: str) -> None:
        add(ts, "containerd", f'time="{_nano(ts)}" level=info msg="{msg}"')

    def cloud_init(ts: float, stage: str) -> None:
        add(
            ts,
            "cloud-init",
            f"Cloud-init v. {CLOUD_INIT} running '{stage}' at {_cloud_init_stamp(ts)}. "
            f"Up {ts - uptime0 + 0.5:.2f} seconds.",
        )

    vm = t["vmInitialized"]
    add(
        vm,
        "kernel",
        f"Linux version {KERNEL} (mockbuild@ip-10-0-47-91) (gcc10-gcc (GCC) 10.5.0 20230707 (Red Hat "
        f"10.5.0-1), GNU ld version 2.35.2-9.amzn2.0.1) #1 SMP Wed Oct 30 18:35:54 UTC 2024",
    )
    add(vm, "kernel", f"Command line: BOOT_IMAGE=/boot/vmlinuz-{KERNEL} root=UUID=2c4d ro console=tty0")
    add(vm, "kernel", "x86/fpu: Supporting XSAVE feature 0x001: 'x87 floating point registers'")
    add(vm, "systemd", "systemd 219 running in system mode.")

    ci = t["cloudInitStart"]
    net = t["networkReady"]
    cloud_init(ci, "init-local")
    add(ci, "systemd", "Started Initial cloud-init job (pre-networking).")
    add(ci + (net - ci) * 0.5, "systemd", "Reached target Network (Pre).")
    add(net, "systemd", "Starting Initial cloud-init job (metadata service crawler)...")
    add(net, "systemd", "Reached target Network.")

    cs = t["containerdStart"]
    add(cs, "systemd", "Starting containerd container runtime...")
    cloud_init(cs, "init")
    ctrd(
        cs + 0.05,
        f"starting containerd revision=7f7fdf5fed64eb6a7caf99b3e12efcf9d60e311c version={CONTAINERD}",
    )
    ctrd(cs + 0.11, "containerd successfully booted in 0.062664s")
    add(cs + 0.11, "systemd", "Started containerd container runtime.")
    ctrd(cs + 0.12, "Start subscribing containerd event")
    ctrd(cs + 0.12, "Start recovering state")
    ks = t["kubeletStart"]
    online = cs + (ks - cs) * 0.25
    add(online, "systemd", "Started Initial cloud-init job (metadata service crawler).")
    add(online, "systemd", "Reached target Network is Online.")
    cloud_init(online, "modules:config")
    ctrd(online + 0.01, "Start event monitor")
    ctrd(online + 0.01, "Start cni network conf syncer for default")
    cloud_init(cs + (ks - cs) * 0.4, "modules:final")

    pause = f"602401143452.dkr.ecr.{ident.region}.amazonaws.com/eks/pause:3.5"
    sandbox_pull = ks - min(0.2, (ks - cs) / 4)
    ctrd(
        sandbox_pull,
        f"ImageUpdate event &ImageUpdate{{Name:{pause},Labels:map[string]string{{io.cri-containerd.image: "
        "managed,},XXX_unrecognized:[],}",
    )
    add(sandbox_pull, "systemd", "Started pull sandbox image defined in containerd config.toml.")
    add(ks, "systemd", "Starting Kubernetes Kubelet...")
    add(ks, "systemd", "Started Kubernetes Kubelet.")
    add(
        ks,
        "cloud-init",
        f"Cloud-init v. {CLOUD_INIT} finished at {_cloud_init_stamp(ks)}. Datasource DataSourceEc2.  "
        f"Up {ks - uptime0 + 0.5:.2f} seconds",
    )
    klog(ks + 0.3, "I", "server.go:486", f'"Kubelet version" kubeletVersion="{ident.kubelet_version}"')
    klog(ks + 0.6, "I", "server.go:1176", '"Started kubelet"')
    klog(ks + 0.6, "I", "server.go:163", '"Starting to listen" address="0.0.0.0" port=10250')
    reg = t["registered"]
    step = max((reg - ks - 0.6) / 4, 0.01)
    for i in range(1, 4):
        klog(
            ks + 0.6 + i * step,
            "E",
            "kubelet.go:2412",
            f'"Error getting node" err="node \\"{node}\\" not found"',
        )
    klog(reg - 0.01, "I", "kubelet_node_status.go:72", f'"Attempting to register node" node="{node}"')
    klog(reg, "I", "kubelet_node_status.go:75", f'"Successfully registered node" node="{node}"')
    for event in ("NodeHasSufficientMemory", "NodeHasNoDiskPressure", "NodeHasSufficientPID"):
        klog(
            reg + 0.002,
            "I",
            "kubelet_node_status.go:679",
            f'"Recording event message for node" node="{node}" event="{event}"',
        )

    # DaemonSet pods every EKS node runs: kube-proxy and aws-node (VPC CNI, with its init container).
    cni = t["cniReady"]
    proxy_pod, cni_pod = f"kube-proxy-{_hex_id(node + 'p', 5)}", f"aws-node-{_hex_id(node + 'a', 5)}"
    proxy_uid, cni_uid = _uid(node + "proxy"), _uid(node + "cni")
    proxy_sb, cni_sb = _hex_id(node + "proxy-sandbox"), _hex_id(node + "cni-sandbox")
    proxy_ctr, init_ctr, cni_ctr = (
        _hex_id(node + "proxy-c"),
        _hex_id(node + "init-c"),
        _hex_id(node + "cni-c"),
    )
    sb = reg + 0.75
    for pod, uid in ((proxy_pod, proxy_uid), (cni_pod, cni_uid)):
        klog(
            sb,
            "I",
            "kuberuntime_manager.go:442",
            f'"No sandbox for pod can be found. Need to start a new one" pod="kube-system/{pod}"',
        )
        ctrd(
            sb + 0.001,
            f"RunPodSandbox for &PodSandboxMetadata{{Name:{pod},Uid:{uid},Namespace:kube-system,Attempt:0,}}",
        )
    for pod, uid, sandbox in ((cni_pod, cni_uid, cni_sb), (proxy_pod, proxy_uid, proxy_sb)):
        ctrd(
            sb + 0.4,
            f"RunPodSandbox for &PodSandboxMetadata{{Name:{pod},Uid:{uid},Namespace:kube-system,Attempt:0,}} "
            f'returns sandbox id \\"{sandbox}\\"',
        )
    created = sb + 0.45

    def create(ts: float, sandbox: str, container: str) -> None:
        ctrd(ts, f'CreateContainer within sandbox \\"{sandbox}\\" for container {_meta(container)}')

    def created_id(ts: float, sandbox: str, container: str, cid: str) -> None:
        returns = f'returns container id \\"{cid}\\"'
        ctrd(ts, f'CreateContainer within sandbox \\"{sandbox}\\" for {_meta(container)} {returns}')
        ctrd(ts, f'StartContainer for \\"{cid}\\"')

    create(created, proxy_sb, "kube-proxy")
    create(created, cni_sb, "aws-vpc-cni-init")
    created_id(created + 0.04, proxy_sb, "kube-proxy", proxy_ctr)
    created_id(created + 0.05, cni_sb, "aws-vpc-cni-init", init_ctr)
    add(created + 0.06, "systemd", f"Started libcontainer container {proxy_ctr}.")
    add(created + 0.06, "systemd", f"Started libcontainer container {init_ctr}.")
    aws_node = created + max((cni - created) * 0.4, 0.1)
    klog(
        aws_node - 0.01,
        "I",
        "generic.go:334",
        f'"Generic (PLEG): container finished" podID="{cni_uid}" containerID="{init_ctr}" exitCode=0',
    )
    create(aws_node, cni_sb, "aws-node")
    created_id(aws_node + 0.03, cni_sb, "aws-node", cni_ctr)
    add(aws_node + 0.04, "systemd", f"Started libcontainer container {cni_ctr}.")
    ctrd(aws_node + 0.09, f'StartContainer for \\"{cni_ctr}\\" returns successfully')
    klog(
        cni + 0.3,
        "I",
        "kubelet.go:2473",
        f'"SyncLoop (probe)" probe="readiness" status="ready" pod="kube-system/{cni_pod}"',
    )
    ready = t["ready"]
    klog(
        ready,
        "I",
        "kubelet_node_status.go:679",
        f'"Recording event message for node" node="{node}" event="NodeReady"',
    )
    klog(
        ready + 0.001,
        "I",
        "kubelet_node_status.go:493",
        '"Fast updating node status as it just became ready"',
    )
    for start in pod_starts:
        ref = f"{start.namespace}/{start.name}"
        sandbox_at = max(start.started - 0.9, ready)
        meta = f"Name:{start.name},Uid:{start.uid},Namespace:{start.namespace},Attempt:0,"
        ctrd(sandbox_at, f"RunPodSandbox for &PodSandboxMetadata{{{meta}}}")
        klog(
            start.started,
            "I",
            "kubelet.go:2473",
            f'"SyncLoop (PLEG): event for pod" pod="{ref}" '
            f"event=&{{ID:{start.uid} Type:ContainerStarted Data:{start.container_id}}}",
        )
    lines.sort(key=lambda item: item[0])  # stable: same-time lines keep their written order
    kept = [text for ts, text in lines if until is None or ts <= until]
    return "".join(f"{text}\n" for text in kept)


def render_cni_log(timeline: BootTimeline) -> str:
    """The aws-node container log (CRI format) whose last setup line marks the CNI as initialised."""
    cni = timeline.at("cniReady")
    start = timeline.registered + 1.2 + max((cni - timeline.registered - 1.2) * 0.4, 0.1) + 0.1
    steps = [
        (start, "Validating env variables ..."),
        (start + 0.001, "Install CNI binaries.."),
        (start + 0.11, "Starting IPAM daemon in the background ... "),
        (start + 0.12, "Checking for IPAM connectivity ... "),
        (max(start + 0.2, cni - 1.0), "Retrying waiting for IPAM-D"),
        (cni - 0.02, "Copying config file ... "),
        (cni, "Successfully copied CNI plugin binary and config file."),
        (cni + 0.001, "Foregrounding IPAM daemon ..."),
    ]
    out = []
    for ts, msg in steps:
        ms = datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        out.append(
            f'{_nano(ts)} stdout F {{"level":"info","ts":"{ms}","caller":"entrypoint.sh","msg":"{msg}"}}'
        )
    return "\n".join(out) + "\n"


def _meta(container: str) -> str:
    return f"&ContainerMetadata{{Name:{container},Attempt:0,}}"


def _uid(seed: str) -> str:
    h = _hex_id(seed, 32)
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:32]}"
