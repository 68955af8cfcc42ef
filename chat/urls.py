from django.urls import path

from . import views

app_name = "chat"

urlpatterns = [
    path("", views.index, name="index"),
    path("new/", views.thread_new, name="thread-new"),
    path("settings/", views.preferences, name="preferences"),
    path("approvals/", views.approvals_page, name="approvals"),
    path("break-glass/", views.break_glass_page, name="break-glass"),
    path("<uuid:thread_id>/", views.thread_page, name="thread"),
    path("artifacts/<int:workspace_id>/frame/", views.artifact_frame, name="artifact-frame"),
]
