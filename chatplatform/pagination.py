"""List pagination with strict, bounded parameters (``?limit=&offset=``)."""

from __future__ import annotations

from rest_framework.pagination import LimitOffsetPagination

from .safe_input import parse_int

MAX_PAGE_SIZE = 200
MAX_OFFSET = 2**31 - 1


class BoundedLimitOffsetPagination(LimitOffsetPagination):
    """DRF's limit/offset pagination, but a ``limit`` or ``offset`` that is not a plain
    integer in range is a 400 ``invalid_parameter`` (DRF would silently ignore it, and an
    offset beyond 64 bits crashed the database query). ``limit`` is 1…; above
    ``MAX_PAGE_SIZE`` (200) it is capped."""

    max_limit = MAX_PAGE_SIZE

    def get_limit(self, request):
        raw = request.query_params.get(self.limit_query_param)
        if raw is None or raw == "":
            return self.default_limit
        return min(parse_int(raw, "limit", minimum=1, maximum=MAX_OFFSET), self.max_limit)

    def get_offset(self, request):
        return parse_int(request.query_params.get(self.offset_query_param), "offset", minimum=0,
                         maximum=MAX_OFFSET, default=0)
