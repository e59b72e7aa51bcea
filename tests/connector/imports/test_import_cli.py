"""`brain-connector import` on real files, as a real process: Markdown vaults and notes, our own
Markdown export (round trip), mem0 exports, ChatGPT and Claude conversations through a scripted
model server, duplicates, and refusals that change nothing."""

from __future__ import annotations

import io
import json
import subprocess
import warnings
import zipfile
from pathlib import Path
from typing import Any

import pytest

from connector.engine.format.archive import load_directory
from connector.engine.format.text import memory_body
from connector.webapp.transfer import export_zip
from tests.connector.test_e2e_thinking import fake_model
from tests.support.processes import console_script, run_command

from . import samples

pytestmark = pytest.mark.timeout(300)
NOW = "2026-02-03T04:05:06.000Z"  # an explicit clock: ids and times do not depend on today


def run_import(brain: Path, source: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_command([console_script("brain-connector"), "import", str(brain), str(source), "--now", NOW, *args],
                       timeout=240, env=env)


def imported_ok(brain: Path, source: Path, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    done = run_import(brain, source, *args, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def refused(brain: Path, source: Path, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    done = run_import(brain, source, *args, env=env)
    assert done.returncode == 1, done.stdout
    assert "Traceback" not in done.stderr
    return json.loads(done.stderr)


def live(brain_dir: Path) -> dict[str, dict[str, Any]]:
    """The brain's live memories by title: index entry, front matter fields and body."""
    brain = load_directory(brain_dir)
    out = {}
    for memory_id, entry in brain.read_json("index.json")["memories"].items():
        text = brain.read_text(entry["path"])
        out[entry["title"]] = {**entry, "id": memory_id, "body": memory_body(text), "text": text}
    return out


def files_of(brain_dir: Path) -> dict[str, bytes]:
    return {str(path.relative_to(brain_dir)): path.read_bytes() for path in sorted(brain_dir.rglob("*")) if path.is_file()}


def test_an_obsidian_vault_and_a_basic_memory_folder_import_with_their_folders_tags_and_sources(tmp_path: Path) -> None:
    vault = samples.obsidian_vault(tmp_path)
    brain = tmp_path / "brain"
    dry = imported_ok(brain, vault, "--dry-run")
    assert dry["format"] == "markdown" and dry["dry_run"] is True and dry["new"] == 3
    assert sorted(dry["passed_over"]) == ["Empty.md: no text", "Projects/diagram.png: not a Markdown file"]
    assert not brain.exists()  # a dry run writes nothing, not even the directory

    report = imported_ok(brain, vault)
    assert report["new"] == 3 and len(report["stored"]) == 3
    memories = live(brain)
    assert set(memories) == {"Tomato plan", "Compost", "2024-05-02"}
    tomato = memories["Tomato plan"]
    assert tomato["path"].startswith("Projects/Garden/") and tomato["tags"] == ["garden", "plants"]
    assert "south bed" in tomato["body"] and "[[Compost]]" in tomato["body"]
    assert tomato["origin"] == "user" and tomato["type"] == "learning"
    assert 'source: "imported from Vault/Projects/Garden/Tomatoes.md"' in tomato["text"]
    assert memories["Compost"]["tags"] == ["garden", "soil"]
    assert memories["2024-05-02"]["path"].startswith("Daily/")
    assert not any(".obsidian" in name for name in files_of(brain))

    notes = samples.basic_memory_note(tmp_path)
    report = imported_ok(brain, notes, "--from", "markdown")
    coffee = live(brain)["Coffee Brewing Methods"]
    assert coffee["tags"] == ["coffee", "brewing"] and coffee["type"] == "learning"  # Basic Memory's "note"
    assert coffee["path"].startswith("coffee/") and "Pour over gives a cleaner cup" in coffee["body"]


def test_a_note_whose_text_shows_nothing_is_passed_over_like_an_empty_one(tmp_path: Path) -> None:
    """A note holding only a zero-width space or a NUL has no text, as an empty note has none: it is
    passed over, and the rest of the folder imports (memorize refuses such a text as empty)."""
    folder = tmp_path / "Notes"
    folder.mkdir()
    (folder / "Seeds.md").write_text("Order tomato seeds in February.\n")
    (folder / "Invisible.md").write_text("---\ntags: [x]\n---\n\u200b\ufeff\n")
    (folder / "Nul.md").write_bytes(b"\x00\n")
    brain = tmp_path / "brain"
    report = imported_ok(brain, folder)
    assert report["new"] == 1
    assert sorted(report["passed_over"]) == ["Invisible.md: no text", "Nul.md: no text"]
    assert set(live(brain)) == {"Seeds"}


def test_a_single_note_with_a_long_heading_gets_a_title_cut_as_memorize_cuts_one(tmp_path: Path) -> None:
    note = tmp_path / "long.md"
    heading = "A very long heading " * 20
    note.write_text(f"# {heading}\n\nThe **body** of the note.\n")
    brain = tmp_path / "brain"
    imported_ok(brain, note)
    (title,) = live(brain)
    assert len(title) <= 80 and title.endswith("…") and heading.startswith(title[:-1].rstrip())
    # One note given by itself is read whatever its name ends with; detected, or named with --from.
    plain = tmp_path / "reminder.txt"
    plain.write_text("Renew the car insurance before the end of May.\n")
    assert imported_ok(brain, plain)["format"] == "markdown"
    assert "reminder" in live(brain)


def test_a_note_whose_front_matter_holds_a_date_the_calendar_has_not_imports(tmp_path: Path) -> None:
    """``date: 2024-02-30`` is YAML's timestamp syntax but no date: PyYAML's ValueError was a traceback
    here (and a 500 from the web app's import); the value is the note's text, as its author sees it."""
    note = tmp_path / "typo.md"
    note.write_text("---\ndate: 2024-02-30\ntags: [garden]\n---\n# Seed order\nOrder tomato seeds in February.\n")
    brain = tmp_path / "brain"
    report = imported_ok(brain, note)
    assert report["new"] == 1
    assert "Order tomato seeds in February." in live(brain)["Seed order"]["body"]


def test_a_note_holding_a_credential_is_listed_as_refused_and_the_others_import(tmp_path: Path) -> None:
    """The report said nothing of a note refused for a credential: it vanished from "new" unsaid."""
    vault = tmp_path / "vault"
    vault.mkdir()
    key = "AKIAIOSFODNN7EXAMPLE"
    (vault / "Deploy keys.md").write_text(f"The deploy user's access key is {key}.\n")
    (vault / "Tomatoes.md").write_text("Tomatoes need six hours of sun.\n")
    brain = tmp_path / "brain"
    for args in (("--dry-run",), ()):
        report = imported_ok(brain, vault, *args)
        assert report["new"] == 1 and len(report["refused"]) == 1
        assert report["refused"][0].startswith("Deploy keys: looks like it contains a credential")
        assert key not in json.dumps(report)
    assert list(live(brain)) == ["Tomatoes"]


def test_a_note_with_a_memory_id_and_a_list_of_types_is_a_note_from_elsewhere(tmp_path: Path) -> None:
    # Not our export (our type is one word): read as any other note. The lookup of a list among
    # our types raised TypeError (unhashable type): a traceback, a 500 in the web app.
    note = tmp_path / "typed.md"
    note.write_text("---\nid: mem_20240101_abc123\ntype: [note, idea]\n---\nThe shed key hangs by the door.\n")
    brain = tmp_path / "brain"
    assert imported_ok(brain, note)["new"] == 1
    assert live(brain)["typed"]["type"] == "learning"


def test_a_note_longer_than_a_memory_may_be_is_refused_by_name(tmp_path: Path) -> None:
    # brain_memorize and the web app take 50,000 characters; an import took any length (a zip of
    # 600 KB brought a note of 200 MB: 45 s of checks and 3.7 GB of memory).
    vault = samples.obsidian_vault(tmp_path)
    (vault / "Long.md").write_text("# Long\n" + "The hedge is trimmed in June. " * 2000)
    brain = tmp_path / "brain"
    report = imported_ok(brain, vault)
    assert report["new"] == 3 and report["refused"] == ["Long: longer than 50000 characters; not imported"]
    assert "Long" not in live(brain)


def _native(*memories: dict[str, Any]) -> bytes:
    return json.dumps({"format": "brain-store/memories", "version": 1, "memories": [
        {"type": "learning", "path": "notes/", "content": f"{memory['title']} is kept.", **memory}
        for memory in memories]}).encode()


def test_a_memory_whose_other_fields_hold_more_than_memorize_takes_is_refused_by_name(tmp_path: Path) -> None:
    # Only the content had a limit: 200,000 tags on one memory were imported (and its page took
    # seconds to render), as were a source, a pin scope or a context of any length.
    export = tmp_path / "export.json"
    export.write_bytes(_native(
        {"title": "Fine", "tags": [f"t{n}" for n in range(200)], "related": [f"mem_20240101_{n:06x}" for n in range(200)]},
        {"title": "Many tags", "tags": [f"t{n}" for n in range(200_000)]},
        {"title": "Long tag", "tags": ["ok", "x" * 301]},
        {"title": "Many links", "related": [f"mem_20240101_{n:06x}" for n in range(201)]},
        {"title": "Long link", "supersedes": ["mem_" + "1" * 300]},
        {"title": "Long source", "source": "s" * 2049},
        {"title": "Long scope", "pinned": True, "pin_scope": "p" * 301},
        {"title": "Long project", "encoding_context": {"project": "p" * 301}},
        {"title": "Many topics", "encoding_context": {"topics": [f"t{n}" for n in range(201)]}},
    ))
    brain = tmp_path / "brain"
    dry = imported_ok(brain, export, "--dry-run")
    assert dry["new"] == 1 and dry["refused"] == [
        "Many tags: 'tags' has more than 200 items; not imported",
        "Long tag: 'tags' holds an item longer than 300 characters; not imported",
        "Many links: 'related' has more than 200 items; not imported",
        "Long link: 'supersedes' holds an item longer than 200 characters; not imported",
        "Long source: 'source' is longer than 2048 characters; not imported",
        "Long scope: 'pin_scope' is longer than 300 characters; not imported",
        "Long project: 'encoding_context.project' is longer than 300 characters; not imported",
        "Many topics: 'encoding_context.topics' has more than 200 items; not imported",
    ]
    report = imported_ok(brain, export)
    assert report["new"] == 1 and report["refused"] == dry["refused"]
    assert list(live(brain)) == ["Fine"] and len(live(brain)["Fine"]["tags"]) == 200

    # a note from elsewhere is held to the same limits
    note = tmp_path / "Tagged.md"
    note.write_text("---\ntags: " + " ".join(f"t{n}" for n in range(201)) + "\n---\n# Tagged\nBody.\n")
    assert imported_ok(brain, note)["refused"] == ["Tagged: 'tags' has more than 200 items; not imported"]
    assert list(live(brain)) == ["Fine"]


def test_importing_the_same_notes_again_reports_duplicates_and_writes_nothing(tmp_path: Path) -> None:
    vault = samples.obsidian_vault(tmp_path)
    brain = tmp_path / "brain"
    imported_ok(brain, vault)
    before = files_of(brain)
    # A second copy of one note in another folder: a duplicate within the file too.
    (vault / "Copy of Compost.md").write_text("The compost bin is turned every second Sunday.\n")
    again = imported_ok(brain, vault)
    assert again["new"] == 0 and "stored" not in again
    titles = sorted(item["title"] for item in again["duplicates"])
    assert titles == ["2024-05-02", "Compost", "Copy of Compost", "Tomato plan"]
    held = {item["existing_title"] for item in again["duplicates"]}
    assert held == {"2024-05-02", "Compost", "Tomato plan"}
    assert files_of(brain) == before

    # The same fact in other words is written, and reported with the memory it repeats.
    paraphrase = tmp_path / "paraphrase.md"
    paraphrase.write_text("---\ntitle: Compost turning\n---\nEvery other Sunday the compost bin gets turned.\n")
    report = imported_ok(brain, paraphrase)
    compost_id = live(brain)["Compost"]["id"]
    assert report["new"] == 1 and report["duplicates"] == []
    assert [(item["id"], item["relation"], item["title"]) for item in report["similar"]] == \
           [(compost_id, "duplicate", "Compost turning")]


def test_our_markdown_export_round_trips_into_an_empty_brain(tmp_path: Path) -> None:
    source = tmp_path / "source"
    memorize = [
        {"title": "Dentist on Tuesdays", "type": "preference", "path": "personal/", "content": "Dentist appointments "
         "are on Tuesdays.\n\n- never Mondays\n- *bring* the card", "tags": ["health", "schedule"], "salience": 0.8,
         "confidence": 0.9, "source": "a phone call", "origin": "user", "pinned": True, "pin_priority": 2,
         "encoding_context": {"project": "home", "topics": ["health"], "task_type": "planning", "agent": "me"}},
        {"title": "Router: \"admin\" page --- LAN only", "type": "learning", "path": "home/router.md",
         "content": "The router admin page is at 192.168.1.1 **only** on the LAN.", "tags": ["home"],
         "origin": "external", "valid_from": "2025-01-01T00:00:00.000Z"},
        {"title": "路由器密码在抽屉里", "type": "observation", "path": "home/", "content": "路由器的说明书在书房的抽屉里。",
         "tags": ["家"], "origin": "agent-inferred", "cognitive_type": "episodic"},
    ]
    done = subprocess.run([console_script("brain-connector"), "memorize", str(source), "--now", NOW, "--no-similar"],
                          input=json.dumps(memorize), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    first = live(source)
    related_id = first["Dentist on Tuesdays"]["id"]
    assert first["Router: \"admin\" page --- LAN only"]["quarantined"] is True
    exported = tmp_path / "brain-export.zip"
    exported.write_bytes(export_zip(load_directory(source)))

    target = tmp_path / "target"
    report = imported_ok(target, exported)
    assert report["format"] == "markdown" and report["new"] == 3 and report["pending_verification"] == 1
    second = live(target)
    assert set(second) == set(first)
    for title, old in first.items():
        new = second[title]
        assert new["body"] == old["body"], title
        for key in ("path", "type", "cognitive_type", "tags", "origin", "salience", "confidence", "encoding_context",
                    "pinned", "pin_priority", "valid_from", "quarantined", "related", "strength", "decay_rate"):
            assert new.get(key) == old.get(key), (title, key)
        for line in ("source:",):
            assert [x for x in new["text"].splitlines() if x.startswith(line)] == \
                   [x for x in old["text"].splitlines() if x.startswith(line)], title
    assert related_id not in second["Dentist on Tuesdays"]["id"]  # new ids


def test_a_mem0_export_in_both_documented_shapes(tmp_path: Path) -> None:
    brain = tmp_path / "brain"
    report = imported_ok(brain, samples.write_json(tmp_path / "mem0-export.json", samples.MEM0_RESULTS))
    assert report["format"] == "mem0" and report["new"] == 2
    memories = live(brain)
    veggie = memories["Is a vegetarian and allergic to nuts"]
    assert veggie["tags"] == ["user:alex", "food", "source:onboarding"]
    assert veggie["valid_from"] == "2024-07-25T11:12:09.447Z"  # updated_at, in UTC
    assert veggie["origin"] == "agent-inferred" and veggie["body"] == "Is a vegetarian and allergic to nuts"
    assert ("imported from mem0-export.json (mem0 id 892db2ae-06d9-49e5-8b3e-585ef9b85b8e, created "
            "2024-07-20T08:30:21.154Z, updated 2024-07-25T11:12:09.447Z)") in veggie["text"]
    tennis = memories["Plays tennis on Saturday mornings"]
    assert tennis["tags"] == ["user:alex", "agent:travel-assistant"]
    assert tennis["encoding_context"]["project"] == "travel-assistant"
    assert tennis["valid_from"] == "2024-07-21T16:00:00.000Z"

    plain = imported_ok(brain, samples.write_json(tmp_path / "get_all.json", samples.MEM0_LIST))
    assert plain["format"] == "mem0" and plain["new"] == 1
    assert live(brain)["Prefers window seats on long flights"]["tags"] == ["user:sam"]


def _zip(entries: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, text in entries.items():
            archive.writestr(name, text)
    return buffer.getvalue()


def _zip_twice(name: str, first: str, second: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns of the duplicate name
        archive.writestr(name, first)
        archive.writestr(name, second)
    return buffer.getvalue()


class _NameAsWritten(zipfile.ZipInfo):
    """An entry whose name is stored as the given bytes, without the UTF-8 flag (as Windows'
    own zip writes names on a Japanese or Chinese system, and macOS's Finder writes UTF-8)."""

    raw = b""

    def _encodeFilenameFlags(self) -> tuple[bytes, int]:  # noqa: N802 - zipfile's name
        return self.raw, self.flag_bits & ~0x800


def _zip_named(entries: dict[bytes, str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for number, (raw, text) in enumerate(entries.items()):
            info = _NameAsWritten(f"entry-{number}")
            info.raw = raw
            archive.writestr(info, text)
    return buffer.getvalue()


@pytest.mark.parametrize(("encoding", "names"), [
    ("utf-8", ["メモ/会議室の予約.md", "笔记/部署流程.md"]),
    # 予 and 表 end in byte 0x5C in Shift_JIS: read as CP437 that is a backslash
    ("cp932", ["議事録/会議室の予約表.md", "議事録/ソフト開発.md"]),
    ("gbk", ["笔记/部署流程.md", "笔记/会议记录.md"]),
])
def test_a_vault_zip_with_chinese_or_japanese_names_without_the_utf8_flag_keeps_them(
        tmp_path: Path, encoding: str, names: list[str]) -> None:
    """zipfile reads a name without the UTF-8 flag as CP437: the titles were mojibake
    ("Σ╝ÜΦ¡░σ«ñ"), and a Shift_JIS name holding 予 was refused as a path outside the archive."""
    vault = tmp_path / "vault.zip"
    vault.write_bytes(_zip_named({name.encode(encoding): f"{name} の本文。\n" for name in names}))
    brain = tmp_path / "brain"
    report = imported_ok(brain, vault)
    assert report["new"] == 2
    memories = live(brain)
    assert set(memories) == {name.split("/")[1].removesuffix(".md") for name in names}
    for name in names:
        memory = memories[name.split("/")[1].removesuffix(".md")]
        assert f'source: "imported from vault.zip/{name}"' in memory["text"] and memory["body"].startswith(name)


def test_a_brain_folder_imports_with_the_titles_of_its_index_and_not_its_archive(tmp_path: Path) -> None:
    """The `brain` command line keeps titles in index.json, not in the memory files: imported,
    a memory titled 東京オフィスの会議室予約ルール was titled with its file's transliterated name
    (dong-jing-ofuisuno-hui-yi-shi-yu-yue-ruru)."""
    source = tmp_path / "source"
    titles = ["東京オフィスの会議室予約ルール", "部署流程：蓝绿发布（每周四）", "Redis cache TTL"]
    memories = [{"title": title, "type": "learning", "path": "captured/", "content": f"{title}の本文。"}
                for title in titles]
    done = run_command([console_script("brain-connector"), "memorize", str(source), "--now", NOW, "--no-similar"],
                       timeout=240, input=json.dumps(memories))
    assert done.returncode == 0, done.stderr
    assert not any("title:" in path.read_text() for path in (source / "captured").glob("*.md"))
    # A forgotten memory (in _archived/) is not brought back as a live one.
    forgotten = run_command([console_script("brain-connector"), "forget", str(source),
                             json.loads(done.stdout)["stored"][2]["id"], "--now", NOW], timeout=240)
    assert forgotten.returncode == 0, forgotten.stderr
    brain = tmp_path / "brain"
    report = imported_ok(brain, source)
    assert sorted(item["title"] for item in report["stored"]) == sorted(titles[:2])
    assert set(live(brain)) == set(titles[:2])
    assert [item for item in report["passed_over"] if item.endswith("an archived memory")] == [
        f"{path.relative_to(source)}: an archived memory" for path in (source / "_archived").rglob("*.md")]


def test_front_matter_tags_separated_by_chinese_or_japanese_commas_are_separate_tags(tmp_path: Path) -> None:
    note = tmp_path / "会議.md"
    note.write_text("---\ntags: 会議、予約，部署 支付\n---\n# 会議室の予約\n前日までに予約する。\n", encoding="utf-8")
    brain = tmp_path / "brain"
    imported_ok(brain, note)
    assert live(brain)["会議室の予約"]["tags"] == ["会議", "予約", "部署", "支付"]



@pytest.mark.parametrize(("front", "tags"), [
    ("tags: {garden: 1, soil: 2}", ["garden", "soil"]),  # was the tags "{'garden':", "1,", "'soil':", "2}"
    ("tags: {garden, soil}", ["garden", "soil"]),  # YAML's set
    ("tags: true", []),  # was the tag "True"
    ("tags: 2024", ["2024"]),
])
def test_front_matter_tags_that_are_a_mapping_give_its_keys(tmp_path: Path, front: str, tags: list[str]) -> None:
    note = tmp_path / "Compost.md"
    note.write_text(f"---\n{front}\n---\n# Compost\nTurn the heap every two weeks.\n")
    brain = tmp_path / "brain"
    imported_ok(brain, note)
    assert live(brain)["Compost"]["tags"] == tags


BAD_FILES: list[tuple[str, bytes, tuple[str, ...], str]] = [
    ("broken.json", b'{"results": [\n  {"memory": "ok"},\n  {"memory": "x",}\n]}', (), "broken.json, line 3: not JSON"),
    ("mem0.json", json.dumps({"results": [{"memory": "fine"}, {"memory": ""}]}).encode(), (),
     "memory 2: 'memory' must be non-empty text"),
    ("mem0-time.json", json.dumps([{"memory": "a", "created_at": "yesterday"}]).encode(), (),
     "memory 1: 'created_at' is not an ISO 8601 time"),
    ("note.md", b"---\ntitle: [unclosed\n---\nbody\n", (), "note.md, line 2: the front matter is not YAML"),
    ("laughs.md", b"---\na: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n---\nbody\n", (),
     "laughs.md, line 3: the front matter is not YAML (aliases (*name) are not accepted)"),
    ("python.md", b"---\ntitle: !!python/object/apply:os.system [touch /tmp/pwned]\n---\nbody\n", (),
     "python.md, line 2: the front matter is not YAML"),
    # PyYAML's constructors fail past YAMLError on these (a traceback, and a 500 in the web app);
    # a date the calendar has not is kept as text instead (test_a_note_whose_front_matter_holds_a_date...)
    # ... and then in Python's words ("Exceeds the limit (4300 digits) for integer string conversion"):
    # now the import's own, naming the note, the line and the field
    ("digits.md", b"---\ntitle: " + b"9" * 5000 + b"\n---\nbody\n", (),
     "digits.md, line 2: the front matter's 'title' is a number of more than 4300 digits"),
    ("digits-4301.md", b"---\ntitle: Long\nsize:\n  bytes: [1, " + b"9" * 4301 + b"]\n---\nbody\n", (),
     "digits-4301.md, line 4: the front matter's 'size' is a number of more than 4300 digits"),
    ("nested.md", b"---\na: " + b"[" * 5000 + b"]" * 5000 + b"\n---\nbody\n", (),
     "nested.md, line 2: the front matter's 'a' is nested too deeply"),
    # ".." starts with a dot: such an entry was passed over as a hidden folder, without a word
    ("outside.zip", _zip({"Vault/../../evil.md": "# Evil\nbody"}), (), "Vault/../../evil.md: a path outside the archive"),
    # the same name twice: the first note was dropped without a word
    ("twice.zip", _zip_twice("Notes/a.md", "# One\nfirst", "# Two\nsecond"), (), "Notes/a.md: twice in the archive"),
    # an empty zip is no note: it was imported as one memory holding its 22 bytes
    ("empty.zip", b"PK\x05\x06" + bytes(18), (), "empty.zip holds no Markdown note with text."),
    ("latin1.md", b"caf\xe9 au lait\n", (), "latin1.md, line 1: not UTF-8 text"),
    ("other.json", b'{"hello": "world"}', (), "other.json is in no format this app imports"),
    ("text.json", b"not json at all", (), "text.json, line 1: not JSON"),
    # a speaker that is a list or an object is no speaker (it was a TypeError: unhashable type)
    ("chatgpt-role.json", json.dumps([{"mapping": {"a": {"message": {"author": {"role": {"x": 1}},
                                                                      "content": {"parts": ["hi"]}}}},
                                       "current_node": "a"}]).encode(), (), "needs a model"),
    ("claude-sender.json", json.dumps([{"chat_messages": [{"sender": ["human"], "text": "hi"}]}]).encode(), (),
     "needs a model"),
    # an origin that is a list is refused as any wrong origin (it was a TypeError: unhashable type)
    ("origin.json", json.dumps({"format": "brain-store/memories", "version": 1, "memories": [
        {"title": "t", "type": "learning", "content": "c", "path": "notes/", "origin": ["user"]}]}).encode(), (),
     "memory 1 (t): 'origin' must be one of"),
    # half of a character (a "\ud800" escape), which no file of the brain can hold: the write failed
    ("surrogate.json", b'{"format": "brain-store/memories", "version": 1, "memories": [{"title": "t", '
                       b'"type": "learning", "path": "notes/", "content": "a \\ud800 b"}]}', (),
     "memory 1 (t): 'content' holds a lone surrogate (an escape like \\ud800 that is half of a character)"),
    ("mem0-as-claude.json", json.dumps(samples.MEM0_LIST).encode(), ("--from", "claude"),
     "is not a Claude conversations export"),
]


@pytest.mark.parametrize(("name", "data", "args", "reason"), BAD_FILES, ids=[case[0] for case in BAD_FILES])
def test_bad_files_are_refused_with_the_line_or_entry_and_change_nothing(
        tmp_path: Path, name: str, data: bytes, args: tuple[str, ...], reason: str) -> None:
    brain = tmp_path / "brain"
    imported_ok(brain, samples.obsidian_vault(tmp_path))
    before = files_of(brain)
    bad = tmp_path / name
    bad.write_bytes(data)
    answer = refused(brain, bad, *args, env=_no_model_env())
    assert any(reason in item for item in answer["reasons"]), answer
    assert not any("sys.set_int_max_str_digits" in item for item in answer["reasons"]), answer
    assert files_of(brain) == before


def test_a_vault_with_one_bad_note_imports_none_of_it(tmp_path: Path) -> None:
    vault = samples.obsidian_vault(tmp_path)
    (vault / "Daily" / "broken.md").write_text("---\ntags: [a, b\nkey: : :\n---\ntext\n")
    brain = tmp_path / "brain"
    answer = refused(brain, vault)
    assert answer["reasons"][0].startswith("Daily/broken.md, line ")
    assert not brain.exists()


def test_an_import_whose_write_fails_halfway_leaves_the_brain_as_it_was(tmp_path: Path) -> None:
    """The write is all or nothing: one memory's file cannot be written (a directory has its
    name), so neither the index nor any other memory of the import reaches the brain."""
    brain = tmp_path / "brain"
    imported_ok(brain, samples.obsidian_vault(tmp_path))
    before = files_of(brain)
    notes = tmp_path / "notes.zip"
    with zipfile.ZipFile(notes, "w") as archive:
        archive.writestr("inbox/Alpha.md", "# Alpha\nThe alpha release ships on Monday.\n")
        archive.writestr("inbox/Omega.md", "# Omega\nThe omega release ships on Friday.\n")
    (brain / "inbox" / "omega.md").mkdir(parents=True)  # where Omega's file would go
    done = run_import(brain, notes)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert json.loads(done.stderr)["error"] == "cannot write 'inbox/omega.md': a directory of that name is in the way"
    assert files_of(brain) == before  # no index naming files that are not there, no Alpha, no temporary file
    assert "Alpha" not in live(brain)


def _no_model_env() -> dict[str, str]:
    import os

    return {key: value for key, value in os.environ.items() if not key.startswith("CONNECTOR_MODEL")}


@pytest.mark.parametrize("kind", ["chatgpt", "claude"])
def test_conversations_without_a_model_say_what_they_need_and_import_nothing(tmp_path: Path, kind: str) -> None:
    brain = tmp_path / "brain"
    imported_ok(brain, samples.obsidian_vault(tmp_path))
    before = files_of(brain)
    document = samples.chatgpt_conversations() if kind == "chatgpt" else samples.claude_conversations()
    answer = refused(brain, samples.write_json(tmp_path / "conversations.json", document), env=_no_model_env())
    assert "needs a model" in answer["reasons"][0] and "CONNECTOR_MODEL_URL" in answer["reasons"][0]
    assert files_of(brain) == before


def test_chatgpt_and_claude_conversations_go_through_extraction_and_wait_for_verification(tmp_path: Path) -> None:
    brain = tmp_path / "brain"
    with fake_model(tmp_path) as (url, script, log):
        env = {**_no_model_env(), "CONNECTOR_MODEL_URL": url, "CONNECTOR_MODEL": "fake-llm",
               "CONNECTOR_MODEL_API_KEY": "sk-never-printed-0815"}
        script.write_text(json.dumps([{"content": samples.extraction(
            ("Moving to Lisbon in March", "decision", "Moving to Lisbon in March 2025 with the dog Bruno."),
            ("Bruno needs an EU pet passport", "goal", "Bruno the dog needs an EU pet passport from a vet."))}]))
        # ChatGPT's export is a zip with conversations.json among other files.
        export = tmp_path / "chatgpt-export.zip"
        with zipfile.ZipFile(export, "w") as archive:
            archive.writestr("conversations.json", json.dumps(samples.chatgpt_conversations()))
            archive.writestr("chat.html", "<html></html>")
            archive.writestr("user.json", "{}")
        report = imported_ok(brain, export, env=env)
        assert report["format"] == "chatgpt" and report["new"] == 2 and report["pending_verification"] == 2
        sent = [json.loads(line) for line in log.read_text().splitlines()]
        assert len(sent) == 1
        prompt = sent[0]["body"]["messages"][1]["content"]
        assert "User: I'm moving to Lisbon in March with my dog Bruno." in prompt
        assert "Assistant: You can get one from an authorised vet." in prompt
        assert "EDITED AWAY BRANCH" not in prompt and "You are ChatGPT." not in prompt
        assert prompt.index("moving to Lisbon") < prompt.index("EU pet passport")

        script.write_text(json.dumps([{"content": samples.extraction(
            ("Desk height 72 cm", "observation", "The desk is 72 cm high; a standing height of about 110 cm suits."))}]))
        report = imported_ok(brain, samples.write_json(tmp_path / "conversations.json", samples.claude_conversations()),
                             env=env)
        assert report["format"] == "claude" and report["new"] == 1
        prompt = [json.loads(line) for line in log.read_text().splitlines()][-1]["body"]["messages"][1]["content"]
        assert "User: My desk is 72 cm high" in prompt and "Assistant: For your height" in prompt

        # A model failure (or an answer refused) writes nothing of the import.
        before = files_of(brain)
        # The server counts answers: the two served so far, then a good one, then one not JSON.
        good = {"content": samples.extraction(("A", "learning", "a fact"))}
        script.write_text(json.dumps([good, good, good, {"content": "not JSON at all"}]))
        two = samples.claude_conversations() + [{**samples.claude_conversations()[0], "uuid": "second",
                                                 "name": "Second chat"}]
        answer = refused(brain, samples.write_json(tmp_path / "two.json", two), "--from", "claude", env=env)
        assert "conversation 2 (Second chat)" in answer["reasons"][0] and "nothing was imported" in answer["reasons"][0]
        assert files_of(brain) == before
    memories = live(brain)
    lisbon = memories["Moving to Lisbon in March"]
    assert lisbon["origin"] == "external" and lisbon["quarantined"] is True
    assert "source:moving-to-lisbon" in lisbon["tags"] and lisbon["path"].startswith("imported/chatgpt/")
    assert "imported from chatgpt-export.zip (ChatGPT conversation 'Moving to Lisbon'" in lisbon["text"]
    desk = memories["Desk height 72 cm"]
    assert desk["origin"] == "external" and "Claude conversation 'Standing desk setup', 2024-06-10" in desk["text"]
    assert "sk-never-printed-0815" not in json.dumps(memories)


def test_a_file_or_folder_over_the_size_limit_is_refused_before_it_is_read_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # One file given by itself was read whole, however large: /dev/zero filled the memory.
    from connector.imports import files
    from connector.imports.errors import ImportRefused

    monkeypatch.setattr(files, "MAX_EXPANDED_BYTES", 1000)
    big = tmp_path / "big.md"
    big.write_bytes(b"a" * 1001)
    with pytest.raises(ImportRefused, match="larger than"):
        files.Upload.of_path(big)
    with pytest.raises(ImportRefused, match="larger than"):
        files.Upload.of_path(Path("/dev/zero"))  # its size says 0; reading stops after the limit
    big.write_bytes(b"a" * 1000)
    assert files.Upload.of_path(big).entries == {"big.md": b"a" * 1000}
    folder = tmp_path / "vault"
    folder.mkdir()
    (folder / "one.md").write_bytes(b"a" * 600)
    (folder / "two.md").write_bytes(b"a" * 600)
    with pytest.raises(ImportRefused, match="more than"):
        files.Upload.of_path(folder)


def test_an_import_supersedes_only_memories_it_brings(tmp_path: Path) -> None:
    brain = tmp_path / "brain"
    memorize = [{"title": "Boiler service", "type": "observation", "path": "home/", "origin": "user",
                 "content": "The boiler is serviced every October by the plumber on Elm Street."}]
    done = subprocess.run([console_script("brain-connector"), "memorize", str(brain), "--now", NOW, "--no-similar"],
                          input=json.dumps(memorize), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    held = live(brain)["Boiler service"]["id"]
    # An export of another brain: a new version superseding an old one of the file (kept), and
    # links naming a memory of the target brain the file does not hold (dropped, reported).
    document = {"format": "brain-store/memories", "version": 1, "memories": [
        {"id": "mem_20250101_aaaaaa", "title": "Bike plan v1", "type": "learning", "path": "notes/", "origin": "user",
         "content": "Ride the old bike to work on Mondays."},
        {"id": "mem_20250102_bbbbbb", "title": "Bike plan v2", "type": "learning", "path": "notes/", "origin": "user",
         "content": "Ride the new bike to work on Mondays and Fridays.", "supersedes": ["mem_20250101_aaaaaa", held]},
        {"id": "mem_20250103_cccccc", "title": "Boiler moved", "type": "learning", "path": "home/", "origin": "user",
         "content": "Nothing is serviced any more.", "supersedes": [held]},
    ]}
    source = samples.write_json(tmp_path / "other-brain.json", document)
    dropped = [f"Bike plan v2: 'supersedes' names {held}, a memory of this brain the file does not hold; "
               "that link was dropped",
               f"Boiler moved: 'supersedes' names {held}, a memory of this brain the file does not hold; "
               "that link was dropped"]
    dry = imported_ok(brain, source, "--dry-run")
    assert dry["new"] == 3 and dry["passed_over"] == dropped, dry
    report = imported_ok(brain, source)
    assert report["passed_over"] == dropped and not any(item.get("superseded") == [held] for item in report["stored"])
    memories = live(brain)
    # The brain's own memory is still the live one recall serves: nothing of the file replaced it.
    assert "superseded_by" not in memories["Boiler service"] and "valid_until" not in memories["Boiler service"]
    assert "superseded_by" not in live(brain)["Boiler service"]["text"]
    new_v1, new_v2 = memories["Bike plan v1"]["id"], memories["Bike plan v2"]["id"]
    assert memories["Bike plan v1"]["superseded_by"] == new_v2  # a link within the file still works
    assert memories["Bike plan v2"]["supersedes"] == [new_v1]
    assert "supersedes" not in memories["Boiler moved"]
