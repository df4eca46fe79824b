"""The ``k`` best analyses of a CRF tagger's docs, with their probabilities
(:meth:`~spacy_crf.pipeline.crf_tagger.CRFTagger.predict_nbest`), and the
``doc._.crf_nbest`` extension that holds them.

The tag paths come from :func:`spacy_crf.ml.nbest.decode` with what
``predict`` decodes with: the pipe's emission scores (the lexicon's and the
user dictionary's priors included), the scheme's constraints and each doc's
tag mask (whitespace, preset entities, forced user entries). The first
analysis is what ``predict`` and ``set_annotations`` give. A path's
probability is ``P(path | doc)`` under the CRF restricted to the allowed
paths, calibrated as the marginals are by the pipe's temperature ``T``
(``cfg["temperature"]``, :mod:`spacy_crf.pipeline.confidence`): every score
divided by ``T`` before normalising, ``exp(score / T) / Z_T``, so ``T > 1``
spreads the probability over more analyses, ``T < 1`` gathers it on the
first, and the analyses and their order stay those of ``T = 1``. The
probabilities of all allowed paths add up to 1 and those of the ``k`` best
to at most 1 (up to float rounding); with the scheme's constraints no two
paths give the same analysis.

An analysis is what ``set_annotations`` would write for that path, in
character offsets into ``doc.text``:

* ``bio`` / ``bioes``: the entities, ``(start_char, end_char, label)`` in
  order; entities preset on the doc are kept as they are (unless
  ``respect_preset=False``);
* ``bmes``: the words, ``(start_char, end_char)`` (a whitespace token is in none);
* ``tag``: the tag of each token.

They are stored in ``doc.user_data["crf_nbest"]``, a dict from the component's
name to its list of ``(probability, analysis)`` pairs, best first: so they
travel with the doc through ``Doc.to_bytes`` and ``DocBin``
(``store_user_data``), where tuples may come back as lists. The
``doc._.crf_nbest`` extension reads that dict (``{}`` when the doc has
none); :func:`register_extension` registers it, as ``predict_nbest`` does.
"""

from typing import Any, List, Optional, Sequence, Tuple

import numpy
from spacy.attrs import IDX, IS_SPACE, LENGTH
from spacy.tokens import Doc

from ..ml import nbest
from ..ml import tagger_model as crf_model
from ..ml.schemes import bmes_word_bounds, entity_bounds, split_tag, tags_to_spans
from .confidence import temperature
from .forced_tags import preset_entity_tokens

#: the ``doc.user_data`` key and the name of the Doc extension
NBEST_KEY = "crf_nbest"

Analysis = Tuple[float, List[Any]]


def register_extension() -> None:
    """Register ``doc._.crf_nbest`` (a getter of ``doc.user_data["crf_nbest"]``), once."""
    if not Doc.has_extension(NBEST_KEY):
        Doc.set_extension(NBEST_KEY, getter=stored_nbest)


def stored_nbest(doc: Doc) -> dict:
    """The analyses stored on ``doc`` by component name; ``{}`` when there are none."""
    return doc.user_data.get(NBEST_KEY, {})


def _empty_path() -> nbest.NBest:
    return nbest.NBest(numpy.zeros((1, 0), dtype=numpy.int64), numpy.zeros(1, dtype=numpy.float32), numpy.ones(1))


def nbest_paths(pipe, docs: Sequence[Doc], k: int, *, respect_preset: bool = True) -> List[nbest.NBest]:
    """The ``k`` best tag paths of each doc, with their scores and
    probabilities (:class:`spacy_crf.ml.nbest.NBest`), decoded as ``pipe.predict``
    decodes, the probabilities at the pipe's temperature; ``respect_preset=False``
    ignores what the doc already says (its entities), as ``predict_marginals``
    does by default."""
    if not pipe.model.attrs.get("use_crf", True):
        raise ValueError(f"[{pipe.name}] predict_nbest needs a CRF layer; this model has none (use_crf = false).")
    if not any(len(doc) for doc in docs):
        nbest.check_k(k)
        return [_empty_path() for _ in docs]
    ops = pipe.model.ops
    scores = [ops.to_numpy(s) for s in pipe.emission_scores(list(docs))]
    transitions, start, end = crf_model.transition_scores(pipe.model)
    masks = pipe.tag_masks(docs, preset=respect_preset)
    return nbest.decode(scores, transitions, start, end, k, pipe.constraints, masks, temperature=temperature(pipe))


def predict_nbest(pipe, docs: Sequence[Doc], k: int = 5, *, respect_preset: bool = True) -> List[List[Analysis]]:
    """The ``k`` best analyses of each doc, ``(probability, analysis)`` best
    first (see the module doc), also stored in ``doc._.crf_nbest[pipe.name]``."""
    docs = list(docs)
    found = nbest_paths(pipe, docs, k, respect_preset=respect_preset)
    tags = pipe.tags
    analyses = [_analyses(pipe.scheme, tags, doc, result, respect_preset) for doc, result in zip(docs, found)]
    register_extension()
    for doc, analysis in zip(docs, analyses):
        doc.user_data.setdefault(NBEST_KEY, {})[pipe.name] = analysis
    return analyses


def _analyses(scheme: str, tags: List[str], doc: Doc, result: nbest.NBest, respect_preset: bool) -> List[Analysis]:
    assert result.probabilities is not None  # (nbest_paths asks for them)
    probabilities = result.probabilities.tolist()
    n = len(doc)
    if not n:
        return [(p, []) for p in probabilities]
    if scheme == "tag":
        return [(p, [tags[i] for i in path]) for p, path in zip(probabilities, result.paths.tolist())]
    table = doc.to_array([IDX, LENGTH, IS_SPACE]).reshape((n, 3)).astype(numpy.int64)
    char_start, char_end, space = table[:, 0], table[:, 0] + table[:, 1], table[:, 2].astype(bool)
    m = len(result.paths)
    ids, outside, firsts = result.paths.reshape(-1), numpy.tile(space, m), numpy.arange(m) * n
    if scheme == "bmes":
        starts, ends = bmes_word_bounds(ids, outside, firsts)
        labels: Optional[List[str]] = None
    elif respect_preset and preset_entity_tokens(doc).any():
        return [(p, _with_preset(scheme, tags, doc, path, space)) for p, path in zip(probabilities, result.paths)]
    else:
        starts, ends, first_ids = entity_bounds(scheme, tags, ids, outside, firsts)
        labels = [split_tag(tags[i])[1] for i in first_ids.tolist()]
    bounds = numpy.searchsorted(starts, numpy.append(firsts, m * n)).tolist()
    offsets = starts % n
    spans: List[Tuple] = list(
        zip(char_start[offsets].tolist(), char_end[(ends - 1) % n].tolist(), *([labels] if labels is not None else []))
    )
    return [(p, spans[a:b]) for p, a, b in zip(probabilities, bounds[:-1], bounds[1:])]


def _with_preset(scheme: str, tags: List[str], doc: Doc, path: numpy.ndarray, space: numpy.ndarray) -> List[Tuple]:
    """The entities of ``path`` as ``set_annotations`` writes them on a doc with
    preset entities: those kept, the others decoded around them."""
    preset = preset_entity_tokens(doc)
    free = [None if preset[i] or space[i] else tags[t] for i, t in enumerate(path.tolist())]
    decoded = [(doc[s:e].start_char, doc[s:e].end_char, label) for s, e, label in tags_to_spans(scheme, free)]
    return sorted(decoded + [(e.start_char, e.end_char, e.label_) for e in doc.ents])
