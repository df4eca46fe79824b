"""Inference speed of the CRF side and of length-sorted batching, before and after, in one run.

    python scripts/bench_inference.py --texts weibo:DEV_FILE bmes:RESUME_DEV sighan:SXU_TRAIN \\
        --lexicon PKU_WORDS --baseline main --out bench_inference.json

The pipeline is the joint one (``configs/joint.cfg``) over a random encoder
built locally, never downloaded: ``transformer`` (BERT layers cut to
``--layers``, ``--hidden`` wide, one piece per CJK character: the random
encoder of ``bench_encoder_backends.py``), ``segmenter`` (``crf_segmenter``,
BMES, with ``--lexicon`` as its decoding prior), ``crf_ner`` (BIOES) and
``merge_words``; the heads are random after ``initialize``. Texts are the
raw texts of real corpus files (``FORMAT:PATH``, read with the corpus
converter's readers; the first ``--limit`` docs of each), in file order, so
that lengths are mixed as in a corpus.

Each *variant* is the package of one source tree: ``after`` is this checkout,
``before`` (with ``--baseline REV``) is the ``spacy_crf`` package of git
revision ``REV``, exported to a temporary folder. Every variant runs in its
own process (``--threads`` torch threads), one after the other, ``--repeats``
rounds in a rotating order, so that load from other jobs on the machine
falls on all alike. A round measures, on the same saved pipeline and texts:

* seconds per 1,000 characters of the tokenizer and each component
  (``spacy crf speed``'s breakdown: each component on the docs the previous
  ones produced, with ``--batch-size``);
* pipeline chars/s of ``nlp.pipe(texts, batch_size=...)``, and, where the
  variant has it, of :func:`spacy_crf.batching.pipe_sorted` (docs sorted by
  length within a buffer of N batches, outputs in input order) for each N
  of ``--sort-buffers``, the passes in an order that turns every round.

The best round (the one least disturbed by other jobs) and the median are
reported; the JSON adds every round, the machine's record and the load
average. Every variant's outputs (tokens, entities, per doc) are checked to
be equal to the first variant's, sorted and unsorted.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

from bench_common import crf_head, pipeline_config

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

#: The joint pipeline: segmenter and entity tagger on one encoder, then the merge.
PIPELINE = ["transformer", "segmenter", "crf_ner", "merge_words"]
HEADS = [
    crf_head("segmenter", "crf_segmenter", 'spans_key = "words"\n'),
    crf_head("crf_ner", "crf_ner", 'scheme = "bioes"\nspans_key = "words"\n'),
    '\n[components.merge_words]\nfactory = "crf_merge_words"\nspans_key = "words"\n',
]

WORDS = [["张三", "去", "上海"], ["我", "在", "北京", "工作"], ["今天", "天气", "好"]]
ENTS = [
    ("张三去上海", [(0, 2, "PER"), (3, 5, "LOC")]),
    ("我在北京工作", [(2, 4, "LOC")]),
    ("新华社报道", [(0, 3, "ORG")]),
]


def build_pipeline(
    out: Path, *, layers: int, hidden: int, heads: int, lexicon: str, weight: float, outside_bias: float
) -> Path:
    """The joint pipeline over a random encoder, initialized and saved to
    ``out``. Random heads cut words of about two characters, as a trained
    segmenter does, but put most characters in entities; ``outside_bias`` is
    added to the NER head's ``O`` emission bias, so that entities are about
    as rare as in a real corpus (MSRA: one per 29 characters)."""
    import spacy
    import torch
    from spacy.tokens import Doc
    from spacy.training import Example
    from thinc.api import Config

    sys.path.insert(0, str(HERE))
    from bench_encoder_backends import make_encoder

    from spacy_crf.pipeline.lexicon import read_lexicon

    torch.manual_seed(0)
    spacy.util.fix_random_seed(0)
    encoder = make_encoder(out.parent / "encoder", layers, hidden, heads)
    nlp = spacy.util.load_model_from_config(
        Config().from_str(pipeline_config(encoder, PIPELINE, HEADS, batch_size=64)), auto_fill=True, validate=True
    )
    examples = [Example(nlp.make_doc("".join(w)), Doc(nlp.vocab, words=w, spaces=[False] * len(w))) for w in WORDS]
    examples += [Example.from_dict(nlp.make_doc(t), {"entities": e}) for t, e in ENTS]
    nlp.initialize(lambda: examples)
    emissions = nlp.get_pipe("crf_ner").model.get_ref("emissions")
    bias = emissions.get_param("crf_emission_b").copy()
    bias[nlp.get_pipe("crf_ner").tags.index("O")] += outside_bias
    emissions.set_param("crf_emission_b", bias)
    if lexicon:
        nlp.get_pipe("segmenter").set_lexicon(read_lexicon(lexicon), weight)
    nlp.to_disk(out)
    return out


def read_texts(specs: List[str], limit: int) -> List[str]:
    """The raw texts of ``FORMAT:PATH`` corpus files, the first ``limit`` of each (0: all)."""
    from spacy.vocab import Vocab

    from spacy_crf.corpora.convert import read_corpus

    texts: List[str] = []
    for spec in specs:
        fmt, _, path = spec.partition(":")
        docs = read_corpus(fmt, path, Vocab())
        for i, doc in enumerate(docs):
            if limit and i >= limit:
                break
            texts.append(doc.text)
    return texts


def summary(docs) -> List[Any]:
    return [([t.text for t in d], [(e.start_char, e.end_char, e.label_) for e in d.ents]) for d in docs]


def measure(pipeline: str, texts: List[str], batch_size: int, sort_buffers: List[int], turn: int) -> Dict[str, Any]:
    """One round in this process: per-component seconds, then pipeline chars/s
    in input order and sorted with each buffer (in an order that turns with
    ``turn``), and whether the sorted runs gave the same docs."""
    import spacy

    from spacy_crf.cli.speed import component_seconds

    nlp = spacy.load(pipeline)
    list(nlp.pipe(texts[:batch_size], batch_size=batch_size))  # warm-up
    chars = sum(map(len, texts))
    seconds = component_seconds(nlp, texts, batch_size)
    result: Dict[str, Any] = {"ms_per_1k_chars": {k: 1e6 * s / chars for k, s in seconds.items()}, "chars_per_s": {}}
    try:
        from spacy_crf.batching import pipe_sorted
    except ImportError:  # a baseline without it
        sort_buffers = []
    settings = [0] + list(sort_buffers)
    outputs = {}
    for buffer in settings[turn % len(settings) :] + settings[: turn % len(settings)]:
        start = time.perf_counter()
        if buffer:
            docs = list(pipe_sorted(nlp, texts, batch_size=batch_size, buffer=buffer))
        else:
            docs = list(nlp.pipe(texts, batch_size=batch_size))
        result["chars_per_s"][str(buffer)] = chars / (time.perf_counter() - start)
        outputs[buffer] = summary(docs)
    result["outputs"] = outputs[0]
    result["sorted_equal"] = all(out == outputs[0] for out in outputs.values())
    return result


def export_revision(rev: str, dest: Path) -> Path:
    """The ``spacy_crf`` package of git revision ``rev``, under ``dest``."""
    dest.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "spacy_crf"], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    return dest


def run_variant(source: Path, args, pipeline: Path, texts_file: Path, out: Path, turn: int) -> Dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(source), OMP_NUM_THREADS=str(args.threads))
    command = [sys.executable, __file__, "--worker", str(pipeline), str(texts_file), str(out)]
    command += ["--batch-size", str(args.batch_size), "--sort-buffers", args.sort_buffers]
    command += ["--threads", str(args.threads), "--turn", str(turn)]
    subprocess.run(command, env=env, check=True, cwd=str(source))
    return json.loads(out.read_text(encoding="utf8"))


def report(rounds: Dict[str, List[Dict[str, Any]]], chars: int, n_texts: int) -> str:
    names = list(rounds)
    components = list(rounds[names[0]][0]["ms_per_1k_chars"])
    lines = [f"{n_texts} texts, {chars:,} chars; ms per 1,000 chars (best / median of {len(rounds[names[0]])} rounds)"]
    lines.append("| component | " + " | ".join(names) + " |")
    lines.append("|---|" + "---|" * len(names))
    for comp in components:
        cells = []
        for name in names:
            values = [r["ms_per_1k_chars"][comp] for r in rounds[name]]
            cells.append(f"{min(values):.2f} / {statistics.median(values):.2f}")
        lines.append(f"| {comp} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("| pipeline chars/s (best / median) | " + " | ".join(names) + " |")
    lines.append("|---|" + "---|" * len(names))
    settings = sorted({key for rs in rounds.values() for r in rs for key in r["chars_per_s"]}, key=int)
    for key in settings:
        cells = []
        for name in names:
            values = [r["chars_per_s"][key] for r in rounds[name] if key in r["chars_per_s"]]
            cells.append(f"{max(values):,.0f} / {statistics.median(values):,.0f}" if values else "-")
        label = "nlp.pipe, input order" if key == "0" else f"pipe_sorted, buffer {key}"
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def worker(args) -> None:
    import torch

    torch.set_num_threads(args.threads)
    texts = json.loads(Path(args.worker[1]).read_text(encoding="utf8"))
    buffers = [int(b) for b in args.sort_buffers.split(",") if b.strip()]
    result = measure(args.worker[0], texts, args.batch_size, buffers, args.turn)
    Path(args.worker[2]).write_text(json.dumps(result), encoding="utf8")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--texts", nargs="+", default=[], help="FORMAT:PATH corpus files (sighan, bio, bmes, weibo, cluener)"
    )
    p.add_argument("--limit", type=int, default=0, help="docs per file (0: all)")
    p.add_argument("--lexicon", default="", help="word list for the segmenter's lexicon prior (one word a line)")
    p.add_argument("--lexicon-weight", type=float, default=1.0)
    p.add_argument("--baseline", default="", help="git revision whose package is the 'before' variant")
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--hidden", type=int, default=384)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--outside-bias", type=float, default=4.0, help="added to the NER head's O emission bias")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--sort-buffers", default="1,8,32", help="comma-separated batches per length-sorted buffer")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", type=Path, default=Path("bench_inference.json"))
    p.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    p.add_argument("--turn", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)
    from spacy_crf.corpora.convert import FORMATS
    from spacy_crf.files import check_output_paths, write_json_atomic
    from spacy_crf.hardware import hardware
    from spacy_crf.util import check_number

    try:  # every setting and path before the minutes of work
        if not args.texts:
            raise ValueError("--texts: give at least one FORMAT:PATH corpus file")
        for spec in args.texts:
            fmt, _, path = spec.partition(":")
            if fmt not in FORMATS or not Path(path).is_file():
                raise ValueError(f"--texts {spec!r}: expected FORMAT:PATH of an existing file, FORMAT in {FORMATS}")
        for name in ("threads", "batch_size", "repeats", "layers", "hidden", "heads"):
            check_number(f"--{name.replace('_', '-')}", getattr(args, name), minimum=1)
        check_number("--limit", args.limit, minimum=0, hint="0: all docs")
        if not all(b.strip().isdigit() and int(b) >= 1 for b in args.sort_buffers.split(",")):
            raise ValueError(f"--sort-buffers: comma-separated integers >= 1, got {args.sort_buffers!r}")
        check_output_paths([t.partition(":")[2] for t in args.texts], [args.out])
    except ValueError as err:
        sys.exit(str(err))
    texts = read_texts(args.texts, args.limit)
    chars = sum(map(len, texts))
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        texts_file = tmp_path / "texts.json"
        texts_file.write_text(json.dumps(texts, ensure_ascii=False), encoding="utf8")
        pipeline = build_pipeline(
            tmp_path / "pipeline",
            layers=args.layers,
            hidden=args.hidden,
            heads=args.heads,
            lexicon=args.lexicon,
            weight=args.lexicon_weight,
            outside_bias=args.outside_bias,
        )
        sources = {"after": ROOT}
        if args.baseline:
            sources = {"before": export_revision(args.baseline, tmp_path / "baseline"), **sources}
        rounds: Dict[str, List[Dict[str, Any]]] = {name: [] for name in sources}
        names = list(sources)
        for r in range(args.repeats):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                rounds[name].append(run_variant(sources[name], args, pipeline, texts_file, tmp_path / "round.json", r))
                print(f"round {r + 1}/{args.repeats}: {name} done", flush=True)
    reference = rounds[names[0]][0]["outputs"]
    same = all(r["outputs"] == reference and r.get("sorted_equal", True) for rs in rounds.values() for r in rs)
    for rs in rounds.values():
        for r in rs:
            del r["outputs"]
    print(report(rounds, chars, len(texts)))
    print(f"outputs equal across variants, sorted and unsorted: {'yes' if same else 'NO'}")
    record = {
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k != "worker"},
        "texts": len(texts),
        "chars": chars,
        "outputs_equal": same,
        "rounds": rounds,
        "hardware": hardware(),
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
    }
    write_json_atomic(args.out, record)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
