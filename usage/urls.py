from django.urls import path

from . import views

app_name = "usage"

urlpatterns = [
    path("", views.usage_mine, name="mine"),
    path("export.csv", views.usage_mine_csv, name="mine-csv"),
    path("all/", views.usage_admin, name="all"),
    path("all/export.csv", views.usage_admin_csv, name="all-csv"),
    path("budgets/<uuid:thread_id>/", views.budget_status, name="budget-status"),
]
