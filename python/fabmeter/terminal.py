"""Text that came from a results file, an engine or a peer, made safe to print to a terminal: a control
character in it (C0 but for newline and tab in multi-line text, DEL, C1, Unicode's line separators and
bidirectional overrides) could clear the screen, set the window title, recolour the text, rewrite a line or
reorder it. Each is shown escaped instead (ESC as \\x1b, U+202E as \\u202e); every printable character, of
any script, is shown as is. Every place that prints such text calls it."""

from __future__ import annotations

import re

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_CONTROL_IN_LINES = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escaped(m: re.Match) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def shown(text: object) -> str:
    """`text` (str() of it) as one line with every control character escaped: a table cell, a name."""
    return _CONTROL.sub(_escaped, str(text))


def shown_lines(text: object) -> str:
    """`text` with every control character escaped but its newlines and tabs: a message of several lines."""
    return _CONTROL_IN_LINES.sub(_escaped, str(text))
