"""Proposers: where knob priors and source patches come from (a patch folder, the built-in mechanism catalog,
an OpenAI-compatible language model, an external coding agent).

Kept import-light on purpose: :mod:`infrarsi.controller.contract.model` imports :mod:`.spec` and :mod:`.schema`.
Import the implementations from their own modules (:mod:`.base`, :mod:`.llm`, :mod:`.agent`, ...).
"""
