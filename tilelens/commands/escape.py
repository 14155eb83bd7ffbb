"""Control characters in human output are shown, never sent to the terminal.

Everything the CLI prints for people comes from histories and programs nobody vetted: tags, argv, kernel
names and files, error messages, source lines, SQL results. A stored ``ESC [2J`` or ``ESC ]0;title BEL``
would clear the screen or retitle the window if printed raw, and a stray carriage return can hide text.
So every renderer passes such text through :func:`escape`: C0 controls, DEL and C1 controls (the
``Cc`` category) become ``\\x1b``-style escapes (``\\n``, ``\\r``, ``\\t`` for the usual three), and the
Unicode controls that reorder or break lines (bidi embeddings, overrides and isolates, U+2028/2029) become
``\\u202e``-style escapes. The result is a single line that shows exactly which characters were stored.

Machine output stays exact: ``--json`` (JSON escapes control characters itself), ``sql --format csv`` and
``export`` write the stored text unchanged. ``sql --format csv`` escapes only when its stdout is a terminal.
"""

from __future__ import annotations

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_UNICODE_CONTROLS = [0x061C, 0x200E, 0x200F, 0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]


def _table() -> dict[int, str]:
    table: dict[int, str] = {}
    for code in [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)]:
        ch = chr(code)
        table[code] = _NAMED.get(ch, f"\\x{code:02x}")
    for code in _UNICODE_CONTROLS:
        table[code] = f"\\u{code:04x}"
    return table


_ESCAPES = _table()


def escape(text: str) -> str:
    """``text`` with every control character written as an escape; other text unchanged."""
    return text.translate(_ESCAPES)


def escape_lines(text: str) -> list[str]:
    """The lines of a multi-line message (a traceback, say), each escaped: for text meant to span lines."""
    return [escape(line) for line in text.split("\n")]
