"""The notary's keys on disk: the signing key the operator holds, the public keys seals
are checked against.

``gridledger audit keygen`` writes the private key (PKCS#8 PEM, 0600, through
:func:`services.private_files.write_private`) to ``Settings.notary_key_path`` and its
public key to ``<notary_keys_path>/<key id>.pub`` (PEM). A rotation (``--rotate``)
writes a new private key and adds its public key beside the old ones: seals signed
before stay verifiable, and the chain goes on across the change.
"""

from __future__ import annotations

from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
    load_pem_private_key,
    load_pem_public_key,
)

from schemas.errors import GridledgerError
from services.notary.chain import key_id
from services.private_files import make_private_folder, write_private
from services.settings import Settings


class NotaryKeyError(GridledgerError):
    """A key file that is missing or is not an Ed25519 key; the message says what to run."""


def public_pem(public: Ed25519PublicKey) -> str:
    """A public key as PEM (SubjectPublicKeyInfo), what ``<key id>.pub`` holds."""
    return public.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo).decode()


def keygen(settings: Settings, rotate: bool = False) -> tuple[str, Path, Path]:
    """Create the signing key and record its public key; (key id, private, public path).

    An existing key is kept unless ``rotate``: a new key would leave the running notary
    signing with a key nobody expects."""
    path = settings.notary_key_path
    if path.exists() and not rotate:
        current = key_id(load_signing_key(settings).public_key())
        raise NotaryKeyError(
            f"{path} already holds the notary's key ({current}); "
            "`gridledger audit keygen --rotate` replaces it and keeps its public key"
        )
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()
    write_private(path, pem)
    public = save_public_key(settings, key.public_key())
    return key_id(key.public_key()), path, public


def save_public_key(settings: Settings, public: Ed25519PublicKey) -> Path:
    """Add a public key to the accepted ones (``<key id>.pub``); its path."""
    folder = settings.notary_keys_path
    make_private_folder(folder)
    target = folder / f"{key_id(public)}.pub"
    target.write_text(public_pem(public))
    return target


def load_signing_key(settings: Settings) -> Ed25519PrivateKey:
    """The notary's private key; :class:`NotaryKeyError` saying to run keygen when absent."""
    path = settings.notary_key_path
    try:
        key = load_pem_private_key(path.read_bytes(), password=None)
    except FileNotFoundError as exc:
        raise NotaryKeyError(
            f"no notary key at {path}: create one with `gridledger audit keygen` "
            "(or point GRIDLEDGER_NOTARY_KEY_FILE at the operator's key)"
        ) from exc
    except (OSError, ValueError, TypeError) as exc:
        raise NotaryKeyError(f"{path} is not a PEM private key: {exc}") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise NotaryKeyError(f"{path} holds a {type(key).__name__}, the notary signs with Ed25519")
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    """One public key file (PEM); :class:`NotaryKeyError` naming the file otherwise."""
    try:
        public = load_pem_public_key(path.read_bytes())
    except (OSError, ValueError, TypeError) as exc:
        raise NotaryKeyError(f"cannot read the public key {path}: {exc}") from exc
    if not isinstance(public, Ed25519PublicKey):
        raise NotaryKeyError(
            f"{path} holds a {type(public).__name__}, seals are signed with Ed25519"
        )
    return public


def ensure_key(settings: Settings) -> bool:
    """Create the notary's key unless there is one (``dev up``, ``dev init``); whether it
    was created. An existing key that does not load is said now."""
    if settings.notary_key_path.exists():
        load_signing_key(settings)
        return False
    keygen(settings)
    return True


def accepted_keys(settings: Settings, own: Ed25519PublicKey) -> dict[str, Ed25519PublicKey]:
    """The keys whose seals the notary chains onto: the keys folder's and its own."""
    return {**_by_id(sorted(settings.notary_keys_path.glob("*.pub"))), key_id(own): own}


def _by_id(paths: list[Path]) -> dict[str, Ed25519PublicKey]:
    keys = [load_public_key(path) for path in paths]
    return {key_id(public): public for public in keys}


def public_keys(settings: Settings, files: tuple[Path, ...] = ()) -> dict[str, Ed25519PublicKey]:
    """Key id -> public key: of ``files`` when given, else every ``*.pub`` of the keys
    folder. None at all is an error: nothing could be verified."""
    paths = list(files) or sorted(settings.notary_keys_path.glob("*.pub"))
    if not paths:
        raise NotaryKeyError(
            f"no public keys in {settings.notary_keys_path}: pass the operator's with "
            "--public-key FILE, or create the key with `gridledger audit keygen`"
        )
    return _by_id(paths)
