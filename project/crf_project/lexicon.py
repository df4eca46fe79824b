"""The shipped segmenter's lexicon: a general Chinese word list.

    python crf_project lexicon OUT_DIR [--source jieba | --source PATH]

Writes ``OUT_DIR/words.txt`` (one word of two or more characters per line,
sorted, no whitespace inside a word: what :class:`spacy_crf.pipeline.lexicon.Lexicon`
uses), ``OUT_DIR/dict.txt`` (the source dictionary as it is, frequencies and
tags included: what ``spacy_crf.read_tagged_lexicon.v1`` reads for the learned
lexicon features) and ``OUT_DIR/meta.json`` (where the words came from: file
name, SHA-256, package version, word counts).

``jieba`` (default) takes the dictionary that the ``jieba`` package installs
with itself (``dict.txt``, MIT licence, about 349,000 entries); nothing is
downloaded. A PATH is any UTF-8 word list with one word first on each line
(:func:`spacy_crf.pipeline.lexicon.read_lexicon`). The words are used as a decoding
prior of the segmenter (``lexicon-tune``, ``assemble``), never as training
data, and they are not the SXU training words: SXU OOV recall still counts
every dev word not seen in SXU training as unseen.
"""

import hashlib
import shutil
from importlib import metadata
from pathlib import Path

import typer
from wasabi import msg

from crf_project.script_cli import script_app
from spacy_crf.files import write_json_atomic
from spacy_crf.pipeline.lexicon import Lexicon, read_lexicon


def jieba_dictionary() -> Path:
    """The path of the dictionary the installed ``jieba`` package ships."""
    try:
        files = metadata.files("jieba") or []
    except metadata.PackageNotFoundError:
        raise ValueError(
            "--source jieba: the jieba package is not installed "
            "(pip install jieba, or pip install 'spacy-crf[lexicon]')"
        ) from None
    for f in files:
        if f.as_posix() == "jieba/dict.txt":
            return Path(f.locate())
    raise ValueError("--source jieba: the installed jieba package has no jieba/dict.txt")


def build(source: str, out_dir: Path) -> dict:
    """Write ``words.txt`` and ``meta.json`` into ``out_dir``; the meta."""
    path = jieba_dictionary() if source == "jieba" else Path(source)
    entries = read_lexicon(path)
    lexicon = Lexicon(entries)
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / "words.txt.tmp"
    tmp.write_text("".join(w + "\n" for w in sorted(lexicon.words)), encoding="utf-8")
    tmp.replace(out_dir / "words.txt")
    tmp = out_dir / "dict.txt.tmp"
    shutil.copyfile(path, tmp)
    tmp.replace(out_dir / "dict.txt")
    meta = {
        "source": source if source == "jieba" else path.name,
        "source_file": path.name,
        "source_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "source_version": metadata.version("jieba") if source == "jieba" else None,
        "entries": len(entries),
        "words": len(lexicon),
        "max_length": lexicon.max_length,
    }
    write_json_atomic(out_dir / "meta.json", meta)
    return meta


app = script_app()


@app.command()
def main(
    out_dir: Path = typer.Argument(..., help="Directory for words.txt and meta.json"),
    source: str = typer.Option(
        "jieba", "--source", help="'jieba' (the installed jieba package's dictionary) or a word-list file"
    ),
) -> None:
    try:
        meta = build(source, out_dir)
    except ValueError as e:
        msg.fail(str(e), exits=1)
    msg.good(
        f"lexicon: {meta['words']:,} words of 2 to {meta['max_length']} characters "
        f"(of {meta['entries']:,} entries in {meta['source_file']}) -> {out_dir / 'words.txt'}"
    )
