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

``--contradicted-by TRAIN.spacy`` drops from the prior's ``words.txt`` every
word that the segmentation standard contradicts: it occurs in the training corpus's text
and is never one of its gold words there (SXU always splits 一个, 这种, 不能).
On SXU's block-carved dev such words fire 5,403 times and are a gold word 228
times (4 %), while the other dictionary matches are right 82 % of the time
(19,697 words of jieba's; measured with this rule: a word seen even once and
never a word is dropped; requiring 2 or 5 sightings keeps words that are right
10 % and 1 % of the time). The dropped words are listed in ``dropped.txt``.
With them gone the tuned prior helps again: on the 3,000-step joint model,
the best weight goes from 0 (96.63 word F, 86.69 OOV recall on SXU dev) to
0.5 (96.83, 87.97). ``dict.txt``, the lexicon features' dictionary, keeps
them: the features learn how far to trust each tag class, and the NER head
wants entity words that SXU happens to split.
"""

import hashlib
import shutil
from importlib import metadata
from pathlib import Path
from typing import Iterable, Optional, Set

import typer
from wasabi import msg

from crf_project.script_cli import script_app
from spacy_crf.files import write_json_atomic, write_text_atomic
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


def contradicted_words(words: Iterable[str], corpus: Path) -> Set[str]:
    """The ``words`` that occur in the text of ``corpus`` (a ``.spacy`` file
    whose tokens are the gold words) and are never one of its tokens."""
    from spacy.tokens import DocBin
    from spacy.vocab import Vocab

    if not Path(corpus).is_file():
        raise ValueError(f"--contradicted-by {str(corpus)!r}: no such file (a word-segmented .spacy corpus)")
    lexicon = Lexicon(words)
    seen: Set[str] = set()
    gold: Set[str] = set()
    for doc in DocBin().from_disk(corpus).get_docs(Vocab()):
        gold.update(token.text for token in doc)
        _, ids = lexicon.find(doc.text)
        seen.update(lexicon.word_list[i] for i in set(ids.tolist()))
    return seen - gold


def build(source: str, out_dir: Path, contradicted_by: Optional[Path] = None) -> dict:
    """Write ``words.txt`` (without the words ``contradicted_by`` contradicts,
    listed in ``dropped.txt``), ``dict.txt`` and ``meta.json`` into ``out_dir``; the meta."""
    path = jieba_dictionary() if source == "jieba" else Path(source)
    entries = read_lexicon(path)
    dropped = contradicted_words(entries, contradicted_by) if contradicted_by is not None else set()
    lexicon = Lexicon(w for w in entries if w not in dropped)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out_dir / "words.txt", "".join(w + "\n" for w in sorted(lexicon.words)))
    if dropped:
        write_text_atomic(out_dir / "dropped.txt", "".join(w + "\n" for w in sorted(dropped)))
    else:
        (out_dir / "dropped.txt").unlink(missing_ok=True)
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
        "contradicted_by": str(contradicted_by) if contradicted_by is not None else None,
        "dropped": len(dropped),
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
    contradicted_by: Optional[Path] = typer.Option(
        None,
        "--contradicted-by",
        help="a CWS training .spacy file: drop the words it has in its text but never as a word",
    ),
) -> None:
    try:
        meta = build(source, out_dir, contradicted_by)
    except ValueError as e:
        msg.fail(str(e), exits=1)
    msg.good(
        f"lexicon: {meta['words']:,} words of 2 to {meta['max_length']} characters "
        f"(of {meta['entries']:,} entries in {meta['source_file']}; {meta['dropped']:,} contradicted by the "
        f"training words dropped) -> {out_dir / 'words.txt'}"
    )
