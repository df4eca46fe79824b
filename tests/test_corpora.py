"""Corpus readers, splitting, dev carving and the .spacy converter.

Every sample is written to tmp_path and mimics the real file it stands for.
"""

import hashlib
import random
import re
import warnings
from collections import Counter
from pathlib import Path

import pytest
import spacy
import typer
from spacy.tokens import Doc, DocBin, Span
from spacy.training import Example
from typer.testing import CliRunner

from spacy_crf.cli.convert_corpus import convert_corpus_cli
from spacy_crf.corpora import (
    MENTIONS_KEY,
    CorpusFormatError,
    CorpusWarning,
    SplitError,
    carve_dev,
    carve_lines,
    convert_corpus,
    create_char_corpus_reader,
    dev_blocks,
    read_char_bio,
    read_char_bmes,
    read_cluener,
    read_sighan,
    read_weibo,
    read_word_list,
    split_long,
)


@pytest.fixture(scope="module")
def nlp():
    return spacy.blank("zh")


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode("utf8"))
    return path


def ents(doc):
    return [(e.start_char, e.end_char, e.label_, e.text) for e in doc.ents]


def same_tokens(a: Doc, b: Doc) -> bool:
    return [(t.text, t.whitespace_) for t in a] == [(t.text, t.whitespace_) for t in b]


def read_all(reader, *args, **kwargs):
    """Run a reader; return (docs, stats, warning messages)."""
    stats = Counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CorpusWarning)
        docs = list(reader(*args, stats=stats, **kwargs))
    return docs, stats, [str(w.message) for w in caught if issubclass(w.category, CorpusWarning)]


# --- SIGHAN -----------------------------------------------------------------------------

SXU_SAMPLE = (
    "上海  推  “  迎  奥运  ”  三  大  任务  ２００７  －  ０６  －  １１  １５：０６：４８  来源  ：  中国  体育报  。\n"
    "\n"
    "本  报  讯  日前  ，  上海市  体育局  召开  会议  。\n"
    "iPhone  用户  \ue3b2  增加\n"
)


def test_read_sighan_words_and_text(tmp_path, nlp):
    path = write(tmp_path, "train.txt", SXU_SAMPLE)
    docs, stats, warned = read_all(read_sighan, path, nlp.vocab)
    assert len(docs) == 3
    assert stats["blank_lines"] == 1
    assert stats["separators_not_two_spaces"] == 0
    assert not warned
    first = docs[0]
    assert [t.text for t in first][:6] == ["上海", "推", "“", "迎", "奥运", "”"]
    assert first.text == SXU_SAMPLE.split("\n")[0].replace("  ", "")
    assert all(t.whitespace_ == "" for doc in docs for t in doc)
    assert not any(doc.has_unknown_spaces for doc in docs)
    assert [t.text for t in docs[2]] == ["iPhone", "用户", "\ue3b2", "增加"]
    assert docs[1].user_data["spacy_crf.source"] == f"{path}:3"


def test_read_sighan_odd_but_valid_whitespace(tmp_path, nlp):
    # BOM, single-space separator, trailing spaces, CRLF, whitespace-only line.
    text = "\ufeff迈向  充满  希望  \r\n   \r\n的 新  世纪\n"
    path = write(tmp_path, "pku.utf8", text)
    docs, stats, _ = read_all(read_sighan, path, nlp.vocab)
    assert [[t.text for t in d] for d in docs] == [["迈向", "充满", "希望"], ["的", "新", "世纪"]]
    assert stats["byte_order_mark_removed"] == 1
    assert stats["crlf_line_endings"] == 2
    assert stats["blank_lines"] == 1
    assert stats["lines_with_edge_spaces"] == 1
    assert stats["separators_not_two_spaces"] == 1


@pytest.mark.parametrize(
    "bad_line,needle",
    [("中国\u3000人民", "U+3000"), ("中国\t人民", "U+0009"), ("中国  人\u00a0民", "U+00A0")],
)
def test_read_sighan_whitespace_inside_line_is_an_error(tmp_path, nlp, bad_line, needle):
    path = write(tmp_path, "gold.utf8", "上海  推\n" + bad_line + "\n")
    with pytest.raises(CorpusFormatError, match=re.escape("gold.utf8:2: column ")) as err:
        list(read_sighan(path, nlp.vocab))
    assert needle in str(err.value)
    assert err.value.line == 2


def test_read_sighan_invalid_utf8_names_the_line(tmp_path, nlp):
    path = tmp_path / "bad.txt"
    path.write_bytes("上海  推\n中国\n".encode("utf8") + b"\xff\xfe  x\n")
    with pytest.raises(CorpusFormatError, match=r"bad.txt:3: invalid UTF-8"):
        list(read_sighan(path, nlp.vocab))


def test_cws_reference_aligns_with_char_tokens(tmp_path, nlp):
    path = write(tmp_path, "train.txt", SXU_SAMPLE)
    for ref in read_sighan(path, nlp.vocab):
        eg = Example(nlp.make_doc(ref.text), ref)
        # every character token sits in exactly one word, and each word gets its characters
        assert list(eg.alignment.x2y.lengths) == [1] * len(eg.predicted)
        assert list(eg.alignment.y2x.lengths) == [len(word.text) for word in ref]
        assert [t.text for t in eg.predicted] == list(ref.text)


def test_read_word_list(tmp_path):
    path = write(tmp_path, "cityu_training_words.utf8", "\n專任\nPhang\u3000Nga\na\x08前\n專任\n")
    stats = Counter()
    words = read_word_list(path, stats=stats)
    assert words == {"專任", "Phang\u3000Nga", "a\x08前"}
    assert stats["blank_lines"] == 1
    assert stats["duplicate_words"] == 1
    bad = write(tmp_path, "bad_words.utf8", "專任\n 前\n")
    with pytest.raises(CorpusFormatError, match=r"bad_words.utf8:2: word ' 前'"):
        read_word_list(bad)


# --- BIO (MSRA) -------------------------------------------------------------------------------

MSRA_SAMPLE = (
    "".join(
        f"{c}\t{t}\n"
        for c, t in [
            ("因", "O"),
            ("有", "O"),
            ("日", "B-LOC"),
            ("寇", "O"),
            ("在", "O"),
            ("京", "B-LOC"),
            ("中", "B-ORG"),
            ("国", "I-ORG"),
            ("银", "I-ORG"),
            ("行", "I-ORG"),
            ("。", "O"),
        ]
    )
    + "\n"
    + "".join(
        f"{c}\t{t}\n"
        for c, t in [
            ("电", "O"),
            ("话", "O"),
            ("：", "O"),
            ("<", "O"),
            ("A", "O"),
            ("=", "O"),
            ('"', "O"),
            ("P", "O"),
            ("/", "O"),
            (">", "O"),
            ("张", "B-PER"),
            ("三", "I-PER"),
        ]
    )
    + "\n\n"
)


def test_read_char_bio_msra(tmp_path, nlp):
    path = write(tmp_path, "msra_train_bio", MSRA_SAMPLE)
    docs, stats, warned = read_all(read_char_bio, path, nlp.vocab)
    assert not warned
    assert [d.text for d in docs] == ["因有日寇在京中国银行。", '电话：<A="P/>张三']
    assert ents(docs[0]) == [(2, 3, "LOC", "日"), (5, 6, "LOC", "京"), (6, 10, "ORG", "中国银行")]
    assert ents(docs[1]) == [(10, 12, "PER", "张三")]
    for doc in docs:  # reference tokens are exactly the predicted tokens
        assert same_tokens(doc, nlp.make_doc(doc.text))
    assert stats["separator_detected_tab"] == 1
    assert docs[1].user_data["spacy_crf.source"] == f"{path}:13"


def test_read_char_bio_orphan_and_label_change_are_kept_and_warned(tmp_path, nlp):
    text = "我\tO\n北\tI-LOC\n京\tI-LOC\n张\tB-PER\n三\tI-ORG\n"
    path = write(tmp_path, "odd_bio", text)
    docs, stats, warned = read_all(read_char_bio, path, nlp.vocab)
    assert ents(docs[0]) == [(1, 3, "LOC", "北京"), (3, 4, "PER", "张"), (4, 5, "ORG", "三")]
    assert stats["orphan_I_tags"] == 2
    assert any(m.startswith(f"{path}:2: I-LOC follows O") for m in warned)
    assert any(m.startswith(f"{path}:5: I-ORG follows B-PER") for m in warned)
    assert docs[0].text == "我北京张三"


def test_read_char_bio_whitespace_and_multichar_fields(tmp_path, nlp):
    # A space char, an ideographic space, a multi-char field and an entity with a space edge.
    text = "a\tO\n \tO\nb\tB-X\n\u3000\tI-X\n\u3000\tO\nc\tO\n \tB-Y\nd\tI-Y\nef\tO\n"
    path = write(tmp_path, "ws_bio", text)
    docs, stats, warned = read_all(read_char_bio, path, nlp.vocab, sep="\t")
    (doc,) = docs
    assert doc.text == "a b\u3000\u3000c def"
    assert same_tokens(doc, nlp.make_doc(doc.text))
    # X keeps its inner/edge char offsets minus the trailing ideographic space; Y loses its leading space
    assert ents(doc) == [(2, 3, "X", "b"), (7, 8, "Y", "d")]
    assert stats["whitespace_char_fields"] == 4
    assert stats["entity_edges_trimmed"] == 2
    assert stats["multi_char_fields"] == 1
    assert any(m.startswith(f"{path}:9: character field 'ef'") for m in warned)


@pytest.mark.parametrize(
    "line,needle",
    [
        ("中", "expected a character"),
        ("中\tX-LOC", "invalid BIO tag"),
        ("\tO", "empty character field"),
        ("中\tB-", "invalid BIO tag"),
        ("中\tE-LOC", "invalid BIO tag"),
    ],
)
def test_read_char_bio_malformed_lines(tmp_path, nlp, line, needle):
    path = write(tmp_path, "bad_bio", "我\tO\n\n们\tO\n" + line + "\n")
    with pytest.raises(CorpusFormatError, match=re.escape("bad_bio:4: ") + ".*" + re.escape(needle)):
        list(read_char_bio(path, nlp.vocab, sep="\t"))


def test_read_char_bio_space_separator_detected(tmp_path, nlp):
    path = write(tmp_path, "space_bio", "北 B-LOC\n京 I-LOC\n  O\n")
    docs, stats, _ = read_all(read_char_bio, path, nlp.vocab)
    assert docs[0].text == "北京 " and ents(docs[0]) == [(0, 2, "LOC", "北京")]
    assert stats["separator_detected_space"] == 1


# --- BMES (Resume) --------------------------------------------------------------------------------

RESUME_SAMPLE = (
    "高 B-NAME\n勇 E-NAME\n： O\n男 O\n， O\n\n"
    "1 O\n9 O\n汉 B-RACE\n族 E-RACE\n， O\n张 S-NAME\n美 B-ORG\n国 M-ORG\n协 M-ORG\n会 E-ORG\n"
    "P B-TITLE\nM M-TITLE\nI E-TITLE\n"
)


def test_read_char_bmes_resume(tmp_path, nlp):
    path = write(tmp_path, "train.char.bmes", RESUME_SAMPLE)
    docs, stats, warned = read_all(read_char_bmes, path, nlp.vocab)
    assert not warned
    assert [d.text for d in docs] == ["高勇：男，", "19汉族，张美国协会PMI"]
    assert ents(docs[0]) == [(0, 2, "NAME", "高勇")]
    assert ents(docs[1]) == [
        (2, 4, "RACE", "汉族"),
        (5, 6, "NAME", "张"),
        (6, 10, "ORG", "美国协会"),
        (10, 13, "TITLE", "PMI"),
    ]
    assert all(same_tokens(d, nlp.make_doc(d.text)) for d in docs)


def test_read_char_bmes_repairs(tmp_path, nlp):
    # An ORG cut by a sentence break (as in Resume train), an orphan E, a label change.
    text = "俄 B-ORG\n罗 M-ORG\n。 M-ORG\n\n彼 M-ORG\n得 E-ORG\n院 E-TITLE\n董 B-TITLE\n事 E-ORG\n"
    path = write(tmp_path, "odd.char.bmes", text)
    docs, stats, warned = read_all(read_char_bmes, path, nlp.vocab)
    assert ents(docs[0]) == [(0, 3, "ORG", "俄罗。")]
    assert ents(docs[1]) == [(0, 2, "ORG", "彼得"), (2, 3, "TITLE", "院"), (3, 4, "TITLE", "董"), (4, 5, "ORG", "事")]
    assert stats["unterminated_entities"] == 2
    assert stats["orphan_M_E_tags"] == 3
    assert any(m.startswith(f"{path}:3: ORG entity opened at line 1") for m in warned)
    assert any(m.startswith(f"{path}:5: M-ORG follows sentence start") for m in warned)
    assert any(m.startswith(f"{path}:9: E-ORG follows B-TITLE") for m in warned)


def test_read_char_bmes_rejects_bio_tags(tmp_path, nlp):
    path = write(tmp_path, "bad.char.bmes", "高 B-NAME\n勇 I-NAME\n")
    with pytest.raises(CorpusFormatError, match=r"bad.char.bmes:2: invalid BMES tag 'I-NAME'"):
        list(read_char_bmes(path, nlp.vocab))


# --- Weibo ------------------------------------------------------------------------------------------

WEIBO_SAMPLE = (
    "对0\tO\n输0\tO\n给1\tO\n女0\tB-PER.NOM\n人1\tI-PER.NOM\n\n"
    "S0\tO\nt1\tO\no2\tO\nr3\tO\ne4\tO\n55\tO\n66\tO\n77\tO\n88\tO\n99\tO\n310\tB-ORG.NAM\n011\tI-ORG.NAM\n"
    "\ufffd\ufffd0\tO\n嘉0\tB-LOC.NAM\n鱼1\tI-LOC.NAM\n\n"
)


def test_read_weibo(tmp_path, nlp):
    path = write(tmp_path, "weiboNER_2nd_conll.train", WEIBO_SAMPLE)
    docs, stats, warned = read_all(read_weibo, path, nlp.vocab)
    assert [d.text for d in docs] == ["对输给女人", "Store5678930\ufffd\ufffd嘉鱼"]
    assert ents(docs[0]) == [(3, 5, "PER.NOM", "女人")]
    assert ents(docs[1]) == [(10, 12, "ORG.NAM", "30"), (14, 16, "LOC.NAM", "嘉鱼")]
    assert stats["multi_char_fields"] == 1
    assert any(m.startswith(f"{path}:19: character field") for m in warned)
    assert all(same_tokens(d, nlp.make_doc(d.text)) for d in docs)


def test_read_weibo_position_errors(tmp_path, nlp):
    broken = write(tmp_path, "broken.weibo", "今0\tO\n越2\tO\n")
    docs, stats, warned = read_all(read_weibo, broken, nlp.vocab)
    assert docs[0].text == "今越" and stats["weibo_position_breaks"] == 1
    assert warned[0].startswith(f"{broken}:2: position in '越2'")
    bad = write(tmp_path, "bad.weibo", "今0\tO\n天\tO\n")
    with pytest.raises(CorpusFormatError, match=r"bad.weibo:2: Weibo character field '天'"):
        list(read_weibo(bad, nlp.vocab))


# --- CLUENER ----------------------------------------------------------------------------------------

CLUENER_SAMPLE = """{
  "text": "浙商银行企业信贷部叶老桂博士则从另一个角度",
  "label": {
    "name": {
      "叶老桂": [
        [
          9,
          11
        ]
      ]
    },
    "company": {
      "浙商银行": [
        [
          0,
          3
        ]
      ]
    }
  }
}
{"text": "生生不息CSOL生化狂潮", "label": {"game": {"CSOL": [[4, 7], [4, 7]]}}}
{
  "text": "《招商银行：投资永隆银行》的文章",
  "label": {
    "book": {"《招商银行：投资永隆银行》": [[0, 12]]},
    "company": {"招商银行": [[1, 4]], "永隆银行": [[8, 11]]}
  }
}
"""


def test_read_cluener(tmp_path, nlp):
    path = write(tmp_path, "train.json", CLUENER_SAMPLE)
    docs, stats, warned = read_all(read_cluener, path, nlp.vocab)
    assert len(docs) == 3
    assert ents(docs[0]) == [(0, 4, "company", "浙商银行"), (9, 12, "name", "叶老桂")]
    assert ents(docs[1]) == [(4, 8, "game", "CSOL")]
    assert stats["duplicate_mentions"] == 1
    # nested mentions: the longest is the entity, all three stay in the span group
    assert ents(docs[2]) == [(0, 13, "book", "《招商银行：投资永隆银行》")]
    assert sorted((s.text, s.label_) for s in docs[2].spans[MENTIONS_KEY]) == [
        ("《招商银行：投资永隆银行》", "book"),
        ("招商银行", "company"),
        ("永隆银行", "company"),
    ]
    assert stats["overlapping_mentions_not_in_ents"] == 2
    assert len(warned) == 2 and all(m.startswith(f"{path}:23: company mention") for m in warned)
    assert [d.user_data["spacy_crf.source"] for d in docs] == [f"{path}:1", f"{path}:22", f"{path}:23"]
    assert all(same_tokens(d, nlp.make_doc(d.text)) for d in docs)


def test_read_cluener_test_file_without_labels(tmp_path, nlp):
    path = write(
        tmp_path,
        "test.json",
        '{\n  "id": 0,\n  "text": "四川敦煌学"\n}\n{\n  "id": 1,\n  "text": "销售冠军：辐射3-Bethesda"\n}\n',
    )
    docs, _, warned = read_all(read_cluener, path, nlp.vocab)
    assert [d.text for d in docs] == ["四川敦煌学", "销售冠军：辐射3-Bethesda"]
    assert not any(d.ents for d in docs) and not warned


@pytest.mark.parametrize(
    "obj,needle",
    [
        (
            '{"text": "北京欢迎你", "label": {"address": {"北京": [[1, 2]]}}}',
            "mention '北京' at [1, 2] does not match the text there: '京欢'",
        ),
        ('{"text": "北京", "label": {"address": {"北京": [[0, 5]]}}}', "outside the text"),
        ('{"text": "北京", "label": {"address": {"北京": [[0]]}}}', "is not [start, end]"),
        ('{"label": {}}', 'no string field "text"'),
        ('{"text": "北京", "labels": {}}', "unexpected fields"),
        ('{"text": "北京" "label": {}}', "invalid JSON"),
        ("[1, 2]", "expected a JSON object"),
    ],
)
def test_read_cluener_errors_name_the_object_line(tmp_path, nlp, obj, needle):
    good = '{\n  "text": "你好",\n  "label": {}\n}\n'
    path = write(tmp_path, "dev.json", good + good + obj + "\n")
    with pytest.raises(CorpusFormatError, match=re.escape("dev.json:9: ") + ".*" + re.escape(needle)):
        list(read_cluener(path, nlp.vocab))


# --- split_long ----------------------------------------------------------------------------------------


def cws_doc(nlp, words):
    return Doc(nlp.vocab, words=words, spaces=[False] * len(words))


def check_pieces(doc, pieces, max_chars):
    assert "".join(p.text for p in pieces) == doc.text
    assert all(len(p.text) <= max_chars for p in pieces)
    offset, got_ents, got_tokens = 0, [], []
    for p in pieces:
        got_ents += [(e.start_char + offset, e.end_char + offset, e.label_) for e in p.ents]
        got_tokens += [(t.text, t.whitespace_) for t in p]
        offset += len(p.text)
    assert got_ents == [(e.start_char, e.end_char, e.label_) for e in doc.ents]
    assert got_tokens == [(t.text, t.whitespace_) for t in doc]


def test_split_long_prefers_sentence_then_clause(nlp):
    doc = cws_doc(nlp, ["今天", "天气", "好", "。", "我们", "去", "公园", "，", "然后", "回家", "。"])
    stats = Counter()
    pieces = split_long(doc, 12, stats=stats)
    assert [p.text for p in pieces] == ["今天天气好。", "我们去公园，然后回家。"]
    check_pieces(doc, pieces, 12)
    pieces = split_long(doc, 9, stats=stats)
    assert [p.text for p in pieces] == ["今天天气好。", "我们去公园，", "然后回家。"]
    assert stats == Counter(sentence=2, clause=1)
    assert split_long(doc, 0) == [doc] and split_long(doc, len(doc.text)) == [doc]


def test_split_long_sentence_end_after_closing_quote(nlp):
    doc = nlp.make_doc("他说：“好。”我们走吧，好")
    pieces = split_long(doc, 9)
    assert pieces[0].text == "他说：“好。”"


def test_split_long_never_cuts_words_or_entities(nlp):
    doc = cws_doc(nlp, ["中华人民共和国", "成立", "了"])
    pieces = split_long(doc, 8)
    assert [[t.text for t in p] for p in pieces] == [["中华人民共和国"], ["成立", "了"]]
    with pytest.raises(SplitError, match="'中华人民共和国' at chars 0-7 is longer"):
        split_long(doc, 6)
    ner = nlp.make_doc("在北京大学读书")
    ner.ents = [ner.char_span(1, 5, "ORG")]
    check_pieces(ner, split_long(ner, 5), 5)
    assert [p.text for p in split_long(ner, 5)] == ["在北京大学", "读书"]
    assert [p.text for p in split_long(ner, 4)] == ["在", "北京大学", "读书"]
    with pytest.raises(SplitError, match="entity or span '北京大学'"):
        split_long(ner, 3)


def test_split_long_avoids_cutting_digit_runs(nlp):
    doc = nlp.make_doc("开罗晴１７℃／３０℃莫斯科阴")
    pieces = split_long(doc, 8)
    assert pieces[0].text == "开罗晴１７℃／"
    check_pieces(doc, pieces, 8)


def test_split_long_keeps_span_groups_and_whitespace(nlp):
    doc = nlp.make_doc("a b。 c  d。e")
    doc.spans[MENTIONS_KEY] = [doc.char_span(0, 3, "X"), doc.char_span(5, 9, "Y")]
    pieces = split_long(doc, 5)
    check_pieces(doc, pieces, 5)
    groups = [[(s.text, s.label_) for s in p.spans[MENTIONS_KEY]] for p in pieces]
    assert groups == [[("a b", "X")], [("c  d", "Y")], []]
    assert all(not p.has_unknown_spaces for p in pieces)


def test_split_long_random_docs_keep_everything(nlp):
    rng = random.Random(7)
    alphabet = list("我们在北京工作，。！１２ab ") + ["\u3000"]
    for trial in range(150):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 60)))
        doc = nlp.make_doc(text)
        spans, i = [], 0
        while i < len(doc):
            n = rng.randint(1, 4)
            if rng.random() < 0.3 and not doc[i].is_space and not doc[min(i + n, len(doc)) - 1].is_space:
                spans.append(Span(doc, i, min(i + n, len(doc)), label="E"))
            i += n
        doc.ents = spans
        max_chars = rng.randint(5, 30)
        try:
            pieces = split_long(doc, max_chars)
        except SplitError:
            assert any(len(e.text_with_ws) > max_chars for e in doc.ents) or any(
                len(t.text_with_ws) > max_chars for t in doc
            )
            continue
        check_pieces(doc, pieces, max_chars)
        for p in pieces:  # a piece re-tokenizes to its own tokens
            assert same_tokens(p, nlp.make_doc(p.text))


# --- carve_dev -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("carve", ["blocks", "lines"])
def test_carve_dev_is_deterministic_and_keeps_order(nlp, carve):
    docs = [nlp.make_doc(str(i)) for i in range(50)]
    train, dev = carve_dev(docs, 0.2, seed=3, carve=carve, block_size=4)
    again_train, again_dev = carve_dev(docs, 0.2, seed=3, carve=carve, block_size=4)
    assert [d.text for d in dev] == [d.text for d in again_dev]
    assert [d.text for d in train] == [d.text for d in again_train]
    assert len(dev) == 10 and len(train) == 40
    assert sorted(int(d.text) for d in train + dev) == list(range(50))
    assert [int(d.text) for d in dev] == sorted(int(d.text) for d in dev)
    assert (
        len({tuple(d.text for d in carve_dev(docs, 0.2, seed=s, carve=carve, block_size=4)[1]) for s in range(5)}) > 1
    )
    assert len(carve_dev(docs[:3], 0.1, seed=0, carve=carve)[1]) == 1
    assert carve_dev(docs, 0.0, seed=0, carve=carve) == (docs, [])
    with pytest.raises(ValueError, match="dev ratio"):
        carve_dev(docs, 1.0, seed=0, carve=carve)


def test_line_carve_draws_the_same_docs_as_before_blocks_existed():
    # the old carve stays selectable for comparison: the same seed must give the same dev set
    assert carve_dev(list(range(50)), 0.2, seed=3, carve="lines")[1] == [4, 8, 15, 23, 30, 34, 37, 38, 40, 48]
    assert carve_dev(list(range(50)), 0.2, seed=3)[1] != carve_dev(list(range(50)), 0.2, seed=3, carve="lines")[1]


def test_block_carve_takes_runs_of_consecutive_docs_one_per_stretch():
    for seed in range(5):
        blocks = dev_blocks(1000, 105, 20, seed)
        assert sorted(e - s for s, e in blocks) == [5, 20, 20, 20, 20, 20]
        assert all(b[1] <= a[0] for b, a in zip(blocks, blocks[1:]))  # in order, no overlap
        # 895 training docs shared out between 6 blocks: each block in its own sixth of the file
        assert all(i * 1000 // 6 - 20 <= s and e <= (i + 1) * 1000 // 6 + 20 for i, (s, e) in enumerate(blocks))
        _, dev = carve_dev(list(range(1000)), 0.105, seed, block_size=20)
        assert dev == [i for s, e in blocks for i in range(s, e)]
    assert dev_blocks(10, 3, 50, 0) in ([(i, i + 3)] for i in range(8))  # fewer dev docs than a block
    whole = dev_blocks(10, 10, 3, 0)  # no training docs left: the blocks tile the file
    assert sorted(e - s for s, e in whole) == [1, 3, 3, 3] and [i for s, e in whole for i in range(s, e)] == list(
        range(10)
    )
    assert dev_blocks(10, 0, 3, 0) == []


def test_block_carve_keeps_articles_out_of_training():
    # 40 articles of 10 lines, each line with its article's name: a single dev line leaves its article's
    # name in training (dev looks easy); a block of 30 lines holds two whole articles or more, whose names
    # training never saw, as in a test set
    docs = [[f"name{a}", "的"] for a in range(40) for _ in range(10)]

    def oov(carve):
        train, dev = carve_dev(docs, 0.1, seed=0, carve=carve, block_size=30)
        vocab = {w for d in train for w in d}
        return sum(w not in vocab for d in dev for w in d) / sum(map(len, dev))

    assert oov("lines") == 0
    assert oov("blocks") >= 0.25


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        ({"carve": "random"}, "unknown dev carve"),
        ({"block_size": 0}, "block_size"),
        ({"block_size": 2.5}, "block_size"),
    ],
)
def test_carve_dev_rejects_an_unknown_carve_or_block_size(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        carve_dev(list(range(10)), 0.2, seed=0, **kwargs)


# --- convert_corpus, CLI and the training reader --------------------------------------------------------------


def load(path, nlp):
    return list(DocBin().from_disk(path).get_docs(nlp.vocab))


def test_convert_sighan_round_trip_with_dev(tmp_path, nlp, capsys):
    lines = [f"第{i}  句  ，  很  长  的  句子  。  又  一  句  。" for i in range(20)]
    path = write(tmp_path, "train.txt", "\n".join(lines[:10]) + "\n\n" + "\n".join(lines[10:]) + "\n")
    stats = convert_corpus(
        "sighan",
        path,
        tmp_path / "out" / "train.spacy",
        max_chars=10,
        dev_output=tmp_path / "out" / "dev.spacy",
        dev_ratio=0.25,
        seed=1,
    )
    assert stats["read"] == {"docs": 20, "chars": sum(len(l.replace("  ", "")) for l in lines), "words": 240}
    assert stats["reader"]["blank_lines"] == 1
    train = load(tmp_path / "out" / "train.spacy", nlp)
    dev = load(tmp_path / "out" / "dev.spacy", nlp)
    assert stats["outputs"]["train"]["before_split"]["docs"] == 15
    assert stats["outputs"]["dev"]["before_split"]["docs"] == 5
    assert stats["outputs"]["train"]["written"]["docs"] == len(train) == 30
    assert sum(stats["outputs"]["train"]["cuts"].values()) == 15  # each line is cut once
    assert sum(len(d) for d in train + dev) == 240
    assert all(not d.has_unknown_spaces and len(d.text) <= 10 for d in train + dev)
    texts = sorted(train[i].text + train[i + 1].text for i in range(0, 30, 2))
    texts += [dev[i].text + dev[i + 1].text for i in range(0, 10, 2)]
    assert sorted(texts) == sorted(l.replace("  ", "") for l in lines)
    out = capsys.readouterr().out
    assert "20 docs" in out and "240 words" in out
    # the same seed gives the same split
    convert_corpus(
        "sighan", path, tmp_path / "b.spacy", max_chars=10, dev_output=tmp_path / "bdev.spacy", dev_ratio=0.25, seed=1
    )
    assert [d.text for d in load(tmp_path / "bdev.spacy", nlp)] == [d.text for d in dev]


def test_convert_carves_blocks_by_default_and_reports_the_dev_rates(tmp_path, nlp):
    # 8 articles of 5 lines, each line with its article's name: the carve and how much of dev training has
    # seen are in the stats, and the old carve of single lines is still there
    lines = [f"名{a}  说  。" for a in range(8) for _ in range(5)]
    path = write(tmp_path, "train.txt", "\n".join(lines) + "\n")
    out, dev = tmp_path / "train.spacy", tmp_path / "dev.spacy"
    stats = convert_corpus("sighan", path, out, max_chars=0, dev_output=dev, dev_ratio=0.25, seed=0, block_size=10)
    assert stats["carve"] == {"carve": "blocks", "dev_ratio": 0.25, "seed": 0, "block_size": 10}
    texts = [d.text for d in load(dev, nlp)]
    assert texts == [l.replace("  ", "") for l in carve_dev(lines, 0.25, 0, block_size=10)[1]]
    vocab = {t.text for d in load(out, nlp) for t in d}
    words = [t.text for d in load(dev, nlp) for t in d]
    assert stats["dev_rates"] == {
        "words": 30,
        "oov": sum(w not in vocab for w in words),
        "oov_rate": sum(w not in vocab for w in words) / 30,
    }
    assert stats["dev_rates"]["oov"] >= 5  # a block of 10 lines holds one whole article or more
    lines_stats = convert_corpus(
        "sighan", path, out, max_chars=0, dev_output=dev, dev_ratio=0.25, seed=0, carve="lines"
    )
    assert lines_stats["carve"] == {"carve": "lines", "dev_ratio": 0.25, "seed": 0}
    assert [d.text for d in load(dev, nlp)] == [
        l.replace("  ", "") for l in carve_dev(lines, 0.25, 0, carve="lines")[1]
    ]
    assert lines_stats["dev_rates"]["oov"] == 0
    bio = write(tmp_path, "msra_train_bio", MSRA_SAMPLE)
    ner = convert_corpus("bio", bio, tmp_path / "m.spacy", max_chars=0, dev_output=tmp_path / "md.spacy", dev_ratio=0.5)
    assert set(ner["dev_rates"]) == {"entities", "seen", "seen_rate", "seen_text", "seen_text_rate"}
    with pytest.raises(ValueError, match="unknown dev carve"):
        convert_corpus("sighan", path, out, max_chars=0, dev_output=dev, carve="random")


def test_convert_can_also_carve_a_line_dev_from_what_the_blocks_leave(tmp_path, nlp):
    # one model scored on both carves needs a training part that holds neither: 8 articles of 5 lines,
    # each line with its article's name
    lines = [f"名{a}  说  第{i}  。" for a in range(8) for i in range(5)]
    path = write(tmp_path, "train.txt", "\n".join(lines) + "\n")
    out, dev, dev_lines = tmp_path / "train.spacy", tmp_path / "dev.spacy", tmp_path / "dev_lines.spacy"
    stats = convert_corpus(
        "sighan",
        path,
        out,
        max_chars=0,
        dev_output=dev,
        dev_ratio=0.25,
        seed=0,
        block_size=10,
        lines_dev_output=dev_lines,
    )
    blocks_train, block_dev = carve_dev(lines, 0.25, 0, block_size=10)
    rest, line_dev = carve_lines(blocks_train, len(block_dev), 0)
    clean = [[l.replace("  ", "") for l in part] for part in (rest, block_dev, line_dev)]
    assert [[d.text for d in load(p, nlp)] for p in (out, dev, dev_lines)] == clean
    assert sorted(sum(clean, [])) == sorted(l.replace("  ", "") for l in lines)  # every line once
    assert len(line_dev) == len(block_dev) == 10 and len(rest) == 20
    assert stats["carve"]["lines_dev"] == 10 and stats["outputs"]["dev_lines"]["written"]["docs"] == 10
    vocab = {t.text for d in load(out, nlp) for t in d}
    for key, part in (("dev_rates", dev), ("lines_dev_rates", dev_lines)):
        words = [t.text for d in load(part, nlp) for t in d]
        assert stats[key]["oov"] == sum(w not in vocab for w in words)  # against the training part that is written
    # single lines keep their article's name in training: the line dev is the easier one
    assert stats["lines_dev_rates"]["oov_rate"] < stats["dev_rates"]["oov_rate"]
    with pytest.raises(ValueError, match="lines_dev_output needs a block-carved dev"):
        convert_corpus("sighan", path, out, max_chars=0, dev_output=dev, carve="lines", lines_dev_output=dev_lines)
    with pytest.raises(ValueError, match="lines_dev_output needs a block-carved dev"):
        convert_corpus("sighan", path, out, max_chars=0, lines_dev_output=dev_lines)
    with pytest.raises(ValueError, match="leaves no training docs"):
        convert_corpus("sighan", path, out, max_chars=0, dev_output=dev, dev_ratio=0.5, lines_dev_output=dev_lines)


def test_carve_lines_draws_a_count_of_single_docs():
    assert carve_lines(list(range(50)), 10, seed=3) == carve_dev(list(range(50)), 0.2, seed=3, carve="lines")
    assert carve_lines(list(range(5)), 0, seed=3) == (list(range(5)), [])
    with pytest.raises(ValueError, match="cannot carve 6 dev docs from 5"):
        carve_lines(list(range(5)), 6, seed=0)


def test_cli_carve_options(tmp_path, nlp):
    src = write(tmp_path, "train.txt", "".join(f"第{i}  句  。\n" for i in range(20)))
    runner = CliRunner()
    base = [
        "sighan",
        str(src),
        str(tmp_path / "t.spacy"),
        "--max-chars",
        "0",
        "--dev-output",
        str(tmp_path / "d.spacy"),
        "--dev-ratio",
        "0.25",
    ]
    result = runner.invoke(_cli(), base + ["--carve", "lines"])
    assert result.exit_code == 0, result.output
    assert "OOV rate" in result.output and "lines" in result.output
    want = [
        l.replace("  ", "") for l in carve_dev(src.read_text(encoding="utf8").splitlines(), 0.25, 0, carve="lines")[1]
    ]
    assert [d.text for d in load(tmp_path / "d.spacy", nlp)] == want
    result = runner.invoke(_cli(), base + ["--block-size", "5"])
    assert result.exit_code == 0 and "blocks of 5" in result.output, result.output
    for args, needle in [
        (["--carve", "lines", "--block-size", "5"], "only applies with --carve blocks"),
        (["--carve", "random"], "must be one of blocks, lines"),
        (["--block-size", "0"], "must be"),
    ]:
        result = runner.invoke(_cli(), base + args)
        assert result.exit_code == 2 and needle in " ".join(result.output.split()), (args, result.output)
    result = runner.invoke(_cli(), base[:5] + ["--carve", "lines"])  # no --dev-output: nothing to carve
    assert result.exit_code == 2 and "only applies with --dev-output" in " ".join(result.output.split())
    both = base + ["--block-size", "5", "--lines-dev-output", str(tmp_path / "l.spacy")]
    result = runner.invoke(_cli(), both)
    assert result.exit_code == 0 and "single lines drawn from the rest" in result.output, result.output
    assert len(load(tmp_path / "l.spacy", nlp)) == len(load(tmp_path / "d.spacy", nlp)) == 5
    assert len(load(tmp_path / "t.spacy", nlp)) == 10
    result = runner.invoke(_cli(), base + ["--carve", "lines", "--lines-dev-output", str(tmp_path / "l.spacy")])
    assert result.exit_code == 2 and "only applies with --carve blocks" in " ".join(result.output.split())


def test_convert_ner_round_trip_and_limit(tmp_path, nlp):
    path = write(tmp_path, "msra_train_bio", MSRA_SAMPLE)
    stats = convert_corpus("bio", path, tmp_path / "msra.spacy", max_chars=8)
    assert stats["read"]["entities"] == {"LOC": 2, "ORG": 1, "PER": 1}
    assert stats["read"]["chars"] == 23
    docs = load(tmp_path / "msra.spacy", nlp)
    assert "".join(d.text for d in docs) == "因有日寇在京中国银行。" + '电话：<A="P/>张三'
    assert sorted(e.text for d in docs for e in d.ents) == ["中国银行", "京", "张三", "日"]
    for doc in docs:
        assert same_tokens(doc, nlp.make_doc(doc.text))
    limited = convert_corpus("bio", path, tmp_path / "one.spacy", max_chars=0, limit=1)
    assert limited["read"]["docs"] == 2 and limited["kept"]["docs"] == 1
    assert [d.text for d in load(tmp_path / "one.spacy", nlp)] == ["因有日寇在京中国银行。"]


def test_convert_cluener_keeps_mentions_group(tmp_path, nlp):
    path = write(tmp_path, "train.json", CLUENER_SAMPLE)
    stats = convert_corpus("cluener", path, tmp_path / "c.spacy", max_chars=100)
    assert stats["warnings"] == 2 and stats["read"]["entities_total"] == 4
    docs = load(tmp_path / "c.spacy", nlp)
    assert len(docs[2].spans[MENTIONS_KEY]) == 3


def test_cli_reports_file_and_line(tmp_path):
    app = typer.Typer()
    app.command()(convert_corpus_cli)
    runner = CliRunner()
    bad = write(tmp_path, "bad_bio", "我\tO\n中\tX-LOC\n")
    result = runner.invoke(app, ["bio", str(bad), str(tmp_path / "x.spacy"), "--max-chars", "100"])
    assert result.exit_code == 1
    assert f"{bad}:2: invalid BIO tag 'X-LOC'" in " ".join(result.output.split())
    assert "Traceback" not in result.output
    good = write(tmp_path, "train.txt", "上海  推\n今天  好\n")
    result = runner.invoke(
        app,
        [
            "sighan",
            str(good),
            str(tmp_path / "ok.spacy"),
            "--max-chars",
            "100",
            "--dev-output",
            str(tmp_path / "dev.spacy"),
            "--dev-ratio",
            "0.5",
            "--seed",
            "2",
        ],
    )
    assert result.exit_code == 0, result.output
    assert (tmp_path / "ok.spacy").exists() and (tmp_path / "dev.spacy").exists()
    result = runner.invoke(app, ["conll", str(good), str(tmp_path / "x.spacy"), "--max-chars", "100"])
    assert result.exit_code == 1 and "unknown corpus format 'conll'" in " ".join(result.output.split())


def _cli():
    app = typer.Typer()
    app.command()(convert_corpus_cli)
    return app


def _files(folder):
    return sorted(p.name for p in folder.iterdir())


def test_cli_refuses_an_output_that_is_the_input_or_the_other_output(tmp_path, monkeypatch):
    text = "上海  推\n今天  好\n我们  去\n"
    src = write(tmp_path, "train.txt", text)
    (tmp_path / "link.txt").symlink_to(src)
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    cases = [
        [str(src), str(src)],
        ["train.txt", str(tmp_path / "sub" / ".." / "train.txt")],
        [str(src), str(tmp_path / "link.txt")],
        [str(src), "out.spacy", "--dev-output", "train.txt"],
        [str(src), "out.spacy", "--dev-output", "./sub/../out.spacy"],
    ]
    for paths in cases:
        before = _files(tmp_path)
        result = runner.invoke(_cli(), ["sighan", *paths, "--max-chars", "100"])
        assert result.exit_code == 1, (paths, result.output)
        output = " ".join(result.output.split())
        assert "overwrite the input" in output or "also the output" in output
        assert src.read_text(encoding="utf8") == text and _files(tmp_path) == before


@pytest.mark.parametrize(
    "args,option",
    [
        (["--max-chars", "-1"], "--max-chars"),
        (["--max-chars", "100", "--dev-output", "DEV", "--dev-ratio", "1"], "--dev-ratio"),
        (["--max-chars", "100", "--dev-output", "DEV", "--dev-ratio", "-0.1"], "--dev-ratio"),
        (["--max-chars", "100", "--dev-output", "DEV", "--dev-ratio", "nan"], "--dev-ratio"),
        (["--max-chars", "100", "--limit", "-1"], "--limit"),
        (["--max-chars", "100", "--limit", "0"], "--limit"),
        (["--max-chars", "100", "--dev-ratio", "0.2"], "--dev-ratio"),  # no --dev-output: nothing to carve
        (["--max-chars", "100", "--seed", "3"], "--seed"),
    ],
)
def test_cli_rejects_invalid_numbers(tmp_path, args, option):
    src = write(tmp_path, "train.txt", "上海  推\n今天  好\n")
    args = [str(tmp_path / "dev.spacy") if a == "DEV" else a for a in args]
    result = CliRunner().invoke(_cli(), ["sighan", str(src), str(tmp_path / "out.spacy"), *args])
    assert result.exit_code == 2 and option in result.output, result.output
    assert "must be" in result.output or "only applies with --dev-output" in " ".join(result.output.split())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.txt"]


def test_convert_api_rejects_invalid_numbers_before_reading(tmp_path):
    missing = tmp_path / "missing.txt"  # never read: the options are checked first
    for kwargs, needle in [
        ({"max_chars": -5}, "max_chars"),
        ({"dev_ratio": 1.5}, "dev_ratio"),
        ({"limit": -1}, "limit"),
        ({"max_chars": 2.5}, "max_chars"),
    ]:
        with pytest.raises(ValueError, match=needle):
            convert_corpus("sighan", missing, tmp_path / "o.spacy", **kwargs)


@pytest.mark.parametrize("content", ["", "\n\n", "\ufeff"])
def test_empty_corpus_is_an_error_naming_the_file(tmp_path, content):
    src = write(tmp_path, "empty.txt", content)
    with pytest.raises(CorpusFormatError, match="empty.txt: no documents"):
        convert_corpus("sighan", src, tmp_path / "o.spacy", max_chars=0)
    result = CliRunner().invoke(_cli(), ["sighan", str(src), str(tmp_path / "o.spacy"), "--max-chars", "0"])
    assert result.exit_code == 1 and "empty.txt: no documents" in " ".join(result.output.split())
    assert not (tmp_path / "o.spacy").exists()


def test_dev_carving_that_leaves_a_part_empty_is_an_error(tmp_path):
    one = write(tmp_path, "one.txt", "上海  推\n")
    two = write(tmp_path, "two.txt", "上海  推\n今天  好\n")
    for src, ratio in ((one, 0.5), (two, 0.0)):
        with pytest.raises(ValueError, match="both need at least one"):
            convert_corpus(
                "sighan", src, tmp_path / "t.spacy", max_chars=0, dev_output=tmp_path / "d.spacy", dev_ratio=ratio
            )
        assert not (tmp_path / "t.spacy").exists() and not (tmp_path / "d.spacy").exists()


def test_a_failed_conversion_writes_nothing_and_keeps_old_outputs(tmp_path, monkeypatch):
    lines = ["上  推", "今  好", "我  去", "他们  来"]
    # a seed that carves the one doc with a two-character word into dev
    seed = next(s for s in range(100) if carve_dev(lines, 0.25, s)[1] == ["他们  来"])
    src = write(tmp_path, "train.txt", "\n".join(lines) + "\n")
    out, dev = tmp_path / "out" / "train.spacy", tmp_path / "out" / "dev.spacy"
    convert_corpus("sighan", src, out, max_chars=0, dev_output=dev, dev_ratio=0.5)
    old = (out.read_bytes(), dev.read_bytes())
    # the dev part cannot be split: the training file is not written either
    with pytest.raises(SplitError, match="他们"):
        convert_corpus("sighan", src, out, max_chars=1, dev_output=dev, dev_ratio=0.25, seed=seed)
    assert (out.read_bytes(), dev.read_bytes()) == old
    # interrupted while writing the dev file: no half file, no temp file, old outputs kept
    real = DocBin.to_disk

    def to_disk(self, path):
        if "dev" in str(path):
            Path(path).write_bytes(b"half")
            raise KeyboardInterrupt
        return real(self, path)

    monkeypatch.setattr(DocBin, "to_disk", to_disk)
    with pytest.raises(KeyboardInterrupt):
        convert_corpus("sighan", src, out, max_chars=0, dev_output=dev, dev_ratio=0.25)
    assert (out.read_bytes(), dev.read_bytes()) == old
    assert _files(out.parent) == ["dev.spacy", "train.spacy"]


def test_char_corpus_reader_rejects_negative_numbers(tmp_path):
    reader = spacy.registry.readers.get("spacy_crf.CharCorpus.v1")
    joint = spacy.registry.readers.get("spacy_crf.JointCorpus.v1")
    for kwargs in ({"max_length": -1}, {"limit": -1}):
        with pytest.raises(ValueError, match=next(iter(kwargs))):
            reader(tmp_path / "x.spacy", **kwargs)
        with pytest.raises(ValueError, match=next(iter(kwargs))):
            joint(tmp_path / "w.spacy", tmp_path / "e.spacy", **kwargs)


def test_char_corpus_reader(tmp_path, nlp):
    cws = write(tmp_path, "train.txt", "今天  天气  好  。  我们  去  公园  ，  然后  回家  。\n")
    convert_corpus("sighan", cws, tmp_path / "cws.spacy", max_chars=0)
    reader = spacy.registry.readers.get("spacy_crf.CharCorpus.v1")
    examples = list(reader(tmp_path / "cws.spacy")(nlp))
    assert len(examples) == 1
    eg = examples[0]
    assert [t.text for t in eg.predicted] == list("今天天气好。我们去公园，然后回家。")
    assert [t.text for t in eg.reference][:3] == ["今天", "天气", "好"]
    split = list(create_char_corpus_reader(tmp_path / "cws.spacy", max_length=8)(nlp))
    assert [e.reference.text for e in split] == ["今天天气好。", "我们去公园，", "然后回家。"]
    # spacy.Corpus.v1 would silently drop this doc (it is longer than max_length
    # tokens and has no sentence boundaries); that is why this wrapper exists
    assert (
        list(
            spacy.registry.readers.get("spacy.Corpus.v1")(tmp_path / "cws.spacy", gold_preproc=False, max_length=8)(nlp)
        )
        == []
    )
    with pytest.raises(ValueError, match="gold_preproc"):
        create_char_corpus_reader(tmp_path / "cws.spacy", gold_preproc=True)
    unknown = DocBin(docs=[Doc(nlp.vocab, words=["今天", "好"])])
    unknown.to_disk(tmp_path / "unknown.spacy")
    with pytest.raises(ValueError, match="unknown spaces"):
        list(create_char_corpus_reader(tmp_path / "unknown.spacy")(nlp))


# --- the real corpora (skipped where ../shared/data is absent) -------------------------------------------

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.mark.slow
@pytest.mark.skipif(not (DATA / "README.md").exists(), reason="../shared/data is not present")
def test_real_corpora_match_readme(nlp):
    md5 = {
        "cws/sxu/train.txt": "9068ee443e190e5d48312cb5ef4d1bc4",
        "cws/sighan2005/pku_training_words.utf8": "119390cacc8b6aee0be2d55832939b5a",
        "ner/msra/msra_train_bio": "40f4961d2b38352689103b8aa8f30b97",
        "ner/weibo/weiboNER_2nd_conll.train": "452359bfc9c5b1a5196b16772e5ff8bb",
        "ner/weibo/weiboNER_2nd_conll.dev": "1c0d3912fb7162d9c36450efe34dedd4",
        "ner/resume/train.char.bmes": "badab28955123a81149f5d3148290bf1",
        "ner/resume/dev.char.bmes": "3053f33e3347af60dabc03e5e2a98dd6",
        "ner/cluener/train.json": "d4b16383767680d7407e5437af490de6",
        "ner/cluener/test.json": "dfd6bb88b1206402ce529800b4dce171",
    }
    for name, digest in md5.items():
        assert hashlib.md5((DATA / name).read_bytes()).hexdigest() == digest, name
    vocab = nlp.vocab
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CorpusWarning)
        sxu = list(read_sighan(DATA / "cws/sxu/train.txt", vocab))
        assert (len(sxu), sum(len(d) for d in sxu)) == (17115, 528238)
        msra = Counter()
        for doc in read_char_bio(DATA / "ner/msra/msra_train_bio", vocab):
            msra["sentences"] += 1
            msra["chars"] += len(doc.text)
            msra.update(e.label_ for e in doc.ents)
        assert msra == Counter(sentences=45000, chars=2171573, LOC=36860, ORG=20584, PER=17615)
        assert sum(1 for _ in read_weibo(DATA / "ner/weibo/weiboNER_2nd_conll.train", vocab)) == 1350
        assert sum(1 for _ in read_weibo(DATA / "ner/weibo/weiboNER_2nd_conll.dev", vocab)) == 270
        assert sum(1 for _ in read_char_bmes(DATA / "ner/resume/train.char.bmes", vocab)) == 3821
        assert sum(1 for _ in read_char_bmes(DATA / "ner/resume/dev.char.bmes", vocab)) == 463
        assert sum(1 for _ in read_cluener(DATA / "ner/cluener/train.json", vocab)) == 10748
        assert not any(d.ents for d in read_cluener(DATA / "ner/cluener/test.json", vocab))


def test_project_convert_corpora_checks_its_options_first(tmp_path, monkeypatch, capsys):
    import sys

    from crf_project import convert_corpora

    (tmp_path / "assets").mkdir()
    for argv, needle in (
        (["--limit", "-1"], "--limit"),
        (["--max-chars", "-1"], "--max-chars"),
        (["--dev-ratio", "1"], "--dev-ratio"),
        (["--dev-ratio", "nan"], "--dev-ratio"),
        (["--assets", str(tmp_path / "none")], "no such directory"),
    ):
        monkeypatch.setattr(
            sys,
            "argv",
            ["convert_corpora.py", "--assets", str(tmp_path / "assets"), "--out", str(tmp_path / "corpus"), *argv],
        )
        with pytest.raises(SystemExit) as exc:
            convert_corpora.main()
        assert exc.value.code == 2 and needle in capsys.readouterr().err
    assert not (tmp_path / "corpus").exists()
    # a corpus file that is empty is an error naming it, and no manifest is written
    (tmp_path / "assets" / "cws" / "sxu").mkdir(parents=True)
    (tmp_path / "assets" / "cws" / "sxu" / "train.txt").write_text("", encoding="utf8")
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "convert_corpora.py",
            "--assets",
            str(tmp_path / "assets"),
            "--out",
            str(tmp_path / "corpus"),
            "--only",
            "sxu",
        ],
    )
    with pytest.raises(SystemExit) as exc:
        convert_corpora.main()
    assert "train.txt: no documents" in str(exc.value.code)
    assert not (tmp_path / "corpus").exists()


def test_read_docbin_names_the_file_it_cannot_read(tmp_path):
    from spacy_crf.corpora.base import CorpusFormatError, read_docbin

    nlp = spacy.blank("zh")
    DocBin(docs=[nlp.make_doc("张三去上海"), nlp.make_doc("")]).to_disk(tmp_path / "dev.spacy")
    assert [d.text for d in read_docbin(tmp_path / "dev.spacy", nlp.vocab)] == ["张三去上海", ""]
    (tmp_path / "words.txt").write_text("上海\n北京\n", encoding="utf8")
    with pytest.raises(CorpusFormatError, match=r"words\.txt: not a \.spacy \(DocBin\) file"):
        read_docbin(tmp_path / "words.txt")
    with pytest.raises(CorpusFormatError, match=r"missing\.spacy: no such file"):
        read_docbin(tmp_path / "missing.spacy")
