"""Final-answer extraction and cheap string normalisation (pure string functions, no sympy).

``extract_answer`` finds the last complete ``\\boxed{…}`` / ``\\fbox{…}`` (nested braces allowed);
without one, the rest of the line after the last ``Answer:``, ``####`` or ``answer is`` (as in
"the final answer is 7", "so my answer is: 6"). ``mode="number"`` (for tasks with numeric answers)
keeps only a number: the last one on that line, or without any marker the last number of the text
("66 - 19 = 47"). Scanning is linear: no backtracking regexes run on model output.
"""

from __future__ import annotations

import re
from decimal import Decimal

_MARKER = re.compile(r"answer\s*:|####|answer is\s*:?", re.IGNORECASE)
# a number; a minus sign counts only where it cannot be a binary minus ("19-5" holds 19 and 5)
_NUMBER = re.compile(r"(?:(?<![\w)\]}])[-−])?\d+(?:,\d{3})*(?:\.\d+)?")
EXTRACTION_MODES = ("marked", "number")
_SPACING = re.compile(r"\\[,;:! ]|\\left|\\right|\\displaystyle|\s+")
_THOUSANDS = re.compile(r"-?\d{1,3}(,\d{3})+(\.\d+)?")
_INTEGER = re.compile(r"-?\d+")
_DECIMAL = re.compile(r"-?(\d+\.?\d*|\.\d+)")
# an escaped brace or backslash (skipped, as a pair) or a brace; other escapes cannot hide a brace
_BRACE_TOKEN = re.compile(r"\\[\\{}]|[{}]")
_BOX_COMMAND = re.compile(r"\\(?:boxed|fbox)")
_BARE_TOKEN = re.compile(r"[^\s$.,]*")  # the argument of "\\boxed 5": up to whitespace, $ . or ,


def _matching_braces(text: str) -> dict[int, int]:
    """Map each ``{`` index to the index just past its matching ``}`` (escaped braces skipped), in
    one linear pass, so that locating many boxes never rescans the text (issue 14, item 2)."""
    matches: dict[int, int] = {}
    open_at: list[int] = []
    for token in _BRACE_TOKEN.finditer(text):
        ch = token.group()
        if ch == "{":
            open_at.append(token.start())
        elif ch == "}" and open_at:  # unbalanced closers are ignored
            matches[open_at.pop()] = token.end()
    return matches


def _boxed_contents(text: str) -> list[tuple[int, int, int]]:
    """(position, content start, content end) of every complete boxed expression in ``text``.

    Linear in ``len(text)``: braces are matched once for the whole text, and spans (not copies)
    are returned, so nested or repeated unterminated boxes cost no rescans.
    """
    found: list[tuple[int, int, int]] = []
    matches: dict[int, int] | None = None
    n = len(text)
    for command in _BOX_COMMAND.finditer(text):
        pos, i = command.start(), command.end()
        if i < n and text[i].isalpha():  # e.g. \boxedx is another command
            continue
        while i < n and text[i] == " ":
            i += 1
        if i < n and text[i] == "{":
            if matches is None:
                matches = _matching_braces(text)
            end = matches.get(i)
            if end is not None:
                found.append((pos, i + 1, end - 1))
        elif i > command.end():  # "\boxed 5": the next token
            j = _BARE_TOKEN.match(text, i).end()
            if j > i:
                found.append((pos, i, j))
    return found


def _clean_marker_answer(rest: str) -> str:
    line = rest.strip().splitlines()[0] if rest.strip() else ""
    for _ in range(2):  # "**7**." and "$7$." alike
        line = line.strip().strip("*").strip().rstrip(".").strip()
    if line.startswith("$") and line.endswith("$") and len(line) > 1:
        line = line.strip("$").strip()
    return line.rstrip(".").strip()


def _last_number(text: str) -> str | None:
    last = None
    for match in _NUMBER.finditer(text):
        last = match
    return last.group().replace("−", "-").replace(",", "") if last else None


def extract_answer(text: str | None, mode: str = "marked") -> str | None:
    """The final answer stated in ``text``, or None when it states none.

    ``mode="marked"``: the last boxed expression, else the rest of the line after the last marker.
    ``mode="number"``: the last number of that answer, else (no box, no marker) the last number of
    the text.
    """
    if mode not in EXTRACTION_MODES:
        raise ValueError(f"extraction mode must be one of {EXTRACTION_MODES}, got {mode!r}")
    if not text:
        return None
    boxed = _boxed_contents(text)
    if boxed:
        _, begin, stop = max(boxed)
        answer = text[begin:stop].strip()
    else:
        last = None
        for match in _MARKER.finditer(text):
            last = match
        if last is None:
            return _last_number(text) if mode == "number" else None
        answer = _clean_marker_answer(text[last.end():])
    if mode == "number" and answer:
        return _last_number(answer)
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
