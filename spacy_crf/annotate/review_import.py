"""Label Studio's JSON export back into ``.spacy`` training data
(``spacy crf import-review``), the way back of :mod:`.review`.

Each task gives one doc: its latest annotation that was not cancelled (by
``updated_at``, else ``created_at``; in list order when a timestamp is
missing), or, when the task has no annotation, its last prediction. A task
whose every annotation was cancelled (skipped in Label Studio) gives no doc
and is counted. The doc's text is the task's ``data.text``, never changed.
Regions of the ``label`` control are its entities; regions of the ``word``
control, when there are any, are its tokens (the gold words, as the
segmentation corpora's docs are), with the whitespace between them as
spaCy's tokenizer keeps it; without word regions the doc is tokenized by
the language or pipeline given.

Nothing is guessed: a region that overlaps another of its control, lies
outside the text, holds a text other than the one at its offsets, belongs to
another control, or an entity that does not fall on token boundaries, stops
the import with one line naming the file, the task (its position in the
list, from 0, and its Label Studio id) and what is wrong.
"""

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from spacy.language import Language
from spacy.tokens import Doc

from ..files import PathLike, atomic_path, check_output_paths
from .review import ENT_CONTROL, TEXT_OBJECT, WORD_CONTROL, WORD_LABEL, ReviewError

Region = Tuple[int, int, str]


def _timestamp(annotation: Dict[str, Any]) -> Optional[datetime]:
    value = annotation.get("updated_at") or annotation.get("created_at")
    if not isinstance(value, str):
        return None
    try:
        stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)


def chosen_result(task: Dict[str, Any], where: str) -> Tuple[Optional[list], str]:
    """``(result, source)``: the regions of the task's latest annotation not
    cancelled (``"annotation"``), of its last prediction when it has no
    annotation (``"prediction"``), or ``(None, "cancelled")``."""
    annotations = task.get("annotations") or []
    if not isinstance(annotations, list) or not all(isinstance(a, dict) for a in annotations):
        raise ReviewError(f"{where}: 'annotations' is not a list of objects")
    live = [(k, a) for k, a in enumerate(annotations) if not a.get("was_cancelled")]
    if annotations and not live:
        return None, "cancelled"
    if live:
        stamps = [_timestamp(a) for _, a in live]
        if all(stamps):
            latest = max(range(len(live)), key=lambda i: (stamps[i], live[i][0]))
        else:
            latest = len(live) - 1
        return live[latest][1].get("result"), "annotation"
    predictions = task.get("predictions") or []
    if not isinstance(predictions, list) or not predictions:
        raise ReviewError(f"{where}: the task has neither an annotation nor a prediction")
    if not isinstance(predictions[-1], dict):
        raise ReviewError(
            f"{where}: its prediction is a reference ({predictions[-1]!r}), not the regions; "
            "export the project in Label Studio's JSON format"
        )
    return predictions[-1].get("result"), "prediction"


def parse_regions(result: Any, text: str, where: str) -> Tuple[List[Region], List[Region]]:
    """The entity and word regions ``(start, end, label)`` of a result, each
    control's sorted and checked (see the module docstring)."""
    if not isinstance(result, list):
        raise ReviewError(f"{where}: the result is not a list of regions")
    regions: Dict[str, List[Region]] = {ENT_CONTROL: [], WORD_CONTROL: []}
    for r, region in enumerate(result):
        at = f"{where}: region {r}"
        if not isinstance(region, dict):
            raise ReviewError(f"{at} is not an object")
        control = region.get("from_name")
        if control not in regions:
            raise ReviewError(
                f"{at}: from_name {control!r} is neither {ENT_CONTROL!r} (entities) nor {WORD_CONTROL!r} (words)"
            )
        if region.get("type") != "labels" or region.get("to_name") != TEXT_OBJECT:
            raise ReviewError(
                f"{at}: expected type 'labels' on {TEXT_OBJECT!r}, got type {region.get('type')!r} "
                f"on {region.get('to_name')!r}"
            )
        value = region.get("value")
        if not isinstance(value, dict):
            raise ReviewError(f"{at}: no 'value' object")
        start, end, labels = value.get("start"), value.get("end"), value.get("labels")
        if isinstance(start, bool) or isinstance(end, bool) or not isinstance(start, int) or not isinstance(end, int):
            raise ReviewError(f"{at}: start and end must be integers, got {start!r} and {end!r}")
        if not 0 <= start < end <= len(text):
            raise ReviewError(f"{at}: offsets [{start}, {end}) are outside the text of {len(text)} characters")
        if "text" in value and value["text"] != text[start:end]:
            raise ReviewError(
                f"{at}: its text {value['text']!r} does not match {text[start:end]!r}, the text at [{start}, {end})"
            )
        if not (isinstance(labels, list) and len(labels) == 1 and isinstance(labels[0], str) and labels[0]):
            raise ReviewError(f"{at}: expected exactly one label, got {labels!r}")
        if control == WORD_CONTROL and labels[0] != WORD_LABEL:
            raise ReviewError(f"{at}: a word region's label must be {WORD_LABEL!r}, got {labels[0]!r}")
        regions[control].append((start, end, labels[0]))
    for control, what in ((ENT_CONTROL, "entity"), (WORD_CONTROL, "word")):
        found = sorted(regions[control])
        for (s1, e1, l1), (s2, e2, l2) in zip(found, found[1:]):
            if s2 < e1:
                raise ReviewError(
                    f"{where}: {what} regions [{s1}, {e1}) {text[s1:e1]!r} {l1} and [{s2}, {e2}) "
                    f"{text[s2:e2]!r} {l2} overlap"
                )
        regions[control] = found
    return regions[ENT_CONTROL], regions[WORD_CONTROL]


def words_doc(nlp: Language, text: str, words: Sequence[Region], where: str) -> Doc:
    """A doc whose tokens are ``words``, the whitespace between them a single
    space after a word (spaCy's trailing space) or a whitespace token."""
    tokens: List[str] = []
    spaces: List[bool] = []
    pos = 0
    for start, end, _ in [*words, (len(text), len(text), "")]:
        gap = text[pos:start]
        if gap.strip():
            k = pos + len(gap) - len(gap.lstrip())
            raise ReviewError(f"{where}: character {k} {text[k]!r} is in no word region")
        if gap.startswith(" ") and tokens and not spaces[-1]:
            spaces[-1], gap = True, gap[1:]
        if gap:
            tokens.append(gap)
            spaces.append(False)
        word = text[start:end]
        if end > start and any(c.isspace() for c in word):
            raise ReviewError(f"{where}: word region [{start}, {end}) {word!r} holds whitespace")
        if end > start:
            tokens.append(word)
            spaces.append(False)
        pos = end
    return Doc(nlp.vocab, words=tokens, spaces=spaces)


def task_doc(nlp: Language, task: Any, where: str) -> Tuple[Optional[Doc], str, bool]:
    """``(doc, source, has_words)`` of one task (``doc`` None when cancelled)."""
    if not isinstance(task, dict):
        raise ReviewError(f"{where}: a task is an object, got {type(task).__name__}")
    data = task.get("data")
    text = data.get(TEXT_OBJECT) if isinstance(data, dict) else None
    if not isinstance(text, str):
        raise ReviewError(f"{where}: no data.{TEXT_OBJECT} string (export in Label Studio's JSON format, not JSON-MIN)")
    result, source = chosen_result(task, where)
    if source == "cancelled":
        return None, source, False
    ents, words = parse_regions(result, text, where)
    doc = words_doc(nlp, text, words, where) if words else nlp.make_doc(text)
    if doc.text != text:
        raise ReviewError(f"{where}: the tokenizer changed the text {text!r} into {doc.text!r}")
    spans = []
    for start, end, label in ents:
        span = doc.char_span(start, end, label=label)
        if span is None:
            why = "a word region crosses it" if words else "it starts or ends with whitespace"
            raise ReviewError(
                f"{where}: entity region [{start}, {end}) {text[start:end]!r} {label} does not start and end "
                f"on token boundaries ({why})"
            )
        spans.append(span)
    doc.ents = spans
    return doc, source, bool(words)


def read_export(path: Path) -> list:
    try:
        tasks = json.loads(path.read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise ReviewError(f"{path}: not a JSON file ({err})") from None
    if not isinstance(tasks, list):
        raise ReviewError(f"{path}: expected a list of tasks (Label Studio's JSON export), got {type(tasks).__name__}")
    if not tasks:
        raise ReviewError(f"{path}: the export holds no task")
    return tasks


def import_review(
    export_path: PathLike, output_path: PathLike, *, lang: Optional[str] = None, nlp: Optional[Language] = None
) -> Dict[str, int]:
    """Read Label Studio's JSON export ``export_path`` and write its docs to
    ``output_path`` (``.spacy``). Docs without word regions are tokenized by
    ``nlp`` (a pipeline's tokenizer) or a blank pipeline of ``lang``. Every
    task is checked before anything is written. Returns counts."""
    export, out = Path(export_path), Path(output_path)
    if (lang is None) == (nlp is None):
        raise ReviewError("give the language (lang) or a pipeline (nlp), not both and not neither")
    if not out.name.lower().endswith(".spacy"):
        raise ReviewError(f"output {out}: expected a .spacy file")
    if not export.is_file():
        raise ReviewError(f"export {export} is not a file")
    check_output_paths([export], [out])
    if nlp is None:
        from spacy.util import get_lang_class

        try:
            nlp = get_lang_class(str(lang))()
        except Exception as err:  # noqa: BLE001 - an unknown code, a missing dependency: one line
            raise ReviewError(f"language {lang!r} cannot be loaded: {err}") from None
    docs: List[Doc] = []
    counts = {"tasks": 0, "annotation": 0, "prediction": 0, "cancelled": 0, "entities": 0}
    with_words: Dict[bool, List[str]] = {True: [], False: []}
    for i, task in enumerate(read_export(export)):
        label_id = task.get("id") if isinstance(task, dict) else None
        where = f"{export}: task {i}" + (f" (id {label_id})" if label_id is not None else "")
        doc, source, has_words = task_doc(nlp, task, where)
        counts["tasks"] += 1
        counts[source] += 1
        if doc is None:
            continue
        if doc.text.strip():
            with_words[has_words].append(where)
        counts["entities"] += len(doc.ents)
        docs.append(doc)
    if with_words[True] and with_words[False]:
        raise ReviewError(
            f"{with_words[False][0]}: the task has no word regions while others have them "
            f"(first: {with_words[True][0].split(': ', 1)[1]}); its tokens would not be its words"
        )
    if not docs:
        raise ReviewError(f"{export}: no doc to write, every task was cancelled")
    from spacy.tokens import DocBin

    with atomic_path(out) as tmp:
        DocBin(docs=docs).to_disk(tmp)
    counts["docs"] = len(docs)
    counts["with_words"] = len(docs) if with_words[True] else 0
    return counts
