"""Approval routing: rules per tool × risk × environment tier, who may decide, the two-person
rule, expiry and the approval inbox. ``policy`` reads; ``requests`` parks a call and notifies
(the loop's side); ``expiry`` expires (the reaper's side); deciding is a use case
(``agents.services.decisions``); ``selectors`` lists a person's inbox."""
