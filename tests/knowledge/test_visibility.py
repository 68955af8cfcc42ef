"""The visibility matrix: viewer (owner / same workspace / other workspace) × item (plain /
hidden / private) × include_private (on / off), for the search API, the search_knowledge tool
and grounding — plus 404s for what may not be seen (DESIGN §1 ShadowBrain row, §4).

Marked ``db_backends``: the filters live inside each backend's SQL.
"""

import pytest

from agents.services import run_create
from agents.tools import ToolContext
from knowledge.grounding import grounding_for_run
from knowledge.services import knowledge_item_create
from knowledge.tools import search_knowledge
from tests.conftest import make_thread

pytestmark = [pytest.mark.django_db, pytest.mark.db_backends]

VIEWERS = {"owner": "alice", "same_workspace": "bob", "other_workspace": "dave"}
WORKSPACE_OF = {"alice": "demo", "bob": "demo", "dave": "other"}

# What each viewer may retrieve, by (viewer, include_private). The AI's view (tool,
# grounding) includes hidden items; only the owner ever gets the private one.
AI_EXPECTED = {
    ("owner", False): {"plain", "hidden"},
    ("owner", True): {"plain", "hidden", "private"},
    ("same_workspace", False): {"plain", "hidden"},
    ("same_workspace", True): {"plain", "hidden"},  # never another user's private item
    ("other_workspace", False): set(),
    ("other_workspace", True): set(),
}


@pytest.fixture
def items(workspaces, users):
    make = knowledge_item_create
    demo = workspaces["demo"]
    return {
        "plain": make(workspace=demo, owner=users["alice"], title="Zebracorn care (plain)",
                      content="Feed the zebracorn twice a day."),
        "hidden": make(workspace=demo, owner=users["alice"], title="Zebracorn vet (hidden)", is_hidden=True,
                       content="The zebracorn vet is on call at night."),
        "private": make(workspace=demo, owner=users["alice"], title="Zebracorn budget (private)", is_private=True,
                        content="Alice's zebracorn budget is secret."),
    }


def names(items, item_ids) -> set[str]:
    by_id = {str(item.pk): name for name, item in items.items()}
    return {by_id[i] for i in item_ids if i in by_id}


@pytest.mark.parametrize("include_private", [False, True])
@pytest.mark.parametrize("include_hidden", [False, True])
@pytest.mark.parametrize("viewer", list(VIEWERS))
def test_search_api_matrix(items, users, viewer, include_private, include_hidden, api_for):
    client = api_for(users[VIEWERS[viewer]])
    response = client.get("/api/v1/knowledge/search/", {
        "q": "zebracorn", "include_private": str(include_private).lower(), "include_hidden": str(include_hidden).lower(),
    })
    assert response.status_code == 200
    found = names(items, [r["item_id"] for r in response.json()["results"]])
    expected = set(AI_EXPECTED[(viewer, include_private)])
    if not include_hidden:
        expected.discard("hidden")  # the search API leaves hidden items out unless asked
    assert found == expected


@pytest.mark.parametrize("include_private", [False, True])
@pytest.mark.parametrize("viewer", list(VIEWERS))
def test_search_knowledge_tool_matrix(items, users, workspaces, viewer, include_private):
    user = users[VIEWERS[viewer]]
    ctx = ToolContext(workspace_id=workspaces[WORKSPACE_OF[user.username]].pk, thread_id="t", user_id=user.pk,
                      run_id="00000000-0000-0000-0000-000000000000", role="member", include_private=include_private)
    output = search_knowledge(ctx=ctx, query="zebracorn", top_k=10)
    assert names(items, [h["item_id"] for h in output.result["hits"]]) == AI_EXPECTED[(viewer, include_private)]
    assert [c["n"] for c in output.citations] == list(range(1, len(output.citations) + 1))


@pytest.mark.parametrize("include_private", [False, True])
@pytest.mark.parametrize("viewer", list(VIEWERS))
def test_grounding_matrix(items, users, workspaces, offline, viewer, include_private):
    user = users[VIEWERS[viewer]]
    thread = make_thread(user, workspaces[WORKSPACE_OF[user.username]], offline)
    run = run_create(thread=thread, user=user, content="What do we know about the zebracorn?",
                     include_private=include_private).run
    grounding = grounding_for_run(run=run)
    assert names(items, [c["item_id"] for c in grounding.citations]) == AI_EXPECTED[(viewer, include_private)]
    if "private" not in AI_EXPECTED[(viewer, include_private)]:
        assert "secret" not in grounding.block


def test_thread_opt_in_includes_only_the_senders_private_items(items, users, workspaces, offline):
    bob_private = knowledge_item_create(workspace=workspaces["demo"], owner=users["bob"], is_private=True,
                                        title="Bob's zebracorn diary", content="Bob writes about the zebracorn.")
    thread = make_thread(users["bob"], workspaces["demo"], offline, include_private_in_ai=True)
    run = run_create(thread=thread, user=users["bob"], content="zebracorn").run
    ids = {c["item_id"] for c in grounding_for_run(run=run).citations}
    assert str(bob_private.pk) in ids and str(items["private"].pk) not in ids
    # …and the per-send override turns it off again.
    thread2 = make_thread(users["bob"], workspaces["demo"], offline, include_private_in_ai=True)
    run2 = run_create(thread=thread2, user=users["bob"], content="zebracorn", include_private=False).run
    assert str(bob_private.pk) not in {c["item_id"] for c in grounding_for_run(run=run2).citations}


@pytest.mark.parametrize("viewer, status", [("alice", 200), ("bob", 404), ("dave", 404)])
def test_private_item_is_404_for_everyone_but_its_owner(items, users, viewer, status, api_for):
    client = api_for(users[viewer])
    url = f"/api/v1/knowledge/items/{items['private'].pk}/"
    assert client.get(url).status_code == status
    if status == 404:
        assert client.patch(url, {"title": "pwned"}, format="json").status_code == 404
        assert client.delete(url).status_code == 404
        assert client.get(url).json()["error"]["code"] == "not_found"
        client.force_login(users[viewer])
        assert client.get(f"/knowledge/{items['private'].pk}/").status_code == 404
    items["private"].refresh_from_db()
    assert items["private"].title == "Zebracorn budget (private)"


def test_hidden_items_are_unlisted_but_reachable_by_id(items, users, api_for):
    client = api_for(users["bob"])
    listed = {r["id"] for r in client.get("/api/v1/knowledge/items/").json()["results"]}
    assert str(items["hidden"].pk) not in listed and str(items["plain"].pk) in listed
    assert str(items["private"].pk) not in listed
    with_hidden = {r["id"] for r in client.get("/api/v1/knowledge/items/?include_hidden=true").json()["results"]}
    assert str(items["hidden"].pk) in with_hidden
    assert client.get(f"/api/v1/knowledge/items/{items['hidden'].pk}/").status_code == 200


def test_other_workspace_sees_nothing_and_cannot_name_the_workspace(items, users, api_for):
    client = api_for(users["dave"])
    assert client.get("/api/v1/knowledge/items/").json()["results"] == []
    assert client.get(f"/api/v1/knowledge/items/{items['plain'].pk}/").status_code == 404
    assert client.get("/api/v1/knowledge/search/?q=zebracorn&workspace=demo").status_code == 404
    assert client.get("/api/v1/knowledge/items/?workspace=demo").status_code == 404


def test_owner_lists_own_private_item(items, users, api_for):
    listed = {r["id"] for r in api_for(users["alice"]).get("/api/v1/knowledge/items/").json()["results"]}
    assert str(items["private"].pk) in listed
