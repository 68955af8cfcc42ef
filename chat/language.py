"""A person's language preference (``UserPreferences.language``) and the session copy that
``chatplatform.locale.user_language_middleware`` reads on every page without a query.

The copy is written when the person signs in (``user_logged_in``) and when they change the
preference (:func:`language_remember`, which also sets Django's language cookie, so the sign-in
page after a sign-out speaks it too). Another signed-in browser of the same person picks a
change up at its next sign-in.
"""

from __future__ import annotations

from django.conf import settings
from django.utils import translation
from django.utils.translation import gettext as _

from chatplatform.errors import ServiceError
from chatplatform.locale import SESSION_KEY

from .models import UserPreferences


def language_choices() -> list[tuple[str, str]]:
    """The languages a person may choose: ``[(code, name in its own language), …]``."""
    return list(settings.LANGUAGES)


def language_for_user(*, user_id) -> str:
    """The language ``user_id`` chose (a code of ``settings.LANGUAGES``), ``""`` for the browser's."""
    code = UserPreferences.objects.filter(user_id=user_id).values_list("language", flat=True).first() or ""
    return code if code in dict(settings.LANGUAGES) else ""


def browser_language(request) -> str:
    """The supported language ``request``'s browser asks for (``Accept-Language`` alone — the
    language cookie holds the person's choice), else ``settings.LANGUAGE_CODE``."""
    from django.utils.translation.trans_real import parse_accept_lang_header

    for code, _quality in parse_accept_lang_header(request.headers.get("Accept-Language", "")):
        if code == "*":
            break
        try:
            return translation.get_supported_language_variant(code)
        except LookupError:
            continue
    return settings.LANGUAGE_CODE


def language_set(*, user, code: str) -> UserPreferences:
    """Save ``user``'s language (``""``: the browser's). Raises ``ServiceError``
    ``language_not_supported`` (400) for a code not in ``settings.LANGUAGES``."""
    code = (code or "").strip().lower()
    if code and code not in dict(settings.LANGUAGES):
        raise ServiceError("language_not_supported",
                           _("“%(code)s” is not a language this site offers.") % {"code": code}, 400)
    prefs, _created = UserPreferences.objects.update_or_create(user=user, defaults={"language": code})
    return prefs


def language_remember(request, response, code: str) -> None:
    """After ``language_set``: put ``code`` in the session and the language cookie of ``request``'s
    browser, and activate it for the rest of the request (its answer is in the new language)."""
    request.session[SESSION_KEY] = code
    if code:
        response.set_cookie(settings.LANGUAGE_COOKIE_NAME, code, max_age=settings.LANGUAGE_COOKIE_AGE,
                            path=settings.LANGUAGE_COOKIE_PATH, domain=settings.LANGUAGE_COOKIE_DOMAIN,
                            secure=settings.LANGUAGE_COOKIE_SECURE, httponly=settings.LANGUAGE_COOKIE_HTTPONLY,
                            samesite=settings.LANGUAGE_COOKIE_SAMESITE)
    else:
        response.delete_cookie(settings.LANGUAGE_COOKIE_NAME, path=settings.LANGUAGE_COOKIE_PATH,
                               domain=settings.LANGUAGE_COOKIE_DOMAIN)


def language_activate_for(request, code: str) -> None:
    """Answer the rest of ``request`` in ``code`` (``""``: the browser's language)."""
    translation.activate(code or translation.get_language_from_request(request))
    request.LANGUAGE_CODE = translation.get_language()


def connect_signals() -> None:
    """Copy the preference into the session at sign-in (``ChatConfig.ready``)."""
    from django.contrib.auth.signals import user_logged_in

    def logged_in(sender, request, user, **kwargs) -> None:
        if request is not None and hasattr(request, "session"):
            request.session[SESSION_KEY] = language_for_user(user_id=user.pk)

    user_logged_in.connect(logged_in, dispatch_uid="chat.language.logged_in", weak=False)
