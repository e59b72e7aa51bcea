"""The operator docs: every relative link and its #anchor resolves, and docs/README.md lists every operator page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.processes import REPO_ROOT

DOCS = REPO_ROOT / "docs"
# Every page a reader follows links from: the docs, the top README, the deploy and bench indexes.
LINKING_PAGES = [*sorted(DOCS.glob("*.md")), REPO_ROOT / "README.md", REPO_ROOT / "deploy" / "README.md",
                 REPO_ROOT / "bench" / "README.md"]


def without_code_blocks(text: str) -> str:
    """Markdown outside fenced code blocks (a ``](x)`` or ``# x`` in a code block is no link or heading)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)


def anchors(page: Path) -> set[str]:
    """The anchors GitHub makes for ``page``'s headings: lowercased, punctuation but ``-`` and ``_``
    dropped, spaces as ``-``, a repeated heading suffixed ``-1``, ``-2``..."""
    seen: dict[str, int] = {}
    found = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*$", without_code_blocks(page.read_text()), flags=re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def test_relative_links_and_anchors_resolve() -> None:
    broken = []
    for page in LINKING_PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", without_code_blocks(page.read_text())):
            if "://" in target or target.startswith("mailto:"):
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path) if path else page
            if not linked.exists():
                broken.append(f"{page.relative_to(REPO_ROOT)} links to missing {target}")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                broken.append(f"{page.relative_to(REPO_ROOT)} links to {target}: no such heading")
    assert not broken, "\n".join(broken)


def test_index_lists_every_page() -> None:
    index = (DOCS / "README.md").read_text()
    for page in DOCS.glob("*.md"):
        if page.name != "README.md" and not page.name.startswith("store"):  # store*.md: S1 links its own
            assert f"({page.name})" in index, f"docs/README.md does not link {page.name}"


def test_the_idle_connection_timeout_is_said_alike_everywhere() -> None:
    """The servers close idle keep-alive connections after KEEP_ALIVE_SECONDS; no page says otherwise."""
    from cli.serving import KEEP_ALIVE_SECONDS

    said = []
    for page in [*DOCS.glob("*.md"), REPO_ROOT / "README.md"]:
        text = re.sub(r"\s+", " ", page.read_text())
        said += [(page.name, int(seconds)) for seconds in
                 re.findall(r"(?:idle keep-alive connections?|pauses for more than)[^.]{0,40}? (\d+) ?s\b", text, re.I)]
    assert said and all(seconds == KEEP_ALIVE_SECONDS for _, seconds in said), said


@pytest.mark.parametrize(("page_name", "deploy_name"), [("replicas.md", "Caddyfile.replicas"),
                                                        ("self-hosting.md", "Caddyfile.path")])
def test_a_caddy_block_people_copy_is_its_deploy_file(page_name: str, deploy_name: str) -> None:
    """The block people copy from a page is the deploy file without its comments (replicas.md's once
    lacked the keep-alive bound, whose absence gets answers 502)."""
    page = (DOCS / page_name).read_text()
    shown = re.search(r"Without its comments:\n\n```\n(.*?)```", page, flags=re.DOTALL)
    deployed = (REPO_ROOT / "deploy" / deploy_name).read_text().splitlines()
    assert shown is not None
    assert shown.group(1).splitlines() == [line for line in deployed if line.strip() and not line.lstrip().startswith("#")]


def documented_series(section: str) -> dict[str, set[str]]:
    """The series table under ``section`` of docs/observability.md: each series (``_total`` left off,
    as Prometheus adds it to counters) with its labels (words before any parenthesis; ``—``: none)."""
    page = (DOCS / "observability.md").read_text()
    table = page.split(section, 1)[1].split("\n\n", 2)[1]
    series: dict[str, set[str]] = {}
    for row in table.splitlines()[2:]:
        names, labels = row.split("|")[1:3]
        label_set = {word.strip() for word in re.sub(r"\([^)]*\)", "", labels).split(",")} - {"—", ""}
        for name in re.findall(r"`([a-z_]+)`", names):
            series[name.removesuffix("_total")] = label_set
    return series


def test_the_metrics_tables_name_every_series_with_its_labels() -> None:
    from prometheus_client.metrics import MetricWrapperBase

    from connector.metrics import ConnectorMetrics
    from store.metrics import StoreMetrics

    store = {family.name.removeprefix("brain_store_"): set(family._labelnames) for family in StoreMetrics().collect()}
    connector = {metric._name.removeprefix("brain_connector_"): set(metric._labelnames)
                 for metric in vars(ConnectorMetrics()).values() if isinstance(metric, MetricWrapperBase)}
    assert documented_series("Store (`brain_store_*`):") == store
    assert documented_series("Connector (`brain_connector_*`):") == connector


def test_the_tools_table_of_connecting_md_names_every_argument() -> None:
    """Each tool row of docs/connecting.md's table names every argument the tool takes (the
    brain_recall row once left out ``mode`` and called every hit scored like ``brain recall``)."""
    from connector.mcp.definitions import TOOLS

    page = (DOCS / "connecting.md").read_text()
    rows = dict(re.findall(r"^\| `([a-z_]+)` \|(.*)\|\s*$", page, flags=re.MULTILINE))
    tools = {tool.name: tool for tool in TOOLS if tool.name in rows}
    assert {"brain_recall", "brain_read", "brain_memorize"} <= set(tools)
    for name, tool in tools.items():
        missing = [arg for arg in tool.input_schema["properties"] if f"`{arg}" not in rows[name]]
        assert not missing, f"connecting.md's {name} row does not name {missing}"


def test_the_messages_troubleshooting_md_quotes_are_the_servers_words() -> None:
    """An operator greps a log or matches a tool's answer against the "Other symptoms" table: each
    phrase it quotes is in the code (a number there may stand for a placeholder such as ``{port}``).
    It once quoted tools saying "held, will retry" and a "journal file" the log calls a document."""
    sources = "".join(re.sub(r'"\s*\n\s*f?"', "", path.read_text())  # strings continued on the next line
                      for package in ("store", "connector", "common", "cli")
                      for path in (REPO_ROOT / package).rglob("*.py"))
    table = (DOCS / "troubleshooting.md").read_text().split("## Other symptoms", 1)[1]
    quoted = [phrase for symptom in re.findall(r"^\| (.*?) \|", table, flags=re.MULTILINE)
              for whole in re.findall(r'"([^"]+)"', symptom) for phrase in re.split(r"\s*\.\.\.\s*", whole)]
    assert len(quoted) >= 10
    missing = []
    for phrase in quoted:
        pattern = re.sub(r"\d+", lambda number: rf"(?:{number.group()}|\{{[^}}]*\}}|%\([a-z_]+\)[sd])", re.escape(phrase))
        if not re.search(pattern, sources):
            missing.append(phrase)
    assert not missing, f"troubleshooting.md quotes words no server says: {missing}"


def test_the_readme_layout_names_every_package() -> None:
    """README.md's Layout names every package of common/, store/, connector/ and cli/ (it once left out
    connector/imports/, store/routes/ and cli/serving/)."""
    layout = (REPO_ROOT / "README.md").read_text().split("## Layout", 1)[1]
    missing = [f"{top}/{package.name}/" for top in ("common", "store", "connector", "cli")
               for package in sorted((REPO_ROOT / top).iterdir())
               if (package / "__init__.py").is_file() and f"{package.name}/" not in layout]
    assert not missing, f"README.md's Layout does not name {missing}"


def test_the_import_pages_give_the_web_apps_similar_check_its_numbers() -> None:
    """The web app's import dry run gives the similar check to the file's first SIMILAR_CHECKED
    memories and its write queues the pairs of the first IMPORT_CHECKED; webapp.md once said the
    dry run checked 50, contradicting import.md."""
    from connector.webapp.actions import IMPORT_CHECKED
    from connector.webapp.routes import SIMILAR_CHECKED

    webapp = re.sub(r"\s+", " ", (DOCS / "webapp.md").read_text())
    imports = re.sub(r"\s+", " ", (DOCS / "import.md").read_text())
    assert f"for the file's first {SIMILAR_CHECKED} memories" in webapp
    assert f"the first {SIMILAR_CHECKED} memories of a file" in imports
    assert f"the first {IMPORT_CHECKED} new memories given its similar check" in webapp


def test_every_page_naming_the_redirect_uri_to_register_names_the_web_apps_too() -> None:
    """With OIDC the provider must know two redirect URIs, the OAuth one and the web app's; env.example
    and troubleshooting.md named only the first, so the web app's sign-in failed at the provider."""
    pages = [DOCS / "oidc-providers.md", DOCS / "troubleshooting.md", DOCS / "webapp.md",
             REPO_ROOT / "deploy" / "env.example"]
    for page in pages:
        text = page.read_text()
        assert "/oidc/callback" in text and "/app/oidc/callback" in text, page.name


def test_every_repository_path_the_docs_name_exists() -> None:
    """A path of this repository written in backticks (`store/migrate.py`, `tests/ops/`, `deploy/...`)
    names a file or directory that is there; deploy/.env is the operator's own copy of env.example."""
    made_by_the_operator = {"deploy/.env"}
    missing = []
    for page in LINKING_PAGES:
        for path in re.findall(r"`((?:store|connector|common|cli|tests|bench|deploy|contract)/[\w./-]+)`",
                               page.read_text()):
            if path not in made_by_the_operator and not (REPO_ROOT / path).exists():
                missing.append(f"{page.relative_to(REPO_ROOT)}: {path}")
    assert not missing, missing


def test_every_flag_the_docs_give_a_command_is_one_it_takes() -> None:
    """`brain-store user add NAME --email E`, `brain-connector recall BRAIN Q --mode hybrid`...: each
    ``--flag`` written after a command in the docs is an option of that command (or --help)."""
    from tests.support.cli_tree import every_command

    commands = every_command()
    wrong, checked = [], 0
    for page in [REPO_ROOT / "README.md", *sorted(DOCS.glob("*.md")), REPO_ROOT / "deploy" / "README.md"]:
        for program, words in re.findall(r"(brain-store|brain-connector) ([a-z][^`\n|#;&)]*)", page.read_text()):
            names = words.split()
            # the longest command name the words start with ("user add" before "user")
            name = next((" ".join([program, *names[:n]]) for n in (2, 1)
                         if " ".join([program, *names[:n]]) in commands), None)
            if name is None:
                continue
            options = {opt for param in commands[name].params
                       for opt in [*getattr(param, "opts", []), *getattr(param, "secondary_opts", [])]}
            for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", words):
                checked += 1
                if flag not in options | {"--help"}:
                    wrong.append(f"{page.name}: {name} {flag}")
    assert checked > 50 and not wrong, wrong


# Pages that name settings and commands: the docs, the top README and the deploy and bench indexes.
SETTING_PAGES = LINKING_PAGES
# What the "Scripts: agent keys" example of docs/connecting.md reads from its own environment.
SCRIPT_VARIABLES = {"BRAIN_KEY", "BRAIN_MCP_URL"}


def documented_variables(text: str) -> set[str]:
    """The environment variables a page names: ``STORE_*``, ``CONNECTOR_*``, ``OIDC_*``, ``BRAIN_*`` and the
    like, a family written ``STORE_HTTP_*`` or ``*_HTTP_MAX_HEADER_KB`` as each of its members, and a
    row's ``STORE_HTTP_BODY_TIMEOUT_S`` / ``_BODY_MIN_BYTES_PER_S`` as ``STORE_HTTP_BODY_MIN_BYTES_PER_S``."""
    found = set(re.findall(r"(?<![\w*])((?:STORE|CONNECTOR|OIDC|BRAIN|REFERENCE|NEW|RECALL)_[A-Z0-9_]*[A-Z0-9])\b", text))
    found |= {prefix + rest for rest in re.findall(r"`\*(_[A-Z0-9_]+)`", text) for prefix in ("STORE", "CONNECTOR")}
    return found | {completed(first, suffix) for first, suffix in re.findall(r"`([A-Z][A-Z0-9_]+)` / `(_[A-Z0-9_]+)`", text)}


def completed(first: str, suffix: str) -> str:
    """A variable written as a suffix after another (``STORE_INSPECT_MAX_INFLATED_MB`` / ``_MAX_ENTRIES``):
    the first one's name up to the suffix's first word, then the suffix (``STORE_INSPECT_MAX_ENTRIES``)."""
    return first[:first.index("_" + suffix.split("_")[1] + "_")] + suffix


def test_every_environment_variable_the_docs_name_is_read() -> None:
    """Each variable a page names is a setting of one of the servers (or compose's own, in env.example),
    a command's option (`brain-store check`'s BRAIN_STORE_CHECK_TOKEN), or one the tests read; a
    family (``CONNECTOR_HTTP_*``) has members."""
    from tests.ops.test_deploy import CONNECTOR_ENV, STORE_ENV, _documented
    from tests.support.cli_tree import every_command

    options = {param.envvar for command in every_command().values() for param in command.params
               if isinstance(getattr(param, "envvar", None), str)}
    tests_read = {name for path in (REPO_ROOT / "tests").rglob("*.py")
                  for name in re.findall(r"[\"']([A-Z][A-Z0-9_]+)[\"']", path.read_text())}
    read = STORE_ENV | CONNECTOR_ENV | _documented() | options | SCRIPT_VARIABLES
    unknown = []
    for page in SETTING_PAGES:
        text = page.read_text()
        for family in re.findall(r"`((?:STORE|CONNECTOR)_[A-Z_]+_)\*`", text):
            if not any(name.startswith(family) for name in read):
                unknown.append(f"{page.relative_to(REPO_ROOT)}: {family}*")
        for name in documented_variables(text) - read - tests_read:
            unknown.append(f"{page.relative_to(REPO_ROOT)}: {name}")
    assert not unknown, f"the docs name variables nothing reads: {sorted(unknown)}"


# What a settings table's default column says for "nothing set" (an empty value, the setting's default).
UNSET_WORDS = {"none", "unset", "empty", "–", "(required)", "AWS"}
# Settings left unset whose effect the table gives: the S3 client's own default region.
EFFECTIVE_DEFAULTS = {"STORE_S3_REGION": "us-east-1"}


def settings_table_defaults(text: str) -> list[tuple[str, str]]:
    """Each (variable, default) of a page's ``| variable | default | ...`` tables, the default as the
    environment would give it ("" for a word meaning unset; a trailing "(8 h)" remark left off)."""
    rows = []
    for table in re.findall(r"^\| (?:variable|setting) \| default \|.*\n\|[-|]+\|\n((?:\|.*\n)+)", text, re.M):
        for row in table.splitlines():
            cells = [cell.strip() for cell in row.split("|")[1:-1]]
            names = [name for name in re.findall(r"`([A-Z*_][A-Z0-9_]*)`", cells[0])]
            defaults = [value.strip() for value in cells[1].split(" / ")]
            assert len(defaults) in (1, len(names)), row
            for index, name in enumerate(names):
                if name.startswith("_"):  # `STORE_HTTP_BODY_TIMEOUT_S` / `_BODY_MIN_BYTES_PER_S`
                    name = completed(names[0], name)
                value = defaults[index if len(defaults) > 1 else 0].replace("`", "")
                value = value if value.startswith("(") else re.sub(r"\s*\(.*\)$", "", value)
                for full in ([prefix + name[1:] for prefix in ("STORE", "CONNECTOR")] if name.startswith("*")
                             else [name]):
                    rows.append((full, "" if value in UNSET_WORDS else value))
    return rows


def test_the_settings_tables_give_the_settings_defaults() -> None:
    """A ``| variable | default |`` table (store.md, store-s3.md, thinking.md, webapp.md, self-hosting.md's
    connection limits) gives each setting's default: set to it, the settings are the defaults."""
    from common.s3client import make_client
    from connector.settings import ConnectorSettings
    from store.settings import StoreSettings

    store_url = {"CONNECTOR_STORE_URL": "http://127.0.0.1:8787"}
    store_default, connector_default = StoreSettings.from_env({}), ConnectorSettings.load(store_url)
    wrong, checked = [], 0
    for page in SETTING_PAGES:
        for name, value in settings_table_defaults(page.read_text()):
            checked += 1
            if name in EFFECTIVE_DEFAULTS:
                said = EFFECTIVE_DEFAULTS[name] == value
                assert StoreSettings.from_env({}).s3_region is None
            elif name.startswith("STORE_"):
                said = StoreSettings.from_env({name: value}) == store_default
            else:
                said = ConnectorSettings.load({**store_url, name: value}) == connector_default
            if not said:
                wrong.append(f"{page.name}: {name} {value!r}")
    assert make_client(None, None).meta.region_name == EFFECTIVE_DEFAULTS["STORE_S3_REGION"]
    assert checked > 40 and not wrong, wrong


def test_every_command_the_docs_give_a_group_is_one_it_has() -> None:
    """`brain-store user add`, `brain-store brain purge ID`, `brain-store key revoke`: the word after a
    group of commands is one of its commands (`...` for any), and a command written first in backticks
    or first on a line of a code block is one of the program's (the flags test passes over the rest)."""
    from tests.support.cli_tree import every_command

    commands = every_command()
    groups: dict[str, set[str]] = {}
    for name in commands:
        *group, leaf = name.split()
        groups.setdefault(" ".join(group), set()).add(leaf)
    wrong, checked = [], 0
    for page in SETTING_PAGES:
        text = page.read_text()
        for program, first, second in re.findall(r"(brain-store|brain-connector) ([a-z][a-z-]*)(?: ([a-z.][\w.-]*))?", text):
            if f"{program} {first}" in groups:
                checked += 1
                if second not in groups[f"{program} {first}"] and second not in ("...", ""):
                    wrong.append(f"{page.name}: {program} {first} {second}")
        code = "\n".join(re.findall(r"^```.*?\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL))
        started = re.findall(r"`(brain-store|brain-connector) ([a-z][a-z-]*)", text)
        for program, first in started + re.findall(r"^\s*(?:\S*/bin/|sudo |\$ )?(brain-store|brain-connector) ([a-z][a-z-]*)",
                                                   code, flags=re.MULTILINE):
            checked += 1
            if first not in groups[program] and f"{program} {first}" not in groups:
                wrong.append(f"{page.name}: {program} {first}")
    assert checked > 100 and not wrong, wrong
