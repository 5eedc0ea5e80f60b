"""Errors the agent raises on purpose."""

from __future__ import annotations

from schemas.errors import GridledgerError
from schemas.events import OutputFailureReason


class AgentError(GridledgerError):
    """The agent cannot do what it was asked (bad inventory file, unusable home ...)."""


class InventoryError(AgentError):
    """The GPU inventory could not be read from NVML nor from the declared file."""


class ImageUnavailableError(AgentError):
    """The job's image is not on the node and could not (or may not) be pulled."""

    def __init__(self, image: str, reason: str, message: str) -> None:
        self.image = image
        self.reason = reason
        """``not_found`` or ``registry_unreachable``, as in ImageUnavailable."""
        self.message = message
        super().__init__(f"image {image}: {reason}: {message}")


class ContainerStartError(AgentError):
    """Docker refused to create or start the container."""

    def __init__(self, error_kind: str, message: str) -> None:
        self.error_kind = error_kind
        """entrypoint_not_found, entrypoint_not_executable, invalid_config, daemon_error ..."""
        self.message = message
        super().__init__(f"{error_kind}: {message}")


class ArtifactStoreError(AgentError):
    """A checkpoint or output could not be stored."""


class ArtifactChecksumError(ArtifactStoreError):
    """A downloaded checkpoint does not hash to the sha256 recorded when it was stored."""


class ArtifactRefusedError(AgentError):
    """What the job wrote or declared is not stored: the user's side, billed."""

    def __init__(self, path: str, reason: OutputFailureReason, message: str) -> None:
        self.path = path
        self.reason = reason
        self.message = message
        super().__init__(f"{reason}: {message}")


class ArtifactMissingError(AgentError):
    """Nothing exists at the declared path."""
