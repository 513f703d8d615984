"""Checks of a config file that run when the workflow starts, before any job, each stopping at
the first problem with one line that names the entry, the problem and the valid choices:

* :func:`load_yaml_strict`: the YAML itself, rejecting a key repeated in one mapping (PyYAML
  keeps the last silently) with both line numbers;
* :func:`check_schema`: structure and types against ``workflow/schemas/config.schema.yaml``,
  reduced to one line (an unknown key gets a did-you-mean suggestion); the schema's full
  report is kept for the log;
* :func:`check_finite`: no NaN or infinite number anywhere (YAML's ``.nan``, ``.inf``).

The semantic checks (names, parameter values, grids, published links) are
:func:`fedbench.planning.validate.check_config`.
"""

from __future__ import annotations

import difflib
import math
from pathlib import Path

import yaml

SCHEMA = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "config.schema.yaml"


class ConfigFileError(ValueError):
    """A config that cannot be read or does not fit the schema; ``detail`` is the full report."""

    def __init__(self, message: str, detail: str = ""):
        super().__init__(message)
        self.detail = detail or message


# ---- YAML without silent duplicates ------------------------------------------------------


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping."""


def _strict_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    loader.flatten_mapping(node)  # resolve "<<" merges first: merged keys may be overridden
    seen: dict = {}
    for key_node, _ in node.value:
        if id(key_node) in getattr(node, "_merged_keys", ()):
            continue  # brought in by a "<<" merge: the mapping's own key may override it
        key = loader.construct_object(key_node, deep=deep)
        line = key_node.start_mark.line + 1
        if key in seen:
            raise ConfigFileError(
                f"{key_node.start_mark.name}: key {key!r} appears twice in one mapping "
                f"(lines {seen[key]} and {line}); the second would silently replace the first"
            )
        seen[key] = line
    return loader.construct_mapping(node, deep=deep)


def _flatten_mapping(self, node):
    """PyYAML's merge handling, marking merged-in keys so they may be overridden without error."""
    own = {id(key_node) for key_node, _ in node.value}
    yaml.SafeLoader.flatten_mapping(self, node)
    merged = {id(key_node) for key_node, _ in node.value if id(key_node) not in own}
    if merged:
        node._merged_keys = merged


_StrictLoader.flatten_mapping = _flatten_mapping
_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _strict_mapping)


def load_yaml_strict(path: str | Path) -> dict:
    """The YAML file at ``path``; :class:`ConfigFileError` if a mapping repeats a key."""
    with open(path) as f:
        return yaml.load(f, Loader=_StrictLoader)


# ---- schema, one line ---------------------------------------------------------------------


def _path(error) -> str:
    parts = [f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path]
    return "".join(parts).lstrip(".") or "top level"


def _unknown_key_message(error) -> str | None:
    """``unknown key 'x' at <where>; did you mean 'y'? valid keys: ...`` for additionalProperties."""
    if error.validator != "additionalProperties" or not isinstance(error.instance, dict):
        return None
    known = list(error.schema.get("properties", {}))
    unknown = [key for key in error.instance if key not in known]
    if not unknown or not known:
        return None
    key = unknown[0]
    close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    where = _path(error)
    where = where if where == "top level" else f"'{where}'"
    return f"unknown key {key!r} at {where}{hint} (valid keys: {', '.join(known)})"


def check_schema(config: dict, schema_path: str | Path = SCHEMA) -> None:
    """Raise :class:`ConfigFileError` with one line for the most relevant schema violation."""
    import jsonschema

    with open(schema_path) as f:
        schema = yaml.safe_load(f)
    validator = jsonschema.Draft202012Validator(schema)
    errors = list(validator.iter_errors(config))
    if not errors:
        return
    error = jsonschema.exceptions.best_match(errors)
    message = _unknown_key_message(error) or f"{_path(error)}: {error.message}"
    if len(message) >= 300:  # one line under 300 characters
        message = message[:296] + "..."
    raise ConfigFileError(message, detail="\n\n".join(str(e) for e in errors))


# ---- numbers -------------------------------------------------------------------------------


def check_finite(node, where: str = "") -> None:
    """Raise :class:`ConfigFileError` naming the first NaN or infinite number in the config."""
    if isinstance(node, float) and not math.isfinite(node):
        raise ConfigFileError(f"{where or 'top level'}: {node} is not a finite number")
    if isinstance(node, dict):
        for key, value in node.items():
            check_finite(value, f"{where}.{key}" if where else str(key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            check_finite(value, f"{where}[{i}]")
