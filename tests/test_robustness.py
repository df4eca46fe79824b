"""A small segmenter + NER + merge pipeline over hostile and careless input.

Whatever the text, the pipeline must not change ``doc.text``, its tokens
must join back to the text, the merge step must keep every entity the NER
tagger predicted, and ``nlp(text)`` must equal ``nlp.pipe`` at any batch size.
"""

import pytest
import spacy
from spacy.tokens import Doc
from spacy.training import Example

from spacy_crf.training.optimizers import grouped_adam

TRAIN = [
    (["张三", "去", "上海", "。"], [(0, 2, "PER"), (3, 5, "LOC")]),
    (["我", "在", "北京", "工作"], [(2, 4, "LOC")]),
    (["李四", "住", "广州"], [(0, 2, "PER"), (3, 5, "LOC")]),
    (["今天", "天气", "好"], []),
]

ADVERSARIAL = {
    "empty": "",
    "spaces": "   ",
    "newlines": "\n\n",
    "ideographic space": "\u3000",
    "space between words": "张三 去上海",
    "ideographic space inside": "张三\u3000去\u3000上海",
    "crlf": "张三去上海。\r\n李四住广州。\r\n",
    "tabs": "\t张三\t去\t上海\t",
    "emoji": "张三😀去上海🎉",
    "zwj sequence": "👨‍👩‍👧‍👦张三去上海",
    "flags": "🇨🇳北京🇺🇸",
    "combining marks": "café张三e\u0301\u0302去上海",
    "nul": "张三\x00去上海",
    "bom": "\ufeff张三去上海",
    "full-width digits": "２０２６年１２月张三去上海",
    "mixed latin": "张三用iPhone 15 Pro在上海https://example.com/a?b=1工作",
    "only punctuation": "。。！？……",
    "long": "张三去上海，李四住广州。今天天气好！" * 1100,  # ~20k characters
}


@pytest.fixture(scope="module")
def nlp():
    nlp = spacy.blank("zh")
    nlp.add_pipe("crf_tagger", name="segmenter", config={"scheme": "bmes"})
    nlp.add_pipe("crf_tagger", name="ner", config={"scheme": "bioes"})
    nlp.add_pipe("crf_merge_words", name="merge_words")
    examples = []
    for words, ents in TRAIN:
        text = "".join(words)
        ref = Doc(nlp.vocab, words=words, spaces=[False] * len(words))
        examples.append(Example(nlp.make_doc(text), ref))
        examples.append(Example.from_dict(nlp.make_doc(text), {"entities": ents}))
    optimizer = nlp.initialize(lambda: examples, sgd=grouped_adam(1e-2, crf_lr_multiplier=10))
    for _ in range(15):
        nlp.update(examples, sgd=optimizer)
    return nlp


def _annotations(doc):
    return (
        doc.text,
        [(t.idx, t.text, t.whitespace_) for t in doc],
        [(e.start_char, e.end_char, e.label_) for e in doc.ents],
        {key: [(s.start_char, s.end_char, s.label_) for s in group] for key, group in doc.spans.items()},
    )


def _before_merge(nlp, text):
    doc = nlp.make_doc(text)
    for name, proc in nlp.pipeline:
        if name != "merge_words":
            doc = proc(doc)
    return doc


@pytest.mark.parametrize("case", sorted(ADVERSARIAL))
def test_text_tokens_and_entities_survive(nlp, case):
    text = ADVERSARIAL[case]
    doc = nlp(text)
    assert doc.text == text
    assert "".join(t.text_with_ws for t in doc) == text
    assert all(t.text for t in doc)
    before = _before_merge(nlp, text)
    assert [(e.start_char, e.end_char, e.label_) for e in doc.ents] == [
        (e.start_char, e.end_char, e.label_) for e in before.ents
    ]
    # No token mixes whitespace with other characters.
    assert all(t.is_space or not any(ch.isspace() for ch in t.text) for t in doc)


def test_call_and_pipe_agree_at_every_batch_size(nlp):
    texts = [ADVERSARIAL[k] for k in sorted(ADVERSARIAL)]
    expected = [_annotations(nlp(text)) for text in texts]
    for batch_size in (1, 3, 64):
        got = [_annotations(doc) for doc in nlp.pipe(texts, batch_size=batch_size)]
        assert got == expected, f"batch_size={batch_size}"
