"""A trained pipeline's encoder backends on the dev sets, side by side in one run.

    python scripts/bench_pipeline_backends.py PIPELINE --words SXU_DEV.spacy --ents MSRA_DEV.spacy
    python scripts/bench_pipeline_backends.py PIPELINE --words ... --ents ... \
        --backends torch-float32,onnx-int8 --speed-limit 1000 --repeats 3 --out backends_dev.json

PIPELINE is a float32 pipeline directory (``assemble.py --quantize none``):
each backend is that pipeline loaded afresh and then converted
(``torch-float16`` / ``torch-int8`` / ``torch-bfloat16``: ``quantize_pipeline``; ``onnx-float32`` /
``onnx-int8``: ``export_pipeline``; ``openvino-float32`` / ``openvino-bfloat16`` /
``openvino-int8`` / ``openvino-int8-bfloat16``: ``export_openvino``, int8
calibrated on the first ``--calibration-docs`` texts of each
``--calibration`` training file). For each backend, in one run:

* accuracy through the public API, every dev text through ``nlp.pipe``:
  word P/R/F of the tokens against ``--words``, spaCy's entity P/R/F of
  ``doc.ents`` against ``--ents``, and how many docs differ from the first
  backend's (another word boundary or another entity);
* speed as ``spacy crf speed`` measures it: ``nlp.pipe`` at ``--batch-size``
  over the first ``--speed-limit`` texts of each dev set, sorted by length
  within ``--sort-buffer`` batches (``pipe_sorted``, the speed command's
  default; 0 times them in input order), the backends in a
  rotating order on every repeat so that load from other jobs falls on all
  alike (best and median pass), and the seconds per 1,000 characters of each
  component, from which the CRF side's share (the taggers and the merge).

Ratios to the first backend are the figures to compare: the machine's speed
varies from day to day, the ratio measured in one run much less.
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

import spacy
import torch
from bench_common import check_args, finish
from spacy.language import Language
from spacy.scorer import get_ner_prf
from spacy.tokens import Doc
from spacy.training import Example

from spacy_crf.batching import DEFAULT_SORT_BUFFER, pipe_sorted
from spacy_crf.cli.speed import component_seconds
from spacy_crf.corpora.base import read_docbin
from spacy_crf.encoders.onnx_backend import export_pipeline
from spacy_crf.encoders.openvino_backend import export_openvino
from spacy_crf.encoders.quantize import quantize_pipeline
from spacy_crf.hardware import hardware
from spacy_crf.pipeline.scorers import score_words
from spacy_crf.util import check_number

BACKENDS: Dict[str, Callable[[Language, List[str]], Language]] = {
    "torch-float32": lambda nlp, _: nlp,
    "torch-float16": lambda nlp, _: quantize_pipeline(nlp, dtype="float16"),
    "torch-int8": lambda nlp, _: quantize_pipeline(nlp, dtype="qint8"),
    "torch-bfloat16": lambda nlp, _: quantize_pipeline(nlp, dtype="bfloat16"),
    "onnx-float32": lambda nlp, _: export_pipeline(nlp),
    "onnx-int8": lambda nlp, _: export_pipeline(nlp, quantize="int8"),
    "openvino-float32": lambda nlp, _: export_openvino(nlp),
    "openvino-bfloat16": lambda nlp, _: export_openvino(nlp, precision="bfloat16"),
    "openvino-int8": lambda nlp, texts: export_openvino(nlp, quantize="int8", calibration=texts),
    "openvino-int8-bfloat16": lambda nlp, texts: export_openvino(
        nlp, quantize="int8", precision="bfloat16", calibration=texts
    ),
}
#: Pipes that are not the encoder: the CRF side whose share the target bounds.
ENCODER_PIPES = {"tokenizer", "transformer"}


def read_docs(path: Path, nlp_or_vocab) -> List[Doc]:
    docs = read_docbin(path, getattr(nlp_or_vocab, "vocab", nlp_or_vocab))
    if not docs:
        sys.exit(f"{path}: no docs")
    return docs


def analyses(docs: List[Doc]) -> List[Tuple[Set[Tuple[int, int]], Set[Tuple[int, int, str]]]]:
    """Per doc, its words and entities as character offsets: what a user sees."""
    return [
        (
            {(t.idx, t.idx + len(t)) for t in doc if not t.is_space},
            {(e.start_char, e.end_char, e.label_) for e in doc.ents},
        )
        for doc in docs
    ]


def accuracy(
    nlp: Language, word_refs: List[Doc], ent_refs: List[Doc], batch_size: int, iv_words: Optional[Set[str]]
) -> Dict[str, Any]:
    word_docs = list(nlp.pipe([d.text for d in word_refs], batch_size=batch_size))
    ent_docs = list(nlp.pipe([d.text for d in ent_refs], batch_size=batch_size))
    for ref, doc in zip(word_refs + ent_refs, word_docs + ent_docs):
        if doc.text != ref.text:  # the pipeline's own guarantee; a failure here is a bug
            sys.exit(f"the pipeline changed a doc's text: {ref.text[:40]!r}")
    words = score_words([Example(d, r) for d, r in zip(word_docs, word_refs)], spans_key=None, iv_words=iv_words)
    ents = get_ner_prf([Example(d, r) for d, r in zip(ent_docs, ent_refs)])
    return {
        "words_f": words["words_f"],
        "words_oov_recall": words.get("words_oov_recall"),
        "ents_f": ents["ents_f"],
        "ents_p": ents["ents_p"],
        "ents_r": ents["ents_r"],
        "analyses": analyses(word_docs + ent_docs),
    }


def timed_pass(nlp: Language, texts: List[str], batch_size: int, sort_buffer: int) -> float:
    start = time.perf_counter()
    for _doc in pipe_sorted(nlp, texts, batch_size=batch_size, buffer=sort_buffer):
        pass
    return time.perf_counter() - start


def bench(args: argparse.Namespace) -> Dict[str, Any]:
    names = args.backends.split(",")
    calibration: List[str] = []
    if any("int8" in name and name.startswith("openvino") for name in names):
        if not args.calibration:
            sys.exit("--backends openvino-int8 needs --calibration (training .spacy files)")
        vocab = spacy.blank("zh").vocab
        calibration = [d.text for path in args.calibration for d in read_docs(path, vocab)[: args.calibration_docs]]
    pipelines = {name: BACKENDS[name](spacy.load(args.pipeline), calibration) for name in names}
    first = pipelines[names[0]]
    word_refs, ent_refs = read_docs(args.words, first), read_docs(args.ents, first)
    texts = [d.text for d in word_refs[: args.speed_limit]] + [d.text for d in ent_refs[: args.speed_limit]]
    chars = sum(map(len, texts))
    iv_words = None
    if args.dictionary is not None:
        iv_words = {t.text for doc in read_docs(args.dictionary, first) for t in doc if not t.is_space}
    rows: Dict[str, Dict[str, Any]] = {}
    for name in names:
        print(f"{name}: scoring {len(word_refs)} + {len(ent_refs)} dev docs", flush=True)
        rows[name] = accuracy(pipelines[name], word_refs, ent_refs, args.batch_size, iv_words)
        rows[name]["seconds"] = []
    for nlp in pipelines.values():  # warm-up: ONNX sessions start, torch allocates
        timed_pass(nlp, texts[: args.batch_size], args.batch_size, args.sort_buffer)
    for r in range(args.repeats):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            rows[name]["seconds"].append(timed_pass(pipelines[name], texts, args.batch_size, args.sort_buffer))
        print(f"repeat {r + 1}/{args.repeats} done (load {os.getloadavg()[0]:.1f})", flush=True)
    reference = rows[names[0]]
    for name in names:
        row = rows[name]
        row["differing_docs"] = sum(a != b for a, b in zip(row["analyses"], reference["analyses"]))
        row["chars_per_s_best"] = chars / min(row["seconds"])
        row["chars_per_s_median"] = chars / statistics.median(row["seconds"])
        row["speed_ratio_median"] = row["chars_per_s_median"] / (chars / statistics.median(reference["seconds"]))
        parts = component_seconds(pipelines[name], texts, args.batch_size, args.sort_buffer)
        row["ms_per_1k_chars"] = {k: 1e6 * s / chars for k, s in parts.items()}
        row["crf_side_share"] = sum(s for k, s in parts.items() if k not in ENCODER_PIPES) / sum(parts.values())
    for row in rows.values():
        del row["analyses"]
    return {
        "pipeline": str(args.pipeline),
        "words": str(args.words),
        "ents": str(args.ents),
        "dev_docs": {"words": len(word_refs), "ents": len(ent_refs)},
        "speed_texts": len(texts),
        "speed_chars": chars,
        "batch_size": args.batch_size,
        "sort_buffer": args.sort_buffer,
        "threads": args.threads,
        "repeats": args.repeats,
        "backends": rows,
        "hardware": hardware(),
    }


def _pct(value: Optional[float]) -> str:
    return "–" if value is None else f"{100 * value:.2f}"


def table(result: Dict[str, Any]) -> str:
    lines = [
        "| backend | words F | OOV recall | ents F | differing docs | chars/s (best / median) | vs first (median) | CRF side |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r in result["backends"].items():
        lines.append(
            f"| {name} | {100 * r['words_f']:.2f} | {_pct(r['words_oov_recall'])} | {100 * r['ents_f']:.2f} | {r['differing_docs']} | "
            f"{r['chars_per_s_best']:,.0f} / {r['chars_per_s_median']:,.0f} | "
            f"{r['speed_ratio_median']:.2f}x | {100 * r['crf_side_share']:.1f} % |"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("pipeline", type=Path, help="A float32 pipeline directory")
    p.add_argument("--words", type=Path, required=True, help="Dev .spacy file with reference words (SXU dev)")
    p.add_argument("--ents", type=Path, required=True, help="Dev .spacy file with reference entities (MSRA dev)")
    p.add_argument("--dictionary", type=Path, help="Training .spacy file whose words are in-vocabulary (OOV recall)")
    p.add_argument("--backends", default="torch-float32,torch-float16,torch-int8,onnx-float32,onnx-int8")
    p.add_argument(
        "--calibration", type=Path, nargs="*", default=[], help="Training .spacy files: the int8 OpenVINO calibration"
    )
    p.add_argument("--calibration-docs", type=int, default=256, help="Calibration texts of each training file")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--speed-limit", type=int, default=1000, help="Dev texts per corpus timed for speed")
    p.add_argument(
        "--sort-buffer",
        type=int,
        default=DEFAULT_SORT_BUFFER,
        help="Timed texts sorted by length within this many batches, as spacy crf speed does (0: input order)",
    )
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, default=Path("bench_pipeline_backends.json"))
    args = p.parse_args()
    unknown = [b for b in args.backends.split(",") if b not in BACKENDS]
    if unknown:
        p.error(f"--backends: unknown {', '.join(unknown)} (known: {', '.join(BACKENDS)})")
    try:
        check_number("--sort-buffer", args.sort_buffer, minimum=0, hint="0: input order")
    except ValueError as e:
        p.error(str(e))
    check_args(
        p,
        args,
        ("batch_size", "speed_limit", "repeats", "threads", "calibration_docs"),
        [args.pipeline, args.words, args.ents, args.dictionary, *args.calibration],
        args.out,
    )
    torch.set_num_threads(args.threads)
    finish(bench(args), table, args.out)


if __name__ == "__main__":
    main()
