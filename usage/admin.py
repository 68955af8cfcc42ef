from django.contrib import admin

from agents.admin import LLMModelAdmin

from .models import Budget, BudgetWindow, ModelPrice, ToolLimit, UsageRecord
from .services import limit_text


@admin.register(UsageRecord)
class UsageRecordAdmin(admin.ModelAdmin):
    list_display = ["created_at", "user", "workspace", "provider", "model", "input_tokens", "output_tokens",
                    "cached_tokens", "reasoning_tokens", "cost", "currency"]
    list_filter = ["provider", "model", "workspace"]
    date_hierarchy = "created_at"

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False  # history: cost is kept as it was computed


class BudgetWindowInline(admin.TabularInline):
    model = BudgetWindow
    extra = 0
    readonly_fields = ["starts_at", "spent", "in_flight", "hold_until", "warned"]
    can_delete = False


@admin.register(Budget)
class BudgetAdmin(admin.ModelAdmin):
    list_display = ["__str__", "workspace", "user", "model", "metric", "period", "soft", "hard", "enabled"]

    @admin.display(description="soft limit", ordering="soft_limit")
    def soft(self, obj) -> str:
        return limit_text(obj.soft_limit, metric=obj.metric, currency=obj.currency)

    @admin.display(description="hard limit", ordering="hard_limit")
    def hard(self, obj) -> str:
        return limit_text(obj.hard_limit, metric=obj.metric, currency=obj.currency)
    list_filter = ["metric", "period", "enabled"]
    inlines = [BudgetWindowInline]


@admin.register(ToolLimit)
class ToolLimitAdmin(admin.ModelAdmin):
    list_display = ["tool_name", "workspace", "max_calls", "period"]


class ModelPriceInline(admin.StackedInline):
    model = ModelPrice
    extra = 0
    max_num = 1
    verbose_name = "price"


# Prices are set on the admin's model rows (the model's change page).
LLMModelAdmin.inlines = [*LLMModelAdmin.inlines, ModelPriceInline]
