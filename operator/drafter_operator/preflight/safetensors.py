"""Safetensors headers, read without the weights (and without the `safetensors` package).

The format: an 8-byte little-endian unsigned length N, then N bytes of JSON mapping each tensor name to
``{"dtype", "shape", "data_offsets": [begin, end]}`` (offsets relative to the end of the header) plus an
optional ``"__metadata__"`` object of strings, then the tensor bytes. Reading a header costs one small
read per file whatever the checkpoint's size. `read_tensor_bytes` reads one tensor's bytes, for the
few small tensors worth looking at (a draft vocabulary mapping: tens of kilobytes).

`write_safetensors` writes the same format (tests build tiny checkpoints with it; the contract tier
loads them with the real `safetensors`).
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path

DTYPE_SIZES: dict[str, int] = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "F4": 1,
    "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1,
}
INTEGER_DTYPES = ("I64", "I32", "I16", "I8", "U64", "U32", "U16", "U8")
MAX_HEADER_BYTES = 100 * 1024 * 1024  # the reference implementation's own limit
MAX_TENSOR_READ = 64 * 1024 * 1024


class SafetensorsError(ValueError):
    """A file that is not a readable safetensors file (the message names the file and what is wrong)."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    file: str  # path of the .safetensors file holding it
    begin: int  # absolute byte offsets in that file
    end: int

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


def read_header(path: str | os.PathLike) -> tuple[dict[str, TensorInfo], dict[str, str]]:
    """The tensors of one file (name -> TensorInfo) and its ``__metadata__``; reads the header only."""
    path = str(path)
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) < 8:
            raise SafetensorsError(f"{path}: {size} bytes, too short for a safetensors header")
        (length,) = struct.unpack("<Q", raw)
        if length > MAX_HEADER_BYTES or 8 + length > size:
            raise SafetensorsError(f"{path}: header length {length} does not fit a {size}-byte file "
                                   "(not a safetensors file, or truncated)")
        text = f.read(length)
    try:
        header = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SafetensorsError(f"{path}: header is not JSON ({exc})") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    base = 8 + length
    tensors: dict[str, TensorInfo] = {}
    for name, entry in header.items():
        try:
            dtype = str(entry["dtype"])
            shape = tuple(int(d) for d in entry["shape"])
            begin, end = (int(o) for o in entry["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise SafetensorsError(f"{path}: tensor {name!r} has a malformed header entry {entry!r}") from None
        if begin > end or base + end > size:
            raise SafetensorsError(f"{path}: tensor {name!r} data [{begin}, {end}) lies outside the file")
        itemsize = DTYPE_SIZES.get(dtype)
        if itemsize is not None and dtype != "F4":
            numel = 1
            for d in shape:
                numel *= d
            if numel * itemsize != end - begin:
                raise SafetensorsError(f"{path}: tensor {name!r} {dtype}{list(shape)} needs {numel * itemsize} bytes, "
                                       f"the header gives {end - begin}")
        tensors[name] = TensorInfo(name, dtype, shape, path, base + begin, base + end)
    return tensors, {str(k): str(v) for k, v in metadata.items()}


def read_tensor_bytes(info: TensorInfo, limit: int = MAX_TENSOR_READ) -> bytes:
    """The raw little-endian bytes of one tensor; refuses tensors larger than ``limit``."""
    if info.end - info.begin > limit:
        raise SafetensorsError(f"{info.file}: tensor {info.name!r} is {info.end - info.begin} bytes, "
                               f"more than the {limit} a preflight reads")
    with open(info.file, "rb") as f:
        f.seek(info.begin)
        data = f.read(info.end - info.begin)
    if len(data) != info.end - info.begin:
        raise SafetensorsError(f"{info.file}: tensor {info.name!r} is truncated")
    return data


def read_integers(info: TensorInfo, limit: int = MAX_TENSOR_READ) -> list[int]:
    """An integer (or BOOL) tensor's values, flattened."""
    codes = {"I64": "q", "I32": "i", "I16": "h", "I8": "b", "U64": "Q", "U32": "I", "U16": "H", "U8": "B",
             "BOOL": "?"}
    code = codes.get(info.dtype)
    if code is None:
        raise SafetensorsError(f"{info.file}: tensor {info.name!r} is {info.dtype}, not an integer tensor")
    data = read_tensor_bytes(info, limit)
    values = struct.unpack(f"<{info.numel}{code}", data)
    return [int(v) for v in values]


def checkpoint_tensors(directory: str | os.PathLike) -> tuple[dict[str, TensorInfo], list[str]]:
    """Every tensor of a checkpoint directory, from its safetensors headers.

    Sharded checkpoints are read through ``*.safetensors.index.json`` (its ``weight_map`` names each
    tensor's file; a tensor the index names but its file lacks is an error). Without an index every
    ``*.safetensors`` file in the directory is read. Returns (tensors, files read).
    """
    directory = Path(directory)
    indexes = sorted(directory.glob("*.safetensors.index.json"))
    tensors: dict[str, TensorInfo] = {}
    if indexes:
        files: dict[str, list[str]] = {}
        for index in indexes:
            try:
                weight_map = json.loads(index.read_text())["weight_map"]
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise SafetensorsError(f"{index}: not a safetensors index with a weight_map ({exc})") from None
            for name, file in weight_map.items():
                files.setdefault(str(file), []).append(str(name))
        for file, names in sorted(files.items()):
            path = directory / file
            if not path.is_file():
                raise SafetensorsError(f"{path}: named by the index for {len(names)} tensors "
                                       f"(e.g. {names[0]!r}) but missing")
            found, _ = read_header(path)
            missing = [n for n in names if n not in found]
            if missing:
                raise SafetensorsError(f"{path}: the index places {missing[0]!r} there "
                                       f"({len(missing)} such tensors) but the file does not hold it")
            tensors.update(found)
        return tensors, sorted(str(directory / f) for f in files)
    paths = sorted(directory.glob("*.safetensors"))
    for path in paths:
        found, _ = read_header(path)
        tensors.update(found)
    return tensors, [str(p) for p in paths]


def write_safetensors(path: str | os.PathLike, tensors: dict[str, tuple[str, tuple[int, ...], bytes | None]],
                      metadata: dict[str, str] | None = None) -> None:
    """Write a safetensors file: ``tensors`` maps name -> (dtype, shape, data or None for zeros)."""
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    blobs: list[bytes] = []
    offset = 0
    for name, (dtype, shape, data) in tensors.items():
        numel = 1
        for d in shape:
            numel *= d
        size = numel * DTYPE_SIZES[dtype]
        if data is None:
            data = bytes(size)
        if len(data) != size:
            raise ValueError(f"{name}: {dtype}{list(shape)} needs {size} bytes, got {len(data)}")
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        blobs.append(data)
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the reference writer pads the header to 8 bytes
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def pack_integers(values: list[int], dtype: str = "I64") -> bytes:
    codes = {"I64": "q", "I32": "i", "I16": "h", "I8": "b", "U8": "B", "BOOL": "?"}
    code = codes[dtype]
    return struct.pack(f"<{len(values)}{code}", *(bool(v) if dtype == "BOOL" else v for v in values))
