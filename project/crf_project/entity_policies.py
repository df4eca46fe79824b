"""What each way of reconciling words and entities costs, from one run of a joint model.

    python crf_project entity-policies training/joint/model-best \
        corpus/sxu/dev.spacy corpus/msra/dev.spacy [--limit N] [--output OUT.json]

The segmenter and the NER model disagree where an entity boundary falls inside
a predicted word (SXU's words and MSRA's entities follow different standards,
and both models err). A pipeline whose tokens are words must then give up one
of them; the merge step (``crf_merge_words``) offers two ways, and spaCy's
``Doc.char_span(alignment_mode="expand")`` suggests a third:

* ``split`` (the merge's default): the word is cut at the entity boundary;
  the entities stay as predicted, the words pay;
* ``keep_words``: the word stays; ``doc.ents`` keeps only the entities that
  line up with the words (the others go to a span group);
* ``expand``: the word stays and the entity widens to the words it touches
  (an entity that would then overlap an earlier one is dropped).

MODEL is a pipeline that writes the segmenter's words (``doc.spans``) and the
entities on character tokens, e.g. the joint training's ``model-best`` (a
merge step in it is left out). Each reference text goes through the model
once; every policy is computed from that output, so the figures differ only
by the policy: word F on the word-tokenized file, entity F on the other.
"""

from pathlib import Path
from typing import Dict, List, Optional, Tuple

import spacy
import typer
from spacy.scorer import PRFScore
from spacy.tokens import Doc, DocBin

from crf_project.script_cli import run_app, script_app
from spacy_crf.cli._app import check_option
from spacy_crf.files import write_json_atomic
from spacy_crf.pipeline.merge_words import merge_words
from spacy_crf.pipeline.scorers import count_matches, predicted_words, reference_words

POLICIES = ("split", "keep_words", "expand")
Entity = Tuple[int, int, str]


def _merged(doc: Doc, spans_key: str, policy: str) -> Doc:
    """``doc`` through the merge step under ``policy`` (on a copy: keep_words
    writes its span group onto a doc it has nothing to merge in)."""
    return merge_words(doc.copy(), spans_key, entity_policy=policy)


def policy_words(doc: Doc, spans_key: str = "words") -> Dict[str, set]:
    """The words of ``doc`` (character offsets) under each policy: the merge
    step's tokens under ``split`` and ``keep_words``; ``expand`` keeps the
    words as ``keep_words`` does."""
    kept = reference_words(_merged(doc, spans_key, "keep_words"))
    return {"split": reference_words(_merged(doc, spans_key, "split")), "keep_words": kept, "expand": kept}


def policy_entities(doc: Doc, spans_key: str = "words") -> Dict[str, List[Entity]]:
    """The entities of ``doc`` (offsets, label) under each policy: ``split``
    keeps them all (the merge step guarantees it), ``keep_words`` those left
    in the merge step's ``doc.ents``, ``expand`` each widened to the words it
    touches."""
    ents = [(e.start_char, e.end_char, e.label_) for e in doc.ents]
    aligned = [(e.start_char, e.end_char, e.label_) for e in _merged(doc, spans_key, "keep_words").ents]
    word_of: Dict[int, Tuple[int, int]] = {}
    for start, end in predicted_words(doc, spans_key):
        for c in range(start, end):
            word_of[c] = (start, end)
    expanded, taken = [], set()
    for start, end, label in ents:
        start, end = word_of.get(start, (start,))[0], word_of.get(end - 1, (None, end))[1]
        if taken.isdisjoint(range(start, end)):
            taken.update(range(start, end))
            expanded.append((start, end, label))
    return {"split": ents, "keep_words": aligned, "expand": expanded}


def _prf(counts: PRFScore) -> Dict[str, float]:
    return {"p": counts.precision, "r": counts.recall, "f": counts.fscore}


def score_policies(
    nlp, word_refs: List[Doc], ent_refs: List[Doc], spans_key: str = "words", batch_size: int = 128
) -> Dict[str, Dict[str, Dict[str, float]]]:
    """Word P/R/F on ``word_refs`` and entity P/R/F on ``ent_refs`` per policy,
    with the segmenter's own words and the NER model's own entities as
    ``model``."""
    words = {p: PRFScore() for p in ("model",) + POLICIES}
    ents = {p: PRFScore() for p in ("model",) + POLICIES}

    for doc, ref in zip(nlp.pipe((r.text for r in word_refs), batch_size=batch_size), word_refs):
        gold = reference_words(ref)
        count_matches(words["model"], gold, predicted_words(doc, spans_key))
        for policy, pred in policy_words(doc, spans_key).items():
            count_matches(words[policy], gold, pred)
    for doc, ref in zip(nlp.pipe((r.text for r in ent_refs), batch_size=batch_size), ent_refs):
        gold = {(e.start_char, e.end_char, e.label_) for e in ref.ents}
        count_matches(ents["model"], gold, {(e.start_char, e.end_char, e.label_) for e in doc.ents})
        for policy, pred in policy_entities(doc, spans_key).items():
            count_matches(ents[policy], gold, set(pred))
    return {p: {"words": _prf(words[p]), "ents": _prf(ents[p])} for p in ("model",) + POLICIES}


app = script_app()


@app.command(help=__doc__)
def entity_policies_cli(
    model: str = typer.Argument(..., metavar="MODEL", help="pipeline directory with the segmenter and the NER model"),
    words: Path = typer.Argument(..., metavar="WORDS", help=".spacy docs whose tokens are the gold words"),
    ents: Path = typer.Argument(..., metavar="ENTS", help=".spacy docs with gold entities"),
    spans_key: str = typer.Option("words", "--spans-key", help="the segmenter's span group"),
    limit: int = typer.Option(0, "--limit", help="first N docs of each file (0: all)"),
    output: Optional[Path] = typer.Option(None, "--output", help="JSON file for the table"),
) -> None:
    check_option("--limit", limit, minimum=0, hint="0: all docs")
    for path, hint in ((words, "WORDS"), (ents, "ENTS")):
        if not path.is_file():
            raise typer.BadParameter(f"{path}: no such file", param_hint=hint)
    nlp = spacy.load(model)
    for name in [n for n in nlp.pipe_names if nlp.get_pipe_meta(n).factory == "crf_merge_words"]:
        nlp.remove_pipe(name)  # the policies start from the words before any merge

    def read(path: Path) -> List[Doc]:
        docs = list(DocBin().from_disk(path).get_docs(nlp.vocab))
        if not docs:
            raise typer.BadParameter(f"{path}: no docs", param_hint="WORDS" if path == words else "ENTS")
        return docs[:limit] if limit else docs

    table = score_policies(nlp, read(words), read(ents), spans_key)
    print("| policy | word F (P / R) | entity F (P / R) |\n|---|---|---|")
    for policy, s in table.items():
        w, e = s["words"], s["ents"]
        print(
            f"| {policy} | {100 * w['f']:.2f} ({100 * w['p']:.2f} / {100 * w['r']:.2f}) "
            f"| {100 * e['f']:.2f} ({100 * e['p']:.2f} / {100 * e['r']:.2f}) |"
        )
    if output:
        write_json_atomic(
            output, {"model": str(model), "words": str(words), "ents": str(ents), "limit": limit, "policies": table}
        )


def main() -> None:
    run_app(app)
