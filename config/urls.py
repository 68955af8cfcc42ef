from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from django.views.decorators.csrf import csrf_exempt
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.authtoken.views import ObtainAuthToken
from rest_framework.settings import api_settings

from apikeys import api as apikeys_api
from chat import views as chat_views
from chat.api import attachments as attachments_api
from chat.api import breakglass as breakglass_api
from chat.api import organise as organise_api
from chat.api import views as chat_api
from chat.api.providers import ModelChoicesApi, ProviderListApi, ProviderModelsApi
from chat.api.tool_calls import ApprovalInboxApi, ToolCallDecisionApi, ToolCallListApi
from chat.api.tool_offer import ThreadToolsApi
from chat.sse import run_events
from chatplatform.login_throttle import LoginThrottleMixin, PasswordChangeThrottleMixin
from knowledge import api as knowledge_api
from knowledge import upload_api as knowledge_upload_api
from openai_api import views as openai_views
from prompts import api as prompts_api
from sharing import api as sharing_api
from sso.views import PlatformLoginView
from usage import views as usage_views


class ThrottledLoginView(LoginThrottleMixin, PlatformLoginView):
    """The sign-in page (password form and SSO button) with the sign-in budgets."""


class ThrottledPasswordChangeView(PasswordChangeThrottleMixin, auth_views.PasswordChangeView):
    """Changing one's password (it checks the old one) spends the sign-in budgets."""


api_v1 = [
    # Sign-in budgets: in the password backend, as for every door (chatplatform.login_throttle).
    path("auth/token/", ObtainAuthToken.as_view(
        throttle_classes=[], parser_classes=api_settings.DEFAULT_PARSER_CLASSES), name="auth-token"),
    path("api-keys/", apikeys_api.ApiKeyListCreateApi.as_view(), name="api-keys"),
    path("api-keys/<str:key_id>/", apikeys_api.ApiKeyDetailApi.as_view(), name="api-key-detail"),
    path("prompts/", prompts_api.PromptListCreateApi.as_view(), name="prompts"),
    path("prompts/<str:prompt_id>/", prompts_api.PromptDetailApi.as_view(), name="prompt-detail"),
    path("workspaces/", chat_api.WorkspaceListApi.as_view(), name="workspaces"),
    path("workspaces/<str:workspace_id>/sharing/", sharing_api.WorkspaceSharingApi.as_view(), name="workspace-sharing"),
    path("me/preferences/", chat_api.PreferencesApi.as_view(), name="preferences"),
    path("folders/", organise_api.FolderListCreateApi.as_view(), name="folders"),
    path("folders/<str:folder_id>/", organise_api.FolderDetailApi.as_view(), name="folder-detail"),
    path("tags/", organise_api.TagListApi.as_view(), name="tags"),
    path("threads/", chat_api.ThreadListCreateApi.as_view(), name="threads"),
    path("threads/<str:thread_id>/", chat_api.ThreadDetailApi.as_view(), name="thread-detail"),
    path("threads/<str:thread_id>/duplicate/", chat_api.ThreadDuplicateApi.as_view(), name="thread-duplicate"),
    path("threads/<str:thread_id>/messages/", chat_api.ThreadMessagesApi.as_view(), name="thread-messages"),
    path("threads/<str:thread_id>/runs/", chat_api.RunCreateApi.as_view(), name="thread-runs"),
    path("threads/<str:thread_id>/branch/", chat_api.ThreadBranchApi.as_view(), name="thread-branch"),
    path("threads/<str:thread_id>/export/", chat_api.ThreadExportApi.as_view(), name="thread-export"),
    path("threads/<str:thread_id>/break-glass/", breakglass_api.ThreadBreakGlassApi.as_view(),
         name="thread-break-glass"),
    path("break-glass/", breakglass_api.BreakGlassListApi.as_view(), name="break-glass"),
    path("break-glass/<str:request_id>/", breakglass_api.BreakGlassDetailApi.as_view(), name="break-glass-detail"),
    path("break-glass/<str:request_id>/approve/", breakglass_api.BreakGlassDecideApi.as_view(action="approve"),
         name="break-glass-approve"),
    path("break-glass/<str:request_id>/deny/", breakglass_api.BreakGlassDecideApi.as_view(action="deny"),
         name="break-glass-deny"),
    path("break-glass/<str:request_id>/revoke/", breakglass_api.BreakGlassDecideApi.as_view(action="revoke"),
         name="break-glass-revoke"),
    path("messages/<str:message_id>/regenerate/", chat_api.MessageRegenerateApi.as_view(), name="message-regenerate"),
    path("messages/<str:message_id>/edit/", chat_api.MessageEditApi.as_view(), name="message-edit"),
    path("threads/<str:thread_id>/tools/", ThreadToolsApi.as_view(), name="thread-tools"),
    path("threads/<str:thread_id>/shares/", sharing_api.ThreadSharesApi.as_view(), name="thread-shares"),
    path("shares/<str:share_id>/", sharing_api.ShareDetailApi.as_view(), name="share-detail"),
    path("threads/<str:thread_id>/attachments/", attachments_api.ThreadAttachmentsApi.as_view(),
         name="thread-attachments"),
    path("attachments/<str:attachment_id>/", attachments_api.AttachmentDetailApi.as_view(), name="attachment-detail"),
    path("attachments/<str:attachment_id>/content/", attachments_api.AttachmentContentApi.as_view(),
         name="attachment-content"),
    path("attachments/<str:attachment_id>/thumbnail/", attachments_api.AttachmentThumbnailApi.as_view(),
         name="attachment-thumbnail"),
    path("attachments/<str:attachment_id>/keep/", attachments_api.AttachmentKeepApi.as_view(), name="attachment-keep"),
    path("runs/<str:run_id>/", chat_api.RunDetailApi.as_view(), name="run-detail"),
    path("runs/<str:run_id>/cancel/", chat_api.RunCancelApi.as_view(), name="run-cancel"),
    path("runs/<str:run_id>/events/", run_events, name="run-events"),
    path("tool-calls/", ToolCallListApi.as_view(), name="tool-calls"),
    path("approvals/", ApprovalInboxApi.as_view(), name="approvals"),
    path("tool-calls/<str:tool_call_id>/decision/", ToolCallDecisionApi.as_view(), name="tool-call-decision"),
    path("providers/", ProviderListApi.as_view(), name="providers"),
    path("providers/<slug:slug>/models/", ProviderModelsApi.as_view(), name="provider-models"),
    path("models/", ModelChoicesApi.as_view(), name="model-choices"),
    path("knowledge/items/", knowledge_api.KnowledgeItemListCreateApi.as_view(), name="knowledge-items"),
    path("knowledge/items/<str:item_id>/", knowledge_api.KnowledgeItemDetailApi.as_view(), name="knowledge-item-detail"),
    path("knowledge/uploads/", knowledge_upload_api.KnowledgeUploadListCreateApi.as_view(), name="knowledge-uploads"),
    path("knowledge/uploads/<str:upload_id>/", knowledge_upload_api.KnowledgeUploadDetailApi.as_view(),
         name="knowledge-upload-detail"),
    path("knowledge/search/", knowledge_api.KnowledgeSearchApi.as_view(), name="knowledge-search"),
    path("messages/<str:message_id>/save-to-knowledge/", knowledge_api.MessageSaveToKnowledgeApi.as_view(),
         name="message-save-to-knowledge"),
]

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="chat:index", permanent=False)),
    path("favicon.ico", chat_views.favicon, name="favicon"),
    path("admin/", admin.site.urls),
    # Sign-in budgets are enforced in the password backend for every door, the admin login
    # included (chatplatform.login_throttle); this view shows a throttled attempt in the page.
    path("accounts/login/", ThrottledLoginView.as_view(), name="login"),
    path("accounts/password_change/", ThrottledPasswordChangeView.as_view(), name="password_change"),
    path("accounts/", include("django.contrib.auth.urls")),
    path("oidc/", include("sso.urls")),
    path("chat/", include("chat.urls")),
    path("knowledge/", include("knowledge.urls")),
    path("usage/", include("usage.urls")),
    path("s/", include("sharing.urls")),
    path("prompts/", include("prompts.urls")),
    path("metrics", usage_views.metrics, name="metrics"),
    path("api/v1/", include(api_v1)),
    # OpenAI-compatible API (openai_api/): base URL for OpenAI clients is <host>/v1
    path("v1/chat/completions", csrf_exempt(openai_views.chat_completions), name="openai-chat-completions"),
    path("v1/models", csrf_exempt(openai_views.models), name="openai-models"),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="api-docs"),
]

handler400 = "chatplatform.api.bad_request"
handler500 = "chatplatform.api.server_error"
