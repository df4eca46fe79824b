"""Score the shipped pipeline as users call it: raw text in, tokens and doc.ents out.

    python crf_project evaluate-pipeline PIPELINE --words DEV.spacy --ents DEV.spacy \
        [--dictionary TRAIN.spacy] [--set components.merge_words.entity_policy=keep_words] \
        [--limit N] --output metrics/pipeline_public_api.json
    python crf_project evaluate-pipeline zh_crf_pipeline --manifest corpus/manifest.json \
        --words sxu --ents msra --output metrics/pipeline_public_api.json

With ``--manifest`` (written by the corpus step), ``--words`` and ``--ents``
name corpora, and each is scored on its evaluation split (the test file, or
dev where the test file is held back), words with the corpus's dictionary.

PIPELINE is an installed package name (``zh_crf_pipeline``) or a directory.
Each reference doc's text goes through ``nlp.pipe`` exactly as a user would
send it; nothing from the reference reaches the pipeline.

* words: the predicted *tokens* (not the segmenter's span group) against
  the reference words, P/R/F over character offsets (SIGHAN), with OOV/IV
  recall against ``--dictionary`` (the words of the training corpus);
* entities: ``doc.ents`` against the reference entities, spaCy's
  ``ents_p/r/f`` and ``ents_per_type``;
* for comparison, the segmenter's own words (the span group the merge step
  started from) on the same run, so the cost of the merge is visible, and
  where it comes from (``merge_cuts``): the right words the merge cut at an
  entity boundary, by the entity's label, the most frequent of them, and the
  words it made right that way;
* when the merge step keeps words and records entities that do not align
  with them in a span group (``entity_policy = "keep_words"``), also every
  entity by character offsets (``doc.ents`` plus that group): ``ents_all``.

``--set`` overrides the pipeline's config at load time (repeatable), e.g.
the merge step's entity policy; the overrides are recorded in the output.
"""

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple

import spacy
import typer
from spacy.scorer import PRFScore, get_ner_prf
from spacy.tokens import Doc, DocBin
from spacy.training import Example

from crf_project.paths import load_manifest
from crf_project.script_cli import run_app, script_app
from spacy_crf.batching import DEFAULT_SORT_BUFFER, pipe_sorted
from spacy_crf.files import write_json_atomic
from spacy_crf.pipeline.merge_words import DEFAULT_UNALIGNED_ENTS_KEY as UNALIGNED
from spacy_crf.pipeline.merge_words import char_entities
from spacy_crf.pipeline.scorers import count_matches, predicted_words, reference_words, score_words


def read_docs(path: Path, vocab, limit: int) -> List[Doc]:
    docs = list(DocBin().from_disk(path).get_docs(vocab))
    if not docs:
        raise SystemExit(f"{path}: no docs")
    return docs[:limit] if limit else docs


def run(nlp, refs: List[Doc], batch_size: int) -> Tuple[List[Doc], Dict[str, Any]]:
    """The pipeline's docs of the references' texts, in their order, and its
    speed. The texts go through in length-sorted batches, as ``spacy crf
    speed`` sends them (:func:`spacy_crf.batching.pipe_sorted`), so that the
    two report the same kind of chars/s."""
    texts = [doc.text for doc in refs]
    start = time.perf_counter()
    docs = list(pipe_sorted(nlp, texts, batch_size=batch_size, buffer=DEFAULT_SORT_BUFFER))
    seconds = time.perf_counter() - start
    for text, doc in zip(texts, docs):
        if doc.text != text:  # the pipeline's own guarantee; a failure here is a bug
            raise SystemExit(f"the pipeline changed a doc's text: {text[:40]!r}")
    chars = sum(len(t) for t in texts)
    return docs, {
        "docs": len(texts),
        "chars": chars,
        "seconds": round(seconds, 2),
        "chars_per_s": round(chars / seconds, 1) if seconds else None,
        "batch_size": batch_size,
        "sort_buffer": DEFAULT_SORT_BUFFER,
    }


def merge_cuts(examples: Iterable[Example], spans_key: str = "words", top: int = 20) -> Dict[str, Any]:
    """What the merge did to the segmenter's words (``doc.spans[spans_key]``)
    on the way to the tokens, against the reference words: ``right_words_cut``
    (a right word that is no token), ``by_label`` (the label of the entity
    with a boundary inside it), ``top`` (``[word, times, tokens]``), and
    ``words_made_right`` (a reference word that is a token but was no
    segmenter word)."""
    cut: Counter = Counter()
    labels: Counter = Counter()
    shown: Dict[str, str] = {}
    made_right = 0
    for eg in examples:
        doc, text = eg.predicted, eg.predicted.text
        gold, segmenter, tokens = reference_words(eg.reference), predicted_words(doc, spans_key), reference_words(doc)
        made_right += len((gold & tokens) - segmenter)
        for start, end in sorted((gold & segmenter) - tokens):
            word = text[start:end]
            cut[word] += 1
            inside = [e.label_ for e in doc.ents if start < e.start_char < end or start < e.end_char < end]
            labels[inside[0] if inside else "(none)"] += 1
            shown.setdefault(word, "|".join(t.text for t in doc if start <= t.idx < end))
    return {
        "right_words_cut": sum(cut.values()),
        "by_label": dict(labels.most_common()),
        "words_made_right": made_right,
        "top": [[w, c, shown[w]] for w, c in cut.most_common(top)],
    }


def parse_overrides(items: List[str]) -> Dict[str, Any]:
    overrides: Dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--set takes KEY=VALUE (e.g. components.merge_words.policy=keep_words), got {item!r}")
        try:
            overrides[key] = json.loads(value)
        except json.JSONDecodeError:
            overrides[key] = value
    return overrides


def evaluate_pipeline(
    pipeline: str,
    words: Path,
    ents: Path,
    *,
    dictionary: Optional[Path] = None,
    overrides: Optional[Dict[str, Any]] = None,
    limit: int = 0,
    batch_size: int = 128,
    spans_key: str = "words",
) -> Dict[str, Any]:
    nlp = spacy.load(pipeline, config=overrides or {})
    word_refs = read_docs(words, nlp.vocab, limit)
    ent_refs = read_docs(ents, nlp.vocab, limit)
    vocab_words = None
    if dictionary is not None:
        vocab_words = {
            t.text for doc in DocBin().from_disk(dictionary).get_docs(nlp.vocab) for t in doc if not t.is_space
        }

    word_docs, word_speed = run(nlp, word_refs, batch_size)
    word_examples = [Example(d, r) for d, r in zip(word_docs, word_refs)]
    tokens = score_words(word_examples, spans_key=None, iv_words=vocab_words)
    segmenter = cuts = None
    if all(spans_key in d.spans for d in word_docs):
        segmenter = score_words(word_examples, spans_key=spans_key, iv_words=vocab_words)
        cuts = merge_cuts(word_examples, spans_key)
    ent_docs, ent_speed = run(nlp, ent_refs, batch_size)
    entities = get_ner_prf([Example(d, r) for d, r in zip(ent_docs, ent_refs)])
    all_entities = None
    if any(UNALIGNED in d.spans for d in ent_docs):
        prf = PRFScore()
        for doc, ref in zip(ent_docs, ent_refs):
            pred = {(s, e, label) for s, e, label, _, _ in char_entities(doc, UNALIGNED)}
            count_matches(prf, {(e.start_char, e.end_char, e.label_) for e in ref.ents}, pred)
        all_entities = {
            "ents_p": prf.precision,
            "ents_r": prf.recall,
            "ents_f": prf.fscore,
            "unaligned_key": UNALIGNED,
            "unaligned": sum(len(d.spans[UNALIGNED]) for d in ent_docs if UNALIGNED in d.spans),
        }
    return {
        "pipeline": pipeline,
        "components": nlp.pipe_names,
        "overrides": overrides or {},
        "words_data": str(words),
        "ents_data": str(ents),
        "limit": limit,
        "words": tokens,
        "segmenter_words": segmenter,
        "merge_cuts": cuts,
        "ents": entities,
        "ents_all": all_entities,
        "speed": {"words_data": word_speed, "ents_data": ent_speed},
    }


app = script_app()


@app.command(help=__doc__)
def evaluate_pipeline_cli(
    pipeline: str = typer.Argument(..., metavar="PIPELINE", help="installed package name or pipeline directory"),
    words_name: str = typer.Option(
        ..., "--words", help=".spacy docs whose tokens are the gold words (a corpus name with --manifest)"
    ),
    ents_name: str = typer.Option(..., "--ents", help=".spacy docs with gold entities (a corpus name with --manifest)"),
    manifest_path: Optional[Path] = typer.Option(
        None, "--manifest", help="the corpus step's manifest.json: --words/--ents are corpus names"
    ),
    dictionary: Optional[Path] = typer.Option(
        None, "--dictionary", help=".spacy training corpus whose words are the IV dictionary"
    ),
    overrides: List[str] = typer.Option(
        [], "--set", metavar="KEY=VALUE", help="override the pipeline's config at load time (repeatable)"
    ),
    limit: int = typer.Option(0, "--limit", help="first N docs of each file (0: all)"),
    batch_size: int = typer.Option(128, "--batch-size"),
    output: Path = typer.Option(..., "--output"),
) -> None:
    if limit < 0 or batch_size <= 0:
        raise SystemExit("--limit must be >= 0 and --batch-size > 0")
    words, ents = Path(words_name), Path(ents_name)
    split = None
    if manifest_path is not None:
        if not manifest_path.is_file():
            raise SystemExit(f"{manifest_path}: no such file (run the corpus step first)")
        manifest = load_manifest(manifest_path)
        for name in (words_name, ents_name):
            if name not in manifest:
                raise SystemExit(f"{manifest_path}: no corpus {name!r} (has {', '.join(manifest)})")
        words, ents = Path(manifest[words_name]["eval"]), Path(manifest[ents_name]["eval"])
        dictionary = dictionary or Path(manifest[words_name]["dictionary"])
        split = {"words": manifest[words_name]["eval_split"], "ents": manifest[ents_name]["eval_split"]}
    for path in (words, ents, dictionary):
        if path is not None and not path.is_file():
            raise SystemExit(f"{path}: no such file")
    if output.resolve() in {p.resolve() for p in (words, ents, dictionary) if p is not None}:
        raise SystemExit(f"--output {output} is an input file")
    result = evaluate_pipeline(
        pipeline,
        words,
        ents,
        dictionary=dictionary,
        overrides=parse_overrides(overrides),
        limit=limit,
        batch_size=batch_size,
    )
    result["split"] = split
    output.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(output, result)
    w, e, s = result["words"], result["ents"], result["segmenter_words"]
    print(
        f"public API: words F {100 * w['words_f']:.2f} (P {100 * w['words_p']:.2f} / R {100 * w['words_r']:.2f}"
        + (f", OOV-R {100 * w['words_oov_recall']:.2f}" if w.get("words_oov_recall") is not None else "")
        + f"), entities F {100 * e['ents_f']:.2f} (P {100 * e['ents_p']:.2f} / R {100 * e['ents_r']:.2f})"
        + (f"; segmenter's own words F {100 * s['words_f']:.2f}" if s else "")
        + (f"; all entities (incl. unaligned) F {100 * result['ents_all']['ents_f']:.2f}" if result["ents_all"] else "")
        + f" -> {output}"
    )
    cuts = result["merge_cuts"]
    if cuts and cuts["right_words_cut"]:
        print(
            f"the merge cut {cuts['right_words_cut']} right words at entity boundaries ("
            + ", ".join(f"{label} {n}" for label, n in cuts["by_label"].items())
            + f") and made {cuts['words_made_right']} right; most cut: "
            + ", ".join(f"{w} x{c} -> {t}" for w, c, t in cuts["top"][:10])
        )


def main() -> None:
    run_app(app)
