"""The language of a request (Django i18n): the browser's choice, then the person's own.

``locale_middleware`` is Django's ``LocaleMiddleware`` without URL language prefixes (the site
has none), written sync-and-async like the other plumbing middleware: on the async stack (SSE,
the streaming OpenAI-compatible API) it runs on the event loop, where ``LocaleMiddleware`` (a
``MiddlewareMixin``) would hop through ``sync_to_async`` on Django's one thread-sensitive
executor for every request. It activates ``get_language_from_request`` (the ``django_language``
cookie, then ``Accept-Language``, then ``LANGUAGE_CODE``), sets ``request.LANGUAGE_CODE`` and
answers with ``Content-Language`` and ``Vary: Accept-Language, Cookie``.

``user_language_middleware`` (after ``AuthenticationMiddleware``) lets a signed-in person's
language preference win over the browser: the language the app stored in the session under
:data:`SESSION_KEY` (``chat`` keeps it there from ``UserPreferences.language``; ``""`` or absent:
the browser decides). It reads the session only, never the database, and only on the sync
stack, where authentication has loaded the session already.
"""

from __future__ import annotations

from inspect import iscoroutinefunction

from django.conf import settings
from django.utils import translation
from django.utils.cache import patch_vary_headers
from django.utils.decorators import sync_and_async_middleware

SESSION_KEY = "_chat_language"


def _activate_from_browser(request) -> None:
    language = translation.get_language_from_request(request)
    translation.activate(language)
    request.LANGUAGE_CODE = translation.get_language()


def _mark(request, response):
    patch_vary_headers(response, ("Accept-Language", "Cookie"))
    response.headers.setdefault("Content-Language", getattr(request, "LANGUAGE_CODE", settings.LANGUAGE_CODE))
    return response


@sync_and_async_middleware
def locale_middleware(get_response):
    """Activate the browser's language for the request (see the module docstring)."""
    if iscoroutinefunction(get_response):
        async def middleware(request):
            _activate_from_browser(request)
            return _mark(request, await get_response(request))
    else:
        def middleware(request):
            _activate_from_browser(request)
            return _mark(request, get_response(request))
    return middleware


def chosen_language(request) -> str:
    """The supported language a signed-in person chose (from the session), else ``""``."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return ""
    code = request.session.get(SESSION_KEY) or ""
    return code if code and translation.check_for_language(code) and code in dict(settings.LANGUAGES) else ""


@sync_and_async_middleware
def user_language_middleware(get_response):
    """Activate the signed-in person's chosen language over the browser's (sync stack only)."""
    if iscoroutinefunction(get_response):
        async def middleware(request):
            return await get_response(request)
    else:
        def middleware(request):
            code = chosen_language(request)
            if code:
                translation.activate(code)
                request.LANGUAGE_CODE = translation.get_language()
            response = get_response(request)
            if code:
                response.headers["Content-Language"] = request.LANGUAGE_CODE
            return response
    return middleware


def language_from_scope(scope: dict) -> str:
    """The language of a websocket (an ASGI ``scope``), chosen as for a page: the signed-in
    person's choice in the session (when authentication has loaded it), the language cookie,
    ``Accept-Language``, else ``LANGUAGE_CODE``. Never touches the database."""
    from http.cookies import SimpleCookie

    from django.utils.translation.trans_real import parse_accept_lang_header

    supported = dict(settings.LANGUAGES)
    session = scope.get("session")
    loaded = getattr(session, "_session_cache", None) if session is not None else None
    user = scope.get("user")
    chosen = loaded.get(SESSION_KEY) if isinstance(loaded, dict) and getattr(user, "is_authenticated", False) else ""
    headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope.get("headers", [])}
    cookie = SimpleCookie()
    try:
        cookie.load(headers.get("cookie", ""))
    except Exception:  # noqa: BLE001 — a malformed cookie header: no cookie
        pass
    candidates = [chosen or "", cookie[settings.LANGUAGE_COOKIE_NAME].value if settings.LANGUAGE_COOKIE_NAME in cookie else ""]
    candidates += [code for code, _q in parse_accept_lang_header(headers.get("accept-language", "")) if code != "*"]
    for code in candidates:
        if not code:
            continue
        try:
            variant = translation.get_supported_language_variant(code)
        except LookupError:
            continue
        if variant in supported:
            return variant
    return settings.LANGUAGE_CODE


def file_size(n: int) -> str:
    """A byte count for people in the active language ("20.0 MB", "20,0 MB", "1000 bytes"):
    Django's ``filesizeformat`` with a plain space, as the API's other messages have."""
    from django.template.defaultfilters import filesizeformat

    return str(filesizeformat(n)).replace("\xa0", " ")
