"""User words on unseen words: the segmentation of a few dev sentences before and after.

    python crf_project user-words MODEL DEV.spacy [--words TRAIN.spacy] [--n-words 5] \
        [--mode force|prior] [--weight W] [--per-word 2] [--limit N] [--output OUT.json]

MODEL is a pipeline with a ``bmes`` segmenter (its merge step is left out:
the words shown are the segmenter's). DEV holds word-tokenized reference
docs. The script decodes DEV, picks the ``--n-words`` reference words the
segmenter splits most often (a predicted boundary inside the word) among the
unseen ones (not in ``--words``, the training words; without it, among all
words of two or more characters), adds them with
``segmenter.add_user_words(words, mode=...)`` and decodes the docs that hold
them again. It prints each chosen word's whole occurrences before and after
and a few of its sentences both ways, and the word P/R/F of those docs.

The words come from the dev set itself: this shows what a user dictionary
does to the words it holds, it is no estimate of accuracy on unseen text.
"""

from collections import Counter
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

import spacy
import typer
from spacy.language import Language
from spacy.tokens import Doc, DocBin
from spacy.training import Example

from crf_project.script_cli import script_app
from spacy_crf.corpora import read_word_set
from spacy_crf.files import write_json_atomic
from spacy_crf.pipeline.crf_tagger import CRFTagger
from spacy_crf.pipeline.scorers import predicted_words, reference_words, score_words

Offsets = Tuple[int, int]


def segmenter_of(nlp: Language) -> CRFTagger:
    for _, pipe in nlp.pipeline:
        if isinstance(pipe, CRFTagger) and pipe.scheme == "bmes":
            return pipe
    raise ValueError(f"no bmes segmenter (crf_segmenter) in the pipeline {nlp.pipe_names}")


def segment(nlp: Language, texts: List[str], spans_key: str, batch_size: int = 64) -> List[Set[Offsets]]:
    return [predicted_words(doc, spans_key) for doc in nlp.pipe(texts, batch_size=batch_size)]


def split_words(refs: List[Doc], predicted: List[Set[Offsets]], iv_words: Optional[Set[str]]) -> Counter:
    """Reference words of two or more characters (unseen ones only with
    ``iv_words``) by how often the prediction puts a boundary inside them."""
    counts: Counter = Counter()
    for ref, pred in zip(refs, predicted):
        inside = {end for _, end in pred} | {start for start, _ in pred}
        for start, end in reference_words(ref):
            word = ref.text[start:end]
            if len(word) < 2 or (iv_words is not None and word in iv_words):
                continue
            if any(start < b < end for b in inside):
                counts[word] += 1
    return counts


def shown(text: str, words: Set[Offsets]) -> str:
    """The words of ``text``, separated by ``|``."""
    return "|".join(text[s:e] for s, e in sorted(words))


def occurrences(text: str, word: str) -> List[Offsets]:
    found, start = [], text.find(word)
    while start >= 0:
        found.append((start, start + len(word)))
        start = text.find(word, start + 1)
    return found


def demo(
    nlp: Language,
    refs: List[Doc],
    iv_words: Optional[Set[str]],
    *,
    n_words: int = 5,
    mode: str = "force",
    weight: Optional[float] = None,
    per_word: int = 2,
) -> Dict:
    """Choose the words, add them, and compare; the result as a dict."""
    segmenter = segmenter_of(nlp)
    key = segmenter.cfg["spans_key"]
    texts = [ref.text for ref in refs]
    before = segment(nlp, texts, key)
    chosen = [w for w, _ in sorted(split_words(refs, before, iv_words).items(), key=lambda x: (-x[1], x[0]))]
    chosen = chosen[:n_words]
    if not chosen:
        raise ValueError(
            "the segmenter splits no reference word of two or more characters"
            + (" outside the training words" if iv_words is not None else "")
        )
    segmenter.add_user_words(chosen, mode=mode, weight=weight)
    affected = [i for i, text in enumerate(texts) if any(w in text for w in chosen)]
    after = dict(zip(affected, segment(nlp, [texts[i] for i in affected], key)))
    rows = []
    for word in chosen:
        row = {"word": word, "occurrences": 0, "whole_before": 0, "whole_after": 0, "sentences": []}
        for i in affected:
            spans = occurrences(texts[i], word)
            if not spans:
                continue
            row["occurrences"] += len(spans)
            row["whole_before"] += sum(s in before[i] for s in spans)
            row["whole_after"] += sum(s in after[i] for s in spans)
            if len(row["sentences"]) < per_word:
                row["sentences"].append(
                    {
                        "gold": shown(texts[i], reference_words(refs[i])),
                        "before": shown(texts[i], before[i]),
                        "after": shown(texts[i], after[i]),
                    }
                )
        rows.append(row)

    def prf(predicted: Dict[int, Set[Offsets]]) -> Dict[str, float]:
        examples = []
        for i in affected:
            doc = nlp.make_doc(texts[i])
            doc.spans[key] = [doc.char_span(s, e) for s, e in sorted(predicted[i])]
            examples.append(Example(doc, refs[i]))
        scores = score_words(examples, key)
        return {k: scores[k] for k in ("words_p", "words_r", "words_f")}

    return {
        "mode": mode,
        "weight": weight,
        "words": rows,
        "docs": len(refs),
        "affected_docs": len(affected),
        "before": prf({i: before[i] for i in affected}),
        "after": prf(after),
    }


def print_result(result: Dict) -> None:
    typer.echo(f"user words ({result['mode']}), {result['affected_docs']} of {result['docs']} docs hold them")
    typer.echo("| word | occurrences | whole before | whole after |\n|---|---|---|---|")
    for row in result["words"]:
        typer.echo(f"| {row['word']} | {row['occurrences']} | {row['whole_before']} | {row['whole_after']} |")
    for row in result["words"]:
        for sentence in row["sentences"]:
            typer.echo(
                f"\n{row['word']}:\n  gold   {sentence['gold']}\n  before {sentence['before']}\n"
                f"  after  {sentence['after']}"
            )
    b, a = result["before"], result["after"]
    typer.echo(
        f"\nword P/R/F on those docs: {100 * b['words_p']:.2f} / {100 * b['words_r']:.2f} / "
        f"{100 * b['words_f']:.2f} -> {100 * a['words_p']:.2f} / {100 * a['words_r']:.2f} / "
        f"{100 * a['words_f']:.2f}"
    )


app = script_app()


@app.command()
def main(
    model: Path = typer.Argument(..., help="Pipeline directory with a bmes segmenter", exists=True),
    data: Path = typer.Argument(..., help="Dev .spacy file of word-tokenized docs", exists=True),
    words: Optional[Path] = typer.Option(
        None, "--words", help="Training words (.spacy or one a line): choose unseen words only"
    ),
    n_words: int = typer.Option(5, "--n-words", help="How many split words to add"),
    mode: str = typer.Option("force", "--mode", help="force or prior"),
    weight: Optional[float] = typer.Option(None, "--weight", help="The prior's weight (mode prior; default 1)"),
    per_word: int = typer.Option(2, "--per-word", help="Sentences shown per word"),
    limit: int = typer.Option(0, "--limit", help="First N dev docs (0: all)"),
    output: Optional[Path] = typer.Option(None, "--output", help="JSON file to write"),
) -> None:
    nlp = spacy.load(model)
    for name in [n for n in nlp.pipe_names if nlp.get_pipe_meta(n).factory == "crf_merge_words"]:
        nlp.remove_pipe(name)
    refs = list(DocBin().from_disk(data).get_docs(nlp.vocab))
    refs = refs[:limit] if limit else refs
    if not refs:
        raise typer.BadParameter(f"{data}: no docs", param_hint="DATA")
    try:
        result = demo(
            nlp,
            refs,
            read_word_set(words) if words else None,
            n_words=n_words,
            mode=mode,
            weight=weight,
            per_word=per_word,
        )
    except ValueError as e:
        typer.echo(f"{model}: {e}", err=True)
        raise typer.Exit(1) from None
    print_result(result)
    if output:
        write_json_atomic(
            output,
            {"model": str(model), "data": str(data), "words": str(words) if words else None, "limit": limit, **result},
        )
