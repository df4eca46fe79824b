"""Tune the weight of the segmenter's lexicon on dev data.

    python crf_project lexicon-tune MODEL DEV.spacy --words TRAIN.spacy --lexicon lexicon/words.txt \
        [--weights 0,0.5,1,1.25,1.5,2,3] [--limit N] --output metrics/lexicon.json

MODEL's ``bmes`` segmenter decodes DEV (word-tokenized docs) once per
weight, with the lexicon's prior (:mod:`spacy_crf.pipeline.lexicon`) scaled by it;
weight 0 is the model alone. Each weight is scored as ``score_words`` scores
the model: word P/R/F, and OOV and IV recall against the training words
(``--words``). The chosen weight has the highest word F (the smaller one on
a tie); ``assemble.py --lexicon-tuning`` ships it. The emission layer runs
once per doc; only decoding is repeated.

Writes OUTPUT (JSON) and a table beside it (same name, ``.md``).
"""

from pathlib import Path
from typing import Dict, List, Sequence, Set

import srsly
import typer
from spacy.language import Language
from spacy.tokens import Doc
from spacy.training import Example
from spacy.util import minibatch
from tqdm import tqdm

from crf_project.oov_probes import find_segmenter, load_inputs, with_words
from crf_project.results import write_table
from crf_project.script_cli import run_app, script_app
from spacy_crf.cli._app import check_option
from spacy_crf.files import write_json_atomic
from spacy_crf.pipeline.lexicon import Lexicon, read_lexicon
from spacy_crf.pipeline.scorers import predicted_words, score_words

DEFAULT_WEIGHTS = (0.0, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 3.0)


def tune(
    nlp: Language,
    refs: List[Doc],
    iv_words: Set[str],
    lexicon: Lexicon,
    weights: Sequence[float],
    *,
    spans_key: str = "words",
    batch_size: int = 128,
) -> Dict:
    """Score every weight on ``refs``; the rows and the chosen one."""
    seg_name, segmenter = find_segmenter(nlp, spans_key)
    names = nlp.pipe_names
    before = [nlp.get_pipe(n) for n in names[: names.index(seg_name)]]
    tags = segmenter.tags
    by_weight: Dict[float, List[Example]] = {w: [] for w in weights}
    matched = 0
    for batch in tqdm(list(minibatch(refs, size=batch_size)), desc="lexicon weights", unit="batch", leave=False):
        docs = [nlp.make_doc(ref.text) for ref in batch]
        for proc in before:
            docs = list(proc.pipe(docs))
        if not any(len(doc) for doc in docs):
            continue
        emissions = segmenter.model.predict(docs)  # the model alone: no prior yet
        found = [lexicon.matches(doc) for doc in docs]
        matched += sum(map(len, found))
        priors = [
            segmenter.model.ops.asarray2f(lexicon.emission_bias(doc, tags, 1.0, matches))
            for doc, matches in zip(docs, found)
        ]
        for weight in weights:
            ids = segmenter.decode(docs, [e + weight * p for e, p in zip(emissions, priors)])
            segmenter.set_annotations(docs, ids)
            for doc, ref in zip(docs, batch):
                by_weight[weight].append(
                    Example(with_words(nlp, ref.text, predicted_words(doc, spans_key), spans_key), ref)
                )
    rows = [{"weight": w, **score_words(by_weight[w], spans_key=spans_key, iv_words=iv_words)} for w in weights]
    chosen = max(rows, key=lambda r: (r["words_f"] or 0.0, -r["weight"]))
    return {"segmenter": seg_name, "docs": len(refs), "matches": matched, "weights": rows, "chosen": chosen}


def _pct(value) -> str:
    return "–" if value is None else f"{100 * value:.2f}"


def table(result: Dict) -> str:
    lines = ["| lexicon weight | word F (P / R) | OOV recall | IV recall |", "|---|---|---|---|"]
    for r in result["weights"]:
        mark = " (chosen)" if r["weight"] == result["chosen"]["weight"] else ""
        lines.append(
            f"| {r['weight']:g}{mark} | {_pct(r['words_f'])} ({_pct(r['words_p'])} / {_pct(r['words_r'])}) "
            f"| {_pct(r['words_oov_recall'])} | {_pct(r['words_iv_recall'])} |"
        )
    return "\n".join(lines)


app = script_app()


@app.command(help=__doc__)
def lexicon_tune_cli(
    model: str = typer.Argument(..., metavar="MODEL", help="pipeline directory with a bmes CRF segmenter"),
    data: Path = typer.Argument(..., metavar="DATA", help=".spacy dev docs whose tokens are the gold words"),
    words: Path = typer.Option(..., "--words", help=".spacy training docs: their words are in-vocabulary"),
    lexicon_path: Path = typer.Option(..., "--lexicon", help="word list (lexicon.py's words.txt)"),
    weights_text: str = typer.Option(
        ",".join(f"{w:g}" for w in DEFAULT_WEIGHTS), "--weights", help="comma-separated weights (>= 0)"
    ),
    spans_key: str = typer.Option("words", "--spans-key", help="the segmenter's span group"),
    limit: int = typer.Option(0, "--limit", help="first N docs (0: all)"),
    output: Path = typer.Option(..., "--output", help="JSON file for the results (and a .md table beside it)"),
) -> None:
    try:
        weights = sorted({float(w) for w in weights_text.split(",") if w.strip()})
    except ValueError:
        raise typer.BadParameter(f"comma-separated numbers, got {weights_text!r}", param_hint="--weights") from None
    if not weights or any(w < 0 for w in weights):
        raise typer.BadParameter(f"one or more numbers >= 0, got {weights_text!r}", param_hint="--weights")
    check_option("--limit", limit, minimum=0, hint="0: all docs")
    for path, hint in ((data, "DATA"), (words, "--words"), (lexicon_path, "--lexicon")):
        if not path.is_file():
            raise typer.BadParameter(f"{path}: no such file", param_hint=hint)
    try:
        lexicon = Lexicon(read_lexicon(lexicon_path))
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--lexicon") from None
    try:
        nlp, refs, iv_words = load_inputs(model, data, words, limit)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="DATA/--words") from None
    try:
        result = tune(nlp, refs, iv_words, lexicon, weights, spans_key=spans_key)
    except ValueError as e:
        raise typer.BadParameter(f"{model}: {e}", param_hint="MODEL") from None
    meta_path = lexicon_path.parent / "meta.json"
    result = {
        "model": str(model),
        "data": str(data),
        "words": str(words),
        "limit": limit,
        "lexicon": str(lexicon_path),
        "lexicon_words": len(lexicon),
        "lexicon_meta": srsly.read_json(meta_path) if meta_path.is_file() else None,
        **result,
    }
    text = table(result)
    print(text)
    chosen = result["chosen"]
    print(
        f"\nchosen weight: {chosen['weight']:g} (highest word F; {result['matches']:,} lexicon matches in "
        f"{result['docs']:,} docs)"
    )
    write_json_atomic(output, result)
    write_table(
        output.with_suffix(".md"),
        f"Lexicon weight on {data} ({result['docs']:,} docs; {len(lexicon):,} lexicon words; "
        f"model {model}); chosen: the highest word F.\n\n{text}",
    )


def main() -> None:
    run_app(app)
