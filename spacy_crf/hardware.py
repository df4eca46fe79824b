"""What machine a measurement ran on: recorded beside every timing."""

import importlib.metadata
import os
import platform
from typing import Any, Dict, Iterable, List, Optional

#: CPU flags (as Linux names them) that decide which encoder backend is fastest:
#: int8 dot products (VNNI), native bfloat16 and AMX tiles
CPU_FEATURES = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8")
#: the inference runtimes whose versions a timing depends on, where installed
RUNTIMES = ("onnxruntime", "openvino", "nncf")


def cpu_features(flags: Iterable[str]) -> List[str]:
    """The ``CPU_FEATURES`` among a CPU's ``flags``, in that order."""
    present = set(flags)
    return [feature for feature in CPU_FEATURES if feature in present]


#: the flags of int8 dot-product instructions, which int8 inference needs to beat float32
INT8_DOT_PRODUCTS = ("avx512_vnni", "avx_vnni", "amx_int8")


def cpu_flags() -> Optional[List[str]]:
    """This CPU's flags as Linux lists them, or None where they cannot be read."""
    try:
        with open("/proc/cpuinfo", encoding="utf8") as f:
            for line in f:
                if line.startswith("flags"):
                    return line.split(":", 1)[1].split()
    except OSError:
        pass
    return None


def has_int8_dot_products() -> Optional[bool]:
    """Whether this CPU has int8 dot products (VNNI or AMX); None where its
    flags cannot be read."""
    flags = cpu_flags()
    return None if flags is None else any(flag in flags for flag in INT8_DOT_PRODUCTS)


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
                    break
    except OSError:
        pass
    flags = cpu_flags()
    if flags is not None:
        info["cpu_features"] = cpu_features(flags)
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
