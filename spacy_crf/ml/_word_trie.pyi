from typing import Iterable, Tuple

import numpy

class WordTrie:
    max_length: int
    num_nodes: int
    def __init__(self, words: Iterable[str]) -> None: ...
    def find(self, text: str) -> Tuple[numpy.ndarray, numpy.ndarray]: ...
