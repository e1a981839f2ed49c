"""Typed reading of a YAML node tree, collecting every mistake with its position.

The topology parser reads pyyaml's composed nodes rather than plain Python data so
that each error can name the exact line and column of the node it is about, and so
that all errors of a file are reported at once instead of the first one only.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

import yaml
from yaml.constructor import SafeConstructor

from mwrun.errors import Diagnostic

_constructor = SafeConstructor()


@dataclass(frozen=True)
class Pos:
    """Where a node starts in its file (0-based, printed 1-based)."""

    source: str
    line: int
    column: int

    def diagnostic(self, message: str) -> Diagnostic:
        return Diagnostic(self.source, self.line, self.column, message)


def _kind(node: yaml.Node) -> str:
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    value = scalar_value(node)
    if value is None:
        return "nothing (null)"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string"}.get(
        type(value), type(value).__name__
    )


def scalar_value(node: yaml.ScalarNode):
    """The Python value of a scalar node, resolved like yaml.safe_load would."""
    return _constructor.construct_object(node, deep=True)


class Reader:
    """Reads nodes of one file; every check records a diagnostic and returns None."""

    def __init__(self, source: str):
        self.source = source
        self.diagnostics: list[Diagnostic] = []

    def pos(self, node: yaml.Node) -> Pos:
        return Pos(self.source, node.start_mark.line, node.start_mark.column)

    def error(self, node: yaml.Node, message: str) -> None:
        self.diagnostics.append(self.pos(node).diagnostic(message))

    def mapping(self, node: yaml.Node, what: str) -> dict[str, tuple[yaml.Node, yaml.Node]] | None:
        """Key -> (key node, value node); reports non-string and duplicate keys."""
        if not isinstance(node, yaml.MappingNode):
            self.error(node, f"{what} must be a mapping, not {_kind(node)}")
            return None
        items: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        for key_node, value_node in node.value:
            key = scalar_value(key_node) if isinstance(key_node, yaml.ScalarNode) else None
            if not isinstance(key, str | int) or isinstance(key, bool):
                self.error(key_node, f"{what}: keys must be names, not {_kind(key_node)}")
                continue
            key = str(key)
            if key in items:
                first = items[key][0].start_mark.line + 1
                self.error(key_node, f"{what}: duplicate key '{key}' (first given on line {first})")
                continue
            items[key] = (key_node, value_node)
        return items

    def known_keys(self, items: dict, allowed: tuple[str, ...], what: str) -> None:
        for key, (key_node, _) in items.items():
            if key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1)
                known = ", ".join(allowed)
                hint = f"; did you mean '{close[0]}'?" if close else f"; known keys: {known}"
                self.error(key_node, f"{what}: unknown key '{key}'{hint}")

    def _scalar(self, node: yaml.Node, what: str, expected: str):
        if not isinstance(node, yaml.ScalarNode):
            self.error(node, f"{what} must be {expected}, not {_kind(node)}")
            return None, False
        return scalar_value(node), True

    def string(self, node: yaml.Node, what: str) -> str | None:
        value, ok = self._scalar(node, what, "a string")
        if not ok:
            return None
        if isinstance(value, bool) or value is None or isinstance(value, dict | list):
            self.error(node, f"{what} must be a string, not {_kind(node)}")
            return None
        return str(value)

    def integer(self, node: yaml.Node, what: str, minimum: int | None = None,
                maximum: int | None = None) -> int | None:
        value, ok = self._scalar(node, what, "a whole number")
        if not ok:
            return None
        if not isinstance(value, int) or isinstance(value, bool):
            self.error(node, f"{what} must be a whole number, not {_kind(node)}")
            return None
        return self._within(node, what, value, minimum, maximum)

    def number(self, node: yaml.Node, what: str, minimum: float | None = None,
               positive: bool = False) -> float | None:
        value, ok = self._scalar(node, what, "a number")
        if not ok:
            return None
        if not isinstance(value, int | float) or isinstance(value, bool) or value != value:
            self.error(node, f"{what} must be a number, not {_kind(node)}")
            return None
        if positive and value <= 0:
            self.error(node, f"{what} must be more than 0, not {value}")
            return None
        return self._within(node, what, float(value), minimum, None)

    def _within(self, node, what, value, minimum, maximum):
        if minimum is not None and value < minimum:
            self.error(node, f"{what} must be at least {minimum}, not {value}")
            return None
        if maximum is not None and value > maximum:
            self.error(node, f"{what} must be at most {maximum}, not {value}")
            return None
        return value

    def boolean(self, node: yaml.Node, what: str) -> bool | None:
        value, ok = self._scalar(node, what, "true or false")
        if not ok:
            return None
        if not isinstance(value, bool):
            self.error(node, f"{what} must be true or false, not {_kind(node)}")
            return None
        return value

    def choice(self, node: yaml.Node, what: str, choices: tuple[str, ...]) -> str | None:
        value = self.string(node, what)
        if value is None:
            return None
        if value not in choices:
            self.error(node, f"{what} must be one of {' | '.join(choices)}, not '{value}'")
            return None
        return value

    def sequence(self, node: yaml.Node, what: str) -> list[yaml.Node] | None:
        if not isinstance(node, yaml.SequenceNode):
            self.error(node, f"{what} must be a list, not {_kind(node)}")
            return None
        return list(node.value)


MAX_DEPTH = 32  # a topology nests 5 deep; pyyaml's composer recurses once per level


def _too_deep(text: str, source: str) -> Diagnostic | None:
    """The first node nested deeper than MAX_DEPTH. The event parsers (libyaml's, or
    pyyaml's) keep their own stack, so this walk cannot overflow where composing the
    nodes would."""
    depth = 0
    for event in yaml.parse(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                mark = event.start_mark
                return Diagnostic(source, mark.line, mark.column,
                                  f"nested more than {MAX_DEPTH} levels deep")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
    return None


def compose(text: str, source: str) -> tuple[yaml.Node | None, list[Diagnostic]]:
    """Parse YAML text into a node tree; a syntax error becomes one diagnostic."""
    try:
        deep = _too_deep(text, source)
        if deep is not None:
            return None, [deep]
        return yaml.compose(text, Loader=yaml.SafeLoader), []
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "invalid YAML"
        line, column = (mark.line, mark.column) if mark else (0, 0)
        return None, [Diagnostic(source, line, column, f"YAML syntax error: {problem}")]
    except yaml.YAMLError as exc:
        return None, [Diagnostic(source, 0, 0, f"YAML error: {exc}")]
