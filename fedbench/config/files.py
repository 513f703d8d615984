"""Checks of a config file that run when the workflow starts, before any job, each stopping at
the first problem with one line that names the entry, the problem and the valid choices:

* :func:`load_yaml_strict`: the YAML itself, rejecting a key repeated in one mapping (PyYAML
  keeps the last silently) with both line numbers;
* :func:`check_schema`: structure and types against ``workflow/schemas/config.schema.yaml``,
  reduced to one line (an unknown key gets a did-you-mean suggestion); the schema's full
  report is kept for the log;
* :func:`check_finite`: no NaN or infinite number anywhere (YAML's ``.nan``, ``.inf``), and no value
  that contains itself (a recursive YAML anchor, ``loop: &loop [0, *loop]``);
* :func:`normalise_config`: what a command line or a shell would have meant, made explicit before
  the checks: ``--config check_data=false`` (Snakemake passes the string ``'false'``) read as the
  boolean, ``~`` and ``$VARS`` in ``results`` and ``data_root`` expanded.

A YAML file fedbench reads itself (:func:`load_yaml_strict`: ``make cost``, the claims report, the
check of every ``--configfile``) that cannot be parsed (a tab in the indentation) is one line with
its line number; a ``--configfile`` Snakemake cannot parse stops in Snakemake itself, before any of
fedbench's code runs, with Snakemake's own message (``Config file is not valid JSON or YAML``).

The semantic checks (names, parameter values, grids, published links) are
:func:`fedbench.planning.validate.check_config`.
"""

from __future__ import annotations

import difflib
import functools
import math
import os
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
    """The YAML file at ``path``; :class:`ConfigFileError` (one line) if a mapping repeats a key or
    the file is not YAML (e.g. a tab in the indentation), naming the line."""
    with open(path) as f:
        try:
            return yaml.load(f, Loader=_StrictLoader)
        except yaml.MarkedYAMLError as error:
            mark = error.problem_mark or error.context_mark
            line = f" line {mark.line + 1}" if mark is not None else ""
            tab = "; YAML indents with spaces, never tabs" if "\t" in (error.problem or "") or "tab" in str(error) else ""
            raise ConfigFileError(f"{path}:{line}: not valid YAML ({error.problem or error.context}){tab}") from None


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


@functools.lru_cache(maxsize=4)
def _schema(path: str) -> dict:
    """The schema file at ``path``, read once per process (callers do not change it)."""
    with open(path) as f:
        return yaml.safe_load(f)


def training_problem(key: str, value, schema_path: str | Path = SCHEMA) -> str | None:
    """Why ``value`` is not a valid ``training.<key>`` by the schema (``0 is less than the minimum of 1``), or ``None``."""
    import jsonschema

    training = _schema(str(schema_path))["properties"]["experiments"]["additionalProperties"]["properties"]["training"]["properties"]
    if key not in training:
        return None
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(training[key]).iter_errors(value))
    return None if error is None else error.message


# ---- numbers -------------------------------------------------------------------------------


def check_finite(node, where: str = "", _inside: tuple = ()) -> None:
    """Raise :class:`ConfigFileError` naming the first NaN or infinite number in the config, or the
    first value that contains itself (a recursive YAML anchor)."""
    if isinstance(node, float) and not math.isfinite(node):
        raise ConfigFileError(f"{where or 'top level'}: {node} is not a finite number")
    if not isinstance(node, (dict, list)):
        return
    if any(node is outer for outer in _inside):
        raise ConfigFileError(f"{where}: a recursive YAML anchor (the value contains itself); "
                              "give a plain value or an anchor that does not refer to itself")
    inside = (*_inside, node)
    items = node.items() if isinstance(node, dict) else enumerate(node)
    for key, value in items:
        check_finite(value, f"{where}[{key}]" if isinstance(node, list) else (f"{where}.{key}" if where else str(key)), inside)


# ---- what the command line meant -----------------------------------------------------------

TRUE, FALSE = ("true", "yes", "on"), ("false", "no", "off")
EXPANDED_PATHS = ("results", "data_root")


def normalise_config(config: dict, schema_path: str | Path = SCHEMA) -> dict:
    """``config`` in place, and returned: a top-level boolean given as a string (``--config
    check_data=false``: Snakemake reads only ``True``/``False`` as booleans) as the boolean, where
    it is one of true/yes/on/false/no/off (any case), else :class:`ConfigFileError` showing the spelling;
    ``~`` and ``$VARS`` in :data:`EXPANDED_PATHS` expanded as a shell would."""
    properties = _schema(str(schema_path)).get("properties", {})
    for key, value in config.items():
        if properties.get(key, {}).get("type") == "boolean" and isinstance(value, str):
            if value.lower() not in TRUE + FALSE:
                raise ConfigFileError(f"{key}: {value!r} is not a boolean; write true or false (also yes/no, on/off: "
                                      f"--config {key}=false)")
            config[key] = value.lower() in TRUE
    for key in EXPANDED_PATHS:
        if isinstance(config.get(key), str):
            config[key] = os.path.expanduser(os.path.expandvars(config[key]))
    return config
