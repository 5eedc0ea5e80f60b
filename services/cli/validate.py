"""``gridledger validate FILE``: check a job spec offline, with the API's own rules and messages."""

from __future__ import annotations

from typing import Any

import click

from services.cli.exits import Exit
from services.cli.options import Output, output_options


@click.command("validate")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@output_options
def validate(out: Output, file: str) -> int:
    """Check the job spec FILE (YAML or JSON; - reads stdin) without an API or a token.

    The same reading and rules as a submit, so the same problems, each with its fix
    (exit 3). A valid spec prints the GPU memory it is estimated to need (exit 0);
    `gridledger submit --dry-run FILE` checks it against the live fleet.
    """
    from projections.fit import check_fit
    from services.api import problems
    from services.cli.jobs import content_type, refused
    from services.settings import load_settings

    settings = load_settings()
    with click.open_file(file, "rb") as stream:
        body = stream.read()
    try:
        spec = problems.read_spec(
            body, content_type(file, body), settings.api_max_body_bytes, settings.api_max_spec_bytes
        )
    except problems.SpecRefusedError as exc:
        return refused(out, file, exc.document())
    need = check_fit(spec, [])
    result = {
        "valid": True,
        "required_vram_gb": need.required_vram_gb,
        "estimate_basis": need.estimate_basis,
        "spec": spec.model_dump(mode="json"),
    }

    def text(data: dict[str, Any]) -> str:
        basis = data["estimate_basis"]
        memory = (
            f"~{data['required_vram_gb']:g} GiB of GPU memory per GPU ({basis})"
            if data["required_vram_gb"]
            else "no GPU memory estimate (give model or resources.min_vram_gb for one)"
        )
        return f"{file}: valid; {memory}"

    out.emit(result, text)
    return Exit.OK


COMMANDS = (validate,)
