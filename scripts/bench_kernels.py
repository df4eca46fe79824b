"""Each compiled kernel beside the pure-Python path it replaces, on a pipeline's own inputs.

    python scripts/bench_kernels.py PIPELINE DATA.spacy [DATA.spacy ...] [--limit 1000] [--repeats 5]
        [--batch-size 128] [--out bench_kernels.json]

The pipeline runs once over the first ``--limit`` texts of each ``.spacy``
file, batch by batch, and what each kernel's caller is handed there is kept:
each tagger's emission scores with its constraints and transitions (Viterbi,
``spacy_crf.ml.viterbi_numpy.decode``), the batch's text and the dictionary
of the lexicon features (matching, ``WordLexicon.find``), and the
transformer's output with its alignment (mean pooling,
``shared_listener.mean_pooled``). Then, ``--repeats`` times in turn on
those same inputs, each step with the kernel and without it
(``SPACY_CRF_PURE_PYTHON``'s switch); every pair of results must be equal
to the bit, else the script exits 1. Reported: the median seconds per 1,000
characters of each step both ways, and the speed-up; the dictionary's build
(the trie against the automaton) timed once each.
"""

import statistics
import sys
import time
from typing import Any, Callable, Dict, List
from unittest import mock

import numpy
import torch
from bench_common import check_args, finish, load_transformer_pipeline, pipeline_texts_parser, read_texts
from spacy.util import minibatch

from spacy_crf.hardware import hardware
from spacy_crf.ml import kernels, lexicon_features, shared_listener, tagger_model
from spacy_crf.ml.lexicon_match import WordLexicon, batch_texts
from spacy_crf.pipeline.crf_tagger import CRFTagger


def features_lexicon(nlp):
    """The lexicon features' dictionary of the first CRF tagger that has one, or None."""
    lexicons = (lexicon_features.model_lexicon(pipe.model) for _, pipe in nlp.pipeline if isinstance(pipe, CRFTagger))
    return next((lexicon for lexicon in lexicons if lexicon is not None), None)


def collect(nlp, texts: List[str], batch_size: int) -> Dict[str, List[Callable[[], Any]]]:
    """Per step, one call per batch that reruns what the pipeline did there."""
    steps: Dict[str, List[Callable[[], Any]]] = {"viterbi": [], "matching": [], "pooling": []}
    lexicon = features_lexicon(nlp)
    real_decode, real_pool = tagger_model.decode, shared_listener.mean_pooled

    def decode(model, scores, *args, **kwargs):  # (the scores are read-only: kept as they are)
        steps["viterbi"].append(lambda: real_decode(model, scores, *args, **kwargs))
        return real_decode(model, scores, *args, **kwargs)

    def pool(tok2vec, data):
        pooled = real_pool(tok2vec, data)
        if pooled is not None:  # (None: not the stock listener chain, which pools itself)
            steps["pooling"].append(lambda: real_pool(tok2vec, data))
        return pooled

    with mock.patch.object(tagger_model, "decode", decode), mock.patch.object(shared_listener, "mean_pooled", pool):
        for batch in minibatch(texts, size=batch_size):
            docs = list(nlp.pipe(batch, batch_size=batch_size))
            if lexicon is not None:
                text = "\n".join(batch_texts(docs))
                steps["matching"].append(lambda text=text: lexicon.find(text))
    if lexicon is None:
        del steps["matching"]
    else:
        lexicon.find("", compiled=False)  # the automaton built before timing, as the trie was
    if not steps["pooling"]:
        del steps["pooling"]
    return steps


def same(a: Any, b: Any) -> bool:
    if isinstance(a, numpy.ndarray) or isinstance(b, numpy.ndarray):
        return isinstance(a, numpy.ndarray) and isinstance(b, numpy.ndarray) and a.tobytes() == b.tobytes()
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(map(same, a, b))
    return a == b


def run(calls: List[Callable[[], Any]], compiled: bool) -> List[Any]:
    with mock.patch.object(kernels, "enabled", lambda: compiled):
        return [call() for call in calls]


def main() -> None:
    parser = pipeline_texts_parser(__doc__, repeats=5, out="bench_kernels.json")
    args = parser.parse_args()
    check_args(parser, args, ["limit", "batch_size", "repeats"], [args.pipeline, *args.data], args.out)
    built = kernels.built()
    if not all(built.values()):
        sys.exit(f"not every kernel is built ({built}): reinstall the package where a C compiler is available")
    torch.set_num_threads(args.threads)  # the pipeline's pass; the kernels and their Python paths use one thread
    nlp = load_transformer_pipeline(args.pipeline)
    texts = read_texts(args.data, args.limit, nlp.vocab)
    n_chars = sum(map(len, texts))
    steps = collect(nlp, texts, args.batch_size)
    seconds: Dict[str, Dict[str, List[float]]] = {step: {"python": [], "compiled": []} for step in steps}
    for repeat in range(args.repeats):
        for step, calls in steps.items():
            results = {}
            for way in ["python", "compiled"][:: 1 if repeat % 2 == 0 else -1]:  # in turn
                start = time.perf_counter()
                results[way] = run(calls, way == "compiled")
                seconds[step][way].append(time.perf_counter() - start)
            if not same(results["python"], results["compiled"]):
                sys.exit(f"{step}: the kernel and the pure-Python path give different results")
    lexicon = features_lexicon(nlp)
    build = {}
    if lexicon is not None:
        fresh = WordLexicon(lexicon.word_list)
        for way, make in [("python", fresh._matcher), ("compiled", lambda: kernels.WordTrie(fresh.word_list))]:
            start = time.perf_counter()
            make()
            build[way] = time.perf_counter() - start
    per_1k = {
        step: {way: statistics.median(values) / n_chars * 1000 for way, values in ways.items()}
        for step, ways in seconds.items()
    }
    result = {
        "pipeline": str(args.pipeline),
        "texts": len(texts),
        "chars": n_chars,
        "repeats": args.repeats,
        "threads": args.threads,
        "per_1k_chars": per_1k,
        "dictionary_build_s": build,
        "hardware": hardware(),
    }

    def table(r: Dict[str, Any]) -> str:
        lines = [
            f"{r['texts']:,} texts, {r['chars']:,} chars, {r['repeats']} repeats; median s per 1,000 chars",
            "| step | pure Python | compiled | speed-up |",
            "|---|---|---|---|",
        ]
        for step, ways in r["per_1k_chars"].items():
            lines.append(
                f"| {step} | {ways['python']:.5f} | {ways['compiled']:.5f} | {ways['python'] / ways['compiled']:.1f}x |"
            )
        if r["dictionary_build_s"]:
            b = r["dictionary_build_s"]
            lines.append(f"dictionary build: automaton {b['python']:.3f} s, trie {b['compiled']:.3f} s")
        return "\n".join(lines)

    finish(result, table, args.out)


if __name__ == "__main__":
    main()
