"""From an annotated doc to an output record, and per-entity confidence.

A record is ``{"id", "text", "words": [[start, end], ...], "ents": [{"start",
"end", "label"[, "confidence"]}, ...], **carried fields}``, with character
offsets into ``text``.

Confidence (``--confidence``) is the smallest posterior marginal, over the
entity's tokens, of the tag the decoder chose for that token (``B-PER``,
``I-PER``, ``E-PER``, or ``S-PER``): ``min_i p(y_i = t_i | x)`` from the NER
``crf_tagger``'s forward-backward pass, rounded to 4 digits. It is an upper
bound on the probability of the whole span, and low as soon as one token of
the entity is uncertain. It is computed by the ``crf_ent_confidence``
component, which ``load_pipeline`` inserts right after the NER tagger: the
marginals must be taken on the doc the tagger saw (characters), before
``crf_merge_words`` retokenizes it, and inside the same ``nlp.pipe`` pass so
that the encoder's output is reused and ``n_process`` works unchanged. The
values are kept in ``doc.user_data`` by character offsets and attached to
the final ``doc.ents`` when the record is made.
"""

import json
from typing import Any, Dict, List, Optional, Tuple

from spacy.language import Language
from spacy.tokens import Doc

CONFIDENCE_KEY = "crf_ent_confidence"
NER_SCHEMES = ("bio", "bioes")


#: The factories that make a ``CRFTagger``, and their default schemes.
CRF_FACTORIES = {"crf_tagger": "bio", "crf_ner": "bioes", "crf_segmenter": "bmes"}


def crf_components(nlp: Language, schemes) -> List[str]:
    from ..pipeline.crf_tagger import CRFTagger

    # by class, not factory name: crf_ner and crf_segmenter make CRF taggers too
    return [
        name for name, pipe in nlp.pipeline if isinstance(pipe, CRFTagger) and getattr(pipe, "scheme", None) in schemes
    ]


def _config_ner_taggers(pipeline) -> Optional[List[str]]:
    """The entity taggers that a saved pipeline's config declares, or None when
    its config cannot be found or read (then loading it will tell)."""
    from pathlib import Path

    from spacy.util import get_package_path, is_package, load_config

    try:
        path = Path(pipeline) if Path(pipeline).exists() else None
        if path is None and is_package(str(pipeline)):
            path = get_package_path(str(pipeline))
        configs = (
            [path / "config.cfg"]
            if path is not None and (path / "config.cfg").exists()
            else sorted(path.glob("*/config.cfg"))
            if path is not None
            else []
        )
        config = load_config(configs[0], interpolate=False)
        components = config["components"]
        return [
            name
            for name in config["nlp"]["pipeline"]
            if components.get(name, {}).get("factory") in CRF_FACTORIES
            and components[name].get("scheme", CRF_FACTORIES[components[name]["factory"]]) in NER_SCHEMES
        ]
    except Exception:  # noqa: BLE001 - any config we cannot read: leave the check to loading
        return None


def check_confidence(pipeline) -> None:
    """``ValueError`` (before any work) unless ``pipeline`` has an entity
    crf_tagger for ``--confidence`` to read the marginals of."""
    if isinstance(pipeline, Language):
        found: Optional[List[str]] = crf_components(pipeline, NER_SCHEMES)
    else:
        found = _config_ner_taggers(pipeline)
    if found is not None and not found:
        name = pipeline.meta.get("name", "the Language") if isinstance(pipeline, Language) else str(pipeline)
        raise ValueError(
            f"--confidence needs an entity tagger (crf_tagger or crf_ner with scheme 'bio' or "
            f"'bioes'); pipeline {name!r} has none"
        )


def words_key(nlp: Language) -> Optional[str]:
    """The span group with the predicted words (the last BMES crf_tagger's), or
    None when the pipeline has no segmenter (then the tokens are the words)."""
    names = crf_components(nlp, ("bmes",))
    segmenter: Any = nlp.get_pipe(names[-1]) if names else None  # a CRFTagger
    return segmenter.cfg["spans_key"] if names else None


@Language.factory(CONFIDENCE_KEY, default_config={"ner": "crf_ner"})
def make_ent_confidence(nlp: Language, name: str, ner: str) -> "EntConfidence":
    """Per-entity confidence from the CRF marginals of the tagger ``ner``
    (see the module docstring); put it right after that tagger."""
    return EntConfidence(nlp, name, ner)


class EntConfidence:
    def __init__(self, nlp: Language, name: str, ner: str) -> None:
        self.name = name
        self.ner = ner
        # refused here, not at the first doc (an AttributeError) or never (a segmenter: no entities)
        found = crf_components(nlp, NER_SCHEMES)
        if ner not in found:
            pipe: Any = nlp.get_pipe(ner) if ner in nlp.pipe_names else None
            what = "no component of the pipeline" if pipe is None else f"a {type(pipe).__name__}"
            what += f" with scheme {pipe.scheme!r}" if hasattr(pipe, "scheme") else ""
            raise ValueError(
                f"[{name}] ner {ner!r} is {what}, not a crf_tagger with scheme 'bio' or 'bioes' (those: {found})"
            )
        self.tagger: Any = nlp.get_pipe(ner)  # a CRFTagger

    def __call__(self, doc: Doc) -> Doc:
        return next(iter(self.pipe([doc])))

    def pipe(self, docs, batch_size: int = 128):
        from spacy.util import minibatch

        from ..util import batch_by_length

        tagger = self.tagger
        index = {tag: i for i, tag in enumerate(tagger.tags)}
        max_items = tagger.cfg.get("max_batch_items", 4096)
        for batch in minibatch(docs, size=batch_size):
            batch = list(batch)
            for indices in batch_by_length([len(d) for d in batch], max_items):
                sub = [batch[i] for i in indices]
                for doc, marginals in zip(sub, tagger.predict_marginals(sub)):
                    doc.user_data[CONFIDENCE_KEY] = ent_confidences(doc, marginals, index, tagger.scheme)
            yield from batch


def ent_confidences(doc: Doc, marginals, index: Dict[str, int], scheme: str) -> List[list]:
    """``[[start_char, end_char, label, confidence], ...]`` for ``doc.ents``."""
    out = []
    for ent in doc.ents:
        n = ent.end - ent.start
        if scheme == "bioes" and n == 1:
            tags = [f"S-{ent.label_}"]
        elif scheme == "bioes":
            tags = [f"B-{ent.label_}"] + [f"I-{ent.label_}"] * (n - 2) + [f"E-{ent.label_}"]
        else:
            tags = [f"B-{ent.label_}"] + [f"I-{ent.label_}"] * (n - 1)
        probs = [float(marginals[ent.start + k][index[t]]) for k, t in enumerate(tags) if t in index]
        conf = round(min(probs), 4) if probs else None
        out.append([ent.start_char, ent.end_char, ent.label_, conf])
    return out


def add_confidence(nlp: Language) -> str:
    """Insert ``crf_ent_confidence`` after the (last) NER crf_tagger."""
    names = crf_components(nlp, NER_SCHEMES)
    if not names:
        raise ValueError(
            "--confidence needs a crf_tagger with scheme 'bio' or 'bioes' in the pipeline; "
            f"this one has {nlp.pipe_names}"
        )
    if CONFIDENCE_KEY not in nlp.pipe_names:
        nlp.add_pipe(CONFIDENCE_KEY, after=names[-1], config={"ner": names[-1]})
    return names[-1]


def annotations(doc: Doc, key: Optional[str], confidence: bool) -> Dict[str, Any]:
    """Words and entities of an annotated doc, as character offsets. The
    words are cut at whitespace by the rule ``crf_merge_words`` cuts its
    tokens by (:func:`~spacy_crf.pipeline.span_arrays.word_char_bounds`),
    so that no word holds whitespace that the ``spacy`` format's tokens do not."""
    if key is not None and key in doc.spans:
        from ..pipeline.span_arrays import word_char_bounds

        words = word_char_bounds(doc, doc.spans[key])
    else:
        words = [[t.idx, t.idx + len(t)] for t in doc if not t.is_space]
    if confidence:
        conf: Dict[Tuple[int, int, str], Any] = {
            (s, e, label): c for s, e, label, c in doc.user_data.get(CONFIDENCE_KEY, [])
        }
        ents = [
            {
                "start": e.start_char,
                "end": e.end_char,
                "label": e.label_,
                "confidence": conf.get((e.start_char, e.end_char, e.label_)),
            }
            for e in doc.ents
        ]
    else:
        ents = [{"start": e.start_char, "end": e.end_char, "label": e.label_} for e in doc.ents]
    return {"words": words, "ents": ents}


def make_record(text: str, meta: str, ann: Dict[str, Any]) -> Dict[str, Any]:
    """The output record: id, text, words, ents, then the carried fields."""
    m = json.loads(meta)
    record = {"id": m["id"], "text": text, "words": ann["words"], "ents": ann["ents"]}
    record.update(m["fields"])
    return record
