"""Approval routing (issue 13): rules per tool × risk × environment tier, who may decide,
the two-person rule, expiry and the approval inbox. ``policy`` reads, ``services`` writes,
``selectors`` lists a person's inbox."""
