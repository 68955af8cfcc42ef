"""DRF parsers that refuse hostile JSON (``chatplatform.safe_input``): too deep, NUL characters."""

from __future__ import annotations

import codecs

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from .safe_input import BadInput, loads


class SafeJSONParser(JSONParser):
    """``application/json`` bodies: bad JSON, nesting beyond ``JSON_MAX_DEPTH`` or a NUL
    character → 400 ``{"error": {"code": "parse_error" | "nested_too_deeply" | "invalid_text"}}``."""

    def parse(self, stream, media_type=None, parser_context=None):
        parser_context = parser_context or {}
        encoding = parser_context.get("encoding", settings.DEFAULT_CHARSET)
        try:
            text = codecs.getreader(encoding)(stream).read()
        except UnicodeDecodeError as exc:
            raise ParseError(f"The body is not valid {encoding} text.") from exc
        try:
            return loads(text, what="The request body")
        except BadInput:
            raise
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from exc
