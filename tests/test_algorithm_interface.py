"""The algorithm interface: every optional hook declared once on ``Algorithm`` and checked when a
builder is registered, so a misspelt hook is an error instead of a feature silently switched off."""

from __future__ import annotations

import inspect
import typing
from dataclasses import dataclass

import pytest

from fedbench.algorithms import ALGORITHMS
from fedbench.algorithms.base import HOOKS, REQUIRED, Algorithm, check_algorithm_builder


@dataclass(frozen=True)
class _Minimal(Algorithm):
    def init(self, fed, initial):
        return {}

    def round(self, fed, state, round_):
        return state, None

    def client_models(self, fed, state, round_):
        return {}

    def global_model(self, fed, state):
        return None


def test_every_registered_builder_returns_an_algorithm_with_the_required_methods():
    for name in ALGORITHMS.names():
        cls = typing.get_type_hints(ALGORITHMS[name])["return"]
        assert issubclass(cls, Algorithm), name
        assert all(getattr(cls, m) is not getattr(Algorithm, m) for m in REQUIRED), name
        required = {k: "enc" for k, v in ALGORITHMS.parameters(name).items() if v is inspect.Parameter.empty}
        assert isinstance(ALGORITHMS[name](**required), cls), name  # FLT's encoder is the one required name


def test_hook_defaults_switch_their_feature_off():
    algorithm = _Minimal()
    assert [getattr(algorithm, hook)(None, {}) for hook in HOOKS] == [None, None, None, {}, None, None, None]
    assert dict(algorithm.ignored_training) == {} and algorithm.keeps_local_bn is False


@dataclass(frozen=True)
class _Misspelt(_Minimal):
    def cluster(self, fed, state):  # meant: clusters
        return None


class _NotAnAlgorithm:
    pass


class _Incomplete(Algorithm):
    def init(self, fed, initial):
        return {}


def test_a_misspelt_hook_is_refused_at_registration():
    def build() -> _Misspelt:
        return _Misspelt()

    with pytest.raises(TypeError, match="'cluster', which is not a hook; did you mean 'clusters'"):
        check_algorithm_builder("misspelt", build)


def test_a_builder_of_something_else_or_an_incomplete_algorithm_is_refused():
    def other() -> _NotAnAlgorithm:
        return _NotAnAlgorithm()

    with pytest.raises(TypeError, match="annotated to return an Algorithm subclass"):
        check_algorithm_builder("other", other)

    def incomplete() -> _Incomplete:
        return _Incomplete()

    with pytest.raises(TypeError, match="does not implement round, client_models, global_model"):
        check_algorithm_builder("incomplete", incomplete)


def test_plan_hook_and_ignored_settings_default_to_no_problem():
    from fedbench.algorithm_registry import PlanContext

    plan = PlanContext(name="x", entry={}, training={"rounds": 3}, training_set={"momentum": 0.5}, clients={"p": 2})
    assert _Minimal().check_plan(plan) is None and _Minimal().ignored_settings(plan) == {}


def test_ignored_settings_leave_out_what_the_entry_replaces_or_sets_harmlessly():
    from fedbench.algorithm_registry import PlanContext

    pfedme = ALGORITHMS["pfedme"]()
    given = {"local_epochs": 2, "momentum": 0.0}
    plan = PlanContext(name="p", entry={}, training={}, training_set=given)
    assert list(pfedme.ignored_settings(plan)) == ["local_epochs"]  # momentum 0 is what it does anyway
    plan = PlanContext(name="p", entry={"local_steps": 5}, training={}, training_set={**given, "momentum": 0.9})
    assert list(pfedme.ignored_settings(plan)) == ["momentum"]  # local_steps replaces local_epochs knowingly


def test_fedmr_checks_its_place_in_the_plan():
    from fedbench.algorithm_registry import PlanContext

    fedmr = ALGORITHMS["fedmr"](first_stage_rounds=2, models=4)
    assert fedmr.check_plan(PlanContext(name="m", entry={}, training={"rounds": 2}, clients={"a": 4})) is None
    assert "first_stage_rounds = 2 exceeds the experiment's rounds (1)" in fedmr.check_plan(
        PlanContext(name="m", entry={}, training={"rounds": 1}))
    assert fedmr.check_plan(PlanContext(name="m", entry={}, training={"rounds": 2}, clients={"a": 4, "b": 3})) == (
        "algorithms.m.models = 4 intermediate models exceed the 3 clients of partitions.b")


@dataclass(frozen=True)
class _MisspeltProperty(_Minimal):
    @property
    def artifact(self):  # meant: artifacts
        return None


def test_every_registered_builder_passes_the_check_and_a_misspelt_property_does_not():
    """Registration runs when the modules are imported; called again here, the check passes every
    registered builder (hooks, capabilities and helper methods alike) and still refuses a property
    whose name is a near miss of a hook's."""
    for name in ALGORITHMS.names():
        check_algorithm_builder(name, ALGORITHMS[name])

    def build() -> _MisspeltProperty:
        return _MisspeltProperty()

    with pytest.raises(TypeError, match="'artifact', which is not a hook; did you mean 'artifacts'"):
        check_algorithm_builder("misspelt_property", build)
