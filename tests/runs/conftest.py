"""Fixtures shared by the run tests."""

import pytest

from tests.conftest import make_thread


@pytest.fixture
def alice_thread(users, workspaces, openai_provider):
    """alice's thread in the demo workspace on the fake OpenAI-compatible provider."""
    return make_thread(users["alice"], workspaces["demo"], openai_provider)
