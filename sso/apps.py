from django.apps import AppConfig


class SsoConfig(AppConfig):
    name = "sso"
    verbose_name = "Single sign-on"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # Usernames are stored in NFKC form and a look-alike of an existing one is refused,
        # however the user is created (admin, createsuperuser, single sign-on).
        from chatplatform import usernames

        usernames.connect()
