"""The process-wide speed-ups, installed only when asked for.

Importing spacy-crf or building one of its pipes changes nothing outside
the objects it makes. Two changes to the process make multi-process
prediction faster, and a program opts in to both with
:func:`spacy_crf.enable_speed_ups`, or a pipeline from its config::

    [nlp.after_pipeline_creation]
    @callbacks = "spacy_crf.speed_ups.v1"

The pipeline that ``assemble.py`` ships has this, and ``spacy crf annotate``
opts in at its start (docs/architecture.md, "Process-wide changes").
"""

from typing import Callable

from spacy.language import Language
from spacy.util import registry

from . import enable_speed_ups


@registry.callbacks("spacy_crf.speed_ups.v1")
def make_speed_ups() -> Callable[[Language], Language]:
    """An ``[nlp.after_pipeline_creation]`` callback that calls
    :func:`spacy_crf.enable_speed_ups` when the pipeline is built or loaded."""

    def callback(nlp: Language) -> Language:
        enable_speed_ups()
        return nlp

    return callback
