"""Set up the test provider: ``idp_setup client --client-id … --secret … --redirect-uri …``
(a confidential code-flow client, RS256, no consent screen) and ``idp_setup user NAME
--password … --email … --groups a,b`` (create or update; the groups replace the user's
groups). ``creatersakey`` (from django-oidc-provider) makes the signing key."""

from django.contrib.auth.models import Group, User
from django.core.management.base import BaseCommand
from oidc_provider.models import Client, ResponseType


class Command(BaseCommand):
    def add_arguments(self, parser):
        parser.add_argument("what", choices=["client", "user"])
        parser.add_argument("name", nargs="?", default="")
        parser.add_argument("--client-id", default="")
        parser.add_argument("--secret", default="")
        parser.add_argument("--redirect-uri", action="append", default=[])
        parser.add_argument("--password", default="")
        parser.add_argument("--email", default="")
        parser.add_argument("--first-name", default="")
        parser.add_argument("--groups", default=None)

    def handle(self, *args, **o):
        if o["what"] == "client":
            client, _ = Client.objects.update_or_create(
                client_id=o["client_id"],
                defaults={"name": o["client_id"], "client_type": "confidential", "client_secret": o["secret"],
                          "jwt_alg": "RS256", "require_consent": False, "reuse_consent": True},
            )
            uris = set(client.redirect_uris) | set(o["redirect_uri"])
            client.redirect_uris = sorted(uris)
            client.save()
            code, _ = ResponseType.objects.get_or_create(value="code", defaults={"description": "code (Authorization Code Flow)"})
            client.response_types.add(code)
            return
        user, _ = User.objects.get_or_create(username=o["name"])
        if o["password"]:
            user.set_password(o["password"])
        if o["email"]:
            user.email = o["email"]
        if o["first_name"]:
            user.first_name = o["first_name"]
        user.save()
        if o["groups"] is not None:
            names = [g for g in o["groups"].split(",") if g]
            user.groups.set([Group.objects.get_or_create(name=n)[0] for n in names])
