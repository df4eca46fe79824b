"""Config text and tiny data sets shared by the tests (one copy of each).

Pipelines are built from blocks: :func:`pipeline_config` puts an encoder
(``transformer``: a local random BERT; ``tok2vec``: spaCy's HashEmbedCNN)
in front of CRF components that listen to it.
"""

from pathlib import Path
from typing import Sequence, Tuple

NER_DATA = [
    ("我在北京工作", [(2, 4, "LOC")]),
    ("张三去上海", [(0, 2, "PER"), (3, 5, "LOC")]),
    ("今天天气好", []),
    ("李四住广州", [(0, 2, "PER"), (3, 5, "LOC")]),
]
WORDS = [["张三", "去", "上海"], ["我", "在", "北京", "工作"], ["今天", "天气", "好"]]
#: a half-trained pipeline's training words and entities, and dev words with
#: unseen ones (the OOV probes, the lexicon tuning: conftest.write_probe_inputs)
PROBE_WORDS = [
    ["张三", "去", "上海"],
    ["我", "在", "北京", "工作"],
    ["李四", "住", "广州"],
    ["今天", "天气", "好"],
    ["北京大学", "在", "北京"],
    ["上海", "人"],
]
PROBE_ENTS = [("张三去上海", [(0, 2, "PER"), (3, 5, "LOC")]), ("我在北京工作", [(2, 4, "LOC")])]
PROBE_DEV = [["王五", "去", "广州"], ["那不勒斯", "很", "美"], ["我", "在", "上海", "工作"], ["好"]]
#: a small spaCy tok2vec for CRF taggers that embed their own features
SMALL_TOK2VEC = {
    "@architectures": "spacy.HashEmbedCNN.v2",
    "pretrained_vectors": None,
    "width": 32,
    "depth": 1,
    "embed_size": 500,
    "window_size": 1,
    "maxout_pieces": 2,
    "subword_features": False,
}


def crf_model_config(**kwargs) -> dict:
    """A ``spacy_crf.CRFTagger.v1`` model over :data:`SMALL_TOK2VEC`, as a dict for ``add_pipe``."""
    return {"@architectures": "spacy_crf.CRFTagger.v1", "tok2vec": dict(SMALL_TOK2VEC), **kwargs}


TRANSFORMER_BLOCK = """
[components.transformer]
factory = "transformer"
max_batch_items = 4096

[components.transformer.model]
@architectures = "spacy-transformers.TransformerModel.v3"
name = "{name}"
mixed_precision = false

[components.transformer.model.get_spans]
@span_getters = "spacy-transformers.strided_spans.v1"
window = 16
stride = 12

[components.transformer.model.tokenizer_config]
use_fast = true
"""

TOK2VEC_BLOCK = """
[components.tok2vec]
factory = "tok2vec"

[components.tok2vec.model]
@architectures = "spacy.HashEmbedCNN.v2"
pretrained_vectors = null
width = 48
depth = 1
embed_size = 500
window_size = 1
maxout_pieces = 2
subword_features = false
"""

LISTENERS = {
    "transformer": """
[components.{component}.model.tok2vec]
@architectures = "spacy-transformers.TransformerListener.v1"
grad_factor = 1.0
upstream = "*"

[components.{component}.model.tok2vec.pooling]
@layers = "reduce_mean.v1"
""",
    "tok2vec": """
[components.{component}.model.tok2vec]
@architectures = "spacy.Tok2VecListener.v1"
width = 48
upstream = "tok2vec"
""",
}


def crf_block(component: str, factory: str = "crf_tagger", scheme: str = "", encoder: str = "transformer") -> str:
    """A CRF component listening to ``encoder``; ``scheme`` empty: the factory's default."""
    scheme_line = f'scheme = "{scheme}"\n' if scheme else ""
    return (
        f'\n[components.{component}]\nfactory = "{factory}"\n{scheme_line}'
        f'\n[components.{component}.model]\n@architectures = "spacy_crf.CRFTagger.v1"\n'
        + LISTENERS[encoder].replace("{component}", component)
    )


def pipeline_config(crfs: Sequence[Tuple[str, str, str]], encoder: str = "transformer", name: str = "{name}") -> str:
    """``[nlp]`` + ``[components]``: ``encoder`` then one CRF block per
    ``(component, factory, scheme)``. ``name`` is the transformer's model path."""
    names = [encoder] + [c for c, _, _ in crfs]
    head = f'[nlp]\nlang = "zh"\npipeline = {names!r}\nbatch_size = 8\n\n[components]\n'.replace("'", '"')
    encoder_block = TRANSFORMER_BLOCK.replace("{name}", str(name)) if encoder == "transformer" else TOK2VEC_BLOCK
    return head + encoder_block + "".join(crf_block(c, f, s, encoder) for c, f, s in crfs)


#: transformer -> crf_tagger (bioes); "{name}" is replaced by the model path.
PIPELINE_CFG = pipeline_config([("crf_tagger", "crf_tagger", "bioes")])
#: tok2vec -> segmenter (crf_segmenter) + crf_ner (crf_ner, bioes): joint training.
JOINT_CONFIG = pipeline_config([("segmenter", "crf_segmenter", ""), ("crf_ner", "crf_ner", "bioes")], encoder="tok2vec")

TRAIN_CFG = """
[paths]
train = null
dev = null

[system]
seed = 0
gpu_allocator = null

[corpora]

[corpora.train]
@readers = "spacy.Corpus.v1"
path = ${paths.train}

[corpora.dev]
@readers = "spacy.Corpus.v1"
path = ${paths.dev}

[training]
seed = ${system.seed}
max_steps = 6
eval_frequency = 3
patience = 0
dropout = 0.1
accumulate_gradient = 1

[training.batcher]
@batchers = "spacy.batch_by_sequence.v1"
size = 2

[training.optimizer]
@optimizers = "spacy_crf.GroupedAdam.v1"
learn_rate = 0.0005
crf_lr_multiplier = 100.0
use_averages = false

[initialize]
"""
#: what a config with the general crf_tagger factory needs on top of TRAIN_CFG
CRF_TAGGER_NER_WEIGHTS = """
[training.score_weights]
ents_f = 1.0
words_f = null
words_p = null
words_r = null
tag_acc = null
"""


def write_ner_training_files(tiny_bert_dir, out_dir) -> Tuple[Path, Path]:
    """``out_dir/config.cfg`` (PIPELINE_CFG over the tiny BERT + TRAIN_CFG, filled as
    ``spacy init fill-config`` would) and ``out_dir/train.spacy`` (NER_DATA)."""
    import spacy
    from spacy.tokens import DocBin
    from spacy.training import Example
    from thinc.api import Config

    nlp = spacy.blank("zh")
    db = DocBin()
    for text, ents in NER_DATA:
        db.add(Example.from_dict(nlp.make_doc(text), {"entities": ents}).reference)
    db.to_disk(out_dir / "train.spacy")
    config = Config().from_str(PIPELINE_CFG.replace("{name}", str(tiny_bert_dir)))
    config = config.merge(Config().from_str(TRAIN_CFG + CRF_TAGGER_NER_WEIGHTS, interpolate=False))
    # what `spacy init fill-config` does: add every default the user left out
    filled = spacy.util.load_model_from_config(config, auto_fill=True, validate=True).config
    (out_dir / "config.cfg").write_text(filled.to_str(), encoding="utf8")
    return out_dir / "config.cfg", out_dir / "train.spacy"


def joint_recipe_overrides(out_dir: Path, encoder, lexicon: Path, char_tagger) -> dict:
    """Overrides that run ``configs/joint.cfg`` as it is for 3 steps on the
    tiny BERT ``encoder``: WORDS and NER_DATA written to ``out_dir`` as its
    train and dev corpora, ``lexicon`` and ``char_tagger`` as its feature
    paths, windows small enough for the tiny encoder."""
    import spacy
    from spacy.tokens import Doc, DocBin
    from spacy.training import Example

    nlp = spacy.blank("zh")
    words, ents = DocBin(), DocBin()
    for w in WORDS:
        words.add(Doc(nlp.vocab, words=w, spaces=[False] * len(w)))
    for text, spans in NER_DATA:
        ents.add(Example.from_dict(nlp.make_doc(text), {"entities": spans}).reference)
    words.to_disk(out_dir / "words.spacy")
    ents.to_disk(out_dir / "ents.spacy")
    return {
        **{
            f"paths.{split}_{kind}": str(out_dir / f"{kind}.spacy")
            for split in ("train", "dev")
            for kind in ("words", "ents")
        },
        "paths.encoder": str(encoder),
        "paths.lexicon_features": str(lexicon),
        "paths.char_tagger": str(char_tagger),
        "training.max_steps": 3,
        "training.eval_frequency": 3,
        "training.optimizer.learn_rate.warmup_steps": 1,
        "components.transformer.model.get_spans.window": 16,
        "components.transformer.model.get_spans.stride": 12,
    }
