"""A character tagger trained on Chinese text, run from its ONNX graph: what
``spacy_crf.TaggerFeatures.v1`` gives the CRF heads beside the encoder.

The multilingual encoder knows little of Chinese names; a tagger trained on a
large Chinese corpus (Baidu's LAC, a character BiGRU-CRF, extracted by
``spacy crf extract-tagger``) does. Its outputs per character:

* ``marginals``: its CRF's posterior over its own tags (words, parts of speech,
  PER/LOC/ORG/TIME as B/I), by forward-backward with its transitions:
  ``[n, n_tags]``, rows summing to 1;
* ``hidden``: the BiGRU's last states, the input of its emission layer,
  ``[n, hidden_width]`` in [-1, 1].

A :class:`CharTagger` holds the graph's bytes with their sha256, the character
table and the tag names; a pipeline saves all of it, so an installed pipeline
needs ``onnxruntime`` only. Behaviour on any text, documented in
docs/usage.md and tested in tests/test_tagger_features.py:

* every character gets a row: characters outside the tagger's table map to its
  ``OOV`` id, full-width forms to their half-width ones first (the tagger's own
  normalisation), whitespace and non-Chinese text run like any character;
* an empty text gives ``[0, D]``;
* a long text runs in windows of at most :data:`WINDOW` characters, each with
  :data:`CONTEXT` characters of context on both sides whose rows are dropped,
  so memory and time grow linearly and a text of at most ``WINDOW`` characters
  is one exact pass;
* texts of a batch are padded together; the graph carries each row's length to
  its GRUs, so a text's rows do not depend on what it was batched with.
"""

import hashlib
import os
import threading
from collections import OrderedDict
from typing import Dict, List, Optional, Sequence, Tuple

import numpy
import srsly

FORMAT = "spacy_crf.char_tagger.v1"
OUTPUTS = ("marginals", "hidden")
#: characters of a text run in one pass; longer texts run in windows
WINDOW = 512
#: characters of context each side of a window's own rows
CONTEXT = 32
#: padded characters per call of the graph
BATCH_CHARS = 16_384
#: characters' features kept by the training cache (float16), about 2.5 GB at 305 columns
CORPUS_CACHE_CHARS = 4_000_000
_MAX_CODEPOINT = 0x110000
_INHERITED: List[object] = []  # sessions a forked child inherited: kept, never destroyed there


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class CharTagger:
    """An ONNX character tagger with inputs ``token_ids`` ``[B, T]`` and ``length``
    ``[B]`` (int64) and outputs ``emissions`` ``[B, T, >= n_tags]`` and ``hidden``
    ``[B, T, H]``; ``chars[i]`` is the character of id ``i``, ``oov`` the id of
    any other; ``normalise`` maps characters to the ones looked up;
    ``transitions`` ``[n_tags, n_tags]`` are its CRF's scores (from, to).
    ``sha256``: when given, the model's bytes must have it.

    ``CharTagger()`` is the empty tagger of an uninitialized layer."""

    def __init__(
        self,
        model: bytes = b"",
        chars: Sequence[str] = (),
        oov: int = 0,
        tags: Sequence[str] = (),
        transitions: Optional[numpy.ndarray] = None,
        normalise: Optional[Dict[str, str]] = None,
        meta: Optional[Dict] = None,
        sha256: Optional[str] = None,
    ) -> None:
        self.model = bytes(model)
        self.sha256 = sha256_hex(self.model) if self.model else ""
        if sha256 is not None and sha256 != self.sha256:
            raise ValueError(
                f"char tagger: the model's bytes have sha256 {self.sha256}, not the recorded {sha256}: "
                "the file is corrupted or was replaced; extract the tagger again (spacy crf extract-tagger)"
            )
        self.chars = list(chars)
        self.oov = int(oov)
        self.tags = list(tags)
        self.normalise = dict(normalise or {})
        self.meta = dict(meta or {})
        n = len(self.tags)
        self.transitions = numpy.zeros((n, n), "float32") if transitions is None else numpy.asarray(transitions, "f")
        if self.model:
            self._check()
        self._ids: Optional[numpy.ndarray] = None
        self._session = None
        self._pid = os.getpid()
        self._hidden_width: Optional[int] = None
        self._lock = threading.Lock()
        self._corpus: "OrderedDict[Tuple[str, Tuple[str, ...]], numpy.ndarray]" = OrderedDict()
        self._corpus_chars = 0

    def _check(self) -> None:
        if not self.chars or not 0 <= self.oov < len(self.chars):
            raise ValueError(f"char tagger: oov id {self.oov} is not an id of its {len(self.chars)} characters")
        if not self.tags or self.transitions.shape != (len(self.tags), len(self.tags)):
            raise ValueError(f"char tagger: transitions of shape {self.transitions.shape} for {len(self.tags)} tags")

    def __len__(self) -> int:
        return len(self.chars)

    def __bool__(self) -> bool:
        return bool(self.model)

    def width(self, outputs: Sequence[str]) -> int:
        """Columns of :meth:`char_features` for ``outputs``."""
        return sum(len(self.tags) if name == "marginals" else self.hidden_width for name in outputs)

    @property
    def hidden_width(self) -> int:
        if self._hidden_width is None:
            self._hidden_width = int(self.run(numpy.zeros((1, 1), "int64"), numpy.ones(1, "int64"))[1].shape[-1])
        return self._hidden_width

    # --- running the graph ------------------------------------------------------

    def session(self):
        """The ONNX Runtime session of this process. A forked child (``nlp.pipe``
        with ``n_process > 1``) starts its own: the parent's thread pools do not
        survive a fork, and the inherited session is kept, never destroyed
        there (destroying it can crash the child)."""
        if self._session is not None and self._pid != os.getpid():
            _INHERITED.append(self._session)
            self._session = None
        if self._session is None:
            with self._lock:
                if self._session is None:
                    if not self.model:
                        raise ValueError("char tagger: no model (the layer was never initialized)")
                    import onnxruntime
                    import torch

                    options = onnxruntime.SessionOptions()
                    options.log_severity_level = 3
                    options.intra_op_num_threads = torch.get_num_threads()
                    options.inter_op_num_threads = 1
                    self._session = onnxruntime.InferenceSession(
                        self.model, options, providers=["CPUExecutionProvider"]
                    )
                    self._pid = os.getpid()
        return self._session

    def run(self, ids: numpy.ndarray, lengths: numpy.ndarray) -> Tuple[numpy.ndarray, numpy.ndarray]:
        """The graph on padded ids ``[B, T]``: (emissions ``[B, T, n_tags]``, hidden ``[B, T, H]``)."""
        emissions, hidden = self.session().run(["emissions", "hidden"], {"token_ids": ids, "length": lengths})
        return emissions[:, :, : len(self.tags)], hidden

    def ids(self, text: str) -> numpy.ndarray:
        """The tagger's id of each character of ``text``, int64 ``[len(text)]``."""
        if self._ids is None:
            table = numpy.full(_MAX_CODEPOINT, self.oov, dtype="int64")
            for i, char in enumerate(self.chars):
                if len(char) == 1:
                    table[ord(char)] = i
            for source, target in self.normalise.items():
                if len(source) == 1 and len(target) == 1 and table[ord(target)] != self.oov:
                    table[ord(source)] = table[ord(target)]
            self._ids = table
        codes = numpy.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")
        return self._ids[numpy.minimum(codes, _MAX_CODEPOINT - 1)]

    def char_features(self, texts: Sequence[str], outputs: Sequence[str]) -> List[numpy.ndarray]:
        """Per text, float32 ``[len(text), width(outputs)]``: the ``outputs`` (of
        :data:`OUTPUTS`, in that order of columns) of every character."""
        outputs = check_outputs(outputs)
        pieces = [(t, *piece) for t, text in enumerate(texts) for piece in windows(len(text))]
        result = [numpy.zeros((len(text), self.width(outputs)), "float32") for text in texts]
        pieces.sort(key=lambda piece: piece[1] - piece[2])  # longest first
        batch: List[Tuple[int, int, int, int, int]] = []
        for piece in pieces:
            if batch and (batch[0][2] - batch[0][1]) * (len(batch) + 1) > BATCH_CHARS:
                self._run_pieces(batch, texts, outputs, result)
                batch = []
            batch.append(piece)
        if batch:
            self._run_pieces(batch, texts, outputs, result)
        return result

    def _run_pieces(self, pieces, texts, outputs, result) -> None:
        """Run one batch of pieces (text, start, end, own start, own end) and
        write their own rows into ``result``."""
        lengths = numpy.asarray([end - start for _, start, end, _, _ in pieces], dtype="int64")
        ids = numpy.zeros((len(pieces), int(lengths.max(initial=0))), dtype="int64")
        for row, (t, start, end, _, _) in enumerate(pieces):
            ids[row, : end - start] = self.ids(texts[t][start:end])
        emissions, hidden = self.run(ids, lengths)
        columns = []
        if "marginals" in outputs:
            columns.append(self._marginals(emissions, lengths))
        if "hidden" in outputs:
            columns.append(hidden)
        features = numpy.concatenate(columns, axis=-1) if len(columns) > 1 else columns[0]
        for row, (t, start, _, own_start, own_end) in enumerate(pieces):
            result[t][own_start:own_end] = features[row, own_start - start : own_end - start]

    def _marginals(self, emissions: numpy.ndarray, lengths: numpy.ndarray) -> numpy.ndarray:
        return crf_marginals(emissions, lengths, self.transitions)

    # --- the training cache -----------------------------------------------------

    def cached_char_features(self, texts: Sequence[str], outputs: Sequence[str]) -> List[numpy.ndarray]:
        """:meth:`char_features`, kept (float16) per distinct text for the rest of
        the process, up to :data:`CORPUS_CACHE_CHARS` characters (oldest
        dropped first): training sees each text of its corpus many times, so
        the tagger runs once per text, not once per step."""
        key_outputs = tuple(outputs)
        found: Dict[int, numpy.ndarray] = {}
        missing: List[int] = []
        with self._lock:
            for i, text in enumerate(texts):
                hit = self._corpus.get((text, key_outputs))
                if hit is None:
                    missing.append(i)
                else:
                    found[i] = hit
        if missing:
            computed = self.char_features([texts[i] for i in missing], outputs)
            with self._lock:
                for i, features in zip(missing, computed):
                    kept = features.astype("float16")
                    found[i] = kept
                    if (texts[i], key_outputs) not in self._corpus:
                        self._corpus[(texts[i], key_outputs)] = kept
                        self._corpus_chars += len(texts[i])
                while self._corpus_chars > CORPUS_CACHE_CHARS and len(self._corpus) > 1:
                    (text, _), _ = self._corpus.popitem(last=False)
                    self._corpus_chars -= len(text)
        return [found[i].astype("float32") for i in range(len(texts))]

    # --- saved with a pipeline --------------------------------------------------

    def to_dict(self) -> Dict:
        """Everything but the model's bytes, whose sha256 it records (JSON-safe)."""
        return {
            "format": FORMAT,
            "sha256": self.sha256,
            "meta": self.meta,
            "oov": self.oov,
            "tags": self.tags,
            "transitions": self.transitions.tolist(),
            "normalise": self.normalise,
            "chars": self.chars,
        }

    @classmethod
    def from_dict(cls, model: bytes, fields: Dict) -> "CharTagger":
        """The tagger of ``model`` and :meth:`to_dict`'s ``fields``; the model must
        have the recorded sha256."""
        if not isinstance(fields, dict) or fields.get("format") != FORMAT:
            raise ValueError(f"char tagger: not a saved {FORMAT}")
        try:
            kinds = {"chars": list, "oov": int, "tags": list, "transitions": list, "normalise": dict, "meta": dict}
            for key, kind in kinds.items():  # a hand-edited tagger.json: the field named, not a TypeError
                if not isinstance(fields[key], kind):
                    got = type(fields[key]).__name__
                    raise ValueError(f"char tagger: the saved tagger's {key!r} is of type {got}, not {kind.__name__}")
            return cls(
                model,
                fields["chars"],
                fields["oov"],
                fields["tags"],
                numpy.asarray(fields["transitions"], dtype="float32"),
                fields["normalise"],
                fields["meta"],
                sha256=fields["sha256"],
            )
        except KeyError as e:
            raise ValueError(f"char tagger: the saved tagger has no {e.args[0]!r}") from None

    def to_bytes(self) -> bytes:
        return srsly.msgpack_dumps({**self.to_dict(), "model": self.model}) if self.model else b""

    @classmethod
    def from_bytes(cls, data: bytes) -> "CharTagger":
        if not data:
            return cls()
        try:
            msg = srsly.msgpack_loads(data)
        except Exception as e:
            raise ValueError(f"char tagger: unreadable saved tagger ({type(e).__name__}: {e})") from None
        return cls.from_dict(msg.pop("model", b"") if isinstance(msg, dict) else b"", msg)

    def __getstate__(self) -> Dict:
        return {"data": self.to_bytes()}

    def __setstate__(self, state: Dict) -> None:
        self.__dict__.update(CharTagger.from_bytes(state["data"]).__dict__)

    def __copy__(self) -> "CharTagger":  # immutable but for its caches: shared
        return self

    __deepcopy__ = lambda self, memo: self  # noqa: E731


def crf_marginals(emissions: numpy.ndarray, lengths: numpy.ndarray, transitions: numpy.ndarray) -> numpy.ndarray:
    """Posterior of each tag at each position of a CRF without start and end
    scores, float32 ``[B, T, K]`` from emissions ``[B, T, K]``, each row's
    length ``[B]`` and transitions ``[K, K]`` (from, to); rows past a length
    are 0. The forward-backward algorithm with scaling (Rabiner, 1989), in
    probability space: one ``[B, K] x [K, K]`` product a step, where
    :func:`spacy_crf.ml.crf.marginals` takes a log-sum-exp over ``[B, K, K]``
    (several times slower at LAC's 49 tags; the same figures to 1e-5).
    Each step's rows are normalised, so nothing under- or overflows."""
    B, T, K = emissions.shape
    result = numpy.zeros((B, T, K), "float32")
    if not T or not B:
        return result
    E = numpy.exp(emissions - emissions.max(axis=2, keepdims=True), dtype="float64")
    A = numpy.exp(transitions - transitions.max(), dtype="float64")
    alpha = numpy.empty((B, T, K))
    a = E[:, 0] / E[:, 0].sum(axis=1, keepdims=True)
    alpha[:, 0] = a
    for t in range(1, T):
        a = (a @ A) * E[:, t]
        a /= a.sum(axis=1, keepdims=True)
        alpha[:, t] = a
    posterior = alpha
    b = numpy.ones((B, K))
    for t in range(T - 2, -1, -1):
        step = (E[:, t + 1] * b) @ A.T
        step /= step.sum(axis=1, keepdims=True)
        b = numpy.where((t + 1 < lengths)[:, None], step, 1.0)
        posterior[:, t] *= b
    posterior /= posterior.sum(axis=2, keepdims=True)
    posterior[numpy.arange(T)[None, :] >= lengths[:, None]] = 0
    return posterior.astype("float32")


def windows(n: int) -> List[Tuple[int, int, int, int]]:
    """The pieces a text of ``n`` characters runs in: (start, end, own start,
    own end), the own rows of consecutive pieces tiling ``[0, n)``; one piece
    up to :data:`WINDOW` characters, else windows with :data:`CONTEXT`
    characters of context each side."""
    if n <= WINDOW:
        return [(0, n, 0, n)] if n else []
    step = WINDOW - 2 * CONTEXT
    return [(max(0, own - CONTEXT), min(n, own + step + CONTEXT), own, min(n, own + step)) for own in range(0, n, step)]


def check_outputs(outputs: Sequence[str]) -> Tuple[str, ...]:
    """``outputs`` in :data:`OUTPUTS`' order; an error for an empty, repeated or unknown one."""
    if isinstance(outputs, str) or not outputs or len(set(outputs)) != len(outputs):
        raise ValueError(f"outputs must be a non-empty list of distinct names of {list(OUTPUTS)}, got {outputs!r}")
    unknown = [name for name in outputs if name not in OUTPUTS]
    if unknown:
        raise ValueError(f"unknown tagger outputs {unknown}: choose from {list(OUTPUTS)}")
    return tuple(name for name in OUTPUTS if name in outputs)
