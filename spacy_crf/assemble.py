"""Assemble one Chinese pipeline from a trained segmenter and a trained NER model.

``python -m spacy_crf.assemble CWS_MODEL NER_MODEL OUTPUT_DIR [--name crf_pipeline]``

The two models are trained separately, each fine-tuning its own copy of the
encoder through a ``TransformerListener``. Sharing one transformer between
them would give the NER tagger features it was not trained on, so:

* the segmentation model keeps its ``transformer`` component, and its
  ``crf_tagger`` keeps listening to it;
* in the NER model, ``replace_listeners`` copies the NER transformer *into*
  the NER ``crf_tagger`` (the tagger then owns its encoder and needs no
  upstream component);
* the result is ``transformer -> segmenter -> crf_ner -> merge_words``:
  ``transformer`` + ``segmenter`` write the predicted words to
  ``doc.spans["words"]`` on character tokens, ``crf_ner`` writes
  ``doc.ents`` on the same character tokens (with its own encoder copy), and
  ``crf_merge_words`` finally turns words into tokens, splitting a word where
  an entity boundary falls inside it so that no entity is lost or altered.
"""
from pathlib import Path
from typing import Optional

import spacy
import typer
from spacy.language import Language


def _find(nlp: Language, factory: str, name: Optional[str], what: str) -> str:
    if name:
        if name not in nlp.pipe_names:
            raise ValueError(f"{what}: no component {name!r} in {nlp.pipe_names}")
        return name
    found = [n for n in nlp.pipe_names if nlp.get_pipe_meta(n).factory == factory]
    if len(found) != 1:
        raise ValueError(f"{what}: expected one {factory!r} component, found {found}")
    return found[0]


def _owns_listeners(nlp: Language, component: str) -> None:
    """Copy the transformer (or tok2vec) that ``component`` listens to into it."""
    for upstream in ("transformer", "tok2vec"):
        for name in nlp.pipe_names:
            if nlp.get_pipe_meta(name).factory != upstream:
                continue
            if component in getattr(nlp.get_pipe(name), "listening_components", []):
                nlp.replace_listeners(name, component, ["model.tok2vec"])


def assemble(cws_model: Path, ner_model: Path, *, name: str = "crf_pipeline", version: str = "0.1.0",
             segmenter: Optional[str] = None, ner: Optional[str] = None) -> Language:
    """Build ``transformer -> segmenter -> crf_ner -> merge_words`` (see module docs)."""
    cws_nlp = spacy.load(cws_model)
    ner_nlp = spacy.load(ner_model)
    seg_name = _find(cws_nlp, "crf_tagger", segmenter, str(cws_model))
    ner_name = _find(ner_nlp, "crf_tagger", ner, str(ner_model))
    if cws_nlp.get_pipe(seg_name).cfg.get("scheme") != "bmes":
        raise ValueError(f"{cws_model}: component {seg_name!r} is not a bmes segmenter")
    _owns_listeners(ner_nlp, ner_name)

    nlp = spacy.blank("zh", config={"nlp": {"tokenizer": dict(cws_nlp.config["nlp"]["tokenizer"])}})
    trf = [n for n in cws_nlp.pipe_names if cws_nlp.get_pipe_meta(n).factory == "transformer"]
    for t in trf:
        nlp.add_pipe("transformer", name=t, source=cws_nlp)
    nlp.add_pipe(seg_name, name="segmenter", source=cws_nlp)
    nlp.add_pipe(ner_name, name="crf_ner", source=ner_nlp)
    spans_key = nlp.get_pipe("segmenter").cfg.get("spans_key", "words")
    nlp.add_pipe("crf_merge_words", name="merge_words", config={"spans_key": spans_key})
    nlp.meta.update({
        "name": name,
        "version": version,
        "description": "Chinese word segmentation and NER with linear-chain CRFs over transformer "
                       "features (spacy-crf); tokens are the predicted words, doc.ents the entities",
        "sources": [{"name": "segmenter", "path": str(cws_model)}, {"name": "crf_ner", "path": str(ner_model)}],
        "requirements": ["spacy-crf>=0.1.0,<0.2.0"],
        "performance": {},
    })
    return nlp


def assemble_cli(
    cws_model: Path = typer.Argument(..., exists=True, help="Trained segmentation pipeline"),
    ner_model: Path = typer.Argument(..., exists=True, help="Trained NER pipeline"),
    output: Path = typer.Argument(..., help="Directory to write the assembled pipeline to"),
    name: str = typer.Option("crf_pipeline", "--name", help="Pipeline name (package: zh_NAME)"),
    version: str = typer.Option("0.1.0", "--version", help="Pipeline version"),
) -> None:
    """Source the segmenter and the NER tagger into one pipeline and save it."""
    nlp = assemble(cws_model, ner_model, name=name, version=version)
    nlp.to_disk(output)
    texts = ["张三在北京大学工作。"]
    doc = nlp(texts[0])
    typer.echo(f"pipeline {nlp.pipe_names} -> {output}")
    typer.echo(f"  {[t.text for t in doc]}  ents={[(e.text, e.label_) for e in doc.ents]}")


if __name__ == "__main__":
    typer.run(assemble_cli)
