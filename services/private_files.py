"""Files that hold credentials or config: private from the moment they exist.

Every such file (API tokens, S3 credentials, the CLI's profiles, key files) is
written through :func:`write_private`: the content goes to a temporary file
that ``mkstemp`` creates with mode 0600 beside the target, then replaces the
target in one rename, so there is never a moment when a reader sees a partial
file or a world-readable one. A folder it has to create is made 0700.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

FILE_MODE = 0o600
FOLDER_MODE = 0o700


def make_private_folder(folder: Path) -> None:
    """Create ``folder`` and any missing parents with mode 0700; existing ones are kept as
    they are (the stack's home, for one, must stay searchable by the postgres user)."""
    missing = []
    for parent in (folder, *folder.parents):
        if parent.exists():
            break
        missing.append(parent)
    for created in reversed(missing):
        try:
            created.mkdir(mode=FOLDER_MODE)
        except FileExistsError:
            continue
        created.chmod(FOLDER_MODE)  # mkdir's mode is filtered by the umask


def write_private(path: Path, text: str) -> None:
    """Replace ``path`` with ``text``, the file 0600 from its first byte."""
    make_private_folder(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:  # mkstemp creates it 0600, whatever the umask
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
