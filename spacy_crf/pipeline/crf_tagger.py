"""The trainable CRF tagger component (:class:`CRFTagger`).

Its factories (``crf_tagger``, ``crf_ner``, ``crf_segmenter``) are in
:mod:`spacy_crf.pipeline.factories`. What the tagger learns and writes depends on
``scheme``:

* ``"bmes"``: word segmentation over character tokens. Gold word boundaries
  come from the *reference tokens* through ``Example`` alignment. Predicted
  words are written as the span group ``doc.spans[spans_key]``; the doc is
  not retokenized, so other components listening to the same transformer
  keep working. ``crf_merge_words`` turns the words into tokens at the end.
* ``"bio"`` / ``"bioes"``: entities, learned from and written to ``doc.ents``.
* ``"tag"``: ``token.tag_``, with no transition constraints.

Decoding goes around the tags a doc forces (:mod:`spacy_crf.pipeline.forced_tags`):
whitespace is outside every word and entity; entities already on the doc
are kept by ``bio``/``bioes`` and decoded around; with ``respect_ents`` a
``bmes`` segmenter puts a word boundary at every entity boundary. Gold tags
come from spaCy's alignment (:mod:`spacy_crf.pipeline.gold_tags`).

A ``bmes`` segmenter can carry a lexicon (:mod:`spacy_crf.pipeline.lexicon`): words
from outside the training data whose occurrences bias decoding towards
keeping them whole, with ``lexicon_weight``. It is set by ``initialize``
(``lexicon``, ``lexicon_weight``) or :meth:`CRFTagger.set_lexicon`, and
saved with the pipe.

A ``bmes`` segmenter takes user words, an entity tagger user entities
(:mod:`spacy_crf.pipeline.user_dict`): added at load time, without retraining, as
forced words or entities (decoded whole, through the tag mask) or as a
prior; saved with the pipe.

Training (``update``) checks the loss and the gradients of this component:
a NaN or infinite value raises a :class:`NonFiniteError` naming the
component and the batch, or with ``on_nonfinite = "skip"`` skips the batch
with a warning; nothing non-finite is written into the weights. With a
listener upstream (a shared ``transformer`` or ``tok2vec``), the tagger can
only vouch for its own loss, its gradient to the listener and its own
parameters: the encoder's own update is that component's business.
"""

from itertools import islice
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple, Union

import numpy
from spacy.language import Language
from spacy.tokens import Doc
from spacy.training import Example, validate_examples, validate_get_examples
from spacy.util import minibatch
from spacy.vocab import Vocab
from thinc.api import Model
from thinc.types import Floats2d, Ints1d

from ..doc_keys import DEFAULT_SPANS_KEY
from ..ml import tagger_model as crf_model
from ..ml.char_tagger import CharTagger
from ..ml.lexicon_features import initialize_lexicon, model_lexicon
from ..ml.lexicon_match import TaggedLexicon
from ..ml.schemes import (
    SchemeError,
    TransitionMask,
    check_labels,
    check_scheme,
    make_tags,
    transition_mask,
)
from ..ml.tagger_features import initialize_tagger
from ..ml.transitions import TransitionTable
from ..util import batch_by_length
from . import confidence as _confidence
from . import forced_tags as forced
from . import nbest as _nbest
from . import user_dict as _user_dict
from . import user_dict_decoding as _decoding
from .gold_tags import gold_tag_ids
from .guarded_update import check_on_nonfinite
from .lexicon import Lexicon, set_lexicon
from .scorers import score_crf_tagger
from .span_arrays import write_words
from .trainable_head import TrainableHead


class CRFTagger(_decoding.UserDictMethods, TrainableHead):
    """Label token sequences with a linear-chain CRF over token features."""

    config_settings = ("spans_key", "constrain_training", "max_batch_items", "on_nonfinite", "respect_ents")
    nonfinite_causes = (
        "a too large learning rate or CRF multiplier, no grad_clip, NaN features from an "
        "upstream encoder, or NaN weights"
    )

    def __init__(
        self,
        vocab: Vocab,
        model: Model,
        name: str = "crf_tagger",
        *,
        scheme: str = "bio",
        spans_key: str = DEFAULT_SPANS_KEY,
        constrain_training: bool = True,
        max_batch_items: int = 4096,
        labels: Sequence[str] = (),
        scorer: Optional[Callable] = score_crf_tagger,
        on_nonfinite: str = "raise",
        respect_ents: bool = False,
    ) -> None:
        check_on_nonfinite(name, on_nonfinite)
        self.vocab = vocab
        self.model = model
        self.name = name
        self.scorer = scorer
        self.cfg = {
            "scheme": check_scheme(scheme),
            "labels": check_labels(scheme, labels),
            "spans_key": spans_key,
            "constrain_training": constrain_training,
            "max_batch_items": max_batch_items,
            "on_nonfinite": on_nonfinite,
            "respect_ents": bool(respect_ents),
            # set with a lexicon (set_lexicon); the words are saved beside the cfg
            "lexicon_weight": 0.0,
            "lexicon_size": 0,
            "temperature": 1.0,  # calibrates the marginals, never the decoding (pipeline/confidence.py)
        }
        self.lexicon: Optional[Lexicon] = None
        self.user_dict = _user_dict.UserDict()
        self._mask_cache: Tuple[Tuple[str, ...], Optional[TransitionMask]] = ((), None)

    # --- labels and tags ------------------------------------------------------

    @property
    def scheme(self) -> str:
        return self.cfg["scheme"]

    @property
    def tags(self) -> List[str]:
        """The tag inventory; tag ids index this list (a new list each time,
        made from one kept per scheme and labels: code that indexes it per
        token should not pay for building it)."""
        key = (self.scheme, self.labels)
        cached = getattr(self, "_tags_cache", None)
        if cached is None or cached[0] != key:
            cached = self._tags_cache = (key, tuple(make_tags(*key)))
        return list(cached[1])

    @property
    def constraints(self) -> Optional[TransitionMask]:
        tags = tuple(self.tags)
        if self._mask_cache[0] != tags:
            self._mask_cache = (tags, transition_mask(self.scheme, tags))
        return self._mask_cache[1]

    def add_label(self, label: str) -> int:
        if self.scheme == "bmes":
            raise ValueError(f"[{self.name}] scheme 'bmes' has no labels to add.")
        if label in self.labels:
            return 0
        if self.model.has_dim("nO") and self.model.get_ref("emissions").has_dim("nO"):
            raise ValueError(
                f"[{self.name}] cannot add label {label!r} after the model was "
                "initialized: the number of tags is fixed. Pass all labels to "
                "initialize()."
            )
        self.cfg["labels"] = check_labels(self.scheme, list(self.labels) + [label])
        return 1

    # --- prediction -----------------------------------------------------------

    def pipe(self, stream: Iterable[Doc], *, batch_size: int = 128) -> Iterator[Doc]:
        """Annotate a stream of docs, in order, predicting length-sorted
        sub-batches. A sub-batch that fails is decoded again doc by doc, and
        the error handler gets each doc that fails alone (the others go on)."""
        error_handler = self.get_error_handler()
        max_items = self.cfg.get("max_batch_items", 4096)
        for docs in minibatch(stream, size=batch_size):
            docs = list(docs)
            failed: Set[int] = set()
            for indices in batch_by_length([len(doc) for doc in docs], max_items):
                sub_batch = [docs[i] for i in indices]
                try:
                    self.set_annotations(sub_batch, self.predict(sub_batch))
                except Exception:
                    for k, e in _decoding.annotate_each(self, sub_batch):
                        error_handler(self.name, self, [sub_batch[k]], e)
                        failed.add(indices[k])
            yield from (doc for i, doc in enumerate(docs) if i not in failed)

    def predict(self, docs: Iterable[Doc]) -> List[Ints1d]:
        """Best tag ids per doc (constrained Viterbi, or argmax without a CRF),
        around the tags forced by the doc (see :meth:`tag_mask`)."""
        docs = list(docs)
        if not any(len(doc) for doc in docs):
            return [numpy.zeros((len(doc),), dtype="int64") for doc in docs]  # type: ignore[misc]  # thinc's nominal Ints1d
        self._require_initialized("predict")
        return self.decode(docs, self.emission_scores(docs))

    def decode(self, docs: List[Doc], scores: List[Floats2d]) -> List[Ints1d]:
        """Best tag ids for ``docs`` from the given emission ``scores``
        (``[len(doc), n_tags]`` per doc), with the scheme's constraints and the
        tags each doc forces: what :meth:`predict` does after
        :meth:`emission_scores`, for a caller that changes the scores first
        (e.g. tuning a lexicon's weight on a dev set)."""
        n_tags = len(self.tags)  # built from the labels on each access: once per call
        if len(scores) != len(docs) or any(s.shape != (len(d), n_tags) for s, d in zip(scores, docs)):
            raise ValueError(
                f"[{self.name}] decode: expected one [len(doc), {n_tags}] score array per doc, "
                f"got shapes {[tuple(s.shape) for s in scores]} for {len(docs)} docs"
            )
        return crf_model.decode(self.model, scores, self.constraints, self.tag_masks(docs))

    def predict_marginals(self, docs: Iterable[Doc], *, respect_preset: bool = False) -> List[Floats2d]:
        """Per-token tag posteriors [n_tokens, n_tags] per doc (confidences).

        Whitespace tokens are outside (as in :meth:`predict`). Entities or
        words already on the doc are ignored unless ``respect_preset``: this
        is usually called after the tagger ran, when the doc's entities are
        the tagger's own predictions, and forcing those would make every
        confidence 1. Calibrated by the pipe's ``temperature``."""
        docs = list(docs)
        if not any(len(doc) for doc in docs):
            return [numpy.zeros((len(doc), len(self.tags)), dtype="f") for doc in docs]  # type: ignore[misc]
        self._require_initialized("predict_marginals")
        scores = self.emission_scores(docs)
        masks = self.tag_masks(docs, preset=respect_preset)
        return crf_model.marginals(self.model, scores, self.constraints, masks, _confidence.temperature(self))

    def predict_nbest(self, docs: Iterable[Doc], k: int = 5, *, respect_preset: bool = True) -> List[list]:
        """The ``k`` best analyses of each doc, ``(probability, analysis)`` best first, also stored
        in ``doc._.crf_nbest[self.name]`` (:mod:`spacy_crf.pipeline.nbest`)."""
        docs = list(docs)
        if any(len(doc) for doc in docs) and self.model.attrs.get("use_crf", True):
            self._require_initialized("predict_nbest")
        return _nbest.predict_nbest(self, docs, k, respect_preset=respect_preset)

    def emission_scores(self, docs: List[Doc]) -> List[Floats2d]:
        """The scores decoding starts from: the model's emissions
        ``[len(doc), n_tags]`` per doc, plus the lexicon's prior if the pipe
        has a lexicon and a non-zero ``lexicon_weight``."""
        scores = self.model.predict(docs)
        weight = self.cfg.get("lexicon_weight", 0.0)
        if self.lexicon is not None and weight:
            ops = self.model.ops
            biases = self.lexicon.emission_biases(docs, self.tags, weight, source=model_lexicon(self.model))
            scores = [s + ops.asarray2f(bias) for s, bias in zip(scores, biases)]  # type: ignore[arg-type]
        return _decoding.add_prior(self, docs, scores)

    def set_lexicon(self, words: Optional[Iterable[str]], weight: float = 1.0) -> None:
        """Decode with a lexicon (scheme ``bmes`` only): each occurrence of one
        of ``words`` (two or more characters) in a doc adds ``weight`` to its
        B/M/E emission scores (:mod:`spacy_crf.pipeline.lexicon`). The model is not
        changed, and training never sees the prior. ``words=None`` removes
        the lexicon. Tune ``weight`` on dev data; it is saved with the
        words."""
        set_lexicon(self, words, weight)

    def tag_mask(self, doc: Doc, *, preset: bool = True) -> Optional[numpy.ndarray]:
        """Tags allowed at each token of ``doc`` when decoding: bool
        ``[len(doc), n_tags]``, or None when every tag is allowed everywhere
        (:func:`spacy_crf.pipeline.forced_tags.tag_mask`). ``preset``: also force what the
        doc already says (entities, or entity boundaries with ``respect_ents``).
        The user dictionary's forced entries are always applied
        (:func:`spacy_crf.pipeline.user_dict_decoding.constrain`)."""
        return self.tag_masks([doc], preset=preset)[0]

    def tag_masks(self, docs: Sequence[Doc], *, preset: bool = True) -> List[Optional[numpy.ndarray]]:
        """:meth:`tag_mask` of each doc, the batch's token arrays read at once
        (:func:`spacy_crf.pipeline.forced_tags.tag_masks`)."""
        masks = forced.tag_masks(
            docs, self.scheme, self.tags, self.labels, preset=preset, respect_ents=self.cfg.get("respect_ents", False)
        )
        return [_decoding.constrain(self, doc, mask, preset=preset) for doc, mask in zip(docs, masks)]

    def set_annotations(self, docs: Iterable[Doc], tag_ids: List[Ints1d]) -> None:
        tags = self.tags
        docs = list(docs)
        if self.scheme in ("bio", "bioes"):  # the batch's entities at once, through the token arrays
            forced.write_entity_ids(docs, self.scheme, tags, tag_ids)  # type: ignore[arg-type]
            return
        if self.scheme == "bmes":  # the batch's words at once (whitespace is in no word, as in the gold)
            write_words(docs, tag_ids, self.cfg["spans_key"])  # type: ignore[arg-type]
            return
        for doc, ids in zip(docs, tag_ids):  # scheme "tag"
            for token, i in zip(doc, numpy.asarray(ids).tolist()):
                token.tag_ = tags[i]

    def _is_initialized(self) -> bool:
        return crf_model.is_initialized(self.model)

    # --- training -------------------------------------------------------------

    def get_loss(
        self, examples: Iterable[Example], scores: List[Floats2d]
    ) -> Tuple[float, Union[crf_model.CRFGradient, List[Floats2d]]]:
        """Negative log-likelihood of the gold tags, summed over the docs, and
        its gradient (a ``CRFGradient`` with a CRF layer, see
        :func:`~spacy_crf.ml.tagger_model.crf_loss`)."""
        validate_examples(examples, "CRFTagger.get_loss")
        gold: List[Ints1d] = [self._gold_tag_ids(eg) for eg in examples]  # type: ignore[misc]
        return crf_model.crf_loss(
            self.model,
            scores,
            gold,
            self.constraints,
            constrain_training=self.cfg["constrain_training"],
        )

    def _gold_tag_ids(self, eg: Example) -> numpy.ndarray:
        """Gold tag ids over the predicted tokens; -1 where the gold is unknown."""
        return gold_tag_ids(eg, self.scheme, self.tags, list(self.labels), self.name)

    def initialize(
        self,
        get_examples: Callable[[], Iterable[Example]],
        *,
        nlp: Optional[Language] = None,
        labels: Optional[Sequence[str]] = None,
        lexicon: Optional[Iterable[str]] = None,
        lexicon_weight: float = 1.0,
        lexicon_features: Optional[TaggedLexicon] = None,
        tagger_features: Optional[CharTagger] = None,
    ) -> None:
        """Set the labels and the model's shapes.

        labels: entity types ("bio"/"bioes") or tags ("tag"), e.g. from
            ``[initialize.components.NAME.labels]``; they are the labels, as in
            spaCy. Unset: the labels found in the examples plus those added
            with :meth:`add_label` before. Leave unset for "bmes".
        lexicon: "bmes" only: words for :meth:`set_lexicon`, e.g.
            ``[initialize.components.NAME.lexicon]`` with
            ``@readers = "spacy_crf.read_lexicon.v1"``. Unset: no lexicon.
        lexicon_weight: the lexicon's weight (tune it on dev data).
        lexicon_features: the dictionary of the model's lexicon features
            (``lexicon_width`` > 0; any scheme), e.g. with ``@readers =
            "spacy_crf.read_tagged_lexicon.v1"``; saved in the weights.
        tagger_features: the character tagger of the model's tagger features
            (``[components.NAME.model.tagger_features]``), e.g. with
            ``@readers = "spacy_crf.read_char_tagger.v1"``; saved in the weights.
        """
        initialize_lexicon(self.model, lexicon_features, self.name)
        initialize_tagger(self.model, tagger_features, self.name)
        if lexicon is not None:
            try:
                self.set_lexicon(lexicon, lexicon_weight)
            except ValueError as e:
                raise ValueError(f"{e} (initialize: lexicon)") from None
        examples = list(islice(get_examples(), 1000))
        if not examples and labels is None:
            raise ValueError(
                f"[{self.name}] initialize() got no examples and no labels: the "
                "tagger cannot know its tag set. Check the training corpus path, "
                "or pass labels."
            )
        if examples:
            validate_get_examples(get_examples, "CRFTagger.initialize")
        if labels is None:
            labels = sorted(set(self._labels_from(get_examples())) | set(self.labels))
        try:
            self.cfg["labels"] = check_labels(self.scheme, labels)
            tags = self.tags
        except SchemeError as e:
            raise ValueError(f"[{self.name}] {e}") from None
        if self.scheme in ("bio", "bioes", "tag") and not self.labels:
            what = "entities" if self.scheme != "tag" else "tags"
            raise ValueError(
                f"[{self.name}] scheme {self.scheme!r} found no {what} in the "
                "training examples and no labels were given."
            )
        _user_dict.check_entity_labels(self)  # a user entity whose label the tagger will not have
        n_tags = len(tags)
        for ref in ("emissions", "crf"):
            if self.model.has_ref(ref):
                layer = self.model.get_ref(ref)
                if layer.has_dim("nO") and layer.get_dim("nO") != n_tags:
                    raise ValueError(
                        f"[{self.name}] the model's nO is {layer.get_dim('nO')} but the "
                        f"scheme {self.scheme!r} with labels {list(self.labels)} has {n_tags} tags."
                    )
                layer.set_dim("nO", n_tags)
        docs = [eg.reference for eg in examples[:10]] or [Doc(self.vocab, words=["x"])]
        self.model.initialize(X=docs)

    def _labels_from(self, examples: Iterable[Example]) -> List[str]:
        found: Set[str] = set()
        for eg in examples:
            if self.scheme in ("bio", "bioes"):
                found.update(ent.label_ for ent in eg.reference.ents)
            elif self.scheme == "tag":
                found.update(t.tag_ for t in eg.reference if t.tag_)
        return sorted(found)

    # --- inspection -----------------------------------------------------------

    def transition_table(self) -> TransitionTable:
        """The learned transition, start and end scores, labelled by tag."""
        if not self.model.attrs.get("use_crf", True):
            raise ValueError(f"[{self.name}] This model has no CRF layer (use_crf = false): there are no transitions.")
        self._require_initialized("transition_table")
        transitions, start, end = crf_model.transition_scores(self.model)
        return TransitionTable(self.tags, transitions, start, end, self.constraints)

    # --- serialization (TrainableHead) ----------------------------------------

    def _extra_files(self) -> Dict[str, Callable[[], str]]:
        # the user dictionary's entries added through the API; written even when
        # empty, so that saving over an older save leaves no stale entries
        return {_user_dict.FILE: lambda: _user_dict.to_json(self)}

    def _load_extra(self, path_or_bytes: Union[Path, bytes], exclude: Iterable[str]) -> None:
        if isinstance(path_or_bytes, bytes):
            _user_dict.load_from_bytes(self, path_or_bytes, exclude)
        else:
            _user_dict.load_from_disk(self, path_or_bytes, exclude)
