"""Assemble one Chinese pipeline from trained CRF taggers.

    python crf_project assemble JOINT_MODEL OUTPUT_DIR [--name crf_pipeline]
    python crf_project assemble CWS_MODEL OUTPUT_DIR --ner NER_MODEL

The result is ``transformer -> segmenter -> crf_ner -> merge_words``:
``transformer`` + ``segmenter`` write the predicted words to
``doc.spans["words"]`` on character tokens, ``crf_ner`` writes ``doc.ents``
on the same character tokens, and ``crf_merge_words`` finally turns words
into tokens, splitting a word where an entity boundary falls inside it so
that no entity is lost or altered.

* **Joint model** (``configs/joint.cfg``): one transformer was trained for
  both taggers, so both keep listening to it and the pipeline runs one
  encoder.
* **Separate models** (``--ner``): each fine-tuned its own copy of the
  encoder. Sharing the segmentation transformer would give the NER tagger
  features it was not trained on, so ``replace_listeners`` copies the NER
  transformer *into* the NER ``crf_tagger``, which then owns its encoder:
  two encoders run, at about half the speed.

Where a predicted word and an entity disagree (``--words``):

* ``split``: ``crf_merge_words`` splits the word at the entity boundary;
* ``keep_words``: the merge keeps the words; entities that do not align with
  them go to ``doc.spans["ents_chars"]`` instead of ``doc.ents``;
* ``respect_ents``: ``crf_ner`` runs before the segmenter, whose Viterbi
  then takes every entity boundary as a forced word boundary, so the rest of
  the sentence is segmented around the entities and nothing needs splitting.

``--lexicon WORDS.txt`` gives the segmenter a lexicon (a general word list,
``scripts/lexicon.py``) that biases decoding towards keeping its words whole
(:mod:`spacy_crf.pipeline.lexicon`), with the weight that ``scripts/lexicon_tune.py``
chose on dev (``--lexicon-tuning metrics/lexicon.json``) or ``--lexicon-weight``.
The words are saved in the pipeline; weight 0 ships no lexicon.

``--quantize`` chooses how the encoder runs in the shipped pipeline (training
stays in torch): ``qint8`` or ``float16`` store its linear layers as int8 or
float16 for torch, ``bfloat16`` runs them in bfloat16 on CPUs that do so natively
(:func:`spacy_crf.encoders.quantize.quantize_pipeline`);
``onnx`` and ``onnx-int8`` export it to an ONNX graph that ONNX Runtime runs,
float32 or with int8 weights (:func:`spacy_crf.encoders.onnx_backend.export_pipeline`);
``openvino`` and ``openvino-int8`` to an OpenVINO model, float32 or static
int8 calibrated on the first ``--calibration-docs`` texts of each
``--calibration`` file (:func:`spacy_crf.encoders.openvino_backend.export_openvino`).
The graph is saved inside the pipeline; the package then requires
``spacy-crf[onnx]`` or ``spacy-crf[openvino]``. docs/speed.md compares them
on the dev sets.
"""

from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import spacy
import srsly
import typer
from spacy.language import Language
from spacy.tokens import DocBin
from wasabi import msg

from crf_project.script_cli import script_app
from spacy_crf.encoders.openvino_backend import check_precision
from spacy_crf.files import OutputPathError, atomic_dir, check_output_dir, check_output_paths
from spacy_crf.pipeline.lexicon import read_lexicon
from spacy_crf.pipeline.scorers import score_words

# The factories of spacy_crf.pipeline.crf_tagger.CRFTagger: the general one and its variants.
CRF_FACTORIES = ("crf_tagger", "crf_ner", "crf_segmenter")
WORD_POLICIES = ("split", "keep_words", "respect_ents")
QUANTIZE = ("none", "qint8", "float16", "bfloat16", "onnx", "onnx-int8", "openvino", "openvino-int8")
# what each ONNX choice asks of spacy_crf.encoders.onnx_backend.export_pipeline
ONNX_QUANTIZE = {"onnx": "none", "onnx-int8": "int8"}
# ... and each OpenVINO choice of spacy_crf.encoders.openvino_backend.export_openvino
OPENVINO_QUANTIZE = {"openvino": "none", "openvino-int8": "int8"}
#: calibration texts per --calibration file for openvino-int8 (what docs/results.md measured with)
CALIBRATION_DOCS = 256
REQUIREMENT = "spacy-crf{extras}>=0.1.0,<0.2.0"


def _find(nlp: Language, schemes: Tuple[str, ...], name: Optional[str], what: str) -> str:
    """The CRF tagger of ``nlp`` with one of ``schemes`` (or the one named ``name``)."""
    if name:
        if name not in nlp.pipe_names:
            raise ValueError(f"{what}: no component {name!r} in {nlp.pipe_names}")
        found = [name]
    else:
        found = [
            n
            for n in nlp.pipe_names
            if nlp.get_pipe_meta(n).factory in CRF_FACTORIES and nlp.get_pipe(n).cfg.get("scheme") in schemes
        ]
    if len(found) != 1:
        raise ValueError(f"{what}: expected one crf_tagger with scheme {' or '.join(schemes)}, found {found}")
    if nlp.get_pipe(found[0]).cfg.get("scheme") not in schemes:
        raise ValueError(f"{what}: component {found[0]!r} is not a crf_tagger with scheme {' or '.join(schemes)}")
    return found[0]


def _owns_listeners(nlp: Language, component: str) -> None:
    """Copy the transformer (or tok2vec) that ``component`` listens to into it."""
    for upstream in ("transformer", "tok2vec"):
        for name in nlp.pipe_names:
            if nlp.get_pipe_meta(name).factory != upstream:
                continue
            if component in getattr(nlp.get_pipe(name), "listening_components", []):
                nlp.replace_listeners(name, component, ["model.tok2vec"])


def assemble(
    cws_model: Path,
    ner_model: Optional[Path] = None,
    *,
    name: str = "crf_pipeline",
    version: str = "0.1.0",
    segmenter: Optional[str] = None,
    ner: Optional[str] = None,
    words: str = "split",
    quantize: str = "none",
    lexicon: Optional[Path] = None,
    lexicon_weight: float = 0.0,
    calibration: Sequence[Path] = (),
    calibration_docs: int = CALIBRATION_DOCS,
    precision: str = "float32",
) -> Language:
    """Build ``transformer -> segmenter -> crf_ner -> merge_words`` (see module docs).

    cws_model: a joint model (segmenter + NER tagger on one transformer), or
        the segmentation model when ``ner_model`` is given.
    ner_model: a separately trained NER model; its encoder is copied into its tagger.
    words: what happens where a word and an entity disagree (``WORD_POLICIES``).
    quantize: "qint8" (int8) or "float16" dynamic quantization of the encoder's
        linear layers for torch, or "bfloat16" autocast where the CPU runs it natively
        (:func:`spacy_crf.encoders.quantize.quantize_pipeline`);
        "onnx" or "onnx-int8": the encoder as an ONNX Runtime graph, float32 or
        with int8 weights (:func:`spacy_crf.encoders.onnx_backend.export_pipeline`);
        "openvino" or "openvino-int8": an OpenVINO model, float32 or static int8
        (:func:`spacy_crf.encoders.openvino_backend.export_openvino`); "none".
    lexicon: a word list for the segmenter's decoding (``read_lexicon``),
        used with ``lexicon_weight`` > 0.
    calibration: ``.spacy`` files (training data) whose first
        ``calibration_docs`` texts each calibrate "openvino-int8" (unused
        by the other choices, so that a project can switch ``quantize`` alone).
    precision: "float32", or "bfloat16" where the CPU runs it natively, for
        what an OpenVINO encoder does not run in int8 (unused by the others).
    """
    if words not in WORD_POLICIES:
        raise ValueError(f"words must be one of {', '.join(WORD_POLICIES)}, not {words!r}")
    if quantize not in QUANTIZE:
        raise ValueError(f"quantize must be one of {', '.join(QUANTIZE)}, not {quantize!r}")
    if quantize == "openvino-int8" and not calibration:
        raise ValueError("--quantize openvino-int8 needs --calibration (training .spacy files)")
    check_precision(precision)  # checked whatever the choice: a typo should not wait for openvino
    if calibration_docs < 1:
        raise ValueError(f"--calibration-docs must be at least 1, got {calibration_docs}")
    cws_nlp = spacy.load(cws_model)
    ner_nlp = spacy.load(ner_model) if ner_model is not None else cws_nlp
    seg_name = _find(cws_nlp, ("bmes",), segmenter, str(cws_model))
    ner_name = _find(ner_nlp, ("bio", "bioes"), ner, str(ner_model or cws_model))
    if ner_model is not None:
        _owns_listeners(ner_nlp, ner_name)

    # the shipped pipeline opts in to spacy-crf's process-wide speed-ups when it loads
    # (nlp.pipe with n_process > 1 ran at half the speed without: docs/speed.md)
    speed_ups = {"@callbacks": "spacy_crf.speed_ups.v1"}
    tokenizer = dict(cws_nlp.config["nlp"]["tokenizer"])
    nlp = spacy.blank("zh", config={"nlp": {"tokenizer": tokenizer, "after_pipeline_creation": speed_ups}})
    trf = [n for n in cws_nlp.pipe_names if cws_nlp.get_pipe_meta(n).factory == "transformer"]
    for t in trf:
        nlp.add_pipe("transformer", name=t, source=cws_nlp)
    nlp.add_pipe(seg_name, name="segmenter", source=cws_nlp)
    nlp.add_pipe(
        ner_name, name="crf_ner", source=ner_nlp, **({"before": "segmenter"} if words == "respect_ents" else {})
    )
    if words == "respect_ents":
        # the pipe's cfg wins over config.cfg when a saved pipeline loads: set both
        # (nlp.config is rebuilt at each access; the pipe's own config is kept)
        nlp.get_pipe_config("segmenter")["respect_ents"] = True
        nlp.get_pipe("segmenter").cfg["respect_ents"] = True
    # The training word list that words_scorer.v2 scores OOV recall against
    # (configs/joint.cfg) is a project file: the shipped pipeline must not
    # name it, or `spacy evaluate` of the package warns that it is missing.
    nlp.get_pipe_config("segmenter")["scorer"] = {"@scorers": "spacy_crf.words_scorer.v1"}
    nlp.get_pipe("segmenter").scorer = score_words
    lexicon_meta = None
    if lexicon is not None and lexicon_weight > 0:
        seg = nlp.get_pipe("segmenter")
        seg.set_lexicon(read_lexicon(lexicon), weight=lexicon_weight)
        lexicon_meta = {"file": Path(lexicon).name, "words": len(seg.lexicon), "weight": lexicon_weight}
    spans_key = nlp.get_pipe("segmenter").cfg.get("spans_key", "words")
    policy = "keep_words" if words == "keep_words" else "split"
    nlp.add_pipe("crf_merge_words", name="merge_words", config={"spans_key": spans_key, "entity_policy": policy})
    if quantize in ONNX_QUANTIZE:
        from spacy_crf.encoders.onnx_backend import export_pipeline

        export_pipeline(nlp, quantize=ONNX_QUANTIZE[quantize])
    elif quantize in OPENVINO_QUANTIZE:
        from spacy_crf.encoders.openvino_backend import export_openvino

        texts = calibration_texts(calibration, calibration_docs) if quantize == "openvino-int8" else []
        export_openvino(nlp, quantize=OPENVINO_QUANTIZE[quantize], precision=precision, calibration=texts)
    elif quantize != "none":
        from spacy_crf.encoders.quantize import quantize_pipeline

        quantize_pipeline(nlp, dtype=quantize)
    char_tagger = _tagger_meta(nlp)
    nlp.meta.update(
        {
            "name": name,
            "version": version,
            "description": "Chinese word segmentation and NER with linear-chain CRFs over transformer "
            "features (spacy-crf); tokens are the predicted words, doc.ents the entities",
            "sources": [
                {"name": "segmenter", "path": str(cws_model)},
                {"name": "crf_ner", "path": str(ner_model or cws_model)},
            ],
            "words_and_entities": words,
            "quantized": None if quantize == "none" else quantize,
            "lexicon": lexicon_meta,
            # spacy.load of an ONNX or OpenVINO encoder needs its runtime: the extra brings it
            "requirements": [REQUIREMENT.format(extras=_extras(quantize, char_tagger is not None))],
            "char_tagger": char_tagger,
            "performance": {},
        }
    )
    return nlp


def _extras(quantize: str, char_tagger: bool = False) -> str:
    """What ``spacy.load`` of the package needs besides the plain package
    (a character tagger's features run on ONNX Runtime)."""
    extras = ["onnx"] if quantize in ONNX_QUANTIZE or char_tagger else []
    extras += ["openvino"] if quantize in OPENVINO_QUANTIZE else []
    return f"[{','.join(extras)}]" if extras else ""


def _tagger_meta(nlp: Language) -> Optional[dict]:
    """The character tagger of the pipeline's tagger features (its source,
    licence and sha256, as recorded in the weights); None without one."""
    from spacy_crf.ml.tagger_features import REF, tagger_of

    for _, pipe in nlp.pipeline:
        model = getattr(pipe, "model", None)
        if model is not None and model.has_ref(REF):
            tagger = tagger_of(model.get_ref(REF))
            return {**tagger.meta, "sha256": tagger.sha256, "tags": len(tagger.tags), "bytes": len(tagger.model)}
    return None


def calibration_texts(paths: Sequence[Path], limit: int) -> List[str]:
    """The texts of the first ``limit`` docs of each ``.spacy`` file, in order."""
    vocab = spacy.blank("zh").vocab
    texts: List[str] = []
    for path in paths:
        try:
            docs = DocBin().from_disk(path).get_docs(vocab)
            found = [doc.text for _, doc in zip(range(limit), docs)]
        except Exception as e:
            raise ValueError(f"--calibration {str(path)!r}: not a .spacy file ({type(e).__name__}: {e})") from None
        if not found:
            raise ValueError(f"--calibration {str(path)!r}: no docs")
        texts.extend(found)
    return texts


def lexicon_weight_from(lexicon: Optional[Path], weight: Optional[float], tuning: Optional[Path]) -> float:
    """The lexicon weight of the CLI: ``--lexicon-weight``, or the weight
    ``lexicon_tune.py`` chose (``--lexicon-tuning``); 0 without ``--lexicon``."""
    if weight is not None and tuning is not None:
        raise ValueError("give --lexicon-weight or --lexicon-tuning, not both")
    if lexicon is None:
        if weight or tuning is not None:
            raise ValueError("--lexicon-weight and --lexicon-tuning need --lexicon (the word list)")
        return 0.0
    if tuning is not None:
        try:
            weight = float(srsly.read_json(tuning)["chosen"]["weight"])
        except Exception as e:
            raise ValueError(
                f"--lexicon-tuning {str(tuning)!r}: no chosen weight in it "
                f"(a lexicon_tune.py output?): {type(e).__name__}: {e}"
            ) from None
    if weight is None:
        raise ValueError("--lexicon needs --lexicon-weight or --lexicon-tuning")
    if not weight >= 0:
        raise ValueError(f"the lexicon weight must be >= 0, got {weight}")
    return weight


def save_pipeline(nlp: Language, output: Path, *, inputs=(), force: bool = False) -> Path:
    """Write ``nlp`` to ``output`` through a temporary directory that is
    renamed into place once written and loaded back (so an interrupted run
    leaves the earlier pipeline, or nothing). An existing ``output`` is
    replaced only if it is empty or an earlier pipeline (it has ``meta.json``),
    or with ``force``; it may never be or hold one of ``inputs``."""
    check_output_paths(inputs, [], output_dirs=[output])
    check_output_dir(output, marker="meta.json", force=force)
    with atomic_dir(output) as tmp:
        nlp.to_disk(tmp)
        spacy.load(tmp)  # it loads back before it replaces anything
    return Path(output)


app = script_app()


@app.command()
def assemble_cli(
    model: Path = typer.Argument(
        ..., exists=True, help="Joint model (segmenter + NER), or the segmentation model with --ner"
    ),
    output: Path = typer.Argument(
        ..., help="Directory to write the assembled pipeline to (replaced if it is an earlier pipeline)"
    ),
    ner_model: Optional[Path] = typer.Option(None, "--ner", exists=True, help="A separately trained NER model"),
    name: str = typer.Option("crf_pipeline", "--name", help="Pipeline name (package: zh_NAME)"),
    version: str = typer.Option("0.1.0", "--version", help="Pipeline version"),
    force: bool = typer.Option(
        False, "--force", help="Replace OUTPUT even if it is a non-empty directory that is not a pipeline"
    ),
    words: str = typer.Option(
        "split",
        "--words",
        help="Where a word and an entity disagree: split | keep_words | respect_ents (see the module docs)",
    ),
    quantize: str = typer.Option(
        "none",
        "--quantize",
        help="none | qint8 | float16 (torch, dynamic quantization of the encoder's linear layers) | "
        "bfloat16 (torch, bfloat16 products where the CPU runs them natively, float32 elsewhere) | "
        "onnx | onnx-int8 (the encoder as an ONNX Runtime graph, float32 or int8 weights) | "
        "openvino | openvino-int8 (an OpenVINO model, float32 or static int8: needs --calibration): "
        "faster CPU inference",
    ),
    calibration: List[Path] = typer.Option(
        [],
        "--calibration",
        exists=True,
        dir_okay=False,
        help="Training .spacy files whose first --calibration-docs texts calibrate openvino-int8 (repeatable; "
        "unused by the other choices)",
    ),
    calibration_docs: int = typer.Option(
        CALIBRATION_DOCS, "--calibration-docs", help="Calibration texts per --calibration file"
    ),
    precision: str = typer.Option(
        "float32",
        "--precision",
        help="openvino, openvino-int8: float32, or bfloat16 where the CPU runs it natively, for what is not int8",
    ),
    lexicon: Optional[Path] = typer.Option(
        None,
        "--lexicon",
        exists=True,
        dir_okay=False,
        help="Word list for the segmenter's decoding (scripts/lexicon.py's words.txt)",
    ),
    lexicon_weight: Optional[float] = typer.Option(
        None, "--lexicon-weight", help="The lexicon's weight (0: no lexicon)"
    ),
    lexicon_tuning: Optional[Path] = typer.Option(
        None, "--lexicon-tuning", exists=True, dir_okay=False, help="scripts/lexicon_tune.py's JSON: its chosen weight"
    ),
) -> None:
    """Put the segmenter and the NER tagger into one pipeline and save it.

    OUTPUT may not be (or hold) MODEL or the --ner model; it is written to a
    temporary directory next to it and renamed into place, replacing an
    earlier pipeline there; another non-empty directory needs --force.
    """
    try:
        # checked before the (slow) models are loaded, and again when saving
        check_output_paths([model, ner_model], [], output_dirs=[output])
        check_output_dir(output, marker="meta.json", force=force)
        weight = lexicon_weight_from(lexicon, lexicon_weight, lexicon_tuning)
        nlp = assemble(
            model,
            ner_model,
            name=name,
            version=version,
            words=words,
            quantize=quantize,
            lexicon=lexicon,
            lexicon_weight=weight,
            calibration=calibration,
            calibration_docs=calibration_docs,
            precision=precision,
        )
        texts = ["张三在北京大学工作。"]
        doc = nlp(texts[0])
        save_pipeline(nlp, output, inputs=[model, ner_model], force=force)
    except (OutputPathError, ValueError) as err:
        msg.fail(str(err), exits=1)
    typer.echo(f"pipeline {nlp.pipe_names} -> {output}")
    if nlp.meta["lexicon"]:
        typer.echo(f"  segmenter lexicon: {nlp.meta['lexicon']['words']:,} words, weight {weight:g}")
    typer.echo(f"  {[t.text for t in doc]}  ents={[(e.text, e.label_) for e in doc.ents]}")
