"""The README's Python examples run as written."""
import re
from pathlib import Path

README = Path(__file__).parent.parent / "README.md"


def test_readme_python_examples_run(tmp_path, monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf8"), re.S)
    assert blocks
    monkeypatch.chdir(tmp_path)  # the example writes transitions.png
    namespace = {}
    exec(compile("\n".join(blocks), str(README), "exec"), namespace)
    assert [(e.text, e.label_) for e in namespace["nlp"]("张三去上海").ents] == [("张三", "PER"), ("上海", "LOC")]
    assert (tmp_path / "transitions.png").exists()
