"""How full the encoder's padded training batches are, batcher against batcher.

    python scripts/batch_fill.py CONFIG [--batchers config,words:1000,padded:1150]
        [--docs 8000] [--output fill.json] [--paths.train_words ... spacy overrides]

spacy-transformers cuts each doc of a batch into spans (the config's
``get_spans``), tokenizes them, and pads them all to the longest one; the
encoder's forward and backward passes run over every padded position, real
or not. This takes the first ``--docs`` examples of the config's training
corpus once, batches that same list with each batcher, and prints per
batcher: batches, characters and spans per batch, real wordpieces, padded
positions and the fill (wordpieces / padded positions). The encoder's cost of
a step follows the padded positions; its learning follows the characters.

Batcher specs: ``config`` (the config's own ``[training.batcher]``),
``words:SIZE`` (``spacy.batch_by_words.v1``, tolerance 0.2) and
``padded:SIZE`` (``spacy.batch_by_padded.v1``, buffer 256). Nothing is
trained and the encoder's weights are not loaded: only its tokenizer.
"""

import argparse
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Dict, List, Sequence

import spacy.training  # noqa: F401  (registers spaCy's batchers)
import srsly
from spacy import util
from spacy.cli._util import parse_config_overrides
from wasabi import msg


def make_batcher(spec: str, config_batcher: Callable) -> Callable:
    """``config``, ``words:SIZE`` or ``padded:SIZE`` as a spaCy batcher."""
    if spec == "config":
        return config_batcher
    kind, _, size = spec.partition(":")
    if kind not in ("words", "padded") or not size.isdigit() or int(size) <= 0:
        raise SystemExit(f"batcher {spec!r}: expected 'config', 'words:SIZE' or 'padded:SIZE' (SIZE > 0)")
    if kind == "words":
        block = {"@batchers": "spacy.batch_by_words.v1", "size": int(size), "tolerance": 0.2}
    else:
        block = {"@batchers": "spacy.batch_by_padded.v1", "size": int(size), "buffer": 256}
    return util.registry.resolve({"batcher": {**block, "discard_oversize": False}})["batcher"]


def transformer_inputs(resolved: Dict[str, Any]):
    """The first transformer component's span getter and Hugging Face tokenizer."""
    from transformers import AutoTokenizer

    for _name, component in resolved["components"].items():
        if component.get("factory") == "transformer":
            model = component["model"]
            get_spans = util.registry.resolve({"get_spans": model["get_spans"]})["get_spans"]
            tokenizer = AutoTokenizer.from_pretrained(model["name"], **model.get("tokenizer_config", {}))
            return get_spans, tokenizer
    raise SystemExit('the config has no component with factory = "transformer"')


def fill(batches: Sequence[Sequence[Any]], get_spans: Callable, tokenizer) -> Dict[str, float]:
    """Characters, spans, wordpieces and padded positions over ``batches`` of Examples."""
    chars = spans = real = padded = 0
    for batch in batches:
        docs = [eg.predicted for eg in batch]
        texts = [span.text for doc_spans in get_spans(docs) for span in doc_spans]
        chars += sum(len(doc.text) for doc in docs)
        spans += len(texts)
        if not texts:
            continue
        mask = tokenizer(texts, padding="longest")["attention_mask"]
        real += sum(map(sum, mask))
        padded += len(mask) * len(mask[0])
    n = max(len(batches), 1)
    return {
        "batches": len(batches),
        "docs": sum(len(b) for b in batches),
        "chars": chars,
        "chars_per_batch": round(chars / n, 1),
        "spans_per_batch": round(spans / n, 1),
        "wordpieces": real,
        "padded_positions": padded,
        "fill": round(real / padded, 4) if padded else 0.0,
    }


def measure(config_path: Path, overrides: Dict[str, Any], specs: List[str], n_docs: int) -> Dict[str, Dict[str, float]]:
    config = util.load_config(config_path, overrides=overrides, interpolate=False)
    nlp = util.load_model_from_config(config, auto_fill=True, validate=True)
    resolved = nlp.config.interpolate()
    T = util.registry.resolve(resolved["training"], schema=None)
    corpus = util.resolve_dot_names(resolved, [T["train_corpus"]])[0]
    examples = list(islice(corpus(nlp), n_docs))
    if not examples:
        raise SystemExit(f"{config_path}: the training corpus gave no examples")
    get_spans, tokenizer = transformer_inputs(resolved)
    return {spec: fill(list(make_batcher(spec, T["batcher"])(examples)), get_spans, tokenizer) for spec in specs}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", type=Path)
    p.add_argument("--batchers", default="config,words:1000,padded:1150")
    p.add_argument("--docs", type=int, default=8000, help="examples from the start of the training corpus")
    p.add_argument("--output", type=Path, help="the figures as JSON")
    args, rest = p.parse_known_args()
    specs = [s.strip() for s in args.batchers.split(",") if s.strip()]
    if args.docs <= 0 or not specs or len(set(specs)) != len(specs):
        raise SystemExit("--docs must be > 0 and --batchers distinct specs")
    for spec in specs:  # a bad spec fails before the corpus is read
        if spec != "config":
            make_batcher(spec, None)
    results = measure(args.config, parse_config_overrides(rest), specs, args.docs)
    first = next(iter(results.values()))
    msg.info(f"{first['docs']:,} docs, {first['chars']:,} characters, the same for every batcher")
    header = ("batcher", "batches", "chars/batch", "spans/batch", "wordpieces", "padded", "fill")
    rows = [
        (
            spec,
            r["batches"],
            r["chars_per_batch"],
            r["spans_per_batch"],
            f"{r['wordpieces']:,}",
            f"{r['padded_positions']:,}",
            f"{r['fill']:.1%}",
        )
        for spec, r in results.items()
    ]
    msg.table(rows, header=header, divider=True)
    if args.output:
        srsly.write_json(args.output, {"config": str(args.config), "docs": args.docs, "batchers": results})
        msg.good(f"Wrote {args.output}")


if __name__ == "__main__":
    main()
