"""Derive the shipped catalog (`data/catalog.json`) from the AWS Spot Instance Advisor data.

Run it again when the advisor files change:

    python -m shipshape.pricing.catalog_build /path/to/aws-spot-advisor \
        src/shipshape/pricing/data/catalog.json

Inputs (see data/PROVENANCE.md): `spot-advisor-data.json` (2025: savings % and interruption band
per region x instance type), `spot-advisor-data-2021.json` (2021-02 savings %) and
`spot-price-data-2021-04.json` (2021-04 Linux spot prices for five regions).

On-demand prices are not in those files. They are estimated as 2021 spot price / (1 - 2021
savings). For CPU families the estimate is smoothed per (region, instance family) as the family's
median price per vCPU times the type's vCPUs, because integer savings percentages make single-type
estimates noisy; accelerator families (GPU, Inferentia, FPGA) are not priced per vCPU, so they keep
the per-type estimate.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

# spot.js uses legacy region codes; spotinfo maps them like this.
LEGACY_REGIONS = {
    "us-east": "us-east-1",
    "us-east-2": "us-east-2",
    "us-west": "us-west-1",
    "us-west-2": "us-west-2",
    "eu-ireland": "eu-west-1",
    "apac-sin": "ap-southeast-1",
    "apac-syd": "ap-southeast-2",
    "apac-tokyo": "ap-northeast-1",
}


ACCELERATED_PREFIXES = ("g", "p", "inf", "f", "dl", "trn", "vt")


def _family(instance_type: str) -> str:
    return instance_type.split(".", 1)[0]


def _accelerated(instance_type: str) -> bool:
    family = _family(instance_type)
    return family.startswith(ACCELERATED_PREFIXES) and not family.startswith("gr")


def spot_prices_2021(price_doc: dict[str, Any]) -> dict[str, dict[str, float]]:
    """region -> instance type -> Linux spot price (USD/h) from the 2021-04 snapshot."""
    out: dict[str, dict[str, float]] = {}
    for region in price_doc["config"]["regions"]:
        name = LEGACY_REGIONS.get(region["region"], region["region"])
        for group in region["instanceTypes"]:
            for size in group["sizes"]:
                for column in size["valueColumns"]:
                    if column["name"] != "linux":
                        continue
                    text = column["prices"].get("USD", "")
                    try:
                        out.setdefault(name, {})[size["size"]] = float(text)
                    except ValueError:
                        continue  # "N/A*": not offered
    return out


def estimate_on_demand(
    spot_2021: dict[str, dict[str, float]],
    advisor_2021: dict[str, Any],
    vcpus: dict[str, int],
) -> dict[str, dict[str, float]]:
    """region -> instance type -> estimated on-demand price (USD/h), smoothed per family."""
    out: dict[str, dict[str, float]] = {}
    for region, prices in spot_2021.items():
        linux = advisor_2021["spot_advisor"].get(region, {}).get("Linux", {})
        per_vcpu: dict[str, list[float]] = {}
        single: dict[str, float] = {}
        for itype, spot in prices.items():
            record = linux.get(itype)
            cores = vcpus.get(itype)
            if record is None or not cores or not 0 <= record["s"] < 100:
                continue
            single[itype] = spot / (1 - record["s"] / 100)
            per_vcpu.setdefault(_family(itype), []).append(single[itype] / cores)
        for itype in prices:
            rates = per_vcpu.get(_family(itype))
            cores = vcpus.get(itype)
            if _accelerated(itype) and itype in single:
                out.setdefault(region, {})[itype] = round(single[itype], 4)
            elif rates and cores:
                out.setdefault(region, {})[itype] = round(statistics.median(rates) * cores, 4)
    return out


def build(advisor_dir: Path) -> dict[str, Any]:
    advisor = json.loads((advisor_dir / "spot-advisor-data.json").read_text())
    advisor_2021 = json.loads((advisor_dir / "spot-advisor-data-2021.json").read_text())
    price_doc = json.loads((advisor_dir / "spot-price-data-2021-04.json").read_text())

    vcpus = {t: int(v["cores"]) for t, v in advisor_2021["instance_types"].items()}
    vcpus.update({t: int(v["cores"]) for t, v in advisor["instance_types"].items()})
    on_demand = estimate_on_demand(spot_prices_2021(price_doc), advisor_2021, vcpus)
    kept = sorted({t for prices in on_demand.values() for t in prices})

    spot: dict[str, dict[str, list[int]]] = {}
    for region, by_os in sorted(advisor["spot_advisor"].items()):
        linux = by_os.get("Linux", {})
        entries = {t: [int(linux[t]["s"]), int(linux[t]["r"])] for t in kept if t in linux}
        if entries:
            spot[region] = entries
    types = {
        t: {"vcpu": int(info["cores"]), "memoryGiB": float(info["ram_gb"])}
        for t, info in sorted({**advisor_2021["instance_types"], **advisor["instance_types"]}.items())
        if t in kept
    }
    return {
        "description": (
            "Slim instance catalog for the Shipshape emulator: estimated on-demand prices (USD/h, "
            "Linux, from the 2021-04 spot price snapshot and 2021-02 savings), and per region the "
            "2025 Spot Instance Advisor [savings %, interruption band]."
        ),
        "onDemandPricesAsOf": "2021-04",
        "spotAdvisorAsOf": "2025-06",
        "ranges": [
            {"index": r["index"], "label": r["label"], "max": r["max"]}
            for r in sorted(advisor["ranges"], key=lambda r: r["index"])
        ],
        "instanceTypes": types,
        "onDemand": {region: dict(sorted(p.items())) for region, p in sorted(on_demand.items())},
        "spot": spot,
    }


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m shipshape.pricing.catalog_build ADVISOR_DIR OUT.json", file=sys.stderr)
        return 2
    catalog = build(Path(argv[0]))
    Path(argv[1]).write_text(json.dumps(catalog, separators=(",", ":"), sort_keys=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
