"""``update`` with a guard against NaN and infinity, shared by the trainable pipes.

A pipe mixes in :class:`GuardedUpdate` before ``TrainablePipe``; its
``get_loss(examples, outputs)`` returns ``(loss, d_outputs)`` and its
``cfg["on_nonfinite"]`` says what happens when the loss, ``d_outputs`` or a
gradient is not finite: ``"raise"`` a :class:`~spacy_crf.pipeline.load_checks.NonFiniteError`
naming the component and the batch, or ``"skip"`` the batch with a warning.
Either way nothing reaches the weights: the check runs before the
backward pass is passed upstream (a shared encoder would otherwise receive
the NaN) and before the optimizer step.

A loss can also diverge while staying finite (a span head at a too large
learning rate reaches 1e19 and stays there): a batch whose loss per token
exceeds :data:`DIVERGENCE_FACTOR` times the first batch's (or 1 per token,
if that is more) gets a warning, once per pipe.
"""

import warnings
from typing import Any, Dict, Iterable, List, Optional, Tuple

from spacy.training import Example, validate_examples
from thinc.api import Model, set_dropout_rate

from ..doc_keys import quote_text
from . import load_checks as checks

#: values of the ``on_nonfinite`` setting
ON_NONFINITE = ("raise", "skip")
#: how many times the first batch's loss per token a batch's may reach before
#: the divergence warning; a converging loss only falls below the first
DIVERGENCE_FACTOR = 1e3


def check_on_nonfinite(name: str, value: str) -> str:
    if value not in ON_NONFINITE:
        raise ValueError(f"[{name}] on_nonfinite must be one of {ON_NONFINITE}, not {value!r}.")
    return value


class GuardedUpdate:
    """``update`` / ``finish_update`` of ``TrainablePipe`` with the non-finite guard."""

    #: appended to the error: what usually causes a non-finite loss in this pipe
    nonfinite_causes = "a too large learning rate, no grad_clip, NaN features from an upstream encoder, or NaN weights"
    # since the last optimizer step: whether a batch's gradients went in,
    # whether a batch was skipped (on_nonfinite = "skip")
    # what the TrainablePipe it is mixed into provides
    name: str
    model: Model
    cfg: Dict[str, Any]

    def get_loss(self, examples: Iterable[Example], outputs: Any) -> Tuple[float, Any]:
        raise NotImplementedError

    _grads_in = False
    _skipped = False
    # the loss per token of the first batch with a loss; whether divergence was reported
    _first_loss: Optional[float] = None
    _warned_divergence = False

    def update(
        self, examples: Iterable[Example], *, drop: float = 0.0, sgd=None, losses: Optional[Dict[str, float]] = None
    ) -> Dict[str, float]:
        """Learn from a batch, as ``TrainablePipe.update``, checking that the
        loss and the gradients are finite before anything is passed on or
        written (``on_nonfinite``: raise or skip the batch). A batch of empty
        docs changes nothing."""
        if losses is None:
            losses = {}
        losses.setdefault(self.name, 0.0)
        examples = list(examples)
        validate_examples(examples, f"{type(self).__name__}.update")
        if not any(len(eg.predicted) for eg in examples):
            return losses
        set_dropout_rate(self.model, drop)
        outputs, backprop = self.model.begin_update([eg.predicted for eg in examples])
        loss, d_outputs = self.get_loss(examples, outputs)
        problem = checks.nonfinite_in_loss(loss, d_outputs)
        if problem:
            self._nonfinite(problem, examples)
            return losses
        self._watch_divergence(loss, examples)
        backprop(d_outputs)
        problem = checks.nonfinite_grads(self.model)
        if problem:
            checks.zero_grads(self.model)  # the gradients accumulated since the last step go too
            self._grads_in = False
            self._nonfinite(problem, examples)
            return losses
        self._grads_in = True
        if sgd not in (None, False):
            self.finish_update(sgd)
        losses[self.name] += loss
        return losses

    def finish_update(self, sgd) -> None:
        """Apply the optimizer, unless every batch since the last step was
        skipped (``on_nonfinite = "skip"``): ``Language.update`` and spaCy's
        training loop call this after the batch, and an optimizer step on
        zero gradients would still move the weights (Adam's momentum)."""
        skipped_only = self._skipped and not self._grads_in
        self._skipped = self._grads_in = False
        if skipped_only:
            checks.zero_grads(self.model)
            return
        super().finish_update(sgd)  # type: ignore[misc]  # TrainablePipe's, after this mixin

    def _watch_divergence(self, loss: float, examples: List[Example]) -> None:
        """Warn, once, when a finite loss has grown by orders of magnitude.
        Per token, so that a batch of long docs is not mistaken for one; the
        reference is at least 1 per token, so that fine-tuning a pipe whose
        first loss is already near 0 does not warn at the first harder batch."""
        per_token = loss / max(1, sum(len(eg.predicted) for eg in examples))
        if self._first_loss is None:
            if per_token > 0:
                self._first_loss = per_token
            return
        if self._warned_divergence or per_token <= DIVERGENCE_FACTOR * max(self._first_loss, 1.0):
            return
        self._warned_divergence = True
        warnings.warn(
            f"[{self.name}] the training loss is diverging: {per_token:.3g} per token {self._where(examples)}, "
            f"over {DIVERGENCE_FACTOR:g} times the first batch's {self._first_loss:.3g}: the learning rate "
            "(or this head's lr_multiplier) is probably too large; lower it or set grad_clip. (Reported once.)",
            stacklevel=3,
        )

    @staticmethod
    def _where(examples: List[Example]) -> str:
        n = len(examples)
        return f"in a batch of {n} doc{'s' if n != 1 else ''} starting with {quote_text(examples[0].predicted, 40)}"

    def _nonfinite(self, problem: str, examples: List[Example]) -> None:
        where = self._where(examples)
        if self.cfg.get("on_nonfinite", "raise") == "skip":
            self._skipped = True
            warnings.warn(
                f'[{self.name}] {problem} {where}: batch skipped (on_nonfinite = "skip"); the weights are unchanged.',
                stacklevel=3,
            )
            return
        raise checks.NonFiniteError(
            f"[{self.name}] {problem} {where}. Nothing was written to the weights. Usual causes: "
            f'{self.nonfinite_causes}. Set on_nonfinite = "skip" to skip such batches with a warning.'
        )
