"""What the benchmark scripts share: reading texts, checking their arguments, writing the result.

Each script prints a table and writes its JSON record; an argument out of
range, a missing input or an output that would overwrite an input is a
usage error (exit 2) before any work.
"""

import argparse
import functools
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional

from spacy.tokens import Doc

from spacy_crf.corpora.base import read_docbin
from spacy_crf.files import check_output_paths, write_json_atomic
from spacy_crf.util import check_number

#: The transformer of the benchmarks' pipelines: the encoder at ``{name}`` (a
#: local folder), in strided windows as the shipped configs run it.
TRANSFORMER_BLOCK = """
[components.transformer]
factory = "transformer"
max_batch_items = 4096

[components.transformer.model]
@architectures = "spacy-transformers.TransformerModel.v3"
name = "{name}"
mixed_precision = false

[components.transformer.model.get_spans]
@span_getters = "spacy-transformers.strided_spans.v1"
window = 128
stride = 96

[components.transformer.model.tokenizer_config]
use_fast = true
"""


def crf_head(name: str, factory: str, settings: str = "", model_settings: str = "") -> str:
    """The config block of a CRF tagger component ``name`` (``factory``)
    listening to the transformer with mean pooling; ``settings`` and
    ``model_settings`` are extra lines for its component and model sections."""
    return f"""
[components.{name}]
factory = "{factory}"
{settings}
[components.{name}.model]
@architectures = "spacy_crf.CRFTagger.v1"
{model_settings}
[components.{name}.model.tok2vec]
@architectures = "spacy-transformers.TransformerListener.v1"
grad_factor = 1.0
upstream = "*"

[components.{name}.model.tok2vec.pooling]
@layers = "reduce_mean.v1"
"""


def pipeline_config(encoder, pipeline: List[str], blocks: Iterable[str], batch_size: int = 128) -> str:
    """Config text of a zh pipeline: the transformer over ``encoder`` (a local
    folder), then the components whose ``blocks`` are given (``crf_head``)."""
    names = ", ".join(f'"{name}"' for name in pipeline)
    header = f'[nlp]\nlang = "zh"\npipeline = [{names}]\nbatch_size = {batch_size}\n\n[components]\n'
    return header + TRANSFORMER_BLOCK.replace("{name}", str(encoder)) + "".join(blocks)


def load_transformer_pipeline(path: Path):
    """``spacy.load(path)``; exit if the pipeline has no ``transformer`` component."""
    import spacy

    nlp = spacy.load(path)
    if "transformer" not in nlp.pipe_names:
        sys.exit(f"{path}: no 'transformer' component")
    return nlp


def encoder_of(nlp):
    """The Hugging Face model (or ONNX stand-in) inside the pipeline's transformer."""
    return nlp.get_pipe("transformer").model.layers[0].shims[0]._hfmodel.transformer


def read_texts(paths: List[Path], limit: int, vocab) -> List[str]:
    """The texts of the first ``limit`` docs of each ``.spacy`` file (exit if one has none)."""
    texts = []
    for path in paths:
        docs = read_docbin(path, vocab)
        if not docs:
            sys.exit(f"{path}: no docs")
        texts.extend(doc.text for doc in docs[:limit])
    return texts


def pipeline_texts_parser(doc: str, *, repeats: int, out: str) -> argparse.ArgumentParser:
    """The options of a benchmark that times a pipeline over dev texts:
    PIPELINE DATA.spacy... --limit --batch-size --repeats --threads --out."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("pipeline", type=Path, help="A pipeline directory with a transformer component")
    parser.add_argument("data", type=Path, nargs="+", help=".spacy files whose texts are timed")
    parser.add_argument("--limit", type=int, default=1000, help="texts of each file")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=repeats)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path(out))
    return parser


def check_args(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    counts: Iterable[str],
    inputs: Iterable[Optional[Path]],
    output: Path,
) -> None:
    """Usage errors for options in ``counts`` below 1, inputs that do not
    exist, and an ``output`` that is one of the inputs."""
    for name in counts:
        try:
            check_number(f"--{name.replace('_', '-')}", getattr(args, name), minimum=1)
        except ValueError as e:
            parser.error(str(e))
    inputs = [path for path in inputs if path is not None]
    for path in inputs:
        if not path.exists():
            parser.error(f"{path}: no such file or directory")
    try:
        check_output_paths(inputs, [output])
    except ValueError as e:
        parser.error(str(e))


def finish(result: Dict[str, Any], table: Callable[[Dict[str, Any]], str], output: Path) -> None:
    """Print the result's table and write its JSON record."""
    print(table(result))
    write_json_atomic(output, result)
    print(f"wrote {output}")


def doc_view(doc: Doc) -> tuple:
    """What a benchmark compares between two ways of making a doc: its text,
    its tokens' offsets, its entities and every span group, with labels."""
    return (
        doc.text,
        tuple((t.idx, len(t)) for t in doc),
        tuple((e.start_char, e.end_char, e.label_) for e in doc.ents),
        tuple((key, tuple((s.start_char, s.end_char, s.label_) for s in group)) for key, group in doc.spans.items()),
    )


def timed(counter: Counter, label: str, function: Callable) -> Callable:
    """``function``, adding the wall seconds of each call to ``counter[label]``."""

    @functools.wraps(function)
    def call(*args, **kwargs):
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            counter[label] += time.perf_counter() - start

    return call
