"""spacy_crf.ml.tagger_model: the loss has no side effects; the CRF parameters get their
gradients in the CRF layer's backprop; nothing happens on import."""

import subprocess
import sys

import numpy
import pytest
import spacy
from _configs import NER_DATA, crf_model_config
from spacy.training import Example
from thinc.api import Model, chain, noop, set_dropout_rate

from spacy_crf.ml.tagger_model import CRFGradient


def _ner_pipe():
    nlp = spacy.blank("zh")
    pipe = nlp.add_pipe("crf_ner", config={"model": crf_model_config()})
    examples = [Example.from_dict(nlp.make_doc(t), {"entities": e}) for t, e in NER_DATA]
    nlp.initialize(lambda: examples)
    set_dropout_rate(pipe.model, 0.0)
    return pipe, examples


def _zero_grads(model):
    for node in model.walk():
        for name in node.param_names:
            if node.has_grad(name):
                node.set_grad(name, node.ops.alloc(node.get_grad(name).shape))


def _grads(model):
    return {
        (node.id, name): node.get_grad(name).copy()
        for node in model.walk()
        for name in node.param_names
        if node.has_grad(name)
    }


def _backward(pipe, examples, n_get_loss):
    _zero_grads(pipe.model)
    scores, backprop = pipe.model.begin_update([eg.predicted for eg in examples])
    for _ in range(n_get_loss):
        loss, d_scores = pipe.get_loss(examples, scores)
    backprop(d_scores)
    return loss, _grads(pipe.model)


def test_get_loss_twice_leaves_gradients_as_once():
    pipe, examples = _ner_pipe()
    loss_once, once = _backward(pipe, examples, 1)
    loss_twice, twice = _backward(pipe, examples, 2)
    assert loss_once == loss_twice
    assert once.keys() == twice.keys()
    for key in once:
        numpy.testing.assert_array_equal(once[key], twice[key], err_msg=str(key))
    crf = pipe.model.get_ref("crf")
    assert numpy.abs(once[(crf.id, "crf_transitions")]).sum() > 0


def test_get_loss_writes_nothing_and_backprop_adds_the_crf_gradients():
    pipe, examples = _ner_pipe()
    crf = pipe.model.get_ref("crf")
    _zero_grads(pipe.model)
    scores, backprop = pipe.model.begin_update([eg.predicted for eg in examples])
    _, d_scores = pipe.get_loss(examples, scores)
    assert isinstance(d_scores, CRFGradient) and set(d_scores.d_params) == {"crf_transitions", "crf_start", "crf_end"}
    assert not any(numpy.abs(crf.get_grad(name)).sum() for name in crf.param_names if crf.has_grad(name))
    backprop(d_scores)
    numpy.testing.assert_array_equal(crf.get_grad("crf_transitions"), d_scores.d_params["crf_transitions"])


def test_importing_the_package_has_no_side_effects():
    code = (
        "import os, sys; calls = []; os.register_at_fork = lambda **kw: calls.append(kw)\n"
        "import spacy_crf, spacy_crf.ml.tagger_model\n"
        "assert not spacy_crf.util._fork_hook_installed; before = len(calls)  # torch registers its own\n"
        "import spacy_crf as p; assert not [m for m in ('spacy_crf.pipeline.crf_tagger', 'spacy_crf.pipeline.factories') if m in sys.modules]\n"
        "from spacy_crf.ml.tagger_model import build_crf_tagger, CRF\n"
        "import thinc.api; build_crf_tagger(thinc.api.Linear(2, 2)); build_crf_tagger(thinc.api.Linear(2, 2))\n"
        "assert not spacy_crf.util._fork_hook_installed and len(calls) == before, calls  # opt-in only\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    bare = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, spacy_crf; print(sorted(m for m in sys.modules "
            "if m.split('.')[0] in ('torch', 'spacy', 'thinc')))",
        ],
        capture_output=True,
        text=True,
    )
    assert bare.returncode == 0 and bare.stdout.strip() == "[]", bare.stdout + bare.stderr


def test_decode_and_marginals_obey_per_doc_tag_masks():
    from spacy_crf.ml.tagger_model import decode, marginals

    pipe, examples = _ner_pipe()
    docs = [eg.predicted for eg in examples]
    scores = pipe.model.predict(docs)
    K = len(pipe.tags)
    free = decode(pipe.model, scores, pipe.constraints)
    forced_tag = pipe.tags.index("S-LOC")
    mask = numpy.ones((len(docs[1]), K), dtype=bool)
    mask[2] = False
    mask[2, forced_tag] = True
    masks = [None, mask, None, None]
    got = decode(pipe.model, scores, pipe.constraints, masks)
    assert got[1][2] == forced_tag
    for i in (0, 2, 3):
        numpy.testing.assert_array_equal(got[i], free[i])
    probs = marginals(pipe.model, scores, pipe.constraints, masks)
    assert probs[1][2, forced_tag] == pytest_approx(1.0)
    assert (probs[1][:, pipe.tags.index("E-LOC")][3:4] == 0).all()  # nothing can continue an S
    # the softmax head honours the mask too
    nlp = spacy.blank("zh")
    soft = nlp.add_pipe("crf_ner", config={"model": crf_model_config(use_crf=False)})
    nlp.initialize(lambda: examples)
    soft_scores = soft.model.predict(docs)
    assert decode(soft.model, soft_scores, soft.constraints, masks)[1][2] == forced_tag
    assert marginals(soft.model, soft_scores, soft.constraints, masks)[1][2, forced_tag] == pytest_approx(1.0)


def pytest_approx(value):
    import pytest

    return pytest.approx(value, abs=1e-5)


def test_check_weights_reports_widths_and_nonfinite_parameters():
    from spacy_crf.ml.tagger_model import is_initialized
    from spacy_crf.pipeline.load_checks import check_weights

    pipe, _ = _ner_pipe()
    assert is_initialized(pipe.model) and check_weights(pipe.model, len(pipe.tags)) == []
    problems = check_weights(pipe.model, len(pipe.tags) + 1)
    assert any("output width" in p for p in problems) and any("transition matrix is 9x9" in p for p in problems)
    crf = pipe.model.get_ref("crf")
    start = crf.get_param("crf_start").copy()
    start[0] = numpy.inf
    crf.set_param("crf_start", start)
    assert check_weights(pipe.model, len(pipe.tags)) == [
        "parameter 'crf_start' of layer 'crf' has 1 NaN or infinite values"
    ]
    fresh = spacy.blank("zh").add_pipe("crf_ner", config={"model": crf_model_config()})
    assert not is_initialized(fresh.model) and check_weights(fresh.model, 9) == []


def test_transition_scores_before_initialize_say_so():
    import pytest

    from spacy_crf.ml.tagger_model import transition_scores

    fresh = spacy.blank("zh").add_pipe("crf_ner", config={"model": crf_model_config()})
    with pytest.raises(ValueError, match="not initialized"):
        transition_scores(fresh.model)


def _train_steps(nlp, examples, steps=3):
    from spacy_crf.training.optimizers import grouped_adam

    optimizer = grouped_adam(0.001, crf_lr_multiplier=100.0)
    for _ in range(steps):
        nlp.update(examples, sgd=optimizer)


def test_the_transitions_move_when_the_model_is_wrapped_by_chain():
    pipe, examples = _ner_pipe()
    wrapped = chain(pipe.model, noop())  # a pass-through wrapper above the CRF
    crf = wrapped.layers[0].get_ref("crf")
    _zero_grads(wrapped)
    scores, backprop = wrapped.begin_update([eg.predicted for eg in examples])
    _, d_scores = pipe.get_loss(examples, scores)
    backprop(d_scores)
    assert numpy.abs(crf.get_grad("crf_transitions")).sum() > 0


def test_a_wrapper_that_rebuilds_the_gradient_fails_instead_of_dropping_the_transitions():
    pipe, examples = _ner_pipe()

    def rebuild(model, X, is_train):
        return X, lambda dY: [d.copy() for d in dY.d_emissions]  # loses d_params

    wrapped = chain(pipe.model, Model("rebuild", rebuild))
    scores, backprop = wrapped.begin_update([eg.predicted for eg in examples])
    _, d_scores = pipe.get_loss(examples, scores)
    with pytest.raises(TypeError, match="got a list, not the CRFGradient .* lose the gradients of the transitions"):
        backprop(d_scores)
    with pytest.raises(TypeError):
        list(d_scores)  # not a list: iterating it cannot silently drop d_params either


def test_the_transitions_move_behind_a_tok2vec_listener():
    nlp = spacy.blank("zh")
    nlp.add_pipe("tok2vec")
    model = crf_model_config()
    model["tok2vec"] = {"@architectures": "spacy.Tok2VecListener.v1", "width": 96, "upstream": "*"}
    pipe = nlp.add_pipe("crf_ner", config={"model": model})
    examples = [Example.from_dict(nlp.make_doc(t), {"entities": e}) for t, e in NER_DATA]
    nlp.initialize(lambda: examples)
    before = pipe.model.get_ref("crf").get_param("crf_transitions").copy()
    _train_steps(nlp, examples)
    after = pipe.model.get_ref("crf").get_param("crf_transitions")
    assert numpy.abs(after - before).max() > 0.01
