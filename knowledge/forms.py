"""Forms of the knowledge pages: field shapes only; the services validate and write."""

from __future__ import annotations

from django import forms
from django.utils.translation import gettext_lazy as _

from .models import KnowledgeItem

TYPE_CHOICES = [(t.value, t.label) for t in KnowledgeItem.Type]


class KnowledgeItemForm(forms.Form):
    type_choices = TYPE_CHOICES  # suggestions for the type field (free text is allowed)

    title = forms.CharField(max_length=300, required=False, label=_("Title"))
    content = forms.CharField(widget=forms.Textarea(attrs={"rows": 16}), strip=False, label=_("Content"))
    type = forms.CharField(max_length=40, initial="note", widget=forms.TextInput(attrs={"list": "kb-types"}),
                           label=_("Type"))
    tags = forms.CharField(max_length=1000, required=False, help_text=_("Comma-separated."), label=_("Tags"))
    url = forms.CharField(max_length=200, required=False, label=_("URL"))
    is_hidden = forms.BooleanField(required=False, label=_("Hidden (left out of lists; the AI still uses it)"))
    is_private = forms.BooleanField(required=False, label=_("Private (only you; the AI uses it only when you opt in)"))

    def __init__(self, *args, workspaces=None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if workspaces is not None:
            self.fields["workspace"] = forms.ChoiceField(choices=[(w.slug, w.name) for w in workspaces],
                                                         label=_("Workspace"))
            self.order_fields(["workspace"])

    @classmethod
    def initial_for(cls, item: KnowledgeItem) -> dict:
        return {"title": item.title, "content": item.content, "type": item.type, "tags": ", ".join(item.tags),
                "url": item.url, "is_hidden": item.is_hidden, "is_private": item.is_private}
