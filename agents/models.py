"""Roles, providers and models, tool policies, runs and the tool-call ledger (DESIGN §4)."""

import uuid

from django.conf import settings
from django.db import models


class Role(models.Model):
    """A workspace role. ``viewer``, ``member`` and ``admin`` are seeded; admins add more.

    ``rank`` orders roles for messages such as "needs member": a higher rank is more trusted.
    ``is_admin`` lets the role read every thread of its workspace and decide approvals.
    """

    name = models.SlugField(unique=True)
    label = models.CharField(max_length=100)
    rank = models.PositiveSmallIntegerField(default=10)
    is_admin = models.BooleanField(default=False)
    description = models.TextField(blank=True)

    class Meta:
        ordering = ["rank", "name"]

    def __str__(self) -> str:
        return self.label or self.name


class Environment(models.Model):
    """A deployment environment a tool call may touch; its tier drives the risk level."""

    class Tier(models.TextChoices):
        PROD = "prod"
        STAGING = "staging"
        DEV = "dev"

    name = models.CharField(max_length=100, unique=True)
    tier = models.CharField(max_length=8, choices=Tier.choices)

    def __str__(self) -> str:
        return f"{self.name} ({self.tier})"


class Provider(models.Model):
    """An LLM endpoint. Its key comes from the environment variable named in ``api_key_env``
    or from ``api_key_encrypted`` (entered write-only in the admin, Fernet-encrypted);
    no API, page, event or log ever carries it."""

    class Kind(models.TextChoices):
        OPENAI_COMPATIBLE = "openai_compatible", "OpenAI-compatible"
        ANTHROPIC = "anthropic", "Anthropic"
        OLLAMA = "ollama", "Ollama"
        OFFLINE = "offline", "Offline (rule-based, no LLM)"
        AGENT_RUNS = "agent_runs", "Agent runs API"

    slug = models.SlugField(unique=True)
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=24, choices=Kind.choices)
    base_url = models.URLField(blank=True)
    api_key_env = models.CharField(
        max_length=100, blank=True, help_text="Name of the environment variable holding the key."
    )
    api_key_encrypted = models.TextField(blank=True, editable=False)
    default_model = models.CharField(max_length=200, blank=True)
    enabled = models.BooleanField(default=True)
    # DeepSeek-style providers reject a replayed tool-call turn without its reasoning.
    echo_reasoning = models.BooleanField(
        default=False, help_text="Send stored reasoning back on assistant tool-call turns."
    )
    # Agent providers (kind agent_runs, agents/agent_runs): the environment the agent acts on
    # (its tier sets the risk of the agent's approvals) and what "approve" forwards to it.
    environment = models.ForeignKey(
        Environment, null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
        help_text="Agent providers: the environment this agent administers (its tier drives the risk level).",
    )

    class ApproveAs(models.TextChoices):
        ONCE = "once", "Once (this command only)"
        SESSION = "session", "For the agent's session"
        ALWAYS = "always", "Always (the agent remembers the pattern)"

    agent_approve_as = models.CharField(
        max_length=8, choices=ApproveAs.choices, default=ApproveAs.ONCE,
        help_text="Agent providers: what an approval in the chat forwards to the agent. "
                  "Session/always let the agent skip asking again; deny is always forwarded as deny.",
    )
    # Catalogue cache (agents/catalogue.py): the last probe and model listing.
    health_status = models.CharField(max_length=300, blank=True, editable=False)
    health_checked_at = models.DateTimeField(null=True, blank=True, editable=False)
    models_refreshed_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class LLMModel(models.Model):
    """A model offered by a provider. A run may use a model of its provider only when its row
    is enabled and allows the user's role in the thread's workspace (no roles: every role);
    a provider's ``default_model`` without a row counts as enabled for every role."""

    class PromptTier(models.TextChoices):
        AUTO = "auto", "Auto"
        FULL = "full", "Full"
        SMALL = "small", "Small"

    provider = models.ForeignKey(Provider, on_delete=models.CASCADE, related_name="models")
    name = models.CharField(max_length=200)
    label = models.CharField(max_length=200, blank=True)
    context_window = models.PositiveIntegerField(default=32768, help_text="tokens")
    supports_tools = models.BooleanField(default=True)
    supports_images = models.BooleanField(
        null=True, blank=True,
        help_text="Whether the model reads images (vision). Empty: known from the provider's listing or the "
                  "model's name (llm.capabilities.name_takes_images).",
    )
    parameter_size = models.CharField(max_length=20, blank=True, help_text='e.g. "7B"')
    prompt_tier = models.CharField(max_length=8, choices=PromptTier.choices, default=PromptTier.AUTO)
    enabled = models.BooleanField(default=True, help_text="Only enabled models may be used (agents.selectors.model_allowed).")
    allowed_roles = models.ManyToManyField(
        "Role", blank=True, related_name="allowed_models",
        help_text="The workspace roles that may use this model. Empty: every role.",
    )
    echo_reasoning = models.BooleanField(
        null=True, blank=True,
        help_text="Send stored reasoning back on tool-call turns for this model. Empty: the provider's setting.",
    )
    # Set when the provider's model listing last contained this model; None: entered by hand.
    listed_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["provider", "name"]
        constraints = [models.UniqueConstraint(fields=["provider", "name"], name="llmmodel_unique_name")]
        verbose_name = "LLM model"  # not Django's "llm model" / "Llm models"
        verbose_name_plural = "LLM models"

    def __str__(self) -> str:
        return f"{self.provider.slug}/{self.name}"


class ToolPolicy(models.Model):
    """The admin's word on one tool: whether it is enabled, for whom, and how risky it is.

    A row is created for every registered tool with the declaration's defaults. An empty
    ``allowed_roles`` means every role for a read tool and *no one* for a write or dangerous
    tool (until an administrator names roles; ``agents.pipeline.role_allows``).
    """

    class Risk(models.TextChoices):
        READ = "read"
        WRITE = "write"
        DANGEROUS = "dangerous"

    class ApprovalMode(models.TextChoices):
        NEVER = "never"
        WRITES_IN_PROD = "writes_in_prod"
        ALWAYS = "always"

    tool_name = models.CharField(max_length=64, unique=True)
    enabled = models.BooleanField(default=True)
    risk = models.CharField(max_length=12, choices=Risk.choices, default=Risk.READ)
    allowed_roles = models.ManyToManyField(
        Role, blank=True, related_name="tool_policies",
        help_text="Empty: every role for a read tool, no one for a write or dangerous tool.",
    )
    affinity_object_types = models.JSONField(default=list, blank=True)
    timeout_s = models.PositiveIntegerField(default=30)
    approval_mode = models.CharField(max_length=16, choices=ApprovalMode.choices, default=ApprovalMode.NEVER)

    class Meta:
        ordering = ["tool_name"]
        verbose_name_plural = "tool policies"

    def __str__(self) -> str:
        return self.tool_name


class ApprovalPolicy(models.Model):
    """Who may approve a tool call that needs approval, how many must, and for how long.

    A rule matches a call by its tool (``tool_policy``; empty: every tool), the MCP server or
    agent provider it comes from (empty: any), its risk (``read|write|dangerous``; empty:
    any) and its environment tier (``prod|staging|dev``; empty: any, also none). The most
    specific enabled rule wins (tool > server/provider > tier > risk); ties go to the oldest.
    ``agents.approvals.policy`` reads them; ``expires_s`` 0 means the request never expires.
    """

    class ApproverKind(models.TextChoices):
        REQUESTER = "requester", "The requester (or a workspace admin)"
        ROLE = "role", "People with a named role"
        WORKSPACE_ADMINS = "workspace_admins", "Workspace admins"

    name = models.CharField(max_length=100, unique=True, help_text='Shown on the card, e.g. "Production write".')
    enabled = models.BooleanField(default=True)
    tool_policy = models.ForeignKey(
        ToolPolicy, null=True, blank=True, on_delete=models.CASCADE, related_name="approval_policies",
        help_text="Only calls of this tool. Empty: every tool.",
    )
    mcp_server = models.ForeignKey(
        "agents_mcp.MCPServer", null=True, blank=True, on_delete=models.CASCADE, related_name="approval_policies",
        help_text="Only tools of this MCP server. Empty: any source.",
    )
    provider = models.ForeignKey(
        Provider, null=True, blank=True, on_delete=models.CASCADE, related_name="approval_policies",
        limit_choices_to={"kind": "agent_runs"}, help_text="Only this agent provider's approvals. Empty: any.",
    )
    risk = models.CharField(max_length=12, choices=ToolPolicy.Risk.choices, blank=True, help_text="Empty: any risk.")
    env_tier = models.CharField(max_length=8, choices=Environment.Tier.choices, blank=True,
                                help_text="Empty: any tier, and calls with no environment.")
    approver_kind = models.CharField(max_length=20, choices=ApproverKind.choices, default=ApproverKind.REQUESTER)
    approver_role = models.ForeignKey(
        Role, null=True, blank=True, on_delete=models.PROTECT, related_name="+",
        help_text="For “people with a named role”: the role (read at decision time).",
    )
    approvals_needed = models.PositiveSmallIntegerField(choices=[(1, "1"), (2, "2 (two-person rule)")], default=1)
    requester_counts = models.BooleanField(
        default=True, help_text="Whether the requester may be one of the approvers (never under the two-person rule).",
    )
    expires_s = models.PositiveIntegerField(default=86400, help_text="seconds a request stays open; 0: never expires")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "approval policies"
        constraints = [
            models.CheckConstraint(condition=models.Q(approvals_needed__in=[1, 2]), name="approvalpolicy_needed_1_or_2"),
            models.CheckConstraint(condition=~models.Q(approvals_needed=2, requester_counts=True),
                                   name="approvalpolicy_two_person_excludes_requester"),
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        errors = {}
        if self.approver_kind == self.ApproverKind.ROLE and self.approver_role_id is None:
            errors["approver_role"] = "Name the role whose members may approve."
        if self.approver_kind != self.ApproverKind.ROLE and self.approver_role_id is not None:
            errors["approver_role"] = "A role is named only for “people with a named role”."
        if self.approvals_needed == 2 and self.requester_counts:
            errors["requester_counts"] = "Under the two-person rule the requester never counts as an approver."
        if self.approvals_needed == 2 and self.approver_kind == self.ApproverKind.REQUESTER:
            errors["approver_kind"] = "Two approvals need a group of approvers (a role or workspace admins)."
        if self.mcp_server_id and self.provider_id:
            errors["provider"] = "A rule is for an MCP server or an agent provider, not both."
        if errors:
            raise ValidationError(errors)


class Run(models.Model):
    """One agent turn: from a user message to the final assistant message. Its status
    changes only through ``agents.runs.lifecycle`` (the transition table is there)."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        AWAITING_APPROVAL = "awaiting_approval"
        COMPLETED = "completed"
        FAILED = "failed"
        CANCELLED = "cancelled"
        INTERRUPTED = "interrupted"

    TERMINAL = frozenset({Status.COMPLETED, Status.FAILED, Status.CANCELLED, Status.INTERRUPTED})

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    thread = models.ForeignKey("chat.Thread", on_delete=models.CASCADE, related_name="runs")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="runs")
    user_message = models.ForeignKey("chat.Message", null=True, on_delete=models.SET_NULL, related_name="+")
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.QUEUED)
    provider = models.ForeignKey(Provider, null=True, on_delete=models.SET_NULL, related_name="+")
    model = models.CharField(max_length=200, blank=True)
    grounded = models.BooleanField(default=True)
    include_private = models.BooleanField(default=False)
    ui_context = models.JSONField(default=dict, blank=True)
    env_id = models.CharField(max_length=100, blank=True)
    iterations = models.PositiveSmallIntegerField(default=0)
    error = models.JSONField(default=dict, blank=True)
    last_event_seq = models.PositiveIntegerField(default=0)
    # The highest seq the run's writer may publish before it saves a higher one
    # (agents.events: EVENTS_SEQ_RESERVE ahead): a writer that died may have published up to it,
    # so the next one numbers above it. Lowered to the last seq by a writer that closes cleanly.
    seq_reserved = models.PositiveIntegerField(default=0)
    # Lease: the worker running the turn renews it with a heartbeat; an expired lease means
    # the worker died, and the reaper re-queues the run (bounded by ``attempts``).
    lease_owner = models.CharField(max_length=200, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    # The budget windows the current model round holds (usage.services.budget_admit), so a
    # round whose worker died is released by the next attempt or the reaper, not left to age.
    budget_hold = models.JSONField(default=list, blank=True)
    # When the run was last (re-)queued: a queued run nobody claimed by RUN_QUEUED_DEADLINE_S
    # after this is enqueued again by the reaper (a lost broker message).
    queued_at = models.DateTimeField(null=True, blank=True)
    # A backend's own state (agents.backends), e.g. a remote agent's run id and the last event
    # read from it, so a recovered run re-attaches instead of starting the remote run twice.
    backend_state = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["thread", "status"], name="run_thread_status"),
            # Cancelled while running and not closed yet (its worker closes it at once, unless it
            # died): the reaper's lookup (agents.runs.reaper), an index of the few such rows.
            models.Index(fields=["lease_expires_at"], condition=models.Q(status="cancelled", finished_at__isnull=True),
                         name="run_cancel_unclosed"),
        ]
        constraints = [
            # One queued or running run per thread, held by the database under concurrent sends.
            models.UniqueConstraint(fields=["thread"], condition=models.Q(status__in=["queued", "running"]),
                                    name="run_one_active_per_thread"),
        ]

    def __str__(self) -> str:
        return f"Run {self.pk} ({self.status})"

    @property
    def is_terminal(self) -> bool:
        return self.status in self.TERMINAL


class ToolCall(models.Model):
    """The ledger and audit record of one tool call the model made.

    A call that ``succeeded`` or whose status is unknown is never executed again — not on
    resume and not on task redelivery after a worker crash (DESIGN §4). Its status changes
    only through ``agents.runs.lifecycle``.
    """

    class Status(models.TextChoices):
        PENDING = "pending"
        AWAITING_APPROVAL = "awaiting_approval"
        APPROVED = "approved"
        DENIED = "denied"
        PERMISSION_DENIED = "permission_denied"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        TIMEOUT = "timeout"
        STATUS_UNKNOWN = "status_unknown"
        EXPIRED = "expired"

    #: Ledger states that count as a call made, for per-tool limits (denied, expired and
    #: refused calls do not).
    COUNTED = ("approved", "running", "succeeded", "failed", "timeout", "status_unknown")

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="tool_calls")
    message = models.ForeignKey("chat.Message", on_delete=models.CASCADE, related_name="ledger")
    call_id = models.CharField(max_length=200)
    tool_name = models.CharField(max_length=200)
    arguments = models.JSONField(default=dict, blank=True)
    raw_arguments = models.TextField(blank=True)
    risk = models.CharField(max_length=12, blank=True)
    risk_level = models.CharField(max_length=12, blank=True)
    env_context = models.CharField(max_length=12, blank=True)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PENDING)
    result = models.JSONField(null=True, blank=True)
    summary = models.TextField(blank=True)
    is_error = models.BooleanField(default=False)
    attempts = models.PositiveSmallIntegerField(default=0)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    requested_at = models.DateTimeField(null=True, blank=True, help_text="when approval was requested")
    decision = models.CharField(max_length=12, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    # The approval rule that fired, as it was when the call parked (agents.approvals.policy
    # ``ApprovalRule.as_dict``: rule, policy_id, approver_kind, role, requester_counts,
    # expires_s); who holds the role is read at decision time.
    approval = models.JSONField(default=dict, blank=True)
    approvals_needed = models.PositiveSmallIntegerField(default=1)
    approvals_so_far = models.PositiveSmallIntegerField(default=0)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="when an open approval request expires")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["created_at"]
        constraints = [models.UniqueConstraint(fields=["message", "call_id"], name="toolcall_unique_call")]
        indexes = [models.Index(fields=["status", "expires_at"], name="toolcall_status_expires"),
                   # Policy simulation walks a workspace's recent calls newest first (policies.simulation).
                   models.Index(fields=["created_at"], name="toolcall_created_at")]

    def __str__(self) -> str:
        return f"{self.tool_name} ({self.status})"


class ApprovalDecision(models.Model):
    """One person's decision on a call that waited for approval: who, in which role at the
    time, approve or deny, when. A person decides a call at most once; ``expired`` rows have
    no person (the request ran out of time)."""

    class Decision(models.TextChoices):
        APPROVE = "approve"
        DENY = "deny"
        EXPIRED = "expired"

    tool_call = models.ForeignKey(ToolCall, on_delete=models.CASCADE, related_name="approvals")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    username = models.CharField(max_length=150, blank=True, help_text="kept if the account is deleted")
    role = models.CharField(max_length=100, blank=True, help_text="the approver's workspace role at the time")
    as_requester = models.BooleanField(default=False)
    decision = models.CharField(max_length=8, choices=Decision.choices)
    decided_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["decided_at", "id"]
        constraints = [models.UniqueConstraint(fields=["tool_call", "user"], condition=models.Q(user__isnull=False),
                                               name="approvaldecision_one_per_person")]

    def __str__(self) -> str:
        return f"{self.decision} by {self.username or '-'} ({self.role or '-'})"


class AuditEvent(models.Model):
    """Security-relevant events besides the ToolCall ledger: permission denials, rejected UI
    context, refused decisions. Read-only in the admin."""

    class Kind(models.TextChoices):
        PERMISSION_DENIED = "permission_denied"
        UI_CONTEXT_REJECTED = "ui_context_rejected"
        FRAME_REJECTED = "frame_rejected"
        DECISION_REFUSED = "decision_refused"
        MCP_TOOL_QUARANTINED = "mcp_tool_quarantined"
        MCP_TOOL_REVIEWED = "mcp_tool_reviewed"
        MCP_CALL = "mcp_call"
        MCP_SERVER_CHANGED = "mcp_server_changed"
        MCP_OAUTH = "mcp_oauth"
        APPROVAL_DECIDED = "approval_decided"
        APPROVAL_EXPIRED = "approval_expired"

    kind = models.CharField(max_length=32, choices=Kind.choices)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    workspace = models.ForeignKey("chat.Workspace", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    thread_id = models.UUIDField(null=True, blank=True)
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="audit_events")
    tool_name = models.CharField(max_length=200, blank=True)
    detail = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.kind} {self.tool_name} {self.created_at:%Y-%m-%d %H:%M}"
