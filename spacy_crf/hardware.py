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


def _cpuinfo() -> Dict[str, str]:
    """The first CPU's "model name" and "flags" in ``/proc/cpuinfo``, those it has
    (none where the file cannot be read)."""
    found: Dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf8") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("model name", "flags") and key not in found:
                    found[key] = value.strip()
                    if len(found) == 2:
                        break
    except OSError:
        pass
    return found


def cpu_flags(info: Optional[Dict[str, str]] = None) -> Optional[List[str]]:
    """This CPU's flags as Linux lists them (from ``info``, :func:`_cpuinfo`'s
    result, where given), or None where they cannot be read."""
    info = _cpuinfo() if info is None else info
    return info["flags"].split() if "flags" in info else None


def has_int8_dot_products() -> Optional[bool]:
    """Whether this CPU has int8 dot products (VNNI or AMX); None where its
    flags cannot be read."""
    flags = cpu_flags()
    return None if flags is None else any(flag in flags for flag in INT8_DOT_PRODUCTS)


def hardware() -> Dict[str, Any]:
    """CPU model and features, core count, torch threads, GPU (if any), the
    installed inference runtimes of this machine, and whether this
    installation's compiled kernels are built and in use."""
    info: Dict[str, Any] = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "cpu": platform.processor() or platform.machine(),
    }
    cpuinfo = _cpuinfo()  # one read for the model and the flags
    if "model name" in cpuinfo:
        info["cpu"] = cpuinfo["model name"]
    flags = cpu_flags(cpuinfo)
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
    from .ml import kernels  # (numpy only: no model code is loaded)

    info["compiled_kernels"] = {**kernels.built(), "enabled": kernels.enabled()}
    return info
