"""What machine a measurement ran on: recorded beside every timing."""

import importlib.metadata
import os
import platform
from typing import Any, Dict, Iterable, List

#: CPU flags (as Linux names them) that decide which encoder backend is fastest:
#: int8 dot products (VNNI), native bfloat16 and AMX tiles
CPU_FEATURES = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8")
#: the inference runtimes whose versions a timing depends on, where installed
RUNTIMES = ("onnxruntime", "openvino", "nncf")


def cpu_features(flags: Iterable[str]) -> List[str]:
    """The ``CPU_FEATURES`` among a CPU's ``flags``, in that order."""
    present = set(flags)
    return [feature for feature in CPU_FEATURES if feature in present]


def hardware() -> Dict[str, Any]:
    """CPU model and features, core count, torch threads, GPU (if any) and
    the installed inference runtimes of this machine."""
    info: Dict[str, Any] = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "cpu": platform.processor() or platform.machine(),
    }
    try:
        with open("/proc/cpuinfo", encoding="utf8") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    info["cpu_features"] = cpu_features(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    try:
        import torch

        info["torch"] = torch.__version__
        info["torch_threads"] = torch.get_num_threads()
        info["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:  # pragma: no cover - torch is a requirement
        info["gpu"] = None
    for runtime in RUNTIMES:
        try:
            info[runtime] = importlib.metadata.version(runtime)
        except importlib.metadata.PackageNotFoundError:
            pass
    return info
