"""Claims of the test provider: standard profile/e-mail claims, a ``groups`` scope (the
user's Django groups), and token faults for the negative tests.

A user in a group named ``token-fault:expired`` gets ID tokens that expired two minutes
before they were issued; ``token-fault:wrong-audience`` gets tokens for another client.
The provider still signs them with its real key, so the platform must reject them on
their claims. Fault groups are not part of the ``groups`` claim.
"""

from oidc_provider.lib.claims import ScopeClaims

FAULT_PREFIX = "token-fault:"


def _groups(user) -> list[str]:
    return sorted(g.name for g in user.groups.all() if not g.name.startswith(FAULT_PREFIX))


def userinfo(claims, user):
    claims["preferred_username"] = user.username
    claims["email"] = user.email
    claims["email_verified"] = True
    claims["given_name"] = user.first_name
    claims["family_name"] = user.last_name
    claims["name"] = f"{user.first_name} {user.last_name}".strip()
    return claims


class GroupsScopeClaims(ScopeClaims):
    info_groups = ("Groups", "The groups you belong to.")

    def scope_groups(self):
        return {"groups": _groups(self.user)}


def token_faults(id_token, user, token, request, **kwargs):
    faults = {g.name[len(FAULT_PREFIX):] for g in user.groups.all() if g.name.startswith(FAULT_PREFIX)}
    if "expired" in faults:
        id_token["exp"] = id_token["iat"] - 120
    if "wrong-audience" in faults:
        id_token["aud"] = "some-other-application"
    return id_token
