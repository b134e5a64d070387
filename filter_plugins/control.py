"""The one rule for text that reaches a file or a command line: no control characters.

Every string the stack writes into a shell script (train.sh, train.env, the profile.d scripts),
a systemd unit, an INI or YAML config (pip.conf, .condarc), an ldconfig file or a command line
is one line of text. A newline (or a carriage return, NUL, tab, escape, ...) in a value would end
the line it sits on, so what follows it would be read as a line of its own: a shell command, a
unit directive, a config key. So no value may hold one, and the rule is checked once, at input
validation, for every option of every role (roles/preflight/tasks/inputs.yml):

- ``control_character_problems(value, name)``: what is wrong with a variable, one item per
  offending string (the variable itself, a list element ``name[1]``, a mapping's key or value
  ``name.KEY``, nested as deep as it goes); empty when all is well. The value itself is not
  repeated (a URL may carry a token): the message names the variable, the character and where.
- ``one_line(value, name)``: the value as text, for a template line that cannot quote it (an INI
  or unit line); a control character stops the template naming the variable.

A control character is any of C0 (U+0000 to U+001F, tab included), DEL, C1 (U+0080 to U+009F)
and the Unicode line and paragraph separators (U+2028, U+2029), which some readers take for line
ends. No path, name, URL or setting of the stack needs one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")

_NAMES = {
    "\n": "a newline (\\n)",
    "\r": "a carriage return (\\r)",
    "\t": "a tab (\\t)",
    "\x00": "a NUL (\\0)",
    "\x1b": "an escape (\\x1b)",
}

WHY = (
    "such a character would end the line the value lands on in a script, a systemd unit, a config file or a "
    "command line, and the rest would be read as a command or a setting of its own"
)


def control_character(text: str) -> str | None:
    """What the first control character in text is and where, or None when there is none."""
    match = CONTROL.search(text)
    if match is None:
        return None
    char = match.group()
    what = _NAMES.get(char, "the control character U+%04X" % ord(char))
    return "%s at character %d" % (what, match.start() + 1)


def control_character_problems(value: Any, name: str = "the value") -> list[str]:
    """One message per string in value (keys and elements too) that holds a control character."""
    problems: list[str] = []
    _walk(value, str(name), problems)
    return problems


def _walk(value: Any, where: str, problems: list[str]) -> None:
    if isinstance(value, str):
        found = control_character(value)
        if found:
            problems.append("%s holds %s" % (where, found))
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(key, str):
                found = control_character(key)
                if found:
                    problems.append("a key of %s (%s) holds %s" % (where, ascii(key), found))
            _walk(item, "%s.%s" % (where, key), problems)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for number, item in enumerate(value):
            _walk(item, "%s[%d]" % (where, number), problems)


def path_spelling_problems(value: Any, name: str = "the value") -> list[str]:
    """For a path option: a trailing '/', a '//' or a '/./' in it. Such a spelling names the same
    directory, but not the same string: `dirname` of '/opt/x/' is '/opt/x', and '<prefix>.partial'
    of '/opt/x/' lies inside the prefix. A role cannot rewrite a value given with -e (extra vars
    outrank everything it could set), so the input is refused with its normal spelling instead."""
    if not isinstance(value, str) or not value.startswith("/") or value == "/":
        return []
    normal = "/" + "/".join(part for part in value.split("/") if part not in ("", "."))
    if normal == value:
        return []
    return ["%s is spelled '%s': write it as '%s'" % (name, value, normal)]


def one_line(value: Any, name: str = "the value") -> str:
    """The value as text; a control character in it stops the template, naming the variable."""
    text = str(value)
    found = control_character(text)
    if found:
        raise AnsibleFilterError("%s holds %s: %s. Set it without that character." % (name, found, WHY))
    return text


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "control_character_problems": control_character_problems,
            "path_spelling_problems": path_spelling_problems,
            "one_line": one_line,
        }
