"""ed25519 signatures of a snapshot manifest (the ``cryptography`` package: ``pip install
'tunedb[sign]'``).  Keys are PEM files: a private key (PKCS#8, unencrypted) that the publisher
keeps and a public key (SubjectPublicKeyInfo) that readers are given.  The signature sits in
the manifest itself (``"signature": {"alg": "ed25519", "value": <base64>}``) and signs the
canonical encoding of the rest of the manifest (``format.signed_bytes``), so a manifest and its
signature are replaced together, in one rename; every other file is named by its sha256 in the
manifest (or in a file the manifest names by its sha256), so the signature covers the whole
snapshot."""

from __future__ import annotations

import base64
import binascii
import os
from pathlib import Path
from typing import Any

from tunedb.index.snapshot.format import SIGNATURE, SnapshotError, signed_bytes


def _crypto():
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise ValueError("signing needs the cryptography package: pip install 'tunedb[sign]'") from None
    return serialization, ed25519


def generate_keys(private_path: str | os.PathLike, public_path: str | os.PathLike) -> str:
    """Write a new ed25519 key pair (the private file with mode 0600); returns the public key PEM.
    ``ValueError`` when a file exists already (nothing is overwritten)."""
    serialization, ed25519 = _crypto()
    priv_p, pub_p = Path(private_path), Path(public_path)
    for p in (priv_p, pub_p):
        if p.exists():
            raise ValueError(f"{p} exists; not overwriting a key")
    key = ed25519.Ed25519PrivateKey.generate()
    priv = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())
    pub = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    fd = os.open(priv_p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(priv)
    pub_p.write_bytes(pub)
    return pub.decode()


def sign(manifest: bytes, private_key_file: str | os.PathLike) -> bytes:
    """The raw 64-byte ed25519 signature of ``manifest``.  ``ValueError`` (one line) for a file
    that is not an unencrypted ed25519 private key."""
    serialization, ed25519 = _crypto()
    try:
        key = serialization.load_pem_private_key(Path(private_key_file).read_bytes(), password=None)
    except OSError as e:
        raise ValueError(f"cannot read key {private_key_file}: {e.strerror}") from None
    except (ValueError, TypeError) as e:
        raise ValueError(f"{private_key_file} is not an unencrypted PEM private key: {str(e).splitlines()[0]}") from None
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise ValueError(f"{private_key_file} is not an ed25519 private key")
    return key.sign(manifest)


def load_public_key(key: str | bytes | os.PathLike):
    """An ed25519 public key from a PEM file path, PEM text or bytes.  ``ValueError`` when it is none."""
    serialization, ed25519 = _crypto()
    if isinstance(key, bytes):
        pem = key
    elif isinstance(key, str) and key.lstrip().startswith("-----BEGIN"):
        pem = key.encode()
    else:
        try:
            pem = Path(key).read_bytes()
        except OSError as e:
            raise ValueError(f"cannot read publisher key {key}: {e.strerror}") from None
    try:
        pub = serialization.load_pem_public_key(pem)
    except (ValueError, TypeError) as e:
        raise ValueError(f"publisher key is not a PEM public key: {str(e).splitlines()[0]}") from None
    if not isinstance(pub, ed25519.Ed25519PublicKey):
        raise ValueError("publisher key is not an ed25519 public key")
    return pub


def key_fingerprint(public_key: Any) -> str:
    """A short, stable name of an ed25519 public key: the first 32 hex digits of the sha256 of
    its raw bytes (what the rollback state is kept under)."""
    import hashlib

    serialization, _ = _crypto()
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "ed25519:" + hashlib.sha256(raw).hexdigest()[:32]


def verify(manifest: bytes, signature: bytes | None, public_key, where: str) -> None:
    """SnapshotError (one line) unless ``signature`` is ``public_key``'s signature of ``manifest``."""
    from cryptography.exceptions import InvalidSignature

    if signature is None:
        raise SnapshotError(f"{where} is not signed, and a publisher key was given: refused")
    try:
        public_key.verify(signature, manifest)
    except InvalidSignature:
        raise SnapshotError(f"{where}: the manifest's signature does not match the publisher key: refused") from None


def sign_manifest(manifest: dict, private_key_file: str | os.PathLike) -> dict:
    """``manifest`` with its :data:`SIGNATURE` entry: the signature of :func:`signed_bytes`."""
    sig = sign(signed_bytes(manifest), private_key_file)
    return {**manifest, SIGNATURE: {"alg": "ed25519", "value": base64.b64encode(sig).decode("ascii")}}


def verify_manifest(manifest: dict, public_key, where: str) -> None:
    """SnapshotError (one line) unless ``manifest`` carries ``public_key``'s signature of the
    rest of itself."""
    entry = manifest.get(SIGNATURE)
    if entry is None:
        verify(signed_bytes(manifest), None, public_key, where)
    if not isinstance(entry, dict) or entry.get("alg") != "ed25519" or not isinstance(entry.get("value"), str):
        raise SnapshotError(f"{where}: the manifest's signature is not an ed25519 signature: refused")
    try:
        sig = base64.b64decode(entry["value"], validate=True)
    except (binascii.Error, ValueError):
        raise SnapshotError(f"{where}: the manifest's signature is not base64: refused") from None
    verify(signed_bytes(manifest), sig, public_key, where)


__all__ = ["generate_keys", "sign", "load_public_key", "key_fingerprint", "verify", "sign_manifest", "verify_manifest"]
