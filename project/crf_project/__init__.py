"""The spaCy project's commands and the code they share.

Every command is a module here with a typer ``app``, run through the one front
door, ``python crf_project COMMAND [ARGS]`` from ``project/`` (``python
../crf_project ...`` from ``project/studies/``): see ``__main__.py``. Modules
import each other as ``crf_project.NAME``; this file imports nothing, so that
the packaged pipeline's venv (``check``, ``evaluate-pipeline``, ``speed``) can
run a command with only spaCy and spacy-crf installed.
"""
