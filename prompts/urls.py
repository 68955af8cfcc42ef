from django.urls import path

from . import views

app_name = "prompts"

urlpatterns = [
    path("", views.prompt_list, name="list"),
    path("new/", views.prompt_new, name="create"),
    path("<uuid:prompt_id>/edit/", views.prompt_edit, name="edit"),
    path("<uuid:prompt_id>/delete/", views.prompt_remove, name="delete"),
]
