"""The review queue (``spacy crf review-queue``): the documents a pipeline is
least sure of, as Label Studio tasks with the pipeline's predictions, and the
labelling config to import them with.

**Confidence.** For a CRF tagger, the confidence of a token is the posterior
marginal (forward-backward) of the tag the decoder chose for it,
``p(y_i = t_i | x)``, under the constraints the decoder used (whitespace,
entities already on the doc, user dictionaries). A region's score is the
smallest confidence over its characters: for an entity that is the
``crf_ent_confidence`` of ``spacy crf annotate --confidence``; for a word, the
same over the segmenter's BMES tags. A **document's score** is the smallest
confidence over all its characters, for the entity tagger and the segmenter
alike: the probability of its most doubtful decision. It counts the
characters tagged ``O`` too, so a document where the model nearly found an
entity it did not predict scores low although no region shows it. The
probability of the whole Viterbi path (``exp(path score - log Z)``) was not
used: it is a product over every position, so it falls with the length of
the document and the queue would be the longest documents, not the most
doubtful ones; a mean or an entropy over positions dilutes one doubtful name
in a long sentence.

The pipeline runs component by component over batches of documents, and
each entity tagger (``bio``, ``bioes``) and segmenter (``bmes``) of the
pipeline (the last of each, as ``annotate`` reads them) has its marginals
taken on the character-level doc just before it decodes the batch, so that
the encoder's output is reused and ``crf_merge_words`` runs afterwards.
"""

import heapq
import json
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple
from xml.sax.saxutils import quoteattr

import numpy
from spacy.language import Language
from spacy.tokens import Doc

from ..files import PathLike, check_output_paths, write_json_atomic, write_text_atomic
from ..ml.schemes import spans_to_tags
from ..util import batch_by_length, check_number
from .records import NER_SCHEMES, crf_components

#: Label Studio's names: the entity control, the word control, the text object.
ENT_CONTROL, WORD_CONTROL, TEXT_OBJECT = "label", "word", "text"
#: The one label of the word control.
WORD_LABEL = "W"
SCORE_DIGITS = 4


class ReviewError(ValueError):
    """A review queue or an import that cannot be made (bad input, options or pipeline)."""


@dataclass
class ScoredDoc:
    """One document scored: its position in the input, id, text, score, and
    regions as character offsets: ``ents`` ``(start, end, label, confidence)``,
    ``words`` ``(start, end, confidence)`` (None without a segmenter).
    A confidence is None where no tagger of the pipeline decided the region."""

    index: int
    doc_id: Any
    text: str
    score: float
    ents: List[Tuple[int, int, str, Optional[float]]]
    words: Optional[List[Tuple[int, int, Optional[float]]]]


def config_path(output: PathLike) -> Path:
    """Where the labelling config goes: ``review.json`` -> ``review.config.xml``."""
    out = Path(output)
    return out.with_name(out.name[: -len(".json")] + ".config.xml")


def review_taggers(nlp: Language) -> Tuple[Optional[str], Optional[str]]:
    """The names of the entity tagger and the segmenter whose marginals score
    the docs (the last of each, or None); an error when there is neither."""
    ner, seg = crf_components(nlp, NER_SCHEMES), crf_components(nlp, ("bmes",))
    if not ner and not seg:
        raise ReviewError(
            "the review queue needs a crf_tagger with scheme 'bio', 'bioes' or 'bmes' (an entity tagger or a "
            f"segmenter) to take the marginals of; this pipeline has {nlp.pipe_names}"
        )
    return (ner[-1] if ner else None), (seg[-1] if seg else None)


def _merge_component(nlp: Language) -> Any:
    from ..pipeline.merge_words import MergeWords

    found = [proc for _, proc in nlp.pipeline if isinstance(proc, MergeWords)]
    return found[-1] if found else None


def _marginals(tagger: Any, docs: List[Doc]) -> Dict[int, numpy.ndarray]:
    """``{id(doc): [n_tokens, n_tags]}``, before ``tagger`` decodes the docs
    (so with the entities already on them forced, as the decoder forces them)."""
    out = {}
    max_items = tagger.cfg.get("max_batch_items", 4096)
    for indices in batch_by_length([len(d) for d in docs], max_items):
        sub = [docs[i] for i in indices]
        for doc, marginals in zip(sub, tagger.predict_marginals(sub, respect_preset=True)):
            out[id(doc)] = numpy.asarray(tagger.model.ops.to_numpy(marginals), dtype="float64")
    return out


def char_confidences(tagger: Any, doc: Doc, marginals: numpy.ndarray) -> numpy.ndarray:
    """``[len(doc.text)]``: each character's confidence (its token's marginal
    of the tag ``tagger`` decoded, read back from the doc's entities or words);
    1 for the characters of no token (trailing whitespace)."""
    if tagger.scheme == "bmes":
        key = tagger.cfg["spans_key"]
        spans = [(s.start, s.end, "") for s in doc.spans[key]] if key in doc.spans else []
    else:
        labels = set(tagger.labels)
        spans = [(e.start, e.end, e.label_) for e in doc.ents if e.label_ in labels]
    index = {tag: i for i, tag in enumerate(tagger.tags)}
    ids = numpy.array([index[tag] for tag in spans_to_tags(tagger.scheme, spans, len(doc))], dtype=numpy.int64)
    token_conf = marginals[numpy.arange(len(doc)), ids] if len(doc) else numpy.zeros(0)
    out = numpy.ones(len(doc.text), dtype="float64")
    if len(doc):
        table = doc.to_array(["IDX", "LENGTH"]).reshape((len(doc), 2)).astype(numpy.int64)
        starts, lengths = table[:, 0], table[:, 1]
        within = numpy.arange(int(lengths.sum())) - numpy.repeat(numpy.cumsum(lengths) - lengths, lengths)
        out[numpy.repeat(starts, lengths) + within] = numpy.repeat(token_conf, lengths)
    return out


def _region_min(conf: Optional[numpy.ndarray], start: int, end: int) -> Optional[float]:
    return None if conf is None or end <= start else float(conf[start:end].min())


def _cut_at(words: Sequence[Sequence[int]], edges: Sequence[int]) -> List[Tuple[int, int]]:
    """Words cut wherever an entity starts or ends inside one (sorted ``edges``)."""
    out = []
    for start, end in words:
        points = [start]
        k = bisect_right(edges, start)
        while k < len(edges) and edges[k] < end:
            points.append(edges[k])
            k += 1
        points.append(end)
        out += [(a, b) for a, b in zip(points, points[1:]) if b > a]
    return out


def _regions(nlp: Language, doc: Doc, seg: Optional[str], merge: Any) -> Tuple[list, Optional[list]]:
    """The entities ``(start, end, label)`` and words ``(start, end)`` of an
    annotated doc: the final tokens for words when ``crf_merge_words`` ran,
    else the segmenter's span group, cut at entity edges."""
    if merge is not None:
        from ..pipeline.merge_words import char_entities

        ents = [(s, e, label) for s, e, label, _, _ in char_entities(doc, merge.unaligned_ents_key)]
    else:
        ents = [(e.start_char, e.end_char, e.label_) for e in doc.ents]
    if seg is None:
        return ents, None
    if merge is not None:
        words: Sequence[Sequence[int]] = [[t.idx, t.idx + len(t)] for t in doc if not t.is_space]
    else:
        from ..pipeline.span_arrays import word_char_bounds

        key = nlp.get_pipe(seg).cfg["spans_key"]  # type: ignore[attr-defined]
        words = word_char_bounds(doc, doc.spans[key]) if key in doc.spans else []
    return ents, _cut_at(words, sorted({x for s, e, _ in ents for x in (s, e)}))


def score_docs(nlp: Language, texts: Iterable[Tuple[Any, str]], *, batch_size: int = 64) -> Iterator[ScoredDoc]:
    """Run ``nlp`` over ``(doc_id, text)`` pairs and yield every doc scored, in input order."""
    from spacy.util import minibatch

    ner, seg = review_taggers(nlp)
    taggers = {name for name in (ner, seg) if name is not None}
    merge = _merge_component(nlp)
    index = 0
    for batch in minibatch(texts, size=batch_size):
        ids = [doc_id for doc_id, _ in batch]
        docs = [nlp.make_doc(text) for _, text in batch]
        rows: List[Dict[str, numpy.ndarray]] = [{} for _ in docs]  # each doc's char confidences by tagger
        for name, proc in nlp.pipeline:
            marginals = _marginals(proc, docs) if name in taggers else None
            docs = list(proc.pipe(docs, batch_size=batch_size)) if hasattr(proc, "pipe") else [proc(d) for d in docs]
            if len(docs) != len(rows):
                raise ReviewError(
                    f"component {name!r} returned {len(docs)} docs for {len(rows)} (an error handler dropped some)"
                )
            if marginals is None:
                continue
            for row, doc in zip(rows, docs):
                if id(doc) not in marginals:
                    raise ReviewError(f"component {name!r} returned a doc it was not given; cannot score it")
                row[name] = char_confidences(proc, doc, marginals[id(doc)])
        for doc_id, doc, row in zip(ids, docs, rows):
            ner_conf, seg_conf = (row.get(name) if name else None for name in (ner, seg))
            ents, words = _regions(nlp, doc, seg, merge)
            mins = [float(c.min()) for c in (ner_conf, seg_conf) if c is not None and len(c)]
            yield ScoredDoc(
                index=index,
                doc_id=doc_id,
                text=doc.text,
                score=min(mins) if mins else 1.0,
                ents=[(s, e, label, _region_min(ner_conf, s, e)) for s, e, label in ents],
                words=None if words is None else [(s, e, _region_min(seg_conf, s, e)) for s, e in words],
            )
            index += 1


def least_confident(scored: Iterable[ScoredDoc], n: int) -> List[ScoredDoc]:
    """The ``n`` docs with the lowest scores, lowest first (ties: input order),
    keeping only ``n`` docs in memory."""
    heap: List[Tuple[Tuple[float, int], ScoredDoc]] = []  # keys (-score, -index): the root is the most confident kept
    for item in scored:
        key = (-item.score, -item.index)
        if len(heap) < n:
            heapq.heappush(heap, (key, item))
        elif key > heap[0][0]:
            heapq.heapreplace(heap, (key, item))
    return sorted((item for _, item in heap), key=lambda item: (item.score, item.index))


def _round(value: Optional[float]) -> Optional[float]:
    return None if value is None else round(value, SCORE_DIGITS)


def _region(k: int, control: str, text: str, start: int, end: int, label: str, conf: Optional[float]) -> dict:
    region: Dict[str, Any] = {
        "id": f"{control}-{k}",
        "from_name": control,
        "to_name": TEXT_OBJECT,
        "type": "labels",
        "value": {"start": start, "end": end, "text": text[start:end], "labels": [label]},
    }
    if conf is not None:
        region["score"] = _round(conf)
    return region


def to_task(item: ScoredDoc, model_version: str) -> Dict[str, Any]:
    """One Label Studio task with the pipeline's prediction (predictions import format)."""
    result = [_region(k, ENT_CONTROL, item.text, s, e, label, c) for k, (s, e, label, c) in enumerate(item.ents)]
    result += [_region(k, WORD_CONTROL, item.text, s, e, WORD_LABEL, c) for k, (s, e, c) in enumerate(item.words or [])]
    prediction = {"model_version": model_version, "score": _round(item.score), "result": result}
    return {"data": {TEXT_OBJECT: item.text, "doc_id": item.doc_id}, "predictions": [prediction]}


def label_config(labels: Sequence[str], words: bool) -> str:
    """Label Studio's labelling config: entity labels (``label``), the word
    label (``word``, when the pipeline segments) over one ``Text`` (``text``)."""
    lines = ["<View>"]
    if labels:
        lines.append(f'  <Labels name="{ENT_CONTROL}" toName="{TEXT_OBJECT}">')
        lines += [f"    <Label value={quoteattr(label)}/>" for label in labels]
        lines.append("  </Labels>")
    if words:
        lines.append(f'  <Labels name="{WORD_CONTROL}" toName="{TEXT_OBJECT}">')
        lines.append(f'    <Label value="{WORD_LABEL}" background="#c8c8c8"/>')
        lines.append("  </Labels>")
    lines += [f'  <Text name="{TEXT_OBJECT}" value="${TEXT_OBJECT}"/>', "</View>"]
    return "\n".join(lines) + "\n"


def check_input(path: Path) -> None:
    """A ``.spacy`` file or a file ``annotate`` reads (``.txt``, ``.jsonl``,
    ``.parquet``, gzipped or not), else :class:`ReviewError`."""
    from .io import input_kind

    if not path.is_file():
        raise ReviewError(f"input {path} is not a file")
    if not path.name.lower().endswith(".spacy") and input_kind(path) is None:
        raise ReviewError(f"input {path}: expected a .txt file (one document a line), .jsonl, .parquet or .spacy")


def read_texts(path: Path) -> Iterator[Tuple[Any, str]]:
    """``(doc_id, text)`` of each document of the input: ``FILE:LINE`` (the
    ``id`` field of a JSONL or Parquet record when it has one; ``FILE:N``
    for the N-th doc of a ``.spacy`` file, whose texts only are read)."""
    if path.name.lower().endswith(".spacy"):
        from spacy.tokens import DocBin
        from spacy.vocab import Vocab

        try:
            docs = list(DocBin().from_disk(path).get_docs(Vocab()))
        except Exception as err:  # noqa: BLE001 - any unreadable file: one line naming it
            raise ReviewError(f"input {path} cannot be read as a .spacy file: {err}") from None
        yield from ((f"{path.name}:{i}", doc.text) for i, doc in enumerate(docs, 1))
        return
    from .io import AnnotateError, read_rows

    try:
        for row in read_rows(str(path), 0, path.name):
            if row["kind"] == "error":
                raise ReviewError(f"{path}:{row['line']}: {row['error']}")
            if row["kind"] == "doc":
                yield json.loads(row["meta"])["id"], row["text"]
    except AnnotateError as err:
        raise ReviewError(str(err)) from None


def _load(pipeline: Any) -> Language:
    if isinstance(pipeline, Language):
        return pipeline
    import spacy

    try:
        return spacy.load(pipeline)
    except Exception as err:  # noqa: BLE001 - truncated weights, a bad config...: one line naming the pipeline
        raise ReviewError(f"pipeline {str(pipeline)!r} cannot be loaded: {err}") from None


def review_queue(
    pipeline: Any,
    input_path: PathLike,
    output_path: PathLike,
    *,
    n: int = 100,
    batch_size: int = 64,
    model_version: Optional[str] = None,
) -> Dict[str, Any]:
    """Score every document of ``input_path`` with ``pipeline`` (a name, a
    path or a ``Language``) and write the ``n`` least confident, least
    confident first, as Label Studio tasks to ``output_path`` (``.json``),
    with the labelling config beside it (:func:`config_path`). Inputs,
    options and output paths are checked before any work. Returns counts."""
    inp, out = Path(input_path), Path(output_path)
    check_number("--n", n, minimum=1)
    check_number("--batch-size", batch_size, minimum=1)
    if not out.name.lower().endswith(".json") or out.name.lower() == ".json":
        raise ReviewError(f"output {out}: expected a .json file (Label Studio's tasks)")
    check_input(inp)
    pipeline_path = Path(pipeline) if isinstance(pipeline, (str, Path)) and Path(pipeline).exists() else None
    check_output_paths([inp, pipeline_path], [out, config_path(out)])
    nlp = _load(pipeline)
    ner, seg = review_taggers(nlp)
    meta = nlp.meta
    version = model_version or f"{meta.get('lang', '')}_{meta.get('name', 'pipeline')}-{meta.get('version', '')}"
    counted = {"docs": 0}

    def counting(items: Iterator[ScoredDoc]) -> Iterator[ScoredDoc]:
        for item in items:
            counted["docs"] += 1
            yield item

    chosen = least_confident(counting(score_docs(nlp, read_texts(inp), batch_size=batch_size)), n)
    if not counted["docs"]:
        raise ReviewError(f"input {inp} holds no document")
    labels = set(nlp.get_pipe(ner).labels) if ner else set()  # type: ignore[attr-defined]
    labels |= {label for item in chosen for _, _, label, _ in item.ents}
    write_text_atomic(config_path(out), label_config(sorted(labels), seg is not None))
    write_json_atomic(out, [to_task(item, version) for item in chosen])
    return {
        "docs": counted["docs"],
        "tasks": len(chosen),
        "scores": [item.score for item in chosen],
        "output": out,
        "config": config_path(out),
    }
