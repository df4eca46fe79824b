"""How sure a CRF tagger is of the words and entities it predicts, and the
temperature that calibrates it.

**A span's confidence** (a predicted word of a ``bmes`` segmenter, a
predicted entity of a ``bio``/``bioes`` tagger) is the smallest posterior
marginal, over the span's tokens, of the tag the decoder chose there:
``min_i p(y_i = t_i | x)`` from the CRF's forward-backward pass. It is the
``crf_ent_confidence`` of ``spacy crf annotate --confidence`` and the region
score of the review queue, and an upper bound on the probability of the
whole span. For a word, the tags are ``S`` or ``B M... E``; they fix both of
its boundaries, so the confidence is about the exact span.

**The temperature** ``T`` (the pipe's ``cfg["temperature"]``, default 1: no
calibration) divides the emissions, the transitions and the start and end
scores before the forward-backward, so that every marginal the pipe reports
(:meth:`~spacy_crf.pipeline.crf_tagger.CRFTagger.predict_marginals`, and the
confidences built from it) is calibrated, and so are the probabilities of
the n-best analyses (``predict_nbest``): ``T > 1`` makes them less sure,
``T < 1`` surer. Decoding never reads it: dividing every score of a path by
the same ``T`` does not change which path scores best, so the predicted tags
are those of ``T = 1``. It is fitted on held-out data by ``spacy crf
calibrate`` (:mod:`spacy_crf.calibration`) or set with
:func:`set_temperature`, saved in the ``cfg`` (``to_disk``, ``to_bytes``,
``spacy package``) and checked at load (:func:`load_temperature`).
"""

import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy
from spacy.tokens import Doc
from thinc.types import Floats2d

from ..ml.schemes import position_tag

#: the cfg key of the temperature
TEMPERATURE = "temperature"

#: a span as token offsets and its label ("" for a word)
TokenSpan = Tuple[int, int, str]


def check_temperature(name: str, value: Any) -> float:
    """``value`` as a float, or ``ValueError`` naming the pipe unless it is a
    finite number > 0."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    if not ok:
        raise ValueError(
            f"[{name}] temperature must be a finite number > 0 (1: no calibration; the marginals' "
            f"scores are divided by it), got {value!r}"
        )
    return float(value)


def temperature(pipe: Any) -> float:
    """The pipe's temperature (1 for a pipe that has none)."""
    return float(pipe.cfg.get(TEMPERATURE, 1.0))


def set_temperature(pipe: Any, value: float) -> None:
    """Calibrate the marginals of the CRF tagger ``pipe`` with temperature
    ``value`` (checked; 1 removes the calibration). Saved with the pipe."""
    pipe.cfg[TEMPERATURE] = check_temperature(pipe.name, value)


def load_temperature(pipe: Any, saved: Dict[str, Any], where: str) -> None:
    """At load, after the saved ``cfg`` was merged into the pipe's: check its
    temperature, naming what was loaded; a save from before calibration has
    none and loads uncalibrated (T = 1). Pipes without a temperature (the
    span head) are left alone."""
    if TEMPERATURE not in pipe.cfg and TEMPERATURE not in saved:
        return
    try:
        pipe.cfg[TEMPERATURE] = check_temperature(pipe.name, saved.get(TEMPERATURE, 1.0))
    except ValueError as e:
        raise ValueError(f"[{pipe.name}] cannot load {where}: its cfg's {str(e).split('] ', 1)[-1]}") from None


# --- span confidences ----------------------------------------------------------------------------


def predicted_spans(tagger: Any, doc: Doc) -> List[TokenSpan]:
    """The spans ``tagger`` wrote on ``doc``, as token offsets: the words of
    its span group (``bmes``) or the entities with one of its labels."""
    if tagger.scheme == "bmes":
        key = tagger.cfg["spans_key"]
        return [(s.start, s.end, "") for s in doc.spans[key]] if key in doc.spans else []
    labels = set(tagger.labels)
    return [(e.start, e.end, e.label_) for e in doc.ents if e.label_ in labels]


class SpanRows:
    """Where the confidences of some spans of one doc are read in its
    marginals: each span's tokens (``positions``) and decoded tags
    (``tag_ids``), the spans one after the other (span ``k`` has the rows
    ``offsets[k]:offsets[k + 1]``). A span of no token, or with a tag the
    tagger does not have, is not ``valid``. Made once per doc, read at any
    temperature (:meth:`confidences`)."""

    def __init__(self, tagger: Any, spans: Sequence[TokenSpan]) -> None:
        index = {tag: i for i, tag in enumerate(tagger.tags)}
        positions: List[int] = []
        tag_ids: List[int] = []
        offsets = [0]
        valid = []
        for start, end, label in spans:
            tags = [position_tag(tagger.scheme, i == start, i == end - 1, label) for i in range(start, end)]
            ok = end > start and all(t in index for t in tags)
            if ok:
                positions.extend(range(start, end))
                tag_ids.extend(index[t] for t in tags)
            offsets.append(len(positions))
            valid.append(ok)
        self.positions = numpy.asarray(positions, dtype=numpy.int64)
        self.tag_ids = numpy.asarray(tag_ids, dtype=numpy.int64)
        self.offsets = numpy.asarray(offsets, dtype=numpy.int64)
        self.valid = numpy.asarray(valid, dtype=bool)

    def __len__(self) -> int:
        return len(self.valid)

    def confidences(self, marginals: Any) -> numpy.ndarray:
        """float64 ``[n_spans]`` from the doc's ``marginals`` ``[len(doc),
        n_tags]`` (numpy): each span's smallest marginal; NaN where not valid."""
        out = numpy.full(len(self.valid), numpy.nan)
        if self.valid.any():
            probs = numpy.asarray(marginals, dtype="float64")[self.positions, self.tag_ids]
            out[self.valid] = numpy.minimum.reduceat(probs, self.offsets[:-1][self.valid])
        return out


def span_confidences(
    tagger: Any, doc: Doc, marginals: Floats2d, spans: Optional[Sequence[TokenSpan]] = None
) -> numpy.ndarray:
    """float64 ``[len(spans)]``: each span's confidence (module docstring)
    from the doc's ``marginals`` ``[len(doc), n_tags]``; ``spans`` default to
    :func:`predicted_spans`. A span of no token, or whose tags the tagger does
    not have, is NaN."""
    rows = SpanRows(tagger, predicted_spans(tagger, doc) if spans is None else spans)
    return rows.confidences(tagger.model.ops.to_numpy(marginals))
