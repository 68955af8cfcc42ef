"""The prompt form of the Prompts page. Only shapes here: lengths, the command's form, the
duplicate check and permissions are the service's (one set of rules for page and API)."""

from __future__ import annotations

from django import forms
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from .services import BODY_MAX, COMMAND_MAX, TITLE_MAX


class PromptForm(forms.Form):
    command = forms.CharField(
        label=_("Command"), max_length=COMMAND_MAX + 1, required=False,
        help_text=_("Typed after / in the chat box, e.g. summarize → /summarize. Lowercase letters, digits, - and _."),
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false", "placeholder": "summarize"}))
    title = forms.CharField(label=_("Title"), max_length=TITLE_MAX, required=False,
                            widget=forms.TextInput(attrs={"placeholder": _("Summarize a text")}))
    body = forms.CharField(
        # The length is the service's to check, after \r\n → \n (a browser posts \r\n; its
        # maxlength counts a line break as one character, as the service does).
        # Not stripped: a prompt's trailing blank lines are where the text to work on goes.
        label=_("Prompt"), required=False, strip=False,
        widget=forms.Textarea(attrs={"rows": 10, "spellcheck": "true", "maxlength": BODY_MAX}))
    workspace = forms.ChoiceField(label=_("Who can use it"), required=False)

    def __init__(self, *args, workspaces=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.workspaces = {str(w.pk): w for w in workspaces}
        # Formatted here, in the request's language (a lazy string formatted at import would not be).
        self.fields["body"].help_text = gettext(
            "Variables: {{name}} asks for a value when the prompt is inserted; {{name|default}} fills in the "
            "default unless changed. At most %(n)d characters.") % {"n": BODY_MAX}
        self.fields["workspace"].choices = [("", _("Only me (personal)"))] + [
            (str(w.pk), _("Everyone in %(workspace)s") % {"workspace": w.name}) for w in workspaces]

    def chosen_workspace(self):
        return self.workspaces.get(self.cleaned_data.get("workspace") or "")
