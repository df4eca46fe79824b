from typing import Optional

import numpy

def log_partition_flat(
    emissions: numpy.ndarray,
    offsets: numpy.ndarray,
    transitions: numpy.ndarray,
    start: numpy.ndarray,
    end: numpy.ndarray,
    allowed: Optional[numpy.ndarray] = ...,
    temperature: float = ...,
) -> numpy.ndarray: ...
