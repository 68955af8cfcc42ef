from django.urls import path

from . import views

app_name = "sharing"

urlpatterns = [
    path("<str:token>/", views.share_page, name="page"),
    path("<str:token>/continue/", views.share_continue_view, name="continue"),
]
