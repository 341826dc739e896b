"""Final-answer extraction and cheap string normalisation (pure string functions, no sympy).

``extract_answer`` finds the last complete ``\\boxed{…}`` / ``\\fbox{…}`` (nested braces allowed);
without one, the rest of the line after the last ``Answer:``, ``####`` or ``final answer is``.
Scanning is linear: no backtracking regexes run on model output.
"""

from __future__ import annotations

import re
from decimal import Decimal

_BOX_COMMANDS = ("\\boxed", "\\fbox")
_MARKER = re.compile(r"answer\s*:|####|final answer is\s*:?", re.IGNORECASE)
_SPACING = re.compile(r"\\[,;:! ]|\\left|\\right|\\displaystyle|\s+")
_THOUSANDS = re.compile(r"-?\d{1,3}(,\d{3})+(\.\d+)?")
_INTEGER = re.compile(r"-?\d+")
_DECIMAL = re.compile(r"-?(\d+\.?\d*|\.\d+)")


def _braced(text: str, start: int) -> int | None:
    """Index just past the ``}`` matching the ``{`` at ``start`` (escaped braces skipped), or None."""
    depth = 0
    i = start
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


def _boxed_contents(text: str) -> list[tuple[int, str]]:
    """(position, content) of every complete boxed expression in ``text``."""
    found = []
    for command in _BOX_COMMANDS:
        pos = text.find(command)
        while pos != -1:
            i = pos + len(command)
            if i < len(text) and (text[i].isalpha()):  # e.g. \boxedx is another command
                pos = text.find(command, i)
                continue
            while i < len(text) and text[i] == " ":
                i += 1
            if i < len(text) and text[i] == "{":
                end = _braced(text, i)
                if end is not None:
                    found.append((pos, text[i + 1:end - 1]))
            elif i > pos + len(command):  # "\boxed 5": the next token
                j = i
                while j < len(text) and not text[j].isspace() and text[j] not in "$.,":
                    j += 1
                if j > i:
                    found.append((pos, text[i:j]))
            pos = text.find(command, pos + len(command))
    return found


def _clean_marker_answer(rest: str) -> str:
    line = rest.strip().splitlines()[0] if rest.strip() else ""
    for _ in range(2):  # "**7**." and "$7$." alike
        line = line.strip().strip("*").strip().rstrip(".").strip()
    if line.startswith("$") and line.endswith("$") and len(line) > 1:
        line = line.strip("$").strip()
    return line.rstrip(".").strip()


def extract_answer(text: str | None) -> str | None:
    """The final answer stated in ``text``, or None when it states none."""
    if not text:
        return None
    boxed = _boxed_contents(text)
    if boxed:
        content = max(boxed)[1].strip()
        return content or None
    last = None
    for match in _MARKER.finditer(text):
        last = match
    if last is None:
        return None
    answer = _clean_marker_answer(text[last.end():])
    return answer or None


def normalize(answer: str) -> str:
    """A spelling of ``answer`` that only drops what never changes its meaning (spacing, ``$``,
    ``\\left``/``\\right``, ``\\dfrac``, thousands separators, a trailing period): equal normal
    forms mean equivalent answers."""
    s = _SPACING.sub("", answer)
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").replace("{,}", ",")
    s = s.strip("$").rstrip(".")
    if _THOUSANDS.fullmatch(s):
        s = s.replace(",", "")
    return s


def integer_value(normalized: str) -> int | None:
    """The integer a normalised answer spells, if it is a plain (short) integer."""
    if len(normalized) <= 64 and _INTEGER.fullmatch(normalized):
        return int(normalized)
    return None


def decimal_value(normalized: str) -> Decimal | None:
    """The value of a normalised answer that is a plain (short) decimal number such as ``-2.50``."""
    if len(normalized) <= 40 and _DECIMAL.fullmatch(normalized):
        return Decimal(normalized)
    return None


def nesting_depth(text: str) -> int:
    """Deepest nesting of (), [] and {} in ``text`` (unbalanced closers are ignored)."""
    depth = best = 0
    for ch in text:
        if ch in "({[":
            depth += 1
            best = max(best, depth)
        elif ch in ")}]" and depth:
            depth -= 1
    return best
