"""Inference speed of the transformer encoder's backends, side by side in one run.

    python scripts/bench_encoder_backends.py                       # the four backends, 2 threads
    python scripts/bench_encoder_backends.py --repeats 7 --out bench_encoder_backends.json
    python scripts/bench_encoder_backends.py --backends torch-float32,torch-float16,onnx-int8

One pipeline (a transformer and a CRF NER tagger listening to it) over a
random encoder of the real size, built locally (no download): BERT layers cut
to 3, 384 wide, 12 heads, 1,536 inner, like multilingual-e5-small cut to 3
layers, with one piece per CJK character. Each backend is the same saved
pipeline loaded and then:

* ``torch-float32``: as saved;
* ``torch-int8`` / ``torch-float16``: ``spacy_crf.encoders.quantize.quantize_pipeline``
  (dtype ``qint8`` / ``float16``);
* ``onnx-float32`` / ``onnx-int8``: ``spacy_crf.encoders.onnx_backend.export_pipeline``
  (quantize ``none`` / ``int8``).

Every repeat runs ``nlp.pipe(texts, batch_size=128)`` over the same 128 texts
of 40-60 Chinese characters once per backend, the backends in a rotating
order, so that load from other jobs on the machine falls on all alike. Each
backend's chars/s (the whole pipeline, and the transformer component alone)
is reported for its best pass (the one least disturbed by other jobs) and
its median pass, with the ratios to torch float32 and how far each backend's
predictions are from torch float32's (share of equal tags, largest
difference of a last hidden state). The JSON adds every pass's seconds, the
machine's record (``spacy_crf.hardware.hardware()``) and its load average
before, at each repeat and after.
"""

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy
import spacy
import torch
from bench_common import crf_head, pipeline_config
from spacy.training import Example
from thinc.api import Config

from spacy_crf.encoders.onnx_backend import export_pipeline
from spacy_crf.encoders.quantize import quantize_pipeline
from spacy_crf.files import check_output_paths, write_json_atomic
from spacy_crf.hardware import hardware
from spacy_crf.util import check_number

BACKENDS = {
    "torch-float32": lambda nlp: nlp,
    "torch-int8": lambda nlp: quantize_pipeline(nlp, dtype="qint8"),
    "torch-float16": lambda nlp: quantize_pipeline(nlp, dtype="float16"),
    "onnx-float32": lambda nlp: export_pipeline(nlp),
    "onnx-int8": lambda nlp: export_pipeline(nlp, quantize="int8"),
}
DEFAULT_BACKENDS = "torch-float32,torch-int8,onnx-float32,onnx-int8"
SOURCE = (
    "我爱北京天安门迈向充满希望的新世纪中国科学院的研究人员发表了一篇关于量子计算的论文"
    "长江是中国最长的河流全长约六千三百公里上海证券交易所今天上涨成交量达到三千亿元"
    "张三和李四昨天去了广州参加一个国际会议会上讨论了人工智能在医疗领域的应用前景"
    "新华社记者报道今年夏天南方多个省份遭遇强降雨部分地区发生洪涝灾害当地政府组织救援"
)
#: The benchmark's pipeline: the encoder and one entity tagger.
PIPELINE = (["transformer", "crf_tagger"], [crf_head("crf_tagger", "crf_tagger", 'scheme = "bioes"\n')])


def make_encoder(path: Path, layers: int, hidden: int, heads: int) -> Path:
    """A random BERT with one piece per CJK character (the common block), saved to ``path``."""
    from transformers import BertConfig, BertModel, BertTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = specials + [chr(c) for c in range(0x4E00, 0x9FA6)] + list("abcdefghijklmnopqrstuvwxyz0123456789")
    path.mkdir(parents=True, exist_ok=True)
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf8")
    BertTokenizerFast(vocab_file=str(path / "vocab.txt"), tokenize_chinese_chars=True).save_pretrained(str(path))
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=4 * hidden,
        max_position_embeddings=512,
    )
    BertModel(config).eval().save_pretrained(str(path))
    return path


def make_texts(n: int, low: int, high: int, seed: int = 0):
    rng = random.Random(seed)
    source = SOURCE * 2
    texts = []
    for _ in range(n):
        length, start = rng.randint(low, high), rng.randrange(len(SOURCE))
        texts.append(source[start : start + length])
    return texts


def make_pipeline(encoder_dir: Path, out: Path) -> Path:
    """The transformer + CRF pipeline over the encoder, initialized (random heads), saved to ``out``."""
    config = Config().from_str(pipeline_config(encoder_dir, *PIPELINE))
    nlp = spacy.util.load_model_from_config(config, auto_fill=True, validate=True)
    data = [("张三去上海", [(0, 2, "PER"), (3, 5, "LOC")]), ("我在北京工作", [(2, 4, "LOC")])]
    nlp.initialize(lambda: [Example.from_dict(nlp.make_doc(t), {"entities": e}) for t, e in data])
    nlp.to_disk(out)
    return out


def run_once(nlp, texts, component_only: bool):
    """Wall seconds of one pass; with ``component_only`` the transformer alone."""
    names = ["transformer"] if component_only else nlp.pipe_names
    with nlp.select_pipes(enable=names):
        start = time.perf_counter()
        docs = list(nlp.pipe(texts, batch_size=128))
        return time.perf_counter() - start, docs


def predictions(nlp, texts):
    docs = list(nlp.pipe(texts, batch_size=128))
    tags = numpy.concatenate([ids for ids in nlp.get_pipe("crf_tagger").predict(docs)])
    hidden = [numpy.asarray(d._.trf_data.tensors[0]) for d in docs]
    return tags, hidden


def bench(backends, pipeline_dir: Path, texts, repeats: int):
    pipelines = {name: BACKENDS[name](spacy.load(pipeline_dir)) for name in backends}
    reference_tags, reference_hidden = predictions(pipelines[backends[0]], texts)
    times = {name: {"pipeline": [], "transformer": []} for name in backends}
    loads = []
    for nlp in pipelines.values():  # warm-up: ONNX sessions start, torch allocates
        run_once(nlp, texts, False)
    for r in range(repeats):
        loads.append(os.getloadavg()[0])
        order = backends[r % len(backends) :] + backends[: r % len(backends)]
        for name in order:
            for part in ("pipeline", "transformer"):
                times[name][part].append(run_once(pipelines[name], texts, part == "transformer")[0])
    chars = sum(len(t) for t in texts)
    rows = []
    for name in backends:
        tags, hidden = predictions(pipelines[name], texts)
        row = {
            "backend": name,
            "tags_equal": float(numpy.mean(tags == reference_tags)),
            "max_abs_hidden_diff": max(float(numpy.abs(a - b).max()) for a, b in zip(hidden, reference_hidden)),
            "seconds": times[name],
        }
        for part in ("pipeline", "transformer"):
            # best: the pass least disturbed by other jobs; median: a typical one
            row[f"{part}_best"] = chars / min(times[name][part])
            row[f"{part}_median"] = chars / statistics.median(times[name][part])
        rows.append(row)
    for row in rows:
        for key in ("pipeline_best", "pipeline_median", "transformer_best", "transformer_median"):
            row[f"{key}_ratio"] = row[key] / rows[0][key]
    return rows, chars, loads


def table(rows, reference: str) -> str:
    lines = [
        f"| backend | pipeline chars/s, best / median | vs {reference} | transformer chars/s, best / median "
        f"| vs {reference} | tags = {reference} | max abs hidden diff |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cells = [r["backend"]]
        for part in ("pipeline", "transformer"):
            cells.append(f"{r[f'{part}_best']:,.0f} / {r[f'{part}_median']:,.0f}")
            cells.append(f"{r[f'{part}_best_ratio']:.2f}x / {r[f'{part}_median_ratio']:.2f}x")
        cells += [f"{100 * r['tags_equal']:.2f}%", f"{r['max_abs_hidden_diff']:.2g}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--backends",
        default=DEFAULT_BACKENDS,
        help=f"comma-separated, the first is the reference; from {', '.join(BACKENDS)}",
    )
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--texts", type=int, default=128)
    p.add_argument("--min-chars", type=int, default=40)
    p.add_argument("--max-chars", type=int, default=60)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--hidden", type=int, default=384)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--out", type=Path, default=Path("bench_encoder_backends.json"))
    args = p.parse_args()
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown or not backends:
        sys.exit(f"--backends: unknown {unknown or 'none given'}; expected names from {', '.join(BACKENDS)}")
    try:  # every setting and the output path before the minutes of work
        for name in ("threads", "texts", "min_chars", "layers", "hidden", "heads", "repeats"):
            check_number(f"--{name.replace('_', '-')}", getattr(args, name), minimum=1)
        check_number("--max-chars", args.max_chars, minimum=args.min_chars, hint="at least --min-chars")
        check_output_paths([], [args.out])
    except ValueError as err:
        sys.exit(str(err))
    torch.set_num_threads(args.threads)
    texts = make_texts(args.texts, args.min_chars, args.max_chars)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        encoder = make_encoder(Path(tmp) / "encoder", args.layers, args.hidden, args.heads)
        pipeline = make_pipeline(encoder, Path(tmp) / "pipeline")
        rows, chars, loads = bench(backends, pipeline, texts, args.repeats)
    load_after = os.getloadavg()
    print(
        f"{len(texts)} texts, {chars} chars, batch 128, {args.threads} threads, {args.repeats} passes each; "
        f"load average (1 min) {load_before[0]:.2f} before, {min(loads):.2f}-{max(loads):.2f} during, "
        f"{load_after[0]:.2f} after"
    )
    print(table(rows, backends[0]))
    record = {
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "chars": chars,
        "hardware": hardware(),
        "loadavg_before": load_before,
        "loadavg_after": load_after,
        "loadavg_per_repeat": loads,
        "rows": rows,
    }
    write_json_atomic(args.out, record)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
