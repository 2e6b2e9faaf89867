"""GGUF → safetensors, converted once into the model cache directory.

Loading a GGUF file through transformers (`from_pretrained(dir, gguf_file=...)`) de-quantizes every
tensor on each load (about 20 s for SmolLM2-135M on this CPU). The first load therefore saves the
de-quantized float32 model and its tokenizer as an ordinary HF model directory (config, tokenizer,
`model.safetensors`) under `cache_dir/gguf/<stem>-<hash>/`; later loads read that directory (< 1 s),
with identical logits. The same directory is what vLLM loads (`LLM(model=dir)`).

`save_pretrained` refuses a model that still carries its GGUF quantizer, hence `model.hf_quantizer = None`
before saving; the GGUF `quantization_config` is then removed from the saved config.json (the weights are
plain float32, and vLLM refuses a directory that claims `quant_method: gguf`). The directory is written to a temporary sibling and renamed, so a crash or a concurrent
conversion never leaves a half-written cache entry behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

_DONE = ".iclaudit-converted"
_LAYOUT = 2  # bump when the converted directory's layout changes: old entries are then ignored


def _drop_quantization_config(config_path: Path) -> None:
    """The saved weights are plain float32: remove the GGUF `quantization_config` that transformers keeps
    in config.json (vLLM rejects a model directory that claims `quant_method: gguf`)."""
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config.pop("quantization_config", None)
    config_path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def gguf_cache_dir(gguf_path: Path, cache_dir: Path) -> Path:
    """Where the converted model of `gguf_path` lives: keyed by the file's resolved path, size and mtime."""
    resolved = gguf_path.resolve()
    stat = resolved.stat()
    digest = hashlib.sha256(f"{_LAYOUT}|{resolved}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[
        :12
    ]
    return cache_dir / "gguf" / f"{resolved.stem}-{digest}"


def is_converted(gguf_path: Path, cache_dir: Path) -> bool:
    return (gguf_cache_dir(gguf_path, cache_dir) / _DONE).is_file()


def ensure_safetensors(gguf_path: Path, cache_dir: Path) -> Path:
    """The HF model directory for `gguf_path`, converting it (once) if the cache has none yet."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = gguf_cache_dir(gguf_path, cache_dir)
    if (target / _DONE).is_file():
        return target
    if not gguf_path.is_file():
        raise FileNotFoundError(f"GGUF file not found: {gguf_path}")
    target.parent.mkdir(parents=True, exist_ok=True)
    src_dir, name = str(gguf_path.resolve().parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(src_dir, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(src_dir, gguf_file=name, dtype=torch.float32)
    # save_pretrained refuses a model that still has its GGUF quantizer (nn.Module types a set attribute
    # as Tensor | Module)
    model.hf_quantizer = None  # type: ignore[assignment]
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        _drop_quantization_config(tmp / "config.json")
        (tmp / _DONE).write_text(str(gguf_path.resolve()))
        try:
            os.replace(tmp, target)
        except OSError:
            # Another process finished first (the target exists and is not empty): keep theirs.
            if not (target / _DONE).is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target
