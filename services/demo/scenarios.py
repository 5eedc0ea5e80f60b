"""The demo's fleet and jobs: one job per failure mode.

The classes: docs/architecture.md, "Failure classes".

The same catalogue drives ``gridledger demo`` and the end-to-end tests, so
what the demo shows is what the tests assert. Jobs use only the locally built
images (``gridledger/busybox``, ``gridledger/python``) and print the messages
real GPU jobs print (a CUDA OOM traceback, a missing libcudart), since no GPU is
needed to see how gridledger explains them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

BUSYBOX = "gridledger/busybox:latest"
PYTHON = "gridledger/python:latest"

DEMO_TENANT = "dev"
DENIED_TENANT = "other"
"""The demo's agents hold a revoked object-store credential for this tenant, so the store
itself refuses its uploads (the "outputs failed to store" case, for real)."""


@dataclass(frozen=True)
class DemoNode:
    """One agent of the demo fleet: where it is and the GPUs it declares."""

    node_id: str
    provider: str
    region: str
    gpus: list[dict[str, Any]]

    def inventory(self) -> dict[str, Any]:
        """The declared inventory file's content."""
        return {"provider": self.provider, "region": self.region, "gpus": self.gpus}


FLEET = (
    DemoNode(
        "node-a",
        "lambda",
        "us-east",
        [{"index": i, "model": "NVIDIA A10G", "memory_total_mb": 24576} for i in range(2)],
    ),
    DemoNode(
        "node-b",
        "coreweave",
        "eu-west",
        [
            {"index": i, "model": "NVIDIA A100-SXM4-80GB", "memory_total_mb": 81920}
            for i in range(2)
        ],
    ),
)


@dataclass(frozen=True)
class Expected:
    """What the user should see at the end."""

    status: str
    failure_class: str = ""
    attribution: str = ""
    attempts: int = 1
    billed: bool = False
    """Some GPU-seconds are billable."""
    credited: bool = False
    """Some GPU-seconds are credited (a platform-side failure was not charged)."""


@dataclass(frozen=True)
class DemoJob:
    """One demo job: the spec that provokes a failure mode, and the outcome it must have."""

    key: str
    title: str
    spec: dict[str, Any]
    expected: Expected
    tags: tuple[str, ...] = field(default_factory=tuple)
    tenant: str = DEMO_TENANT
    """Whose job it is (submitted with that tenant's API token)."""


def _py(code: str) -> list[str]:
    return ["python3", "-c", code]


TRAIN_OK = """
import os, pathlib, time
out = pathlib.Path(os.environ["GRIDLEDGER_OUTPUT_DIR"])
(out / "ckpt").mkdir(parents=True, exist_ok=True)
for step in range(1, 4):
    print(f"step {step}/3 loss={1.0 / step:.3f}", flush=True)
    (out / "ckpt" / f"step-{step}.pt").write_bytes(os.urandom(4096))
    time.sleep(1)
(out / "model.pt").write_bytes(b"weights")
print("saved model.pt", flush=True)
"""

CUDA_OOM = """
import sys
print("loading model to cuda:0", flush=True)
print("Traceback (most recent call last):", file=sys.stderr)
print('  File "train.py", line 42, in <module>', file=sys.stderr)
print("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB "
      "(GPU 0; 23.69 GiB total capacity; 21.87 GiB already allocated)", file=sys.stderr)
sys.exit(1)
"""

NO_CUDA = """
import sys
print("ImportError: libcudart.so.12: cannot open shared object file: No such file or directory",
      file=sys.stderr)
sys.exit(1)
"""

RESUMABLE = """
import os, pathlib, sys, time
out = pathlib.Path(os.environ["GRIDLEDGER_OUTPUT_DIR"])
resume = os.environ.get("GRIDLEDGER_RESUME_FROM")
(out / "ckpt").mkdir(parents=True, exist_ok=True)
if resume:
    step = int(pathlib.Path(resume).read_text())
    print(f"resumed from {resume} at step {step}", flush=True)
else:
    step = 1
    (out / "ckpt" / "step-1.pt").write_text("1")
    print("step 1 done, checkpoint written", flush=True)
    time.sleep(600)  # the node disappears while we are here
for s in range(step + 1, step + 3):
    print(f"step {s} done", flush=True)
(out / "model.pt").write_text("weights")
print("finished", flush=True)
"""

JOBS: tuple[DemoJob, ...] = (
    DemoJob(
        "train-ok",
        "a training job that checkpoints and stores its model",
        {
            "name": "train-ok",
            "image": PYTHON,
            "command": _py(TRAIN_OK),
            "outputs": [{"path": "model.pt"}],
            "checkpoints": "ckpt",
            "resources": {"gpus": 1, "memory_gb": 0.25},
        },
        Expected("succeeded", billed=True),
        tags=("follow",),
    ),
    DemoJob(
        "cuda-oom",
        "the model does not fit in GPU memory at run time",
        {"name": "cuda-oom", "image": PYTHON, "command": _py(CUDA_OOM)},
        Expected("failed", "gpu_out_of_memory", "user", billed=True),
    ),
    DemoJob(
        "missing-module",
        "the image lacks a Python module",
        {"name": "missing-module", "image": PYTHON, "command": _py("import transformers")},
        Expected("failed", "missing_module", "user", billed=True),
    ),
    DemoJob(
        "no-cuda",
        "CUDA runtime missing from the image",
        {"name": "no-cuda", "image": PYTHON, "command": _py(NO_CUDA)},
        Expected("failed", "cuda_unavailable", "user", billed=True),
    ),
    DemoJob(
        "bad-entrypoint",
        "the command does not exist in the image",
        {"name": "bad-entrypoint", "image": BUSYBOX, "command": ["train-model", "--epochs", "3"]},
        Expected("failed", "entrypoint_not_found", "user", billed=True),
    ),
    DemoJob(
        "missing-data",
        "the dataset is not where the script looks for it",
        {
            "name": "missing-data",
            "image": PYTHON,
            "command": _py("print('loading dataset', flush=True)\nopen('data/train.jsonl')"),
        },
        Expected("failed", "missing_file", "user", billed=True),
    ),
    DemoJob(
        "host-oom",
        "the process exceeds its host memory limit",
        {
            "name": "host-oom",
            "image": BUSYBOX,
            "command": ["sh", "-c", 'x=a; while true; do x="$x$x"; done'],
            "resources": {"memory_gb": 0.03},
        },
        Expected("failed", "host_out_of_memory", "user", billed=True),
    ),
    DemoJob(
        "user-error",
        "the user's command exits 1",
        {
            "name": "user-error",
            "image": BUSYBOX,
            "command": ["sh", "-c", "echo 'epoch 3: loss is nan, aborting' >&2; exit 1"],
        },
        Expected("failed", "user_process_error", "user", billed=True),
    ),
    DemoJob(
        "image-not-found",
        "the image was never built or pushed",
        {"name": "image-not-found", "image": "gridledger/trainer:v2", "command": ["train"]},
        Expected("failed", "image_not_found", "user", billed=True),
    ),
    DemoJob(
        "does-not-fit",
        "a 70B model in training mode on one GPU",
        {
            "name": "does-not-fit",
            "image": PYTHON,
            "command": ["python3", "train.py"],
            "model": {"params_billion": 70, "dtype": "bf16", "mode": "training"},
        },
        Expected("rejected", "does_not_fit", "user", attempts=0),
    ),
    DemoJob(
        "upload-fails",
        "the process succeeds but the store refuses the node's credential for its outputs",
        {
            "name": "upload-fails",
            "image": BUSYBOX,
            "command": ["sh", "-c", 'echo done > "$GRIDLEDGER_OUTPUT_DIR/report.txt"'],
            "outputs": [{"path": "report.txt"}],
        },
        Expected("succeeded_with_errors", "output_upload_failed", "platform", credited=True),
        tenant=DENIED_TENANT,
    ),
    DemoJob(
        "output-missing",
        "the process exits 0 but never writes its declared output",
        {
            "name": "output-missing",
            "image": BUSYBOX,
            "command": ["sh", "-c", "echo training done"],
            "outputs": [{"path": "model.pt"}],
        },
        Expected("failed", "output_missing", "user", billed=True),
    ),
)

HOLDER = DemoJob(
    "long-run",
    "a long job holding one A100, cancelled by its user",
    {
        "name": "long-run",
        "image": BUSYBOX,
        "command": ["sh", "-c", "echo warming up; sleep 600"],
        "resources": {"gpus": 1, "gpu_models": ["NVIDIA A100-SXM4-80GB"]},
    },
    Expected("cancelled", "cancelled", "user", billed=True),
)

NO_CAPACITY = DemoJob(
    "no-capacity",
    "needs both A100s while one is busy; gives up at its queue deadline",
    {
        "name": "no-capacity",
        "image": BUSYBOX,
        "command": ["true"],
        "resources": {"gpus": 2, "gpu_models": ["NVIDIA A100-SXM4-80GB"]},
        "limits": {"queue_timeout_s": 8},
    },
    Expected("failed", "capacity_unavailable", "capacity", attempts=0),
)

NODE_LOST = DemoJob(
    "node-lost",
    "its node disappears mid-run; retried elsewhere from the last checkpoint",
    {
        "name": "node-lost",
        "image": PYTHON,
        "command": _py(RESUMABLE),
        "checkpoints": "ckpt",
        "outputs": [{"path": "model.pt"}],
        "placement": {"providers": ["lambda"]},
    },
    Expected("succeeded", attempts=2, billed=True, credited=True),
)

ALL_JOBS: tuple[DemoJob, ...] = (*JOBS, HOLDER, NO_CAPACITY, NODE_LOST)
