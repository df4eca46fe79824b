"""spacy_crf.ml.fast_align: the wordpiece alignment and piece strings
give spacy-transformers' own results, for random spans and offsets and for a
real tokenizer, and a pipeline's transformer output is the same with them."""

import random

import numpy
import pytest
import spacy
from spacy.tokens import Doc
from spacy.vocab import Vocab
from spacy_transformers.align import get_alignment_via_offset_mapping
from spacy_transformers.layers import transformer_model
from spacy_transformers.span_getters import configure_strided_spans
from thinc.api import Config

from spacy_crf._compat import stock_transformer_helper
from spacy_crf.ml import fast_align

TEXTS = ["张三去北京工作", "李四 住 上海", "今天天气好。" * 30, "", "abc 中国人 x!", "  ", "中\n国"]


def random_doc(rng: random.Random, vocab: Vocab) -> Doc:
    n = rng.randint(0, 30)
    words = [rng.choice(["a", "bb", "中", "国人", " ", "ccc", "\n", "。"]) for _ in range(n)]
    return Doc(vocab, words=words, spaces=[rng.random() < 0.3 for _ in range(n)])


def random_offsets(rng: random.Random, spans, length: int) -> numpy.ndarray:
    """Pieces of 0-3 characters anywhere in (and just past) each span, some
    (0, 0) as special and padding pieces are."""
    offsets = numpy.zeros((len(spans), length, 2), dtype=numpy.int64)
    for i, span in enumerate(spans):
        for j in range(length):
            if rng.random() < 0.15:
                continue
            start = rng.randint(0, len(span.text) + 2)
            offsets[i, j] = (start, start + rng.randint(0, 3))
    return offsets


def test_the_alignment_equals_spacy_transformers_on_random_spans_and_offsets():
    rng, vocab = random.Random(0), Vocab()
    checked = 0
    for _ in range(600):
        docs = [random_doc(rng, vocab) for _ in range(rng.randint(1, 4))]
        window = rng.randint(2, 12)
        spans = [s for doc_spans in configure_strided_spans(window, rng.randint(1, window))(docs) for s in doc_spans]
        if not spans:
            continue
        offsets = random_offsets(rng, spans, rng.randint(1, 20))
        expected = get_alignment_via_offset_mapping(spans, offsets)
        got = fast_align.align_by_offsets(spans, offsets)
        assert got.data.dtype == expected.data.dtype and got.lengths.dtype == expected.lengths.dtype
        assert numpy.array_equal(got.lengths, expected.lengths)
        assert numpy.array_equal(got.data, expected.data)
        checked += 1
    assert checked > 400  # most draws had spans: the comparison is not vacuous


def test_a_token_in_two_windows_gets_the_pieces_of_both():
    vocab = Vocab()
    doc = Doc(vocab, words=list("中国人民"), spaces=[False] * 4)
    spans = [doc[0:3], doc[2:4]]  # 人 is in both
    offsets = numpy.array([[[0, 0], [0, 1], [1, 2], [2, 3], [0, 0]], [[0, 0], [0, 1], [1, 2], [0, 0], [0, 0]]])
    align = fast_align.align_by_offsets(spans, offsets)
    assert align.lengths.tolist() == [1, 1, 2, 1]
    assert align.data.ravel().tolist() == [1, 2, 3, 6, 7]
    with pytest.raises(ValueError, match="different sizes"):
        fast_align.align_by_offsets(spans, offsets[:1])


def tokenizer_of(path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path))


def test_tokenizing_equals_spacy_transformers(tiny_bert_dir):
    tokenizer = tokenizer_of(tiny_bert_dir)
    stock = stock_transformer_helper("huggingface_tokenize")
    expected = stock(tokenizer, TEXTS)
    got = fast_align.huggingface_tokenize(tokenizer, TEXTS)
    assert set(got) == set(expected)
    for key in expected:
        if isinstance(expected[key], numpy.ndarray):
            assert numpy.array_equal(got[key], expected[key]) and got[key].dtype == expected[key].dtype, key
        else:
            assert got[key] == expected[key], key
    assert got["input_texts"][0][0] == "[CLS]" and "[PAD]" in got["input_texts"][0]


def test_a_tokenizer_that_spells_its_pieces_itself_keeps_its_own_way(tiny_bert_dir):
    tokenizer = tokenizer_of(tiny_bert_dir)
    tokenizer.convert_ids_to_tokens = lambda ids, skip_special_tokens=False: ["?"] * len(ids)
    got = fast_align.huggingface_tokenize(tokenizer, TEXTS[:2])
    assert {piece for row in got["input_texts"] for piece in row} == {"?"}


def test_the_table_follows_added_tokens(tiny_bert_dir):
    tokenizer = tokenizer_of(tiny_bert_dir)
    before = len(fast_align.string_table(tokenizer))
    tokenizer.add_tokens(["北京大学"])
    table = fast_align.string_table(tokenizer)
    assert len(table) == before + 1 and table[-1] == "北京大学"
    got = fast_align.huggingface_tokenize(tokenizer, ["我在北京大学"])
    assert "北京大学" in got["input_texts"][0]


def test_building_a_crf_tagger_installs_them_and_the_transformer_output_is_unchanged(tiny_bert_dir, monkeypatch):
    from _configs import NER_DATA, PIPELINE_CFG
    from spacy.training import Example

    config = Config().from_str(PIPELINE_CFG.replace("{name}", str(tiny_bert_dir)))
    nlp = spacy.util.load_model_from_config(config, auto_fill=True, validate=True)
    assert transformer_model.get_alignment_via_offset_mapping is fast_align.align_by_offsets
    assert transformer_model.huggingface_tokenize is fast_align.huggingface_tokenize
    fast_align.install()  # again: nothing changes, the stock helpers are still known
    assert stock_transformer_helper("get_alignment_via_offset_mapping") is get_alignment_via_offset_mapping
    nlp.initialize(lambda: [Example.from_dict(nlp.make_doc(t), {"entities": e}) for t, e in NER_DATA])
    with nlp.select_pipes(enable=["transformer"]):
        fast = [doc._.trf_data for doc in nlp.pipe(TEXTS, batch_size=3)]
        for name in ("get_alignment_via_offset_mapping", "huggingface_tokenize"):
            monkeypatch.setattr(transformer_model, name, stock_transformer_helper(name))
        stock = [doc._.trf_data for doc in nlp.pipe(TEXTS, batch_size=3)]
    for a, b in zip(fast, stock):
        assert numpy.array_equal(a.align.data, b.align.data) and numpy.array_equal(a.align.lengths, b.align.lengths)
        assert a.wordpieces.strings == b.wordpieces.strings
        assert numpy.array_equal(a.wordpieces.input_ids, b.wordpieces.input_ids)
        assert all(numpy.array_equal(x, y) for x, y in zip(a.tensors, b.tensors))


def test_the_helpers_benchmark_times_both_and_checks_their_outputs(tiny_bert_dir, tmp_path, monkeypatch):
    import json

    import torch
    from _configs import NER_DATA, PIPELINE_CFG
    from conftest import ROOT, load_script
    from spacy.tokens import DocBin
    from spacy.training import Example

    config = Config().from_str(PIPELINE_CFG.replace("{name}", str(tiny_bert_dir)))
    nlp = spacy.util.load_model_from_config(config, auto_fill=True, validate=True)
    nlp.initialize(lambda: [Example.from_dict(nlp.make_doc(t), {"entities": e}) for t, e in NER_DATA])
    nlp.to_disk(tmp_path / "pipeline")
    DocBin(docs=[nlp.make_doc(t) for t in TEXTS * 2]).to_disk(tmp_path / "dev.spacy")
    script = load_script(ROOT / "scripts" / "bench_transformer_helpers.py")
    out = tmp_path / "bench.json"
    argv = [str(tmp_path / "pipeline"), str(tmp_path / "dev.spacy"), "--batch-size", "3", "--repeats", "2"]
    threads = torch.get_num_threads()
    try:
        script.main(argv + ["--threads", "1", "--out", str(out)])
    finally:
        torch.set_num_threads(threads)
    record = json.loads(out.read_text(encoding="utf8"))
    assert list(record["variants"]) == ["spacy-transformers", "fast_align"]
    for row in record["variants"].values():
        assert len(row["seconds"]) == 2 and all(s > 0 for s in row["helpers_s_per_1k_chars_median"].values())
    # the package's helpers are back in place after the run
    assert transformer_model.get_alignment_via_offset_mapping is fast_align.align_by_offsets
    # a helper that changes the output stops the run
    broken = dict(script.VARIANTS["fast_align"], huggingface_tokenize=lambda tok, texts: _one_piece_less(tok, texts))
    monkeypatch.setitem(script.VARIANTS, "fast_align", broken)
    with pytest.raises(SystemExit, match="differ"):
        script.main(argv + ["--threads", "1", "--out", str(tmp_path / "broken.json")])
    assert transformer_model.huggingface_tokenize is fast_align.huggingface_tokenize


def _one_piece_less(tokenizer, texts):
    data = fast_align.huggingface_tokenize(tokenizer, texts)
    data["input_texts"] = [row[:-1] for row in data["input_texts"]]
    return data
