"""The versioned adapter store: one immutable, content-hashed folder per version.

    <root>/versions/v7/adapter_model.safetensors
                      /adapter_config.json
                      /manifest.json        (version, parent, content hash, data window, metrics)

A version is published by writing it in a temporary folder, flushing it to
disk and renaming it into place, so a reader sees either nothing or the whole
version, never half of one. Files are made read-only. Readers address versions
only by name (``v7``), never by a path from outside the store, and verify the
content hash before they trust the weights.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

VERSION_RE = re.compile(r"^v([0-9]+)$")
ADAPTER_FILES = ("adapter_model.safetensors", "adapter_config.json")
MANIFEST = "manifest.json"


class StoreError(RuntimeError):
    pass


class TamperedAdapter(StoreError):
    """The files of a version no longer match its recorded content hash."""


@dataclass(frozen=True)
class Manifest:
    version: str
    parent: str | None
    content_hash: str
    base_model: str
    created_at: float
    data_window: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(self.__dict__, indent=2, sort_keys=True)


@dataclass(frozen=True)
class StoredAdapter:
    version: str
    path: Path
    manifest: Manifest

    @property
    def number(self) -> int:
        return version_number(self.version)


def version_number(version: str) -> int:
    match = VERSION_RE.match(version)
    if not match:
        raise StoreError(f"{version!r} is not an adapter version (expected v<number>, e.g. v3)")
    return int(match.group(1))


def content_hash(folder: Path) -> str:
    """sha256 over the adapter files' names and bytes, in a fixed order."""
    digest = hashlib.sha256()
    for name in ADAPTER_FILES:
        path = folder / name
        if not path.exists():
            raise StoreError(f"{folder} lacks {name}")
        digest.update(name.encode() + b"\0")
        with path.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class AdapterStore:
    def __init__(self, root: Path | str):
        self.root = Path(root)
        self.versions_dir = self.root / "versions"
        self.versions_dir.mkdir(parents=True, exist_ok=True)

    def versions(self) -> list[str]:
        """Published versions, oldest first."""
        names = [
            p.name
            for p in self.versions_dir.iterdir()
            if VERSION_RE.match(p.name) and (p / MANIFEST).exists()
        ]
        return sorted(names, key=version_number)

    def latest(self) -> StoredAdapter | None:
        versions = self.versions()
        return self.get(versions[-1]) if versions else None

    def path_of(self, version: str) -> Path:
        version_number(version)  # refuses anything that is not a plain version name
        return self.versions_dir / version

    def get(self, version: str) -> StoredAdapter:
        path = self.path_of(version)
        manifest_path = path / MANIFEST
        if not manifest_path.exists():
            raise StoreError(f"adapter version {version} is not in the store at {self.root}")
        manifest = Manifest(**json.loads(manifest_path.read_text()))
        return StoredAdapter(version, path, manifest)

    def verify(self, version: str) -> StoredAdapter:
        """The version, after checking its files against the recorded hash."""
        stored = self.get(version)
        actual = content_hash(stored.path)
        if actual != stored.manifest.content_hash:
            raise TamperedAdapter(
                f"adapter {version} fails its content check: manifest says {stored.manifest.content_hash}, files hash to {actual}"
            )
        return stored

    def publish(
        self,
        adapter_dir: Path,
        base_model: str,
        parent: str | None = None,
        data_window: dict[str, Any] | None = None,
        metrics: dict[str, float] | None = None,
    ) -> StoredAdapter:
        """Copy a PEFT adapter folder in as the next version, atomically."""
        staging = self.root / f".staging-{os.getpid()}-{time.time_ns()}"
        staging.mkdir(parents=True)
        try:
            for name in ADAPTER_FILES:
                shutil.copyfile(Path(adapter_dir) / name, staging / name)
            digest = content_hash(staging)
            while True:
                versions = self.versions()
                number = version_number(versions[-1]) + 1 if versions else 1
                version = f"v{number}"
                manifest = Manifest(
                    version=version,
                    parent=parent,
                    content_hash=digest,
                    base_model=base_model,
                    created_at=time.time(),
                    data_window=data_window or {},
                    metrics=metrics or {},
                )
                (staging / MANIFEST).write_text(manifest.to_json())
                for child in staging.iterdir():
                    with child.open("rb") as fh:
                        os.fsync(fh.fileno())
                    child.chmod(0o444)
                _fsync_dir(staging)
                target = self.versions_dir / version
                try:
                    staging.rename(target)  # atomic; fails if another publisher took the number
                except OSError:
                    if target.exists():
                        for child in staging.iterdir():
                            child.chmod(0o644)
                        continue
                    raise
                _fsync_dir(self.versions_dir)
                return StoredAdapter(version, target, manifest)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)

    def clean_staging(self) -> int:
        """Remove leftovers of publishes that were killed midway; returns how many."""
        leftovers = list(self.root.glob(".staging-*"))
        for path in leftovers:
            for child in path.iterdir():
                child.chmod(0o644)
            shutil.rmtree(path, ignore_errors=True)
        return len(leftovers)
