from django.apps import AppConfig


class OidcIdpConfig(AppConfig):
    name = "tests.oidc_idp"
    label = "oidc_idp"
