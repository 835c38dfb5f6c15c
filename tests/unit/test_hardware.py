"""The GPU system catalog: every bundled system loads, cites its numbers and matches the references."""

from __future__ import annotations

from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml

from costmodel import hardware
from costmodel.errors import CatalogError
from costmodel.hardware import (
    NUMERIC_FIELDS,
    GiB,
    MiB,
    SystemSpec,
    load_system,
    system_names,
    with_overrides,
)
from costmodel.precision import Dtype

EXPECTED = (
    "b200-sxm",
    "b300-sxm",
    "gb200-nvl72",
    "gb300-nvl72",
    "h100-sxm",
    "h200-sxm",
    "mi300x",
    "mi355x",
)

SHARED_SYSTEMS = Path(__file__).parents[2].parent / "shared" / "reference" / "systems"
# Our id -> aiconfigurator systems yaml @095f58a5 copied under /work/shared.
AICONFIG_FILES = {
    "h100-sxm": "h100_sxm.yaml",
    "h200-sxm": "h200_sxm.yaml",
    "b200-sxm": "b200_sxm.yaml",
    "b300-sxm": "b300_sxm.yaml",
    "gb200-nvl72": "gb200.yaml",
    "gb300-nvl72": "gb300.yaml",
}
# Deliberate departures from aiconfigurator, each explained in the system's YAML comments.
NIC_DEPARTURES = {"b200-sxm", "gb200-nvl72"}  # ship CX-7 400G; aiconfigurator models CX-8 800G


@pytest.fixture(params=EXPECTED)
def spec(request: pytest.FixtureRequest) -> SystemSpec:
    return load_system(request.param)


def test_catalog_lists_exactly_the_bundled_systems() -> None:
    assert system_names() == EXPECTED


def test_every_numeric_field_has_a_source(spec: SystemSpec) -> None:
    for field in NUMERIC_FIELDS:
        assert spec.sources[field].strip(), field


def test_spot_values_match_the_reference() -> None:
    assert load_system("h200-sxm").hbm_bandwidth_bytes_per_s == 4.8e12
    assert load_system("h100-sxm").hbm_capacity_bytes == 80 * GiB
    assert load_system("gb200-nvl72").hbm_capacity_bytes == 189_471 * MiB
    assert load_system("gb200-nvl72").scaleup_domain_gpus == 72
    assert load_system("gb200-nvl72").peak_flops(Dtype.FP4) == 1e16
    assert load_system("gb300-nvl72").peak_flops("fp4") == 1.5e16
    assert load_system("mi300x").scaleup_peer_bandwidth_bytes_per_s == 64e9
    assert load_system("mi300x").scaleup_bandwidth_bytes_per_s == 448e9
    assert load_system("mi355x").scaleup_bandwidth_bytes_per_s == pytest.approx(535.5e9)
    assert load_system("b300-sxm").nic_bandwidth_bytes_per_s == 100e9


def test_grace_link_is_shared_by_two_gpus() -> None:
    # NVLink-C2C 900 GB/s bidir per Grace, one Grace per 2 GPUs.
    assert load_system("gb200-nvl72").host_link_bandwidth_bytes_per_s == 900e9 / 2 / 2


def test_bandwidths_are_per_direction(spec: SystemSpec) -> None:
    # Bidirectional datasheet figures: NVLink4 900 GB/s, NVLink5 1.8 TB/s, xGMI 7 x 128 / 7 x 153.6 GB/s.
    bidirectional = {"nvidia": 1.8e12, "amd": 7 * 153.6e9}[spec.vendor]
    assert spec.scaleup_bandwidth_bytes_per_s <= bidirectional / 2
    assert spec.nic_bandwidth_bytes_per_s <= 800e9 / 8  # no NIC above 800 Gb/s per GPU
    assert spec.host_link_bandwidth_bytes_per_s < 900e9 / 2


def test_topology_shapes(spec: SystemSpec) -> None:
    if spec.vendor == "amd":
        assert spec.scaleup_topology == "mesh"
        assert spec.scaleup_bandwidth_bytes_per_s == pytest.approx(
            7 * spec.scaleup_peer_bandwidth_bytes_per_s
        )
    else:
        assert spec.scaleup_topology == "switch"
        assert spec.scaleup_peer_bandwidth_bytes_per_s == spec.scaleup_bandwidth_bytes_per_s
    assert spec.gpus_per_rack == spec.nodes_per_rack * spec.gpus_per_node


def test_fp4_only_where_native() -> None:
    for name in ("h100-sxm", "h200-sxm", "mi300x"):
        assert Dtype.FP4 not in load_system(name).peak_flops_per_s
    for name in EXPECTED:
        assert Dtype.INT4 not in load_system(name).peak_flops_per_s


def test_missing_format_names_system_and_supported_formats() -> None:
    with pytest.raises(CatalogError, match=r"h100-sxm.*bf16, fp8"):
        load_system("h100").peak_flops(Dtype.FP4)


@pytest.mark.parametrize(
    ("alias", "canonical"),
    [
        ("h100", "h100-sxm"),
        ("H200", "h200-sxm"),
        ("b200", "b200-sxm"),
        ("b300", "b300-sxm"),
        ("gb200", "gb200-nvl72"),
        ("GB300", "gb300-nvl72"),
        ("h100_sxm", "h100-sxm"),
        ("GB200_NVL72", "gb200-nvl72"),
        (" MI355X ", "mi355x"),
    ],
)
def test_aliases(alias: str, canonical: str) -> None:
    assert load_system(alias) is load_system(canonical)


def test_unknown_name_lists_known_names() -> None:
    with pytest.raises(CatalogError) as info:
        load_system("a100")
    for name in EXPECTED:
        assert name in str(info.value)


def test_overrides_replace_and_revalidate() -> None:
    base = load_system("h200")
    spec = with_overrides(base, {"hbm_capacity_bytes": 1.2e11, "gpus_per_rack": 64})
    assert spec.hbm_capacity_bytes == 1.2e11
    assert spec.nodes_per_rack == 8
    assert spec.sources["hbm_capacity_bytes"] == "scenario override"
    assert base.hbm_capacity_bytes == 141 * GiB  # the cached catalog entry is untouched


def test_overrides_merge_flops() -> None:
    spec = with_overrides(load_system("b200"), {"peak_flops_per_s": {"fp4": 1e16}})
    assert spec.peak_flops("fp4") == 1e16
    assert spec.peak_flops("bf16") == 2.25e15


def test_overrides_reject_unknown_field() -> None:
    with pytest.raises(CatalogError, match=r"hbm_gb.*valid fields:.*hbm_capacity_bytes"):
        with_overrides(load_system("h100"), {"hbm_gb": 80})


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"hbm_bandwidth_bytes_per_s": -1.0}, "hbm_bandwidth_bytes_per_s must lie between"),
        ({"hbm_bandwidth_bytes_per_s": 1e-300}, "hbm_bandwidth_bytes_per_s must lie between"),
        ({"peak_flops_per_s": {"fp8": float("inf")}}, "peak_flops_per_s.fp8 must be a FLOP/s figure"),
        ({"gpus_per_rack": 30}, "multiple of gpus_per_node"),
        ({"scaleup_domain_gpus": 16, "gpus_per_rack": 24}, "must divide gpus_per_rack"),
        ({"scaleup_peer_bandwidth_bytes_per_s": 1e11}, "must equal scaleup_bandwidth_bytes_per_s"),
        ({"power_w": "700"}, "power_w"),
        ({"peak_flops_per_s": {"fp6": 1e15}}, "unknown compute format 'fp6'"),
    ],
)
def test_overrides_report_bad_values(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(CatalogError, match=message):
        with_overrides(load_system("h100"), overrides)


def test_mesh_bandwidths_must_be_consistent() -> None:
    with pytest.raises(CatalogError, match="mesh bandwidths are inconsistent"):
        with_overrides(load_system("mi300x"), {"scaleup_bandwidth_bytes_per_s": 1e12})


def test_integers_are_accepted_for_floats() -> None:
    assert with_overrides(load_system("h100"), {"power_w": 650}).power_w == 650.0


def _aiconfig(name: str) -> dict[str, Any]:
    path = SHARED_SYSTEMS / AICONFIG_FILES[name]
    if not path.is_file():
        pytest.skip(f"reference file {path} is absent")
    data: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return data


@pytest.mark.parametrize("name", sorted(AICONFIG_FILES))
def test_matches_aiconfigurator(name: str) -> None:
    ref, spec = _aiconfig(name), load_system(name)
    gpu, node = ref["gpu"], ref["node"]
    assert spec.hbm_bandwidth_bytes_per_s == gpu["mem_bw"]
    assert spec.hbm_capacity_bytes == gpu["mem_capacity"]
    assert spec.power_w == gpu["power"]
    # aiconfigurator rounds Hopper fp8 to 1978 TFLOPS; the datasheet gives 3958 sparse / 2 = 1979.
    assert spec.peak_flops("bf16") == pytest.approx(gpu["bfloat16_tc_flops"], rel=1e-3)
    assert spec.peak_flops("fp8") == pytest.approx(gpu["fp8_tc_flops"], rel=1e-3)
    if "fp4_tc_flops" in gpu:
        assert spec.peak_flops("fp4") == pytest.approx(gpu["fp4_tc_flops"], rel=1e-3)
    assert spec.gpus_per_node == node["num_gpus_per_node"]
    assert spec.gpus_per_rack == node.get("num_gpus_per_rack", spec.gpus_per_rack)
    assert spec.scaleup_bandwidth_bytes_per_s == node["intra_node_bw"]
    if name not in NIC_DEPARTURES:
        assert spec.nic_bandwidth_bytes_per_s == node.get("inter_rack_bw", node["inter_node_bw"])


def _field_lines(name: str) -> list[str]:
    """The `key: value` lines of a system file above its `sources:` block."""
    text = (resources.files("costmodel") / "data" / "systems" / f"{name}.yaml").read_text(encoding="utf-8")
    body = text.split("\nsources:", 1)[0]
    return [ln for ln in body.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


@pytest.mark.parametrize("name", EXPECTED)
def test_every_field_line_carries_a_unit_comment(name: str) -> None:
    for line in _field_lines(name):
        assert "#" in line, f"{name}.yaml: no unit/source comment on {line!r}"


@pytest.fixture
def systems_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Point the catalog at an empty temporary folder, with its caches cleared around the test."""
    monkeypatch.setattr(hardware, "_systems_dir", lambda: tmp_path)
    hardware.system_names.cache_clear()
    hardware._load_bundled.cache_clear()
    yield tmp_path
    hardware.system_names.cache_clear()
    hardware._load_bundled.cache_clear()


def _h100_text() -> str:
    return (resources.files("costmodel") / "data" / "systems" / "h100-sxm.yaml").read_text(encoding="utf-8")


def test_unsigned_exponent_is_reported_with_the_fix(systems_dir: Path) -> None:
    text = _h100_text().replace("3.35e+12", "3.35e12")
    (systems_dir / "h100-sxm.yaml").write_text(text, encoding="utf-8")
    with pytest.raises(CatalogError, match=r"hbm_bandwidth_bytes_per_s.*8\.0e\+12"):
        load_system("h100")


def test_file_name_must_match_system_name(systems_dir: Path) -> None:
    (systems_dir / "h999.yaml").write_text(_h100_text(), encoding="utf-8")
    with pytest.raises(CatalogError, match="must have name: h999"):
        load_system("h999")


def test_missing_source_is_reported(systems_dir: Path) -> None:
    text = _h100_text().replace('  power_w: "aiconfigurator power; NVIDIA H100 SXM datasheet"\n', "")
    (systems_dir / "h100-sxm.yaml").write_text(text, encoding="utf-8")
    with pytest.raises(CatalogError, match="sources lacks an entry for power_w"):
        load_system("h100")
