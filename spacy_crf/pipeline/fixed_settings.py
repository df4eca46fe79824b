"""The settings a pipe's weights were trained with, checked at load.

Most factory settings are the config's at load (``TrainableHead.config_settings``:
a value given to ``spacy.load`` is the one the loaded pipe uses). Two kinds
cannot change after training, and the save used to replace them without a
word, so that the pipe ran the saved ones under a config that said
otherwise:

* the CRF tagger's ``scheme``: its tags, and so the width of the output
  layer and the transition matrix, follow from it;
* the architecture settings that the weights bring back in the model's
  ``attrs`` (the CRF's ``use_start_end``, the span head's ``rope``, ...).

A pipe made with another value than the saved one (its ``config.cfg``
edited, a setting given to ``spacy.load``, or ``from_disk``/``from_bytes``
into a pipe made otherwise) is refused at load, naming the component and
both values. An equal value loads.
"""

from typing import Any, Dict, Tuple

from thinc.api import Model

#: the model attrs set from an architecture's settings (attr -> the setting's
#: name): the weights' ``from_bytes`` writes the saved values over them
ARCHITECTURE_ATTRS = {
    "use_crf": "use_crf",
    "use_start_end": "use_start_end",
    "span_width": "width",
    "span_rope": "rope",
    "kind": "kind",
}


def _made_with(setting: str, value: Any) -> str:
    return f"the pipe was made with {setting} {value!r} (its config, or a setting given to spacy.load)"


def check_scheme(pipe, saved_cfg: Dict[str, Any], where: str) -> None:
    """Refuse a saved cfg whose ``scheme`` differs from the one ``pipe`` was made with."""
    made, saved = pipe.cfg.get("scheme"), saved_cfg.get("scheme")
    if made is None or saved is None or made == saved:
        return
    raise ValueError(
        f"[{pipe.name}] cannot load {where}: its cfg has scheme {saved!r}, the one it was trained with, but "
        f"{_made_with('scheme', made)}; the scheme cannot change after training (the tags and the transitions follow from it): "
        f"leave it out or set it to {saved!r}."
    )


def architecture_settings(model: Model) -> Dict[Tuple[int, str], Any]:
    """The architecture settings held in ``model``'s attrs, by node (its
    position in ``model.walk()``) and attr."""
    return {
        (i, name): node.attrs[name]
        for i, node in enumerate(model.walk())
        for name in ARCHITECTURE_ATTRS
        if isinstance(node.attrs.get(name), (bool, int, float, str))
    }


def check_architecture(pipe, made: Dict[Tuple[int, str], Any], what: str) -> None:
    """Refuse weights that brought back other architecture settings than
    ``made`` (:func:`architecture_settings` before they were loaded)."""
    loaded = architecture_settings(pipe.model)
    for key, value in made.items():
        if key in loaded and loaded[key] != value:
            setting = ARCHITECTURE_ATTRS[key[1]]
            raise ValueError(
                f"[{pipe.name}] cannot load {what}: the weights were trained with {setting} = "
                f"{loaded[key]!r}, but {_made_with(setting + ' =', value)}; an architecture's settings cannot change after training: leave it out or set it to "
                f"{loaded[key]!r}."
            )
