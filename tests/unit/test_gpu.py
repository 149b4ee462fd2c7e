"""nvidia-smi parsing and arch coverage. The H200 fixture is real output, recorded on a lent GPU machine,
where the parser's compute capability agreed with torch.cuda.get_device_properties (9.0)."""

from pathlib import Path

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils import gpu

FIX = Path(__file__).parent / "fixtures"

# seed 000: torch.cuda.get_arch_list() of vllm/vllm-openai:nightly
NIGHTLY = ["sm_80", "sm_90", "sm_100", "sm_120", "compute_120"]


def test_real_h200_output():
    gpus = gpu.parse_query((FIX / "nvidia-smi-h200.csv").read_text())
    assert gpus == [{"compute_cap": "9.0", "name": "NVIDIA H200", "memory_mib": 143771, "driver": "580.159.04"}]


def test_real_h200_torch_arch_list_covers_it():
    lines = (FIX / "torch-arch-h200.txt").read_text().splitlines()
    arch = eval(lines[1], {})  # noqa: S307 (the recorded repr of a list of strings)
    assert gpu.covers("9.0", arch) == ["sm_90"]
    assert gpu.covers("12.1", arch) == ["sm_120"]


def test_gb10_with_the_nightly_list():
    gb10 = [{"compute_cap": "12.1", "name": "NVIDIA GB10", "memory_mib": None, "driver": ""}]
    assert gpu.arch_verdict(gb10, NIGHTLY) == []
    problems = gpu.arch_verdict(gb10, ["sm_80", "sm_90", "sm_100", "compute_120"])  # PTX only
    assert problems and "GB10 needs sm_120 or sm_121" in problems[0]


@pytest.mark.parametrize(
    ("cap", "arch", "hits"),
    [
        ("12.1", ["sm_121"], ["sm_121"]),
        ("12.1", ["sm_120a"], []),  # arch-specific cubins run only on 12.0
        ("12.0", ["sm_120a"], ["sm_120a"]),
        ("12.1", ["sm_120f"], ["sm_120f"]),
        ("12.0", ["sm_121"], []),
        ("10.0", ["sm_120"], []),
    ],
)
def test_coverage_rules(cap, arch, hits):
    assert gpu.covers(cap, arch) == hits


def test_no_torch_in_the_image_is_not_a_problem():
    assert gpu.arch_verdict([{"compute_cap": "12.1", "name": "GB10"}], None) == []


def test_output_without_compute_cap_is_refused():
    with pytest.raises(ValueError, match="compute_cap"):
        gpu.parse_query("name, memory.total [MiB]\nNVIDIA H200, 143771 MiB\n")
