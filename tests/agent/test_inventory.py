"""Inventory: the NVML path with a fake pynvml, and the declared fallback without a driver."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from services.agent.errors import InventoryError
from services.agent.inventory import discover, load_declared

MIB = 1024 * 1024


class FakeNvml:
    """The slice of pynvml the agent uses, over a fixed device list."""

    class NVMLError(Exception):
        pass

    class NVMLError_DriverNotLoaded(NVMLError):  # noqa: N801, N818 - pynvml's name
        pass

    def __init__(self, devices: list[dict], fail: Exception | None = None) -> None:
        self.devices = devices
        self.fail = fail
        self.shut = False

    def nvmlInit(self) -> None:  # noqa: N802 - pynvml's names, as the agent calls them
        if self.fail:
            raise self.fail

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.shut = True

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> dict:  # noqa: N802
        return self.devices[i]

    def nvmlDeviceGetName(self, h: dict) -> bytes:  # noqa: N802
        return h["name"].encode()

    def nvmlDeviceGetUUID(self, h: dict) -> str:  # noqa: N802
        return h["uuid"]

    def nvmlDeviceGetMemoryInfo(self, h: dict) -> SimpleNamespace:  # noqa: N802
        return SimpleNamespace(total=h["total"], used=h["used"], free=h["total"] - h["used"])

    def nvmlDeviceGetUtilizationRates(self, h: dict) -> SimpleNamespace:  # noqa: N802
        return SimpleNamespace(gpu=h["util"], memory=0)


DEVICES = [
    {
        "name": "NVIDIA A100-SXM4-80GB",
        "uuid": "GPU-a",
        "total": 80 * 1024 * MIB,
        "used": MIB,
        "util": 7,
    },
    {
        "name": "NVIDIA A100-SXM4-80GB",
        "uuid": "GPU-b",
        "total": 80 * 1024 * MIB,
        "used": 0,
        "util": 0,
    },
]


def test_nvml_devices_and_usage():
    nvml = FakeNvml(DEVICES)
    inventory = discover(None, nvml)
    assert inventory.source == "nvml" and inventory.has_real_gpus
    assert [(g.index, g.model, g.memory_total_mb, g.uuid) for g in inventory.gpus] == [
        (0, "NVIDIA A100-SXM4-80GB", 81920, "GPU-a"),
        (1, "NVIDIA A100-SXM4-80GB", 81920, "GPU-b"),
    ]
    usage = inventory.usage()
    assert (usage[0].utilization_pct, usage[0].memory_used_mb) == (7.0, 1)
    inventory.close()
    assert nvml.shut


def test_without_a_driver_the_declared_file_is_used_and_said_so(tmp_path: Path):
    path = tmp_path / "inventory.json"
    path.write_text(
        json.dumps(
            {
                "provider": "lab",
                "region": "eu-1",
                "gpus": [{"index": 0, "model": "A100-80GB", "memory_total_mb": 81920}],
            }
        )
    )
    nvml = FakeNvml([], fail=FakeNvml.NVMLError_DriverNotLoaded("Driver Not Loaded"))
    inventory = discover(path, nvml)
    assert inventory.source == "declared" and not inventory.has_real_gpus
    assert "NVMLError_DriverNotLoaded" in inventory.note and str(path) in inventory.note
    assert [g.model for g in inventory.gpus] == ["A100-80GB"]
    assert (inventory.provider, inventory.region) == ("lab", "eu-1")
    assert inventory.usage()[0].memory_total_mb == 81920


def test_the_real_pynvml_falls_back_on_this_machine(tmp_path: Path):
    """This machine has no NVIDIA driver: the real library raises and the file is used."""
    path = tmp_path / "inventory.yaml"
    path.write_text("gpus:\n  - {index: 0, model: L4, memory_total_mb: 23034}\n")
    inventory = discover(path)
    if inventory.source == "nvml":
        pytest.skip("this machine has a working NVML")
    assert "NVMLError" in inventory.note
    assert inventory.gpus[0].model == "L4"


def test_no_file_means_no_gpus_with_a_note():
    inventory = discover(
        None, FakeNvml([], fail=FakeNvml.NVMLError("NVML Shared Library Not Found"))
    )
    assert inventory.gpus == [] and "no inventory file" in inventory.note


@pytest.mark.parametrize(
    "content",
    [
        '{"gpus": [{"index": 0}]}',
        "not json",
        '{"gpus": [{"index": 0, "model": "x", '
        '"memory_total_mb": 1}, {"index": 0, "model": "y", "memory_total_mb": 1}]}',
    ],
)
def test_a_bad_inventory_file_is_an_error_that_shows_the_format(tmp_path: Path, content: str):
    path = tmp_path / "inv.json"
    path.write_text(content)
    with pytest.raises(InventoryError, match="inv.json"):
        load_declared(path)
