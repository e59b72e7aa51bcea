"""The tool surface without a network: declarations, tolerant arguments, base URLs."""

from __future__ import annotations

import jsonschema
import pytest

from connector.mcp.arguments import ArgumentError, Args
from connector.mcp.definitions import INSTRUCTIONS, TOOLS, TOOLS_BY_NAME
from connector.mcp.http import bearer_token, is_trusted_proxy, request_base_url
from connector.settings import TOOL_NAMES

EXPECTED_HINTS = {
    # name: (readOnly, destructive, idempotent)
    "brain_recall": (True, False, True),
    "brain_status": (True, False, True),
    "brain_read": (True, False, True),
    "brain_use": (False, False, True),
    "brain_memorize": (False, True, False),
    "brain_pin": (False, True, True),
    "brain_unpin": (False, True, True),
    "brain_forget": (False, True, False),
    "brain_verify": (False, True, False),
    "search": (True, False, True),
    "fetch": (True, False, True),
    "brain_reflect": (True, False, True),
    "brain_extract": (False, True, False),
    "brain_mental_model": (False, True, False),
}


def test_tools_with_schemas_and_annotations() -> None:
    assert tuple(tool.name for tool in TOOLS) == TOOL_NAMES
    for spec in TOOLS:
        tool = spec.to_tool()
        assert tool.title and tool.description and len(tool.description) > 40
        jsonschema.Draft202012Validator.check_schema(tool.input_schema)
        jsonschema.Draft202012Validator.check_schema(tool.output_schema)
        assert tool.output_schema["type"] == "object"
        hints = tool.annotations
        assert hints is not None and hints.open_world_hint is False
        assert (hints.read_only_hint, hints.destructive_hint, hints.idempotent_hint) == EXPECTED_HINTS[tool.name]
        # Tolerance: no schema forbids the extra arguments models add.
        assert tool.input_schema.get("additionalProperties") is not False
        wire = tool.model_dump(by_alias=True, exclude_none=True)
        assert "inputSchema" in wire and "outputSchema" in wire and wire["annotations"]["openWorldHint"] is False
    assert TOOLS_BY_NAME["brain_memorize"].scope == "brain.write"
    assert TOOLS_BY_NAME["brain_recall"].scope == "brain.read"


def test_a_tool_with_actions_says_what_each_takes_and_what_to_call_for_the_rest() -> None:
    """`ToolSpec.actions` (a result names the arguments its action ignored) covers every action the
    schema offers and only the schema's arguments, and each argument some action ignores has a hint."""
    with_actions = [spec for spec in TOOLS if spec.actions is not None]
    assert {spec.name for spec in with_actions} == {spec.name for spec in TOOLS if "action" in spec.input_schema["properties"]}
    for spec in with_actions:
        assert spec.actions is not None
        arguments = set(spec.input_schema["properties"]) - {"action"}
        assert set(spec.actions.takes) == set(spec.input_schema["properties"]["action"]["enum"]), spec.name
        ignored_somewhere = {name for takes in spec.actions.takes.values() for name in arguments - takes}
        assert set().union(*spec.actions.takes.values()) <= arguments, spec.name
        assert set(spec.actions.instead) == ignored_somewhere, spec.name


def test_instructions_say_recall_first_and_never_the_conversation() -> None:
    assert "brain_recall" in INSTRUCTIONS and "brain_memorize" in INSTRUCTIONS
    assert "whole conversation" in INSTRUCTIONS


def test_arrays_and_objects_as_json_strings() -> None:
    args = Args({"tags": '["a", "b"]', "ids": "mem_1, mem_2", "explanation": "ignored", "limit": "7", "force": "true"})
    assert args.string_list("tags") == ["a", "b"]
    assert args.string_list("ids") == ["mem_1", "mem_2"]
    assert args.integer("limit", default=10, minimum=1, maximum=25) == 7
    assert args.boolean("force") is True
    assert Args('{"query": "x"}').string("query") == "x"
    # A list in Python's quotes (not JSON, as models often write one) is its items, not "['deploy'".
    assert Args({"tags": "['deploy', 'payments']"}).string_list("tags") == ["deploy", "payments"]
    assert Args({"ids": "[mem_1, 'mem_2']"}).string_list("ids") == ["mem_1", "mem_2"]
    # Read by Python's parser: a comma inside a quoted item stays in it.
    assert Args({"tags": "['a, b', \"c\"]"}).string_list("tags") == ["a, b", "c"]
    assert Args({"tags": "[" * 5000 + "]" * 5000}).string_list("tags")  # too deep to parse: split, not a crash
    assert Args({"tags": "[]"}).string_list("tags") == [] and Args({"tags": "it's, 'quoted'"}).string_list(
        "tags") == ["it's", "quoted"]
    assert Args(None).string("query") is None


def test_brackets_around_a_tag_string_are_the_list_s_and_the_tools_say_so() -> None:
    """"[wip]" lost its brackets without a word anywhere. It is read as YAML and Python write a list
    (as "[wip, draft]" is two tags, "[wip]" is the one tag wip), a tag holding brackets is sent in a
    list, and the tools that take tags now say so in their schema, where the model reads it."""
    assert Args({"tags": "[wip]"}).string_list("tags") == ["wip"]
    assert Args({"tags": "[wip, draft]"}).string_list("tags") == ["wip", "draft"]
    assert Args({"tags": '["[wip]"]'}).string_list("tags") == ["[wip]"]
    assert Args({"tags": ["[wip]"]}).string_list("tags") == ["[wip]"]
    for name in ("brain_memorize", "brain_reflect"):
        said = TOOLS_BY_NAME[name].to_tool().input_schema["properties"]["tags"]["description"]
        assert '"[a, b]"' in said and "\'[\"[wip]\"]\'" in said, (name, said)


def test_argument_refusals_are_clear() -> None:
    with pytest.raises(ArgumentError, match="'query' is required"):
        Args({}).string("query", required=True)
    with pytest.raises(ArgumentError, match="must not be empty"):
        Args({"query": "   "}).string("query", required=True)
    with pytest.raises(ArgumentError, match="'tags'"):
        Args({"tags": {"a": 1}}).string_list("tags")
    with pytest.raises(ArgumentError, match="'limit'"):
        Args({"limit": "lots"}).integer("limit", default=10, minimum=1, maximum=25)
    with pytest.raises(ArgumentError, match="one of"):
        Args({"origin": "gossip"}).choice("origin", ["user", "external"], default="user")
    assert Args({"limit": 500}).integer("limit", default=10, minimum=1, maximum=25) == 25
    # A huge number is repeated in a few characters, not as its 301 digits.
    assert Args({"limit": 1e300}).clamped_integer("limit", default=10, minimum=1, maximum=25) == (
        25, "'limit' 1e+300 is outside 1-25; 25 was used.")
    assert Args({"limit": -(10**40)}).clamped_integer("limit", default=10, minimum=1, maximum=25)[1] == (
        "'limit' -1e+40 is outside 1-25; 1 was used.")
    assert Args({"limit": 0}).integer("limit", default=10, minimum=1, maximum=25) == 1


def _scope(peer: str, headers: dict[str, str], scheme: str = "http") -> dict[str, object]:
    return {
        "type": "http",
        "scheme": scheme,
        "client": (peer, 5555),
        "server": ("127.0.0.1", 8788),
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
    }


def test_base_url_trusts_forwarded_headers_only_from_proxies() -> None:
    forwarded = {"host": "127.0.0.1:8788", "x-forwarded-proto": "https", "x-forwarded-host": "brain.example.org"}
    assert request_base_url(_scope("127.0.0.1", forwarded), None, ("loopback",)) == "https://brain.example.org"
    assert request_base_url(_scope("203.0.113.9", forwarded), None, ("loopback",)) == "http://127.0.0.1:8788"
    assert request_base_url(_scope("10.1.2.3", forwarded), None, ("uniquelocal",)) == "https://brain.example.org"
    assert request_base_url(_scope("127.0.0.1", forwarded), "https://fixed.example/", ("loopback",)) == "https://fixed.example"
    # A hostile Host header is not echoed into URLs.
    evil = {"host": 'x"y/<z>'}
    assert request_base_url(_scope("203.0.113.9", evil), None, ()) == "http://127.0.0.1:8788"
    assert is_trusted_proxy("::ffff:127.0.0.1", ("loopback",))
    assert not is_trusted_proxy("not-an-ip", ("loopback",))
    # The store's words too (CONNECTOR_TRUST_PROXY goes through the same parser): `private`, `none`.
    assert is_trusted_proxy("10.1.2.3", ("private",)) and is_trusted_proxy("fe80::1", ("private",))
    assert is_trusted_proxy("127.0.0.1", ("loopback", "none")) and not is_trusted_proxy("203.0.113.9", ("private",))


def test_bearer_token_parsing() -> None:
    assert bearer_token(_scope("127.0.0.1", {"authorization": "Bearer abc"})) == "abc"
    assert bearer_token(_scope("127.0.0.1", {"authorization": "bearer  abc "})) == "abc"
    assert bearer_token(_scope("127.0.0.1", {"authorization": "Basic abc"})) is None
    assert bearer_token(_scope("127.0.0.1", {})) is None
