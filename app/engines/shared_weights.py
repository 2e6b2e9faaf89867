"""Model weights that every process on the machine shares: parameters backed by a memory-mapped file.

A model loaded the usual way holds its weights in the process's own memory, so N worker processes hold N
copies of one read-only model (540 MB each for SmolLM2-135M in float32). `share_weights` rebinds a CPU
model's parameters to views of a safetensors file mapped copy-on-write (`torch.UntypedStorage.from_file`,
MAP_PRIVATE): the pages are the kernel's page cache of that file, one copy for every process that maps
it, and the process's private copy is freed. Nothing writes to the weights at inference; a write would
only copy the page it touches into that process.

Which file: the model directory's own safetensors files when they hold every parameter in the dtype the
engine runs (the packaged GGUF's float32 conversion in the cache does); otherwise a file of the model's
parameters as loaded (e.g. bfloat16 weights run in float32), written once into `cache_dir/shared` under
the hash of its contents, so every process that loads the same weights maps the same file.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
from pathlib import Path
from typing import Any

_DTYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "F64": "float64"}


def _header(path: Path) -> tuple[int, dict[str, Any]]:
    """(offset of the data, {name: {dtype, shape, data_offsets}}) of a safetensors file."""
    with path.open("rb") as fh:
        (length,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(length))
    header.pop("__metadata__", None)
    return 8 + length, header


def _unique_parameters(model: Any) -> dict[str, Any]:
    """{first qualified name: parameter}, a tied parameter (SmolLM2's embedding = output layer) once."""
    seen: dict[int, str] = {}
    out: dict[str, Any] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        if id(param) not in seen:
            seen[id(param)] = name
            out[name] = param
    return out


def _map_file(path: Path, wanted: dict[str, Any]) -> dict[str, Any] | None:
    """Tensors of `path` for the names in `wanted` (same dtype, shape), as views of one copy-on-write map
    of the file; None when the file lacks one of them or a tensor is not aligned to its element size."""
    import torch

    start, header = _header(path)
    found: dict[str, Any] = {}
    for name, param in wanted.items():
        entry = header.get(name)
        if entry is None or _DTYPES.get(entry["dtype"]) != str(param.dtype).removeprefix("torch."):
            return None
        if list(entry["shape"]) != list(param.shape):
            return None
        found[name] = entry
    size = path.stat().st_size
    storage = torch.UntypedStorage.from_file(str(path), shared=False, nbytes=size)
    tensors: dict[str, Any] = {}
    for name, entry in found.items():
        dtype = wanted[name].dtype
        itemsize = torch.empty((), dtype=dtype).element_size()
        begin = start + int(entry["data_offsets"][0])
        if begin % itemsize:
            return None
        view = torch.empty(0, dtype=dtype)
        # torch types from_file() as _StorageBase | TypedStorage, which no set_() overload names
        view.set_(storage, begin // itemsize, tuple(entry["shape"]))  # type: ignore[call-overload]
        tensors[name] = view
    return tensors


def _write_shared(params: dict[str, Any], cache_dir: Path) -> Path:
    """The parameters as one safetensors file in `cache_dir/shared`, named by the hash of their names,
    dtypes, shapes and bytes (written once; a process that finds it reuses it)."""
    import torch
    from safetensors.torch import save_file

    digest = hashlib.blake2b(digest_size=16)
    for name, param in params.items():
        data = param.detach().contiguous()
        digest.update(f"{name}|{data.dtype}|{tuple(data.shape)}".encode())
        digest.update(data.view(-1).view(torch.uint8).numpy().data)
    target = cache_dir / "shared" / f"{digest.hexdigest()}.safetensors"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=target.name + ".", dir=target.parent)
    os.close(fd)
    try:
        save_file({name: p.detach().contiguous() for name, p in params.items()}, tmp)
        os.replace(tmp, target)  # atomic: a concurrent writer of the same contents wins or loses whole
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def share_weights(model: Any, model_dir: Path | str, cache_dir: Path) -> Path | None:
    """Rebind `model`'s parameters (CPU) to a memory-mapped file every process shares; the file used, or
    None when the model has no parameters on the CPU (nothing to share)."""
    import torch

    params = _unique_parameters(model)
    if not params or any(p.device.type != "cpu" for p in params.values()):
        return None
    mapped: dict[str, Any] | None = None
    used: Path | None = None
    own = sorted(Path(model_dir).glob("*.safetensors")) if Path(model_dir).is_dir() else []
    if len(own) == 1:  # a sharded checkpoint (several files) goes through the shared copy
        mapped, used = _map_file(own[0], params), own[0]
        # the file as loaded, not transformed on the way in (renamed, permuted or fused weights)
        if mapped is not None and not all(torch.equal(mapped[n], p) for n, p in params.items()):
            mapped = None
    if mapped is None:
        used = _write_shared(params, cache_dir)
        mapped = _map_file(used, params)
    if mapped is None:
        return None
    replacement = {id(p): torch.nn.Parameter(mapped[name], requires_grad=False) for name, p in params.items()}
    for module in model.modules():
        for key, param in list(module._parameters.items()):
            if param is not None and id(param) in replacement:
                module._parameters[key] = replacement[id(param)]
    return used
