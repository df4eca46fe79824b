"""The machine record beside every timing (spacy_crf.hardware)."""

import importlib.metadata
import os

import pytest

from spacy_crf.hardware import CPU_FEATURES, cpu_features, hardware


def test_cpu_features_keeps_the_flags_that_decide_the_encoder_backend_in_order():
    flags = ["fpu", "avx512_bf16", "avx2", "sse4_2", "avx512_vnni"]
    assert cpu_features(flags) == ["avx2", "avx512_vnni", "avx512_bf16"]
    assert cpu_features(["fpu", "sse2"]) == []


def test_the_record_names_the_cpu_features_and_the_installed_runtimes():
    info = hardware()
    assert info["cpu_count"] >= 1 and info["torch_threads"] >= 1
    if os.path.exists("/proc/cpuinfo"):
        assert set(info["cpu_features"]) <= set(CPU_FEATURES)
    pytest.importorskip("openvino")
    assert info["openvino"] == importlib.metadata.version("openvino")


def test_the_record_says_whether_the_compiled_kernels_run(monkeypatch):
    assert hardware()["compiled_kernels"] == {
        **dict.fromkeys(["viterbi", "nbest", "partition", "word_trie", "pooling"], True),
        "enabled": True,
    }
    monkeypatch.setenv("SPACY_CRF_PURE_PYTHON", "1")
    assert hardware()["compiled_kernels"]["enabled"] is False
