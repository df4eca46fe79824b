"""The lexicon features' share of the pipeline's prediction time.

    python scripts/bench_lexicon_features.py ../shared/data/cws/sxu/train.txt
    python scripts/bench_lexicon_features.py TEXTS.txt --dictionary dict.txt --texts 512 --out bench_lexfeat.json

One pipeline, ``transformer -> segmenter -> crf_ner`` with the lexicon features
on both heads (``lexicon_width``), over a random encoder of the real size
built locally (no download; BERT layers, 3 deep, 384 wide, 12 heads, one
piece per CJK character, as ``scripts/bench_encoder_backends.py`` builds it)
and a dictionary (default: the one the ``jieba`` package installs). The
texts are the first ``--texts`` non-blank lines of TEXTS with all whitespace
removed (a SIGHAN word-segmented file gives its raw sentences).

Every pass runs ``nlp.pipe(texts, batch_size=128)``; the lexicon-features
layers' forward passes (matching, features and projection, both heads) are
timed inside it. Reported per pass and as best / median over ``--repeats``
passes after a warm-up pass (which builds the matcher, timed apart): the
pipeline's seconds, the layers' seconds and their share. Target: the share
at most 5 %.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import List

import spacy
import torch
from bench_common import crf_head, pipeline_config
from bench_encoder_backends import make_encoder  # the same random encoder
from spacy.training import Example
from thinc.api import Config

from spacy_crf.files import check_output_paths, write_json_atomic
from spacy_crf.hardware import hardware
from spacy_crf.ml.lexicon_features import REF, lexicon_of
from spacy_crf.util import check_number

HEADS = ("segmenter", "crf_ner")


def read_texts(path: Path, limit: int) -> List[str]:
    texts = []
    with path.open(encoding="utf8") as f:
        for line in f:
            text = "".join(line.split())
            if text:
                texts.append(text)
            if len(texts) == limit:
                break
    return texts


def make_pipeline(encoder: Path, dictionary: Path, width: int):
    heads = [
        crf_head(head, factory, model_settings=f"lexicon_width = {width}\n")
        for head, factory in zip(HEADS, ("crf_segmenter", "crf_ner"))
    ]
    text = pipeline_config(encoder, ["transformer", *HEADS], heads)
    nlp = spacy.util.load_model_from_config(Config().from_str(text), auto_fill=True, validate=True)
    for head in HEADS:
        nlp.config["initialize"]["components"][head] = {
            "lexicon_features": {"@readers": "spacy_crf.read_tagged_lexicon.v1", "path": str(dictionary)}
        }
    data = [("张三去上海", [(0, 2, "PER"), (3, 5, "LOC")]), ("我在北京工作", [(2, 4, "LOC")])]
    nlp.initialize(lambda: [Example.from_dict(nlp.make_doc(t), {"entities": e}) for t, e in data])
    return nlp


def time_layers(nlp) -> List[float]:
    """Wrap each head's lexicon-features forward with a timer; returns the
    list its seconds are added to."""
    spent = [0.0]
    for head in HEADS:
        layer = nlp.get_pipe(head).model.get_ref(REF)
        forward = layer._func

        def timed(model, X, is_train, forward=forward):
            start = time.perf_counter()
            try:
                return forward(model, X, is_train)
            finally:
                spent[0] += time.perf_counter() - start

        layer._func = timed
    return spent


def bench(nlp, texts: List[str], repeats: int):
    spent = time_layers(nlp)
    matcher_start = time.perf_counter()
    for head in HEADS:  # the first prediction builds the matcher (shared when loaded)
        lexicon_of(nlp.get_pipe(head).model.get_ref(REF))._matcher()
    matcher_s = time.perf_counter() - matcher_start
    list(nlp.pipe(texts, batch_size=128))  # warm-up
    passes = []
    for _ in range(repeats):
        spent[0] = 0.0
        start = time.perf_counter()
        list(nlp.pipe(texts, batch_size=128))
        total = time.perf_counter() - start
        passes.append({"pipeline_s": total, "lexicon_features_s": spent[0], "share": spent[0] / total})
    return passes, matcher_s


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("texts_file", type=Path, help="texts, one a line (whitespace is removed)")
    p.add_argument("--dictionary", type=Path, default=None, help="`word freq tag` lines (default: jieba's dict.txt)")
    p.add_argument("--texts", type=int, default=256)
    p.add_argument("--width", type=int, default=32, help="lexicon_width of both heads")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--hidden", type=int, default=384)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", type=Path, default=None, help="also write the figures as JSON")
    args = p.parse_args()
    try:  # every setting and path before the minutes of work
        for name in ("texts", "width", "threads", "layers", "hidden", "heads", "repeats"):
            check_number(f"--{name}", getattr(args, name), minimum=1)
        if not args.texts_file.is_file():
            raise ValueError(f"{args.texts_file}: no such file")
        if args.dictionary is None:
            import jieba

            args.dictionary = Path(jieba.__file__).parent / "dict.txt"
        if not args.dictionary.is_file():
            raise ValueError(f"--dictionary {args.dictionary}: no such file")
        check_output_paths([], [args.out] if args.out else [])
    except (ValueError, ImportError) as err:
        sys.exit(str(err))
    torch.set_num_threads(args.threads)
    texts = read_texts(args.texts_file, args.texts)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        encoder = make_encoder(Path(tmp) / "encoder", args.layers, args.hidden, args.heads)
        # saved and loaded, as users get it: the heads share one dictionary
        make_pipeline(encoder, args.dictionary, args.width).to_disk(Path(tmp) / "pipeline")
        nlp = spacy.load(Path(tmp) / "pipeline")
        passes, matcher_s = bench(nlp, texts, args.repeats)
    load_after = os.getloadavg()
    chars = sum(len(t) for t in texts)
    best = min(passes, key=lambda r: r["pipeline_s"])
    median_share = statistics.median(r["share"] for r in passes)
    print(
        f"{len(texts)} texts, {chars:,} chars, batch 128, {args.threads} threads, {args.repeats} passes; "
        f"load average {load_before[0]:.2f} before, {load_after[0]:.2f} after"
    )
    for r in passes:
        print(
            f"  pipeline {r['pipeline_s']:.3f} s, lexicon features {r['lexicon_features_s']:.4f} s, {100 * r['share']:.2f} %"
        )
    print(
        f"lexicon features (both heads): {100 * best['share']:.2f} % of the least disturbed pass, "
        f"{100 * median_share:.2f} % median (target <= 5 %); "
        f"{1e6 * best['lexicon_features_s'] / chars:.2f} us per char; matcher built in {matcher_s:.2f} s"
    )
    if args.out:
        record = {
            "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "chars": chars,
            "passes": passes,
            "matcher_build_s": matcher_s,
            "hardware": hardware(),
            "loadavg_before": load_before,
            "loadavg_after": load_after,
        }
        write_json_atomic(args.out, record)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
