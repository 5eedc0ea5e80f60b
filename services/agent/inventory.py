"""The node's GPUs: from NVML when a driver is there, else from a declared file.

NVML is reached through a pynvml-like module object (the real ``pynvml`` by
default) so the GPU path is unit-tested with a fake one. A node without a usable
NVML says so in its registration (``inventory_source="declared"`` and a note with
the NVML error and the file), and never asks Docker for GPU devices.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from schemas.types import GpuDevice, GpuUsage
from services.agent.errors import InventoryError

log = logging.getLogger(__name__)

MIB = 1024 * 1024


class DeclaredInventory(BaseModel):
    """The inventory file: ``{"gpus": [{index, model, memory_total_mb}], provider?, region?}``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpus: list[GpuDevice] = Field(default_factory=list)
    provider: str = ""
    region: str = ""


def load_declared(path: Path) -> DeclaredInventory:
    """Read a declared inventory from JSON or YAML (chosen by the suffix, JSON otherwise)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise InventoryError(f"cannot read the inventory file {path}: {exc}") from exc
    try:
        data: Any = (
            yaml.safe_load(text) if path.suffix.lower() in (".yaml", ".yml") else json.loads(text)
        )
        inventory = DeclaredInventory.model_validate(data or {})
    except (ValueError, yaml.YAMLError, ValidationError) as exc:
        raise InventoryError(
            f"inventory file {path} is not valid: {exc}. Expected e.g. "
            '{"gpus": [{"index": 0, "model": "A100-80GB", "memory_total_mb": 81920}]}'
        ) from exc
    indices = [gpu.index for gpu in inventory.gpus]
    if len(set(indices)) != len(indices):
        raise InventoryError(f"inventory file {path}: GPU indices repeat: {indices}")
    return inventory


class NvmlGpus:
    """GPUs read through NVML. ``nvml`` is the ``pynvml`` module or a fake with its API."""

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        self.error: type[Exception] = nvml.NVMLError
        """The base of every NVML error: what a failed read raises, and nothing else."""
        nvml.nvmlInit()
        self._handles = [
            nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())
        ]

    def devices(self) -> list[GpuDevice]:
        """The GPUs as NVML reports them: model, memory and UUID."""
        nvml = self._nvml
        devices = []
        for index, handle in enumerate(self._handles):
            name = nvml.nvmlDeviceGetName(handle)
            uuid = nvml.nvmlDeviceGetUUID(handle)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            devices.append(
                GpuDevice(
                    index=index,
                    model=_text(name),
                    memory_total_mb=int(memory.total // MIB),
                    uuid=_text(uuid),
                )
            )
        return devices

    def usage(self) -> list[GpuUsage]:
        """Each GPU's utilisation and memory in use now."""
        nvml = self._nvml
        usage = []
        for index, handle in enumerate(self._handles):
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            rates = nvml.nvmlDeviceGetUtilizationRates(handle)
            usage.append(
                GpuUsage(
                    index=index,
                    utilization_pct=float(rates.gpu),
                    memory_used_mb=int(memory.used // MIB),
                    memory_total_mb=int(memory.total // MIB),
                )
            )
        return usage

    def close(self) -> None:
        """Shut NVML down."""
        self._nvml.nvmlShutdown()


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


@dataclass
class Inventory:
    """What the node registers: its GPUs, where they were read from, and why."""

    source: Literal["nvml", "declared"]
    gpus: list[GpuDevice]
    note: str = ""
    provider: str = ""
    region: str = ""
    nvml: NvmlGpus | None = field(default=None, repr=False)

    @property
    def has_real_gpus(self) -> bool:
        """True when Docker may be asked for GPU devices."""
        return self.source == "nvml"

    def usage(self) -> list[GpuUsage]:
        """Live usage from NVML; zeros (with the declared totals) on a declared inventory."""
        if self.nvml is not None:
            try:
                return self.nvml.usage()
            except self.nvml.error as exc:  # usage is best effort; a bug still surfaces
                log.warning("NVML usage read failed: %s", exc)
        return [GpuUsage(index=g.index, memory_total_mb=g.memory_total_mb) for g in self.gpus]

    def close(self) -> None:
        """Release NVML, if this inventory used it."""
        if self.nvml is not None:
            self.nvml.close()


def _nvml_module() -> Any:
    import pynvml  # nvidia-ml-py

    return pynvml


def discover(inventory_file: Path | None, nvml: Any = None) -> Inventory:
    """The node's GPUs from NVML, falling back to ``inventory_file`` when NVML is unusable.

    Any NVML error at start-up (typically ``NVMLError_LibraryNotFound`` or
    ``NVMLError_DriverNotLoaded`` on a machine without a GPU driver) means the
    declared file is used, and the registration says which error and which file.
    Without a file the node registers with no GPUs (CPU-only jobs can still run).
    """
    module = nvml if nvml is not None else _nvml_module()
    try:
        gpus = NvmlGpus(module)
        devices = gpus.devices()
    except module.NVMLError as exc:
        reason = f"NVML unavailable ({type(exc).__name__}: {exc})"
    else:
        return Inventory(
            source="nvml", gpus=devices, note=f"{len(devices)} GPU(s) from NVML", nvml=gpus
        )
    if inventory_file is None:
        log.warning("%s and no inventory file given: registering without GPUs", reason)
        return Inventory(
            source="declared", gpus=[], note=f"{reason}; no inventory file given: no GPUs"
        )
    declared = load_declared(inventory_file)
    return Inventory(
        source="declared",
        gpus=list(declared.gpus),
        note=f"{reason}; using the declared inventory {inventory_file}",
        provider=declared.provider,
        region=declared.region,
    )


def host_memory_mb() -> int:
    """Physical memory of the host in MiB (0 when the platform does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // MIB)
    except (ValueError, OSError, AttributeError):
        return 0
