"""What a CRF head's span confidences are made of on gold dev docs, kept so
that they can be computed again at any temperature without the encoder.

For each gold doc, the pipeline runs on its text (``nlp.make_doc``, the
components up to the head; ``crf_merge_words`` and the like never) and the
head's emission scores, forced-tag mask and predicted spans are kept
(:class:`DocSpans`). A predicted span is **correct** when the gold doc has
exactly that span: a word with the same character offsets as a gold word
(the gold doc's non-whitespace tokens), an entity with the same offsets and
label as a gold entity.

The encoder pass is the slow part. With a cache directory, each chunk of
:data:`CHUNK` docs is written there as soon as it is done (``.npz``, named by
the head, the dev file's and the pipeline's SHA-256 and the docs' range), and
read back by a later run instead of predicted again: a run that stops goes
on where it stopped, and a second fit (other bins or objective) needs no
encoder at all. A changed pipeline or dev file has other names.
"""

import hashlib
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple

import numpy
from spacy.language import Language
from spacy.tokens import Doc

from ..files import atomic_path
from ..pipeline.confidence import SpanRows, predicted_spans

#: the two kinds of span: a segmenter's words, an entity tagger's entities
WORDS, ENTS = "words", "ents"
KINDS = (WORDS, ENTS)
#: docs per encoder pass and per cache file
CHUNK = 64
#: pipes that never run before a head is read (they retokenize, or read the heads)
SKIPPED_FACTORIES = ("crf_merge_words", "crf_ent_confidence")

CharSpan = Tuple[int, int, str]


class DocSpans:
    """One doc of a head's set: its emission ``scores`` ``[n, n_tags]``, the
    tags allowed at each token (``mask``, None: all), its predicted spans'
    ``rows`` in the marginals, and whether each span is ``correct``."""

    def __init__(self, scores: numpy.ndarray, mask: Optional[numpy.ndarray], rows: SpanRows, correct) -> None:
        self.scores = scores
        self.mask = mask
        self.rows = rows
        self.correct = numpy.asarray(correct, dtype=bool)


class HeadSet:
    """A head (``tagger``, the component ``name``) and its dev docs."""

    def __init__(self, kind: str, name: str, tagger: Any, docs: List[DocSpans]) -> None:
        self.kind = kind
        self.name = name
        self.tagger = tagger
        self.docs = docs

    def subset(self, indices: Iterable[int]) -> "HeadSet":
        return HeadSet(self.kind, self.name, self.tagger, [self.docs[i] for i in indices])

    @property
    def n_spans(self) -> int:
        return sum(len(d.rows) for d in self.docs)


def gold_spans(doc: Doc, kind: str) -> Set[CharSpan]:
    """The gold words (non-whitespace tokens) or entities of a gold doc, by character offsets."""
    if kind == WORDS:
        return {(t.idx, t.idx + len(t), "") for t in doc if not t.is_space}
    return {(e.start_char, e.end_char, e.label_) for e in doc.ents}


def find_heads(nlp: Language) -> Dict[str, Optional[str]]:
    """The last ``bmes`` CRF tagger (words) and the last ``bio``/``bioes`` one (ents), or None."""
    from ..annotate.records import NER_SCHEMES, crf_components

    words, ents = crf_components(nlp, ("bmes",)), crf_components(nlp, NER_SCHEMES)
    return {WORDS: words[-1] if words else None, ENTS: ents[-1] if ents else None}


def pipeline_digest(path: Path) -> str:
    """SHA-256 of a pipeline directory: every file's relative path and bytes."""
    digest = hashlib.sha256()
    for p in sorted(q for q in Path(path).rglob("*") if q.is_file()):
        digest.update(str(p.relative_to(path)).encode("utf8") + b"\0")
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def file_digest(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _chunk_arrays(tagger: Any, docs: Sequence[Doc], scores, masks) -> Dict[str, numpy.ndarray]:
    """A chunk's docs as the arrays a cache file holds."""
    n_tags = len(tagger.tags)
    labels = {label: i for i, label in enumerate(tagger.labels)}
    ops = tagger.model.ops
    spans = []
    for k, doc in enumerate(docs):
        for start, end, label in predicted_spans(tagger, doc):
            span = doc[start:end]
            spans.append((k, start, end, span.start_char, span.end_char, labels.get(label, -1)))
    lengths = numpy.asarray([len(d) for d in docs], dtype=numpy.int64)
    flat = [numpy.asarray(ops.to_numpy(s), dtype="float32").reshape(-1, n_tags) for s in scores]
    return {
        "lengths": lengths,
        "scores": numpy.concatenate(flat) if flat else numpy.zeros((0, n_tags), dtype="float32"),
        "has_mask": numpy.asarray([m is not None for m in masks], dtype=bool),
        "masks": numpy.concatenate(
            [
                numpy.ones((len(d), n_tags), dtype=bool) if m is None else numpy.asarray(m, dtype=bool)
                for d, m in zip(docs, masks)
            ]
        )
        if docs
        else numpy.zeros((0, n_tags), dtype=bool),
        "spans": numpy.asarray(spans, dtype=numpy.int64).reshape(-1, 6),
    }


def _doc_spans(tagger: Any, kind: str, arrays: Dict[str, numpy.ndarray], golds: Sequence[Doc]) -> List[DocSpans]:
    """The chunk's :class:`DocSpans`, correct against ``golds``."""
    labels = list(tagger.labels)
    ends = numpy.cumsum(arrays["lengths"])
    starts = ends - arrays["lengths"]
    spans = arrays["spans"]
    out = []
    for k, gold in enumerate(golds):
        own = spans[spans[:, 0] == k]
        label_of = [labels[i] if i >= 0 else "" for i in own[:, 5].tolist()]
        token_spans = [(int(s), int(e), lab) for s, e, lab in zip(own[:, 1], own[:, 2], label_of)]
        truth = gold_spans(gold, kind)
        correct = [(int(a), int(b), lab) in truth for a, b, lab in zip(own[:, 3], own[:, 4], label_of)]
        rows = slice(int(starts[k]), int(ends[k]))
        mask = arrays["masks"][rows] if arrays["has_mask"][k] else None
        out.append(DocSpans(arrays["scores"][rows], mask, SpanRows(tagger, token_spans), correct))
    return out


def _predict_chunk(nlp: Language, name: str, golds: Sequence[Doc], batch_size: int) -> Dict[str, numpy.ndarray]:
    tagger: Any = nlp.get_pipe(name)
    upto = nlp.pipe_names[: nlp.pipe_names.index(name) + 1]
    skip = [p for p in upto if nlp.get_pipe_meta(p).factory in SKIPPED_FACTORIES]
    with nlp.select_pipes(enable=[p for p in upto if p not in skip]):
        docs = list(nlp.pipe((g.text for g in golds), batch_size=batch_size))
    scores = tagger.emission_scores(docs) if docs else []
    masks = tagger.tag_masks(docs, preset=False)
    return _chunk_arrays(tagger, docs, scores, masks)


def collect(
    nlp: Language,
    kind: str,
    name: str,
    golds: Sequence[Doc],
    *,
    batch_size: int = 64,
    cache: Optional[Path] = None,
    key: str = "",
    progress=None,
) -> HeadSet:
    """The :class:`HeadSet` of the head ``name`` (a ``kind`` head) over the
    gold docs. ``cache``: a directory for the chunks (module docstring),
    ``key`` naming the pipeline and dev file (their digests). ``progress``:
    called with the number of docs done after each chunk."""
    tagger: Any = nlp.get_pipe(name)
    docs: List[DocSpans] = []
    for start in range(0, len(golds), CHUNK):
        chunk = golds[start : start + CHUNK]
        path = None if cache is None else Path(cache) / f"{kind}-{name}-{key}-{start}-{start + len(chunk)}.npz"
        if path is not None and path.exists():
            with numpy.load(path) as data:
                arrays = {k: data[k] for k in data.files}
        else:
            arrays = _predict_chunk(nlp, name, chunk, batch_size)
            if path is not None:
                with atomic_path(path) as tmp, open(tmp, "wb") as f:
                    numpy.savez(f, **arrays)  # type: ignore[arg-type]
        docs.extend(_doc_spans(tagger, kind, arrays, chunk))
        if progress is not None:
            progress(start + len(chunk))
    return HeadSet(kind, name, tagger, docs)
