from datetime import UTC, datetime

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from django.views.decorators.cache import cache_control
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import last_modified
from django.views.generic import RedirectView
from django.views.i18n import JavaScriptCatalog
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.authtoken.views import ObtainAuthToken
from rest_framework.settings import api_settings

from apikeys import api as apikeys_api
from assistants import api as assistants_api
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
from mcp_client import views as mcp_views
from openai_api import views as openai_views
from policies import api as policies_api
from prompts import api as prompts_api
from schedules import api as schedules_api
from schedules import views as schedules_views
from sharing import api as sharing_api
from sso.views import PlatformLoginView
from usage import views as usage_views

# The catalogue changes only with a deploy (a new process): it is as new as the process.
STARTED_AT = datetime.now(UTC)


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
    path("assistants/", assistants_api.AssistantListCreateApi.as_view(), name="assistants"),
    path("assistants/tools/", assistants_api.AssistantToolsApi.as_view(), name="assistant-tools"),
    path("assistants/<str:assistant_id>/", assistants_api.AssistantDetailApi.as_view(), name="assistant-detail"),
    path("assistants/<str:assistant_id>/moderate/", assistants_api.AssistantModerateApi.as_view(),
         name="assistant-moderate"),
    path("mcp/connections/", mcp_views.ConnectionListApi.as_view(), name="mcp-connections"),
    path("mcp/connections/<slug:slug>/", mcp_views.ConnectionDetailApi.as_view(), name="mcp-connection-detail"),
    path("mcp/elicitations/<uuid:elicitation_id>/", mcp_views.ElicitationAnswerApi.as_view(),
         name="mcp-elicitation-answer"),
    path("schedules/", schedules_api.ScheduleListCreateApi.as_view(), name="schedules"),
    path("schedules/<str:schedule_id>/", schedules_api.ScheduleDetailApi.as_view(), name="schedule-detail"),
    path("schedules/<str:schedule_id>/pause/", schedules_api.SchedulePauseApi.as_view(), name="schedule-pause"),
    path("schedules/<str:schedule_id>/resume/", schedules_api.ScheduleResumeApi.as_view(), name="schedule-resume"),
    path("workspaces/", chat_api.WorkspaceListApi.as_view(), name="workspaces"),
    path("workspaces/<str:workspace_id>/sharing/", sharing_api.WorkspaceSharingApi.as_view(), name="workspace-sharing"),
    path("workspaces/<str:workspace_id>/", chat_api.WorkspaceDetailApi.as_view(), name="workspace-detail"),
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
    path("policy-simulations/", policies_api.PolicySimulationCreateApi.as_view(), name="policy-simulations"),
    path("policy-simulations/<str:simulation_id>/", policies_api.PolicySimulationDetailApi.as_view(),
         name="policy-simulation-detail"),
    path("policy-simulations/<str:simulation_id>/calls/", policies_api.PolicySimulationCallsApi.as_view(),
         name="policy-simulation-calls"),
    path("policy-drafts/", policies_api.PolicyDraftListCreateApi.as_view(), name="policy-drafts"),
    path("policy-drafts/<str:draft_id>/", policies_api.PolicyDraftDetailApi.as_view(), name="policy-draft-detail"),
    path("policy-drafts/<str:draft_id>/approve/", policies_api.PolicyDraftApproveApi.as_view(),
         name="policy-draft-approve"),
    path("policy-drafts/<str:draft_id>/apply/", policies_api.PolicyDraftApplyApi.as_view(), name="policy-draft-apply"),
    path("policy-drafts/<str:draft_id>/discard/", policies_api.PolicyDraftDiscardApi.as_view(),
         name="policy-draft-discard"),
    path("policy-versions/", policies_api.PolicyVersionListApi.as_view(), name="policy-versions"),
    path("policy-versions/<str:number>/rollback/", policies_api.PolicyVersionRollbackApi.as_view(),
         name="policy-version-rollback"),
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
    path("mcp-oauth/callback/", mcp_views.callback, name="mcp-oauth-callback"),
    path("mcp-resources/<int:server_id>/", mcp_views.resource, name="mcp-resource"),
    path("mcp-oauth/<slug:slug>/connect/", mcp_views.connect, name="mcp-oauth-connect"),
    path("schedules/", schedules_views.schedules_page, name="schedules-page"),
    path("metrics", usage_views.metrics, name="metrics"),
    path("api/v1/", include(api_v1)),
    # OpenAI-compatible API (openai_api/): base URL for OpenAI clients is <host>/v1
    path("v1/chat/completions", csrf_exempt(openai_views.chat_completions), name="openai-chat-completions"),
    path("v1/models", csrf_exempt(openai_views.models), name="openai-models"),
    # The page scripts' translations (locale/*/LC_MESSAGES/djangojs.po, LOCALE_PATHS) in the
    # request's language: base.html loads it before the modules. The same for a day in a
    # browser cache (it varies by the language cookie and Accept-Language).
    path("jsi18n/", cache_control(max_age=86400, public=False)(
        last_modified(lambda request, **kw: STARTED_AT)(JavaScriptCatalog.as_view())), name="javascript-catalog"),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="api-docs"),
]

handler400 = "chatplatform.api.bad_request"
handler500 = "chatplatform.api.server_error"
