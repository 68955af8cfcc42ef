"""Single sign-on with OpenID Connect (``mozilla-django-oidc``), configured by environment
variables; workspace memberships mapped from a groups claim by admin-edited rules."""
