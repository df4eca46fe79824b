"""Evaluate a trained pipeline on a ``.spacy`` corpus and write the scores as JSON.

``python crf_project evaluate cws MODEL DATA.spacy --words WORDS --output OUT.json``
``python crf_project evaluate ner MODEL DATA.spacy --train-ents TRAIN.spacy --output OUT.json``
``python crf_project evaluate ner MODEL weibo --manifest corpus/manifest.json --output metrics/ner_weibo_{split}.json``

* ``cws``: word P/R/F over character spans (SIGHAN definition), and with
  ``--words`` (a SIGHAN ``*_training_words.utf8`` list, or a word-tokenized
  ``.spacy`` training corpus whose words are the dictionary) OOV and IV
  recall. The model may be a ``crf_tagger`` segmenter (``doc.spans``), a
  softmax ``tagger`` on BMES tags (decoded by
  :func:`baselines.words_from_tags`), or a pipeline whose tokens
  are the words.
* ``ner``: ``ents_p/r/f`` and ``ents_per_type`` (spaCy's definition), and
  with ``--train-ents`` (the ``.spacy`` training corpus) the recall of the
  entities seen in training and of the unseen ones (``ents_seen_recall``,
  ``ents_unseen_recall``): the official test has fewer seen entities than a
  dev of random lines, so these say how a model's score carries over.

Every result records the speed (characters per second of ``nlp.pipe``), the
hardware, and, when the model directory has a ``train_meta.json`` (written by
the project's training step) or ``--train-meta`` is given, the training time.
"""

import json
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Set, Tuple

import spacy
import typer
from spacy.language import Language
from spacy.scorer import get_ner_prf
from spacy.tokens import Doc, DocBin
from spacy.training import Example
from spacy.vocab import Vocab
from wasabi import msg

from crf_project.baselines import words_from_tags
from crf_project.oov import oov_breakdown, summary_lines
from crf_project.paths import load_manifest
from crf_project.script_cli import script_app
from spacy_crf.corpora import read_word_set
from spacy_crf.corpora.rates import mention_set
from spacy_crf.files import OutputPathError, check_output_paths, write_json_atomic
from spacy_crf.hardware import hardware
from spacy_crf.pipeline.scorers import score_ents_seen, score_words
from spacy_crf.util import check_number

TASKS = ("cws", "ner")


def predict_docs(nlp: Language, refs: List[Doc], batch_size: int, n_process: int = 1):
    """Predict the texts of ``refs``; speed is measured after one untimed warm-up batch."""
    texts = [doc.text for doc in refs]
    list(nlp.pipe(texts[:batch_size]))  # warm-up (lazy init, allocations): not timed
    start = time.perf_counter()
    docs = list(nlp.pipe(texts, batch_size=batch_size, n_process=n_process))
    seconds = time.perf_counter() - start
    n_chars = sum(len(t) for t in texts)
    return docs, {
        "docs": len(texts),
        "chars": n_chars,
        "seconds": round(seconds, 3),
        "chars_per_s": round(n_chars / seconds, 1) if seconds > 0 else None,
    }


def evaluate_cws(
    nlp: Language, refs: List[Doc], iv_words: Optional[Set[str]] = None, spans_key: str = "words", batch_size: int = 128
) -> Dict[str, Any]:
    """Word P/R/F of ``nlp`` on word-tokenized ``refs``; with ``iv_words``
    also OOV/IV recall and where the OOV words are lost (``oov``:
    :func:`oov.oov_breakdown`)."""
    docs, speed = predict_docs(nlp, refs, batch_size)
    for doc in docs:
        if spans_key not in doc.spans and any(t.tag_ for t in doc):
            words_from_tags(doc, spans_key)
    examples = [Example(d, r) for d, r in zip(docs, refs)]
    result = {"scores": score_words(examples, spans_key=spans_key, iv_words=iv_words), "speed": speed}
    if iv_words is not None:
        result["oov"] = oov_breakdown(examples, iv_words, spans_key=spans_key)
    return result


def evaluate_ner(
    nlp: Language, refs: List[Doc], seen_ents: Optional[Set[Tuple[str, str]]] = None, batch_size: int = 128
) -> Dict[str, Any]:
    """Entity P/R/F and per-type scores of ``nlp`` on char-tokenized ``refs``;
    with ``seen_ents`` (the training entities, ``(text, label)``) also the
    recall of seen and unseen entities (:func:`score_ents_seen`)."""
    docs, speed = predict_docs(nlp, refs, batch_size)
    examples = [Example(d, r) for d, r in zip(docs, refs)]
    scores = get_ner_prf(examples)
    if seen_ents is not None:
        scores.update(score_ents_seen(examples, seen_ents))
    return {"scores": scores, "speed": speed}


def read_docbin(data: Path) -> DocBin:
    """The ``DocBin`` of a ``.spacy`` file; a missing, unreadable or empty
    file is a ``ValueError`` naming it."""
    if not Path(data).is_file():
        raise ValueError(f"{data}: no such file")
    try:
        docbin = DocBin().from_disk(data)
    except Exception as err:  # msgpack/zlib/KeyError: not a DocBin
        raise ValueError(f"{data}: not a .spacy (DocBin) file ({type(err).__name__}: {err})") from None
    if not len(docbin):
        raise ValueError(f"{data}: no docs to score (empty .spacy file)")
    return docbin


def evaluate(
    task: str,
    model: Path,
    data: Path,
    *,
    words: Optional[Path] = None,
    train_ents: Optional[Path] = None,
    split: str = "test",
    name: Optional[str] = None,
    train_meta: Optional[Path] = None,
    note: str = "",
    limit: int = 0,
    batch_size: int = 128,
) -> Dict[str, Any]:
    """Scores, speed, hardware and training record of ``model`` on ``data``.
    ``words`` (the training words, CWS) gives OOV/IV recall, ``train_ents``
    (the training corpus, NER) seen/unseen entity recall. Settings and files
    are checked before the model is loaded; a missing or empty corpus or word
    list is a ``ValueError`` naming it."""
    if task not in TASKS:
        raise ValueError(f"task must be one of {', '.join(TASKS)}, not {task!r}")
    if words is not None and task != "cws":
        raise ValueError(f"a training word list ({words}) is for the cws task, not {task}")
    if train_ents is not None and task != "ner":
        raise ValueError(f"training entities ({train_ents}) are for the ner task, not {task}")
    check_number("limit", limit, minimum=0, hint="0: all docs")
    check_number("batch_size", batch_size, minimum=1)
    if words is not None and not Path(words).is_file():
        raise ValueError(f"{words}: no such word list or .spacy file")
    seen_ents = None
    if train_ents is not None:
        seen_ents = mention_set(read_docbin(train_ents).get_docs(Vocab()))
        if not seen_ents:
            raise ValueError(f"{train_ents}: no entities (is it an NER training corpus?)")
    docbin = read_docbin(data)  # before the (slow) model is loaded
    nlp = spacy.load(model)
    refs = list(docbin.get_docs(nlp.vocab))
    if limit:
        refs = refs[:limit]
    if task == "cws":
        iv = read_word_set(words) if words else None
        if iv is not None and not iv:
            raise ValueError(f"{words}: no words (empty dictionary)")
        result = evaluate_cws(nlp, refs, iv)
        result["dictionary"] = {"path": str(words), "words": len(iv)} if iv is not None else None
    else:
        result = evaluate_ner(nlp, refs, seen_ents)
        result["training_entities"] = (
            {"path": str(train_ents), "entities": len(seen_ents)} if seen_ents is not None else None
        )
    meta_path = Path(train_meta) if train_meta else Path(model).parent / "train_meta.json"
    out: Dict[str, Any] = {
        "name": name or f"{task}:{Path(model).parent.name}",
        "task": task,
        "model": str(model),
        "pipeline": nlp.pipe_names,
        "data": str(data),
        "split": split,
        "note": note,
        **result,
        "train": json.loads(meta_path.read_text(encoding="utf8")) if meta_path.exists() else None,
        "hardware": hardware(),
    }
    return out


app = script_app()


@app.command()
def evaluate_cli(
    task: str = typer.Argument(..., help="cws or ner"),
    model: Path = typer.Argument(..., help="Pipeline directory", exists=True),
    data: str = typer.Argument(..., help=".spacy corpus to score on, or with --manifest the name of a corpus in it"),
    output: str = typer.Option(..., "--output", "-o", help="JSON file to write; {split} is replaced by the split"),
    manifest: Optional[Path] = typer.Option(
        None,
        "--manifest",
        exists=True,
        help="corpus/manifest.json of the corpus step: DATA names a corpus whose eval file, split and note are taken from it",
    ),
    words: Optional[Path] = typer.Option(
        None, "--words", help="Training word list (.utf8) or .spacy corpus: OOV/IV recall (cws)"
    ),
    train_ents: Optional[Path] = typer.Option(
        None, "--train-ents", help="Training .spacy corpus: recall of entities seen / unseen in it (ner)"
    ),
    split: str = typer.Option("test", "--split", help="What DATA is: test or dev (recorded)"),
    name: Optional[str] = typer.Option(None, "--name", help="Name of this result"),
    train_meta: Optional[Path] = typer.Option(
        None, "--train-meta", help="JSON with the training time (default: MODEL/../train_meta.json)"
    ),
    note: str = typer.Option("", "--note", help="Free text recorded with the scores"),
    limit: int = typer.Option(0, "--limit", help="Score only the first N docs (0: all)"),
) -> None:
    """Score a pipeline on a corpus; write scores, speed, hardware and train time as JSON.

    The output may not be one of the inputs; it is written to a temporary
    file and renamed, so a failed run leaves no JSON (or the earlier one).
    """
    if limit < 0:
        raise typer.BadParameter(f"must be >= 0 (0: all docs), got {limit}", param_hint="--limit")
    try:
        if manifest is not None:
            entries = load_manifest(manifest)
            if data not in entries:
                raise ValueError(f"{manifest}: no corpus {data!r} (it has {', '.join(entries) or 'none'})")
            entry = entries[data]
            data, split, note = entry["eval"], entry["eval_split"], note or entry.get("eval_note", "")
        output = Path(output.replace("{split}", split))
        meta = Path(train_meta) if train_meta else Path(model).parent / "train_meta.json"
        check_output_paths([model, data, words, train_ents, manifest, meta], [output])
        result = evaluate(
            task,
            model,
            Path(data),
            words=words,
            train_ents=train_ents,
            split=split,
            name=name,
            train_meta=train_meta,
            note=note,
            limit=limit,
        )
        write_json_atomic(output, result)
    except (OutputPathError, ValueError, OSError) as err:
        msg.fail(str(err), exits=1)
    s = result["scores"]
    keys = (
        ["words_p", "words_r", "words_f", "words_oov_recall", "words_iv_recall"]
        if task == "cws"
        else ["ents_p", "ents_r", "ents_f", "ents_seen_recall", "ents_unseen_recall"]
    )
    shown = ", ".join(f"{k}={s[k]:.4f}" for k in keys if s.get(k) is not None)
    typer.echo(f"{result['name']} on {split} ({data}): {shown}; {result['speed']['chars_per_s']} chars/s -> {output}")
    if result.get("oov") and result["oov"]["oov_words"]:
        for line in summary_lines(result["oov"]):
            typer.echo(f"  {line}")
