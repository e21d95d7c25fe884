"""A real LSP client (pygls's LanguageClient, from PyPI) driving `fabro lsp` over stdio, for
tests/integration/lsp.rs. Usage: client.py SCENARIO FABRO WORKFLOW_FILE

It opens WORKFLOW_FILE's text as a buffer (the file on disk is not what the server reads), runs
one scenario, and prints what the server answered as JSON on stdout; the Rust tests assert on it.
"""

import asyncio
import json
import os
import subprocess
import sys
import time

from lsprotocol import types as t
from pygls.lsp.client import LanguageClient

TIMEOUT = 20


def apply_edits(text, edits):
    """Applies LSP text edits (UTF-16 positions; the tests' text is ASCII) to text."""
    lines = text.split("\n")
    starts = [0]
    for line in lines[:-1]:
        starts.append(starts[-1] + len(line) + 1)

    def offset(position):
        if position.line >= len(starts):
            return len(text)
        return min(starts[position.line] + position.character, len(text))

    for edit in sorted(edits, key=lambda e: offset(e.range.start), reverse=True):
        text = text[: offset(edit.range.start)] + edit.new_text + text[offset(edit.range.end) :]
    return text


def diagnostic_json(d):
    return {
        "code": d.code,
        "severity": int(d.severity) if d.severity else None,
        "line": d.range.start.line,
        "character": d.range.start.character,
        "end_line": d.range.end.line,
        "end_character": d.range.end.character,
        "message": d.message,
        "source": d.source,
    }


class Session:
    def __init__(self, fabro, path):
        self.fabro = fabro
        self.path = os.path.abspath(path)
        self.uri = "file://" + self.path
        self.text = open(self.path).read()
        self.version = 1
        self.client = LanguageClient("fabro-lsp-test", "1")
        self.published = []
        self.changed = asyncio.Event()
        self.registrations = []

        @self.client.feature(t.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def on_diagnostics(params):
            self.published.append(params)
            self.changed.set()

        @self.client.feature(t.CLIENT_REGISTER_CAPABILITY)
        def on_register(params):
            self.registrations.extend(params.registrations)
            return None

    async def start(self, capabilities=None):
        await self.client.start_io(self.fabro, "lsp", "--stdio")
        result = await asyncio.wait_for(
            self.client.initialize_async(
                t.InitializeParams(
                    capabilities=capabilities or t.ClientCapabilities(),
                    process_id=os.getpid(),
                    root_uri="file://" + os.path.dirname(self.path),
                )
            ),
            TIMEOUT,
        )
        self.client.initialized(t.InitializedParams())
        self.client.text_document_did_open(
            t.DidOpenTextDocumentParams(
                text_document=t.TextDocumentItem(uri=self.uri, language_id="dot", version=1, text=self.text)
            )
        )
        return result

    async def diagnostics(self, version, after=0):
        """The diagnostics published for `version` of the buffer, the last of those published
        after the first `after` publications (waits for them)."""
        deadline = time.monotonic() + TIMEOUT
        while True:
            for params in reversed(self.published[after:]):
                if params.uri == self.uri and params.version == version:
                    return params.diagnostics
            self.changed.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no diagnostics for version {version}")
            try:
                await asyncio.wait_for(self.changed.wait(), remaining)
            except asyncio.TimeoutError:
                pass

    def change(self, text):
        self.version += 1
        self.text = text
        self.client.text_document_did_change(
            t.DidChangeTextDocumentParams(
                text_document=t.VersionedTextDocumentIdentifier(uri=self.uri, version=self.version),
                content_changes=[t.TextDocumentContentChangeWholeDocument(text=text)],
            )
        )

    def doc(self):
        return t.TextDocumentIdentifier(uri=self.uri)

    def at(self, needle, plus=0, occurrence=0):
        """The position of the `occurrence`-th `needle` in the buffer, `plus` characters in."""
        offset = -1
        for _ in range(occurrence + 1):
            offset = self.text.index(needle, offset + 1)
        offset += plus
        line = self.text.count("\n", 0, offset)
        character = offset - (self.text.rfind("\n", 0, offset) + 1)
        return t.Position(line=line, character=character)

    async def stop(self):
        await asyncio.wait_for(self.client.shutdown_async(None), TIMEOUT)
        self.client.exit(None)
        server = self.client._server
        code = await asyncio.wait_for(server.wait(), TIMEOUT)
        await self.client.stop()
        return code


async def diagnostics(session):
    first = [diagnostic_json(d) for d in await session.diagnostics(1)]
    # A broken statement typed above the typo: the syntax error, and the typo still found.
    broken = session.text.replace("  plan [", "  oops -> ;\n  plan [", 1)
    session.change(broken)
    started = time.monotonic()
    after = [diagnostic_json(d) for d in await session.diagnostics(session.version)]
    return {"opened": first, "broken": after, "seconds": time.monotonic() - started}


async def quick_fix(session):
    found = await session.diagnostics(1)
    typo = next(d for d in found if d.code == "unknown_attribute")
    actions = await session.client.text_document_code_action_async(
        t.CodeActionParams(text_document=session.doc(), range=typo.range, context=t.CodeActionContext(diagnostics=[typo]))
    )
    action = next(a for a in actions if "max_retries" in a.title)
    fixed = apply_edits(session.text, action.edit.changes[session.uri])
    session.change(fixed)
    after = [diagnostic_json(d) for d in await session.diagnostics(session.version)]
    return {"titles": [a.title for a in actions], "fixed": fixed, "after": after}


async def hover(session):
    await session.diagnostics(1)
    out = {}
    for name, needle, plus in [
        ("attribute", "max_retires", 2),
        ("known_attribute", "goal_gate", 2),
        ("shape", "parallelogram", 3),
        ("node", "plan [", 1),
        ("condition", "outcome=fail", 2),
    ]:
        result = await session.client.text_document_hover_async(
            t.HoverParams(text_document=session.doc(), position=session.at(needle, plus))
        )
        out[name] = result.contents.value if result else None
    return out


async def complete(session):
    await session.diagnostics(1)
    original = session.text
    out = {}
    for name, insert in [
        ("attribute", "  plan2 [max_"),
        ("shape", "  plan2 [shape="),
        ("sandbox", "  plan2 [sandbox=\""),
        ("target", "  plan -> "),
        ("condition", "  plan -> exit [condition=\""),
    ]:
        text = original.replace("\n}", "\n" + insert + "\n}", 1)
        session.change(text)
        position = session.at(insert, len(insert))
        result = await session.client.text_document_completion_async(
            t.CompletionParams(text_document=session.doc(), position=position)
        )
        items = result.items if isinstance(result, t.CompletionList) else result
        out[name] = [item.label for item in items or []]
    return out


async def navigate(session):
    await session.diagnostics(1)
    definition = await session.client.text_document_definition_async(
        t.DefinitionParams(text_document=session.doc(), position=session.at("-> plan", 4))
    )
    references = await session.client.text_document_references_async(
        t.ReferenceParams(
            text_document=session.doc(),
            position=session.at("plan [", 1),
            context=t.ReferenceContext(include_declaration=True),
        )
    )
    prompt_file = await session.client.text_document_definition_async(
        t.DefinitionParams(text_document=session.doc(), position=session.at("@plan.md", 2))
    )
    child = await session.client.text_document_definition_async(
        t.DefinitionParams(text_document=session.doc(), position=session.at("child.dot", 2))
    )
    symbols = await session.client.text_document_document_symbol_async(
        t.DocumentSymbolParams(text_document=session.doc())
    )
    prepared = await session.client.text_document_prepare_rename_async(
        t.PrepareRenameParams(text_document=session.doc(), position=session.at("plan [", 1))
    )
    rename = await session.client.text_document_rename_async(
        t.RenameParams(text_document=session.doc(), position=session.at("plan [", 1), new_name="design")
    )
    renamed = apply_edits(session.text, rename.changes[session.uri])
    session.change(renamed)
    after = [diagnostic_json(d) for d in await session.diagnostics(session.version)]

    def location(value):
        value = value[0] if isinstance(value, list) else value
        return {"uri": value.uri, "line": value.range.start.line, "character": value.range.start.character}

    return {
        "definition": location(definition),
        "references": [location(r) for r in references],
        "prompt_file": location(prompt_file),
        "child": location(child),
        "symbols": [[s.name, s.detail] for s in symbols],
        "prepared": prepared.placeholder if hasattr(prepared, "placeholder") else None,
        "renamed": renamed,
        "after": after,
    }


async def format_document(session):
    await session.diagnostics(1)
    edits = await session.client.text_document_formatting_async(
        t.DocumentFormattingParams(text_document=session.doc(), options=t.FormattingOptions(tab_size=4, insert_spaces=True))
    )
    formatted = apply_edits(session.text, edits or [])
    session.change(formatted)
    again = await session.client.text_document_formatting_async(
        t.DocumentFormattingParams(text_document=session.doc(), options=t.FormattingOptions(tab_size=4, insert_spaces=True))
    )
    return {"formatted": formatted, "edits_again": len(again or [])}


async def garbage(session):
    """Garbage typed into the buffer: the server keeps answering."""
    await session.diagnostics(1)
    for junk in ["\x00\x01{{{", "digraph {", "\"" * 7, "digraph w { a -> -> }", "😀" * 50, ""]:
        session.change(junk)
        await session.diagnostics(session.version)
        await session.client.text_document_hover_async(
            t.HoverParams(text_document=session.doc(), position=t.Position(line=0, character=3))
        )
        await session.client.text_document_completion_async(
            t.CompletionParams(text_document=session.doc(), position=t.Position(line=0, character=2))
        )
    return {"alive": True}


WATCHING = t.ClientCapabilities(
    workspace=t.WorkspaceClientCapabilities(
        did_change_watched_files=t.DidChangeWatchedFilesClientCapabilities(dynamic_registration=True)
    )
)


async def watched_files(session):
    """A client that watches files for the server: a settings layer written beside the workflow
    (reported changed as the client would) is in the buffer's findings, the buffer unchanged."""
    before = [d.code for d in await session.diagnostics(1)]
    published = len(session.published)
    layer = os.path.join(os.path.dirname(session.path), "workflow.toml")
    with open(layer, "w") as file:
        file.write("[run]\ngaol = \"Ship it\"\n")
    session.client.workspace_did_change_watched_files(
        t.DidChangeWatchedFilesParams(changes=[t.FileEvent(uri="file://" + layer, type=t.FileChangeType.Created)])
    )
    after = await session.diagnostics(1, after=published)
    return {
        "registered": [r.method for r in session.registrations],
        "watchers": [w["globPattern"] for r in session.registrations for w in (r.register_options or {}).get("watchers", [])],
        "before": before,
        "after": [d.code for d in after],
        "settings_message": next((d.message for d in after if d.code == "settings"), None),
    }


SCENARIOS = {
    "diagnostics": diagnostics,
    "quick_fix": quick_fix,
    "hover": hover,
    "complete": complete,
    "navigate": navigate,
    "format": format_document,
    "garbage": garbage,
    "watched_files": watched_files,
}


async def main(scenario, fabro, path):
    if scenario == "client_gone":
        # The client dies without shutdown or exit: its end of stdin closes, and the server goes.
        server = subprocess.Popen([fabro, "lsp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"capabilities": {}, "processId": None}})
        server.stdin.write(f"Content-Length: {len(body)}\r\n\r\n{body}".encode())
        server.stdin.flush()
        server.stdin.close()
        started = time.monotonic()
        code = server.wait(timeout=TIMEOUT)
        return {"exit_code": code, "seconds": time.monotonic() - started}
    session = Session(fabro, path)
    initialized = await session.start(WATCHING if scenario == "watched_files" else None)
    result = await SCENARIOS[scenario](session)
    result["server_name"] = initialized.server_info.name if initialized.server_info else None
    result["exit_code"] = await session.stop()
    return result


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(*sys.argv[1:4]))))
