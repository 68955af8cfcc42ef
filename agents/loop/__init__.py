"""Pieces of the model backend's tool loop (``agents.backends.model``): the prompt and
history (``prompt``), prompt tiers (``tiers``), executing one tool call under governance
(``execute``) and model-facing tool results (``results``). The driver that runs a turn is
``agents.runs.driver.run_turn``."""
