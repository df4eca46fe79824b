"""spacy_crf.ml.encoder_chunks: one long doc runs the encoder over a bounded
number of wordpieces per call, with the outputs of one call; the peak memory
of a long doc through nlp.pipe stays bounded per character."""

import json
import random
import subprocess
import sys
from pathlib import Path

import numpy
import pytest
import spacy
import torch
from _backends import examples, make_nlp
from conftest import CHARS, hf_model
from thinc.types import ArgsKwargs
from transformers.modeling_outputs import BaseModelOutputWithPoolingAndCrossAttentions

from spacy_crf.ml import encoder_chunks


def long_text(n_chars: int, seed: int = 0) -> str:
    """Sentences of the tests' characters, ``n_chars`` in all."""
    rng = random.Random(seed)
    parts, length = [], 0
    while length < n_chars:
        parts.append("".join(rng.choice(CHARS) for _ in range(rng.randint(8, 40))) + "。")
        length += len(parts[-1])
    return "".join(parts)[:n_chars]


def encoder_calls(nlp, monkeypatch):
    """The (rows, pieces) of every call of ``nlp``'s encoder from now on."""
    model = hf_model(nlp)
    calls = []
    forward = model.forward

    def counting(*args, **kwargs):
        calls.append(tuple(kwargs["input_ids"].shape))
        return forward(*args, **kwargs)

    monkeypatch.setattr(model, "forward", counting)
    return calls


def predictions(nlp, texts):
    docs = list(nlp.pipe(texts))
    hidden = [numpy.array(doc._.trf_data.tensors[0]) for doc in docs]
    ents = [[(e.start_char, e.end_char, e.label_) for e in doc.ents] for doc in docs]
    return hidden, ents


def test_a_long_doc_runs_the_encoder_in_bounded_calls_with_the_same_outputs(tiny_bert_dir, monkeypatch):
    nlp = make_nlp(tiny_bert_dir)
    nlp.initialize(lambda: examples(nlp))
    long, short = [long_text(1500)], ["张三去上海"]
    monkeypatch.setattr(encoder_chunks, "MAX_PIECES", 10**12)  # one call, as spacy-transformers makes it
    calls = encoder_calls(nlp, monkeypatch)
    whole = predictions(nlp, long), predictions(nlp, short)
    (n_spans, length), _ = calls  # the long doc's strided spans (window 16, stride 12) in one call
    assert n_spans == 125 and length == 18
    monkeypatch.setattr(encoder_chunks, "MAX_PIECES", 200)
    calls.clear()
    chunked = predictions(nlp, long), predictions(nlp, short)
    assert [rows for rows, _ in calls] == [11] * 11 + [4, 1]  # 11 rows of 18 pieces at most, then the short doc
    assert all(rows * length <= 200 for rows, length in calls)
    (hidden, ents), (whole_hidden, whole_ents) = chunked[0], whole[0]
    assert ents == whole_ents and len(ents[0]) > 0
    assert hidden[0].shape == whole_hidden[0].shape and numpy.allclose(hidden[0], whole_hidden[0], atol=1e-5)
    # the short doc is within the bound: one call, the same floats
    assert chunked[1][1] == whole[1][1] and numpy.array_equal(chunked[1][0][0], whole[1][0][0])


@pytest.mark.parametrize("backend", ["qint8", "onnx"])
def test_the_inference_only_encoders_run_in_chunks_too(tiny_bert_dir, backend, monkeypatch):
    nlp = make_nlp(tiny_bert_dir)
    nlp.initialize(lambda: examples(nlp))
    if backend == "onnx":
        pytest.importorskip("onnxruntime")
        pytest.importorskip("onnx")
        from spacy_crf.encoders.onnx_backend import export_pipeline

        export_pipeline(nlp)
    else:
        from spacy_crf.encoders.quantize import quantize_pipeline

        quantize_pipeline(nlp)
    texts = [long_text(600)]
    monkeypatch.setattr(encoder_chunks, "MAX_PIECES", 10**12)
    whole = predictions(nlp, texts)
    monkeypatch.setattr(encoder_chunks, "MAX_PIECES", 100)
    chunked = predictions(nlp, texts)
    assert chunked[1] == whole[1]
    # dynamic int8 quantizes the activations per call, with the range of what
    # the call holds: another call, another rounding, as in another batch
    assert numpy.allclose(chunked[0][0], whole[0][0], atol=2e-2 if backend == "qint8" else 1e-4)


def test_the_outputs_of_the_chunks_are_joined_as_one_output(monkeypatch):
    def stock(shim, inputs):  # the rows' own numbers, in every kind of output
        ids = inputs.kwargs["input_ids"].float()
        return BaseModelOutputWithPoolingAndCrossAttentions(
            last_hidden_state=ids[:, :, None] * 2,
            pooler_output=ids[:, 0],
            hidden_states=(ids, ids + 1),
        )

    ids = torch.arange(7 * 3).reshape(7, 3)
    inputs = ArgsKwargs(args=(), kwargs={"input_ids": ids, "attention_mask": torch.ones_like(ids), "other": 5})
    whole = stock(None, inputs)
    for bound in (3, 6, 20, 21, 1000):
        monkeypatch.setattr(encoder_chunks, "MAX_PIECES", bound)
        joined = encoder_chunks.predict_in_chunks(stock, None, inputs)
        assert type(joined) is type(whole) and list(joined.keys()) == list(whole.keys())
        assert joined.cross_attentions is None
        assert torch.equal(joined.last_hidden_state, whole.last_hidden_state)
        assert torch.equal(joined.pooler_output, whole.pooler_output)
        assert all(torch.equal(a, b) for a, b in zip(joined.hidden_states, whole.hidden_states))


def test_installing_twice_wraps_the_shim_once(tiny_bert_dir):
    from spacy_transformers.layers.hf_shim import HFShim

    make_nlp(tiny_bert_dir)  # building the package's architectures installs it
    wrapped = HFShim.predict
    assert wrapped.wrapped_by_spacy_crf is encoder_chunks.predict_in_chunks
    encoder_chunks.install()
    assert HFShim.predict is wrapped


PEAK = """
import json, random, sys
import spacy
from spacy_crf.ml import encoder_chunks

path, n_chars, max_pieces, text = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.stdin.read()
nlp = spacy.load(path)
encoder_chunks.MAX_PIECES = max_pieces
list(nlp.pipe([text[:300]] * 4))  # warm: the allocations every call makes

def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key))

before = status("VmRSS")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak (VmHWM) from now on
docs = list(nlp.pipe([text]))
print(json.dumps({"per_char": (status("VmHWM") - before) / n_chars, "ents": len(docs[0].ents)}))
"""


def peak_per_char(path: Path, text: str, max_pieces: int) -> float:
    """Peak memory (resident, over what the process held before) per
    character of ``text`` through ``nlp.pipe`` of the pipeline at ``path``, in
    a fresh process."""
    result = subprocess.run(
        [sys.executable, "-c", PEAK, str(path), str(len(text)), str(max_pieces)],
        input=text,
        capture_output=True,
        text=True,
        encoding="utf8",
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    record = json.loads(result.stdout.strip().splitlines()[-1])
    assert record["ents"] > 0  # the CRF heads ran over the doc
    return record["per_char"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the peak from /proc/self/status")
def test_the_peak_memory_of_one_long_doc_stays_bounded_per_character(tmp_path):
    from transformers import BertConfig, BertModel, BertTokenizerFast

    # a tiny encoder, wide enough (heads, feed-forward) for its activations to
    # dominate the peak as a real one's do, over windows of 32 characters
    bert = tmp_path / "bert"
    bert.mkdir()
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *sorted(set(CHARS)), "。"]
    (bert / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf8")
    BertTokenizerFast(vocab_file=str(bert / "vocab.txt"), tokenize_chinese_chars=True).save_pretrained(str(bert))
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=8,
        intermediate_size=512,
        max_position_embeddings=64,
    )
    BertModel(config).save_pretrained(str(bert))
    nlp = make_nlp(bert)
    nlp.config["components"]["transformer"]["model"]["get_spans"].update({"window": 32, "stride": 24})
    nlp = spacy.util.load_model_from_config(nlp.config, auto_fill=True, validate=True)
    nlp.initialize(lambda: examples(nlp))
    nlp.to_disk(tmp_path / "pipeline")
    text = long_text(30_000)
    bounded = peak_per_char(tmp_path / "pipeline", text, 2048)
    unbounded = peak_per_char(tmp_path / "pipeline", text, 10**12)  # one encoder call, as before
    # all of the doc's 1,250 spans in one call: their attention scores and
    # feed-forward activations at once (measured: about 10 KB a character);
    # in calls of 2,048 pieces what stays is the doc, its tokenization and
    # the encoder's output for it (about 2 KB)
    assert bounded < 4000, (bounded, unbounded)
    assert unbounded > 2 * bounded, (bounded, unbounded)
