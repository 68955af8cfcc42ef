from django.urls import path

from . import views

urlpatterns = [
    path("authenticate/", views.SSOStartView.as_view(), name="oidc_authentication_init"),
    path("callback/", views.SSOCallbackView.as_view(), name="oidc_authentication_callback"),
]
