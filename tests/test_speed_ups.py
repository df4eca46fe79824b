"""The process-wide speed-ups are opt-in: importing spacy_crf or building
its pipes patches nothing; ``enable_speed_ups`` and the
``spacy_crf.speed_ups.v1`` callback install srsly's hook lookup and the
fork hook, once."""

import subprocess
import sys
from pathlib import Path

import spacy
from srsly import msgpack

import spacy_crf
from spacy_crf import _compat, util

TESTS = Path(__file__).parent

#: run in a fresh interpreter, so that no earlier test's opt-in shows
BUILD_EVERY_PIPE = """
import os, sys
forks = []
stock_register = os.register_at_fork
def record(**kw):  # spacy-crf's own fork hooks (torch, joblib and the like register theirs)
    if any((getattr(getattr(f, "func", f), "__module__", None) or "").startswith("spacy_crf") for f in kw.values()):
        forks.append(kw)
    stock_register(**kw)
os.register_at_fork = record
sys.path.insert(0, TESTS)
import spacy_crf
from srsly import msgpack
registries = (msgpack.msgpack_encoders, msgpack.msgpack_decoders)
import spacy
from _configs import crf_model_config, SMALL_TOK2VEC
nlp = spacy.blank("zh")
for factory in ("crf_tagger", "crf_ner", "crf_segmenter"):
    nlp.add_pipe(factory, config={"model": crf_model_config()})
span = {"@architectures": "spacy_crf.SpanPointer.v1", "width": 16, "tok2vec": dict(SMALL_TOK2VEC)}
nlp.add_pipe("span_ner", config={"model": span})
merge = nlp.add_pipe("crf_merge_words")
doc = nlp.make_doc("张三去上海")
doc.spans["words"] = [doc[0:2], doc[2:3], doc[3:5]]
merge(doc)  # (reads the span group as arrays)
assert nlp.pipe_names == ["crf_tagger", "crf_ner", "crf_segmenter", "span_ner", "crf_merge_words"]
patched = [r.namespace for r in registries if "get_all" in vars(r)]
assert not patched, f"get_all replaced on {patched}"
assert forks == [], forks
assert not spacy_crf.util._fork_hook_installed
# the opt-in, twice: the hook lookup and one fork hook
spacy_crf.enable_speed_ups(); spacy_crf.enable_speed_ups()
assert all(isinstance(r.get_all, spacy_crf._compat._HookLookup) for r in registries)
assert len(forks) == 1 and set(forks[0]) == {"after_in_child"}, forks
print("OK")
"""


def test_importing_the_package_and_building_every_pipe_patches_nothing_until_the_opt_in():
    code = BUILD_EVERY_PIPE.replace("TESTS", repr(str(TESTS)))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and result.stdout.strip() == "OK", result.stdout + result.stderr[-3000:]


def test_enable_speed_ups_installs_the_hook_lookup_and_the_fork_hook():
    _compat.restore_msgpack_hooks()
    assert not _compat.msgpack_hooks_sped_up()
    spacy_crf.enable_speed_ups()
    assert isinstance(msgpack.msgpack_encoders.get_all, _compat._HookLookup)
    assert isinstance(msgpack.msgpack_decoders.get_all, _compat._HookLookup)
    assert _compat.msgpack_hooks_sped_up() and util._fork_hook_installed
    lookups = [msgpack.msgpack_encoders.get_all, msgpack.msgpack_decoders.get_all]
    spacy_crf.enable_speed_ups()  # again: changes nothing
    assert [msgpack.msgpack_encoders.get_all, msgpack.msgpack_decoders.get_all] == lookups


def test_the_callback_in_a_config_opts_in_when_the_pipeline_is_built_and_loaded(tmp_path):
    speed_ups = {"@callbacks": "spacy_crf.speed_ups.v1"}
    _compat.restore_msgpack_hooks()
    nlp = spacy.blank("zh", config={"nlp": {"after_pipeline_creation": speed_ups}})
    assert _compat.msgpack_hooks_sped_up()
    _compat.restore_msgpack_hooks()
    nlp.to_disk(tmp_path)
    loaded = spacy.load(tmp_path)
    assert _compat.msgpack_hooks_sped_up()
    assert loaded.config["nlp"]["after_pipeline_creation"] == speed_ups
    _compat.restore_msgpack_hooks()
    spacy.blank("zh")  # without the callback: left alone
    assert not _compat.msgpack_hooks_sped_up()
    spacy_crf.enable_speed_ups()


#: run in a fresh interpreter: a model's first forward pass registers the
#: fork guard, opted in or not, and a worker forked after torch ran does not hang
FORWARD_THEN_FORK = """
import os, sys
sys.path.insert(0, TESTS)
import spacy, torch
import spacy_crf
from spacy.training import Example
from _configs import crf_model_config
nlp = spacy.blank("zh")
nlp.add_pipe("crf_ner", config={"model": crf_model_config()})
assert not spacy_crf.util._fork_hook_installed  # built: nothing yet
examples = [Example.from_dict(nlp.make_doc("张三去上海"), {"entities": [(0, 2, "PER"), (3, 5, "LOC")]})]
nlp.initialize(lambda: examples)  # (runs the model on the examples)
nlp("张三去上海")
assert spacy_crf.util._fork_hook_installed
torch.set_num_threads(2)
a = torch.randn(1000, 1000); (a @ a).sum()  # libgomp's pool runs in this process
pid = os.fork()
if pid == 0:
    b = torch.randn(1000, 1000); (b @ b).sum(); nlp("我在北京"); os._exit(0)
_, status = os.waitpid(pid, 0)
assert status == 0, status
print("OK")
"""


def test_a_models_first_forward_pass_registers_the_fork_guard_and_a_forked_worker_runs():
    code = FORWARD_THEN_FORK.replace("TESTS", repr(str(TESTS)))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stdout.strip() == "OK", result.stdout + result.stderr[-3000:]
