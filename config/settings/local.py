"""Local / demo settings: embedded mode unless REDIS_URL is set."""

from .base import *  # noqa: F403
from .base import env

DEBUG = env.bool("DEBUG", default=True)
