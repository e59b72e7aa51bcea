"""Memories brought from elsewhere (docs/import.md): one module per source format, pure logic.

Each reader turns the bytes of an upload (or the files of a folder) into `MemoryInput`
values with ``source`` saying where each came from; `plan.plan_import` then checks them
against the brain (the similar check's exact duplicates are skipped and reported), gives
them fresh ids and makes the one ``Memorize`` operation the web app and the command line
apply in one transaction. Nothing here does I/O beyond reading what it is given.
"""
