"""``spacy_crf.mention_replacement.v1``: typed mention replacement, a spaCy
augmenter for NER training.

In a share of the training docs that have entities, every entity of a known
type is replaced by another mention of the same type: one seen in the
training corpus, or a dictionary word of a matching tag (jieba's ``nr`` person
names, ``ns`` places, ``nt`` organisations). The doc's other characters and
the entities' labels stay as they were; the entities' offsets move with the
new lengths. A model that sees the same contexts with many names learns
that the context, and the tagger and lexicon features, mark a name, not the
name's own characters: the weak spot of an encoder that never saw most
Chinese names (Dai & Adel, 2020, "An Analysis of Simple Data Augmentation
for Named Entity Recognition": mention replacement).

Docs without entity annotation (the word-segmentation docs of a joint
corpus) and docs without an entity of a known type pass unchanged; so does a
doc whose new entities would not fall on token boundaries. The draws come
from one ``random.Random(seed)``: the same seed and stream give the same docs.
"""

import random
from collections import defaultdict
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Union

from spacy.language import Language
from spacy.tokens import DocBin
from spacy.training import Example
from spacy.util import registry

from ..ml.lexicon_match import MAX_WORD_LENGTH
from ..util import check_number

#: jieba's tags whose words stand in for each entity type (MSRA's PER/LOC/ORG)
DEFAULT_LEXICON_TYPES = {"nr": "PER", "nrfg": "PER", "nrt": "PER", "ns": "LOC", "nt": "ORG"}


def entity_mentions(path: Union[str, Path]) -> Dict[str, List[str]]:
    """The distinct entity texts of a ``.spacy`` corpus by label, in first-seen order."""
    from spacy.vocab import Vocab

    if not Path(path).is_file():
        raise ValueError(f"spacy_crf.mention_replacement.v1: ents {str(path)!r}: no such file (a .spacy NER corpus)")
    try:
        docs = list(DocBin().from_disk(path).get_docs(Vocab()))
    except ValueError as e:
        raise ValueError(f"spacy_crf.mention_replacement.v1: ents {str(path)!r}: not a .spacy file ({e})") from None
    found: Dict[str, Dict[str, None]] = defaultdict(dict)
    for doc in docs:
        for ent in doc.ents:
            if ent.text.strip() and not any(c.isspace() for c in ent.text):
                found[ent.label_][ent.text] = None
    return {label: list(texts) for label, texts in found.items()}


def lexicon_mentions(path: Union[str, Path], types: Dict[str, str]) -> Dict[str, List[str]]:
    """Words of a ``word [freq] [tag]`` dictionary whose tag is a key of
    ``types``, by the label it maps to; words of 2 characters or more."""
    from ..pipeline.lexicon import _fields, _tagged_entry

    found: Dict[str, Dict[str, None]] = defaultdict(dict)
    for line_no, fields in _fields(Path(path)):
        word, _, tag = _tagged_entry(Path(path), line_no, fields)
        if tag in types and 2 <= len(word) <= MAX_WORD_LENGTH:
            found[types[tag]][word] = None
    return {label: list(texts) for label, texts in found.items()}


@registry.augmenters("spacy_crf.mention_replacement.v1")
def make_mention_replacement(
    share: float,
    ents: Optional[Path],
    lexicon: Optional[Path] = None,
    lexicon_share: float = 0.5,
    lexicon_types: Dict[str, str] = DEFAULT_LEXICON_TYPES,
    seed: int = 0,
) -> Callable[[Language, Example], Iterator[Example]]:
    """The augmenter (see the module doc).

    share: the share of docs with entities whose entities are replaced (0: none).
    ents: a ``.spacy`` NER corpus whose entities are the mentions of each label
        (the training corpus itself).
    lexicon: a ``word freq tag`` dictionary (jieba's ``dict.txt``) with more
        mentions; null: the corpus's only.
    lexicon_share: the chance that a replacement comes from the dictionary,
        where it has words of the label.
    lexicon_types: dictionary tag -> entity label.
    seed: of the draws.
    """
    check_number("share", share, minimum=0.0, maximum=1.0, hint="the share of docs changed")
    check_number("lexicon_share", lexicon_share, minimum=0.0, maximum=1.0, hint="the share drawn from the lexicon")
    corpus = entity_mentions(ents) if ents is not None else {}
    words = lexicon_mentions(lexicon, dict(lexicon_types)) if lexicon is not None else {}
    if share > 0 and not corpus and not words:
        raise ValueError(
            "spacy_crf.mention_replacement.v1: no mentions to draw from: set ents (a .spacy NER corpus) "
            "or lexicon (a `word freq tag` dictionary)"
        )
    rng = random.Random(seed)

    def draw(label: str) -> Optional[str]:
        from_corpus, from_lexicon = corpus.get(label), words.get(label)
        if from_lexicon and (not from_corpus or rng.random() < lexicon_share):
            return rng.choice(from_lexicon)
        return rng.choice(from_corpus) if from_corpus else None

    def augment(nlp: Language, example: Example) -> Iterator[Example]:
        reference = example.reference
        if share <= 0 or not reference.has_annotation("ENT_IOB") or not reference.ents or rng.random() >= share:
            yield example
            return
        text, pieces, offsets, at, length = reference.text, [], [], 0, 0
        for ent in reference.ents:
            mention = draw(ent.label_) or ent.text  # a label without mentions keeps its entity
            pieces += [text[at : ent.start_char], mention]
            length += ent.start_char - at
            offsets.append((length, length + len(mention), ent.label_))
            length += len(mention)
            at = ent.end_char
        pieces.append(text[at:])
        new_text = "".join(pieces)
        new_reference = nlp.make_doc(new_text)
        new_ents = [new_reference.char_span(start, end, label=label) for start, end, label in offsets]
        if new_text == text or any(span is None for span in new_ents):
            yield example
            return
        new_reference.ents = new_ents  # type: ignore[assignment]
        new_reference.user_data.update(reference.user_data)
        yield Example(nlp.make_doc(new_text), new_reference)

    return augment
