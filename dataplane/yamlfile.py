"""Reading railab's YAML files (topologies, experiments, workloads) the same way: the
file's problems and YAML's become one line naming the file, raised as the caller's
RailabError subclass; duplicate keys are refused (PyYAML would keep the last one)."""
from __future__ import annotations

from pathlib import Path

import yaml

from dataplane.errors import RailabError


def read_text(path: str | Path, error: type[RailabError], what: str = "YAML file") -> str:
    """The file's text; `what` names the kind of file in messages about a wrong one."""
    source = str(path)
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"{source}: file not found") from None
    except IsADirectoryError:
        raise error(f"{source}: is a directory, not {_a(what)}") from None
    except PermissionError:
        raise error(f"{source}: permission denied") from None
    except UnicodeDecodeError:
        raise error(f"{source}: not UTF-8 text, not {_a(what)}") from None
    except OSError as err:
        raise error(f"{source}: cannot read: {err.strerror}") from None


def _a(noun: str) -> str:
    return f"{'an' if noun[:1] in 'aeiou' else 'a'} {noun}"


# libyaml's parser (Debian's python3-yaml has it) reads a large lab about 10x faster than
# the pure-Python one; the constructor, which refuses duplicate keys, is the same either way.
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _StrictLoader(_SafeLoader):
    """The safe loader, refusing duplicate keys."""

    def construct_mapping(self, node, deep=False):
        seen: dict[object, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node.start_mark.line + 1)
            except TypeError:
                continue  # unhashable key: let PyYAML report it
            if first != key_node.start_mark.line + 1:
                raise _DuplicateKey(f"duplicate key {key!r} at line {key_node.start_mark.line + 1} "
                                    f"(first at line {first})")
        return super().construct_mapping(node, deep)


class _DuplicateKey(Exception):
    pass


def parse(text: str, source: str, error: type[RailabError]):
    """The YAML document in text (None if empty)."""
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - SafeLoader subclass
    except _DuplicateKey as err:
        raise error(f"{source}: {err}") from None
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = " ".join(str(err.problem or err.context or "syntax error").split())
        raise error(f"{source}: not valid YAML: {problem}{where}") from None
    except yaml.YAMLError as err:
        raise error(f"{source}: not valid YAML: {' '.join(str(err).split())}") from None


def load(path: str | Path, error: type[RailabError], what: str = "YAML file"):
    """The YAML document in the file at path."""
    return parse(read_text(path, error, what), str(path), error)
