from django.urls import path

from . import views

app_name = "knowledge"

urlpatterns = [
    path("", views.item_list, name="list"),
    path("new/", views.item_create, name="create"),
    path("events/", views.knowledge_events, name="events"),
    path("<uuid:item_id>/", views.item_detail, name="detail"),
    path("<uuid:item_id>/edit/", views.item_edit, name="edit"),
    path("<uuid:item_id>/delete/", views.item_delete, name="delete"),
    path("<uuid:item_id>/ask/", views.item_ask, name="ask"),
]
