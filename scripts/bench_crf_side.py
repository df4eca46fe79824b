"""The CRF side of a pipeline alone: segmenter, NER tagger and merge, per 1,000 characters.

    python scripts/bench_crf_side.py PIPELINE DATA.spacy [DATA.spacy ...] [--limit 500] [--repeats 4]
        [--batch-size 128] [--output bench.json]

Runs the pipeline's transformer once over the first ``--limit`` texts of each
``.spacy`` file, then, ``--repeats`` times on fresh copies of those docs, the
CRF taggers and the merge step after it, batch by batch as ``nlp.pipe`` runs
them, each timed alone (wall clock: a
profiler inflates the per-call cost of spaCy's compiled code). The lexicon
prior's matcher is built before timing (once per process in real use). Prints
the median seconds per 1,000 characters of each step and of the CRF side as
a whole, and the CRF side's share of the pipeline with the encoder's pass
(timed once); ``spacy crf speed`` gives the whole pipeline's split.

Side by side in each repeat, on the same docs, each step as the pipeline
runs it and the way it ran before: the merge called per doc (``merge_words
(per doc)``, how ``nlp.pipe`` ran it before it had a ``pipe`` method)
against its ``pipe`` (a batch at a time); each CRF tagger after the first
pooling the transformer output itself (``(own pooling)``) against taking the
other head's (:mod:`spacy_crf.ml.shared_listener`); an entity tagger writing
its entities per doc from tag strings read token by token (``(entities per
token)``) against over the batch in array operations; a segmenter with a
lexicon prior within its lexicon features' dictionary matching the prior
with its own automaton (``(prior matched apart)``) against reading the
features' matches; each CRF tagger's dense layers through thinc's blis
``gemm`` (``(blis dense layers)``) against numpy's BLAS held to one thread
(:func:`spacy_crf.util.matmul`); each CRF tagger without the compiled
kernels (``(no compiled kernels)``: the numpy Viterbi search, the
pyahocorasick automaton) against with them; the first tagger pooling the transformer
output doc by doc in spacy-transformers (``(per-doc pooling)``) against
the whole batch at once (:func:`spacy_crf.ml.shared_listener.mean_pooled`).
All ways must give the
same tokens, entities and span groups, else the script exits 1. The CRF
side's total counts the ways the pipeline runs. Inside the taggers, the time
spent matching dictionaries, in the lexicon prior, building tag masks and
decoding is reported too.

Last, the floor: the spaCy objects that the CRF side hands on, built alone
from their finished arrays (the span groups and entities written on the
character docs, the merged docs and theirs). Any implementation through
spaCy's Python API spends at least that, whatever it computes first; the
rest of the CRF side is ours to cut. Beside it, the least work besides the
objects (:func:`least_work`): each doc's text read once, each tagger's dense
products and its Viterbi search, on the arrays the pipeline computed. The
floor and that work together bound the CRF side from below; the script
gives their share of the pipeline with the encoder's pass, which is timed
on a second pass over the texts (the first pass of a process also sets
the encoder's runtime up for each batch shape). Beside the bound, the
same dense products through torch in float32 and in bfloat16: what the
products would take that way.
"""

import argparse
import statistics
import sys
import time
from collections import Counter
from contextlib import ExitStack
from typing import Callable, Dict, List, Tuple
from unittest import mock

import numpy
import spacy
import torch
from bench_common import doc_view, timed
from spacy.attrs import IS_SPACE
from spacy.tokens import Doc
from spacy.util import minibatch

from spacy_crf.corpora.base import read_docbin
from spacy_crf.files import check_output_paths, write_json_atomic
from spacy_crf.hardware import hardware
from spacy_crf.ml import kernels, lexicon_features, lexicon_match, shared_listener, span_model, tagger_model
from spacy_crf.pipeline import crf_tagger, forced_tags, lexicon
from spacy_crf.pipeline.span_arrays import span_group, span_tables
from spacy_crf.util import batch_by_length, flat_rows, matmul

MERGE_FACTORY = "crf_merge_words"
#: timed inside the taggers: (label, owner, attribute)
INSIDE = (
    ("dictionary match", lexicon_match.WordLexicon, "match_arrays"),
    ("lexicon prior", lexicon.Lexicon, "emission_biases"),
    ("tag masks", crf_tagger.CRFTagger, "tag_masks"),
    ("decoding", tagger_model, "decode"),
)


def run_step(pipe, docs: List[Doc], batch_size: int) -> List[Doc]:
    """One pipeline step over ``docs``: its ``pipe`` where it has one, else a call per doc."""
    if hasattr(pipe, "pipe"):
        return list(pipe.pipe(docs, batch_size=batch_size))
    return [pipe(d) for d in docs]


def ways_of(nlp, name: str, batch_size: int, may_share: bool) -> Dict[str, Callable[[List[Doc]], List[Doc]]]:
    """How a step is timed: as the pipeline runs it (``name``), and side by
    side the way it ran before: the merge called per doc, a CRF tagger
    pooling the transformer output itself (not sharing the other head's)."""
    pipe = nlp.get_pipe(name)
    ways = {name: lambda docs: run_step(pipe, docs, batch_size)}
    if nlp.get_pipe_meta(name).factory == MERGE_FACTORY:
        ways[f"{name} (per doc)"] = lambda docs: [pipe(d) for d in docs]
    if may_share:
        ways[f"{name} (own pooling)"] = lambda docs: unshared(lambda: run_step(pipe, docs, batch_size))
    if prior_source(pipe) is not None:
        ways[f"{name} (prior matched apart)"] = lambda docs: prior_apart(lambda: run_step(pipe, docs, batch_size))
    if isinstance(pipe, crf_tagger.CRFTagger) and pipe.scheme in ("bio", "bioes"):
        ways[f"{name} (entities per token)"] = lambda docs: entities_per_token(pipe, docs)
    if isinstance(pipe, crf_tagger.CRFTagger):
        ways[f"{name} (no compiled kernels)"] = lambda docs: pure_python(lambda: run_step(pipe, docs, batch_size))
        ways[f"{name} (blis dense layers)"] = lambda docs: with_blis(lambda: run_step(pipe, docs, batch_size))
        if not may_share:
            ways[f"{name} (per-doc pooling)"] = lambda docs: pooled_per_doc(lambda: run_step(pipe, docs, batch_size))
    return ways


def with_blis(call: Callable[[], List[Doc]]) -> List[Doc]:
    """``call()`` with the dense layers through thinc's ``ops.gemm`` (blis)."""

    def gemm(ops, A, B, *, trans1=False, trans2=False):
        return ops.gemm(A, B, trans1=trans1, trans2=trans2)

    return patched([(module, "matmul", gemm) for module in (tagger_model, lexicon_features, span_model)], call)


def pure_python(call: Callable[[], List[Doc]]) -> List[Doc]:
    """``call()`` without the compiled kernels: the numpy Viterbi search and
    the pyahocorasick automaton (:mod:`spacy_crf.ml.kernels`)."""
    return patched([(kernels, "enabled", lambda: False)], call)


def pooled_per_doc(call: Callable[[], List[Doc]]) -> List[Doc]:
    """``call()`` with spacy-transformers pooling the transformer output doc by doc."""
    return patched([(shared_listener, "mean_pooled", lambda tok2vec, data: None)], call)


def prior_source(pipe):
    """The lexicon features' dictionary a tagger's lexicon prior reads its
    occurrences from, or None (no prior, no features, or words outside them)."""
    if not isinstance(pipe, crf_tagger.CRFTagger) or pipe.lexicon is None or not pipe.cfg.get("lexicon_weight"):
        return None
    source = lexicon_features.model_lexicon(pipe.model)
    return source if source is not None and pipe.lexicon._words_within(source) is not None else None


def patched(replacements, call: Callable[[], List[Doc]]) -> List[Doc]:
    """``call()`` with each ``(owner, attribute, value)`` of ``replacements``
    in place, the originals restored afterwards."""
    with ExitStack() as stack:
        for owner, attribute, value in replacements:
            stack.enter_context(mock.patch.object(owner, attribute, value))
        return call()


def prior_apart(call: Callable[[], List[Doc]]) -> List[Doc]:
    """``call()`` with the lexicon prior matched by its own automaton."""
    return patched([(lexicon.Lexicon, "_words_within", lambda self, source: None)], call)


def forget_matches(pipe) -> None:
    """Drop the dictionaries' kept matches, features and texts, so that each
    way of the first tagger pays for matching the batch (in the pipeline the
    first tagger always does, and the next one reads what it kept)."""
    sources = {id(s): s for s in (prior_source(pipe), lexicon_features.model_lexicon(pipe.model)) if s is not None}
    for source in sources.values():
        for name in ("_features", "_matches"):
            source._batch_cache(name).clear()
    lexicon_match._texts.clear()


def entities_per_token(pipe, docs: List[Doc]) -> List[Doc]:
    """The tagger's ``pipe`` on one batch with entities written as before: per
    doc, from a list of tag strings read token by token (``tags_to_spans``)."""
    tags = pipe.tags  # (built from the labels on each access)
    for indices in batch_by_length([len(doc) for doc in docs], pipe.cfg.get("max_batch_items", 4096)):
        sub_batch = [docs[i] for i in indices]
        for doc, ids in zip(sub_batch, pipe.predict(sub_batch)):
            space = doc.to_array(IS_SPACE).astype(bool).tolist() if len(doc) else []
            forced_tags.write_entities(
                doc, pipe.scheme, [None if sp else tags[i] for sp, i in zip(space, ids.tolist())]
            )
    return docs


def unshared(call: Callable[[], List[Doc]]) -> List[Doc]:
    """``call()`` with every tagger pooling the transformer output itself."""
    return patched([(shared_listener, "signature", lambda tok2vec: None)], call)


def objects_alone(vocab, encoded: List[Doc], finished: Dict[str, List[Doc]], in_place: List[str], repeats: int):
    """Median wall seconds to build, from finished arrays, the spaCy objects
    the CRF side hands on: the span groups and entities that the steps
    writing in place leave on the character docs, and the docs of a step
    that returns new ones (the merge: a ``Doc`` from its words, its
    entities, its span groups). What any implementation through spaCy's
    Python API spends at least, whatever it computes first."""
    steps = list(finished)
    marked = finished[in_place[-1]] if in_place else encoded
    new_docs = [] if not steps or steps[-1] in in_place else finished[steps[-1]]
    marks = [(doc.to_array(ENT_COLUMNS), span_tables(doc)) for doc in marked]
    made = [
        ([t.text for t in doc], [bool(t.whitespace_) for t in doc], doc.to_array(ENT_COLUMNS), span_tables(doc))
        for doc in new_docs
    ]
    times: Dict[str, List[float]] = {"in place": [], "new docs": [], "on the new docs": []}
    for _ in range(repeats):
        bases = [doc.copy() for doc in encoded]  # (a fresh doc to write on, as the taggers get it)
        start = time.perf_counter()
        for doc, (ents, groups) in zip(bases, marks):
            annotate(doc, ents, groups)
        times["in place"].append(time.perf_counter() - start)
        start = time.perf_counter()
        docs = [Doc(vocab, words=words, spaces=spaces) for words, spaces, _, _ in made]
        times["new docs"].append(time.perf_counter() - start)
        start = time.perf_counter()
        for doc, (_, _, ents, groups) in zip(docs, made):
            annotate(doc, ents, groups)
        times["on the new docs"].append(time.perf_counter() - start)
    # the floor counts only if it built the very output
    if list(map(doc_view, bases)) != list(map(doc_view, marked)) or list(map(doc_view, docs)) != list(
        map(doc_view, new_docs)
    ):
        sys.exit("the spaCy objects built alone differ from the pipeline's")
    return {part: statistics.median(values) for part, values in times.items()}


#: the dense products timed through torch beside the pipeline's (not in the bound)
TORCH_PRODUCTS = {"dense products, torch float32": torch.float32, "dense products, torch bfloat16": torch.bfloat16}


def least_work(
    nlp, encoded: List[Doc], taggers: List[str], batch_size: int, repeats: int
) -> Tuple[Dict[str, float], Dict[str, float]]:
    """Median wall seconds, batch by batch, of the work any CRF side does
    besides building its spaCy objects: each doc's text read once (the
    dictionary is matched on it), each tagger's dense products (its token
    rows to emission scores, its lexicon features' projection) and its
    Viterbi search, on the arrays the pipeline computed. The pooling is
    left out: compiled products could read the transformer's rows where
    they lie instead of a pooled copy. Nothing of the merge is counted but
    its objects.

    Second, beside it, the same dense products through torch in float32 and
    in bfloat16 (:data:`TORCH_PRODUCTS`), on one thread as the pipeline's,
    their inputs converted beforehand (as if the layers before handed them
    on in that type): what the products would take that way."""
    ops = nlp.get_pipe(taggers[0]).model.ops if taggers else None
    work = []  # per batch: (docs, [(X, W, b, F, Wl, bl, scores, pipe)])
    for docs in minibatch([d.copy() for d in encoded], size=batch_size):
        heads = []
        for name in taggers:
            pipe = nlp.get_pipe(name)
            model = pipe.model
            emissions = model.get_ref("emissions")
            W, b = emissions.get_param(tagger_model.EMISSION_W), emissions.get_param(tagger_model.EMISSION_B)
            X = flat_rows(model.ops, model.layers[0].predict(docs))  # (the rows Emissions multiplies)
            F = Wl = bl = None
            if model.has_ref(lexicon_features.REF):
                features = model.get_ref(lexicon_features.REF)
                F = lexicon_features.lexicon_features(lexicon_features.lexicon_of(features), docs)
                Wl, bl = (features.get_param(n) for n in (lexicon_features.PROJECTION_W, lexicon_features.PROJECTION_B))
            arrays = (X, W, b, F, Wl, bl)
            tensors = {
                label: [None if a is None else torch.from_numpy(numpy.array(a)).to(dtype) for a in arrays]
                for label, dtype in TORCH_PRODUCTS.items()
            }
            heads.append((*arrays, pipe.emission_scores(docs), pipe, tensors))
        work.append((docs, heads))
    times: Dict[str, List[float]] = {
        "texts": [],
        "dense products": [],
        "Viterbi": [],
        **{k: [] for k in TORCH_PRODUCTS},
    }
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for _ in range(repeats):
            _least_work_pass(ops, work, times)
    finally:
        torch.set_num_threads(threads)
    medians = {part: statistics.median(values) for part, values in times.items()}
    return {k: v for k, v in medians.items() if k not in TORCH_PRODUCTS}, {k: medians[k] for k in TORCH_PRODUCTS}


def _least_work_pass(ops, work, times: Dict[str, List[float]]) -> None:
    """One timed pass of :func:`least_work` over its batches."""
    lap = dict.fromkeys(times, 0.0)
    for docs, heads in work:
        start = time.perf_counter()
        [doc.text for doc in docs]
        lap["texts"] += time.perf_counter() - start
        for X, W, b, F, Wl, bl, scores, pipe, tensors in heads:
            start = time.perf_counter()
            matmul(ops, X, W, trans2=True) + b
            if F is not None:
                numpy.tanh(matmul(ops, F, Wl, trans2=True) + bl)
            lap["dense products"] += time.perf_counter() - start
            start = time.perf_counter()
            tagger_model.decode(pipe.model, scores, pipe.constraints)
            lap["Viterbi"] += time.perf_counter() - start
            for label, (Xt, Wt, bt, Ft, Wlt, blt) in tensors.items():
                start = time.perf_counter()
                torch.nn.functional.linear(Xt, Wt, bt)
                if Ft is not None:
                    torch.tanh(torch.nn.functional.linear(Ft, Wlt, blt))
                lap[label] += time.perf_counter() - start
    for part, value in lap.items():
        times[part].append(value)


ENT_COLUMNS = ["ENT_IOB", "ENT_TYPE"]


def annotate(doc: Doc, ents, groups) -> None:
    """``doc``'s entities from their array and its span groups from their rows,
    as the merge writes them (:func:`span_group`)."""
    doc.from_array(ENT_COLUMNS, ents)
    for key, name, attrs, rows in groups:
        doc.spans[key] = span_group(doc, name, attrs, rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pipeline")
    parser.add_argument("data", nargs="+", help=".spacy files whose texts are timed")
    parser.add_argument("--limit", type=int, default=500, help="texts per file (0: all)")
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--output", default=None, help="JSON file for the figures")
    args = parser.parse_args()
    # before the (slow) work: the figures may not land on the pipeline or a data file
    check_output_paths([args.pipeline, *args.data], [args.output])
    nlp = spacy.load(args.pipeline)
    texts: List[str] = []
    for path in args.data:
        docs = [d.text for d in read_docbin(path, nlp.vocab)]
        texts += docs[: args.limit] if args.limit else docs
    n_chars = sum(map(len, texts))
    trf = [n for n in nlp.pipe_names if nlp.get_pipe_meta(n).factory == "transformer"]
    steps = [n for n in nlp.pipe_names if n not in trf]
    with nlp.select_pipes(enable=trf):
        # (the first pass also sets the encoder's runtime up for each batch shape)
        list(nlp.pipe(texts, batch_size=args.batch_size))
        start = time.perf_counter()
        encoded = list(nlp.pipe(texts, batch_size=args.batch_size))
    encoder_per_1k = (time.perf_counter() - start) / n_chars * 1000
    taggers = [n for n in steps if isinstance(nlp.get_pipe(n), crf_tagger.CRFTagger)]
    # the first tagger pools for itself either way: the others may take its pooling
    ways = {name: ways_of(nlp, name, args.batch_size, name in taggers[1:]) for name in steps}
    # every way once before timing, for the lazy state it builds (the
    # dictionary's trie, or its automaton for the way without the kernels)
    warm = [d.copy() for d in encoded[:50]]
    for name in steps:
        for way in reversed(list(ways[name])):  # the pipeline's way last: its docs go on
            if name in taggers:
                forget_matches(nlp.get_pipe(name))
            out = ways[name][way]([d.copy() for d in warm])
        warm = out
    per_1k: Dict[str, List[float]] = {way: [] for name in steps for way in ways[name]}
    inside: Counter = Counter()
    saved = [(owner, attr, getattr(owner, attr)) for _, owner, attr in INSIDE]
    for label, owner, attr in INSIDE:
        setattr(owner, attr, timed(inside, label, getattr(owner, attr)))
    try:
        for repeat in range(args.repeats):
            copies = [d.copy() for d in encoded]
            seconds: Counter = Counter()
            finished: Dict[str, List[Doc]] = {name: [] for name in steps}  # each step's output
            in_place: Dict[str, bool] = {}  # the step writes on the docs it gets
            # batch by batch through all the steps, as nlp.pipe interleaves them
            for docs in minibatch(copies, size=args.batch_size):
                for name in steps:
                    order = list(ways[name])
                    results = {}
                    for way in order[repeat % len(order) :] + order[: repeat % len(order)]:
                        if isinstance(nlp.get_pipe(name), crf_tagger.CRFTagger):
                            for doc in docs:  # what the tagger wrote in the other way (none came before it)
                                doc.ents = []
                            if name == taggers[0]:  # each way of the first tagger pools and matches for itself
                                shared_listener._pooled.clear()
                                forget_matches(nlp.get_pipe(name))
                        before = Counter(inside)
                        start = time.perf_counter()
                        out = ways[name][way](docs)
                        seconds[way] += time.perf_counter() - start
                        if way != name:  # what the taggers spend inside counts the pipeline's way only
                            inside.clear()
                            inside.update(before)
                        results[way] = list(map(doc_view, out))
                        if way == name:
                            next_docs = out
                    if any(r != results[name] for r in results.values()):
                        sys.exit(f"{name}: {' and '.join(ways[name])} give different docs")
                    in_place[name] = in_place.get(name, True) and all(a is b for a, b in zip(next_docs, docs))
                    docs = next_docs
                    finished[name].extend(next_docs)
            for way, value in seconds.items():
                per_1k[way].append(value / n_chars * 1000)
    finally:
        for owner, attr, function in saved:
            setattr(owner, attr, function)
    floor = objects_alone(nlp.vocab, encoded, finished, [n for n in steps if in_place[n]], args.repeats)
    medians = {name: statistics.median(values) for name, values in per_1k.items()}
    crf_side = sum(medians[name] for name in steps)
    inner = {label: inside[label] / args.repeats / n_chars * 1000 for label, _, _ in INSIDE}
    print(f"{len(texts):,} texts, {n_chars:,} chars, {args.repeats} repeats; median s per 1,000 chars:")
    for name, value in medians.items():
        print(f"  {name:12s} {value:.4f}  {[round(v, 4) for v in per_1k[name]]}")
    print(f"  {'CRF side':12s} {crf_side:.4f}")
    share = crf_side / (crf_side + encoder_per_1k)
    print(f"  encoder pass {encoder_per_1k:.4f} (second pass); the CRF side is {100 * share:.1f} % of the pipeline")
    print("  inside the taggers: " + ", ".join(f"{label} {value:.4f}" for label, value in inner.items()))
    floor_1k = {part: value / n_chars * 1000 for part, value in floor.items()}
    floor_total = sum(floor_1k.values())
    print(
        f"  the spaCy objects alone {floor_total:.4f} ("
        + ", ".join(f"{part} {value:.4f}" for part, value in floor_1k.items())
        + f"): {100 * floor_total / (floor_total + encoder_per_1k):.1f} % of the pipeline"
    )
    least, through_torch = (
        {part: value / n_chars * 1000 for part, value in seconds.items()}
        for seconds in least_work(nlp, encoded, taggers, args.batch_size, args.repeats)
    )
    # where a step returns new docs, the objects left on the character docs
    # are read by it alone: a CRF side could hand the arrays on instead
    handed_on = floor_total - (floor_1k["in place"] if steps and not in_place[steps[-1]] else 0.0)
    bound = handed_on + sum(least.values())
    print(
        "  the least work besides them: "
        + ", ".join(f"{part} {value:.4f}" for part, value in least.items())
        + f"; with the objects that reach the output ({handed_on:.4f}) {bound:.4f}, "
        + f"{100 * bound / (bound + encoder_per_1k):.1f} % of the pipeline"
    )
    print("  beside them (not in the bound): " + ", ".join(f"{k} {v:.5f}" for k, v in through_torch.items()))
    if args.output:
        record = {
            "texts": len(texts),
            "chars": n_chars,
            "per_1k_chars": per_1k,
            "medians": medians,
            "crf_side": crf_side,
            "encoder_per_1k_chars": encoder_per_1k,
            "crf_side_share": share,
            "inside_taggers": inner,
            "objects_alone_per_1k_chars": floor_1k,
            "least_work_per_1k_chars": least,
            "crf_side_at_least": bound,
            "dense_products_through_torch_per_1k_chars": through_torch,
        }
        write_json_atomic(args.output, {**record, "hardware": hardware()})


if __name__ == "__main__":
    main()
