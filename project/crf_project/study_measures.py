"""Measurements for the CRF learning-rate study.

For one trained ``crf_tagger`` this module records what the study compares:
the dev score, the learned transitions (with start/end), their validity
(see :mod:`spacy_crf.ml.transitions`), and how large the transitions are next
to the emissions: ``mean |transition| / mean emission margin``, where a
token's emission margin is its top-1 minus top-2 emission score. A ratio far
below 1 means the transitions can almost never overturn a per-token decision,
i.e. the CRF behaves like a softmax.
"""

from typing import Dict, Iterable, List, Optional, Sequence

import numpy
from thinc.types import Floats2d

from spacy_crf.ml.transitions import TransitionTable


def emission_margins(scores: Sequence[Floats2d]) -> numpy.ndarray:
    """Top-1 minus top-2 emission score of every token, over all docs."""
    margins = []
    for s in scores:
        s = numpy.asarray(s)
        if len(s) and s.shape[1] >= 2:
            top2 = numpy.sort(s, axis=1)[:, -2:]
            margins.append(top2[:, 1] - top2[:, 0])
    return numpy.concatenate(margins) if margins else numpy.zeros((0,))


def transition_emission_ratio(table: TransitionTable, scores: Sequence[Floats2d]) -> Optional[float]:
    """mean |transition score| over the K x K matrix / mean emission margin."""
    margins = emission_margins(scores)
    if not len(margins) or margins.mean() == 0:
        return None
    return float(numpy.abs(table.transitions).mean() / margins.mean())


def record_run(nlp, pipe_name: str, docs: Iterable, scores: Dict[str, object]) -> Dict[str, object]:
    """Everything the study keeps from one trained pipeline.

    docs: dev docs (texts are re-tokenized) to measure emission margins on.
    scores: the pipeline's evaluation scores on the same dev set.
    """
    pipe = nlp.get_pipe(pipe_name)
    texts = [d.text if hasattr(d, "text") else d for d in docs]
    predicted = [nlp.make_doc(t) for t in texts]
    for name, proc in nlp.pipeline:
        if name == pipe_name:
            break
        predicted = list(proc.pipe(predicted))
    emissions = pipe.model.predict(predicted) if any(len(d) for d in predicted) else []
    margins = emission_margins(emissions)
    record: Dict[str, object] = {
        "scores": scores,
        "mean_emission_margin": float(margins.mean()) if len(margins) else None,
        "use_crf": bool(pipe.model.attrs.get("use_crf", True)),
    }
    if record["use_crf"]:
        table = pipe.transition_table()
        record.update(
            transitions=table.to_dict(),
            validity=table.validity(),
            mean_abs_transition=float(numpy.abs(table.transitions).mean()),
            transition_emission_ratio=transition_emission_ratio(table, emissions),
        )
    return record


def mean_and_spread(values: List[Optional[float]]) -> Optional[Dict[str, float]]:
    """Mean and half the range (max-min)/2 over seeds, ignoring missing values."""
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"mean": float(numpy.mean(values)), "spread": float((max(values) - min(values)) / 2), "n": len(values)}
