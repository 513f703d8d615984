"""The algorithm interface: every optional hook declared once on ``Algorithm`` and checked when a
builder is registered, so a misspelt hook is an error instead of a feature silently switched off."""

from __future__ import annotations

import inspect
import typing
from dataclasses import dataclass

import pandas as pd
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
    """Every optional hook's default turns its feature off; the result hook ``history_note``, called on
    the class with a run's history, adds no remark to the scorecard row."""
    algorithm = _Minimal()
    assert [getattr(algorithm, hook)(None, {}) for hook in HOOKS] == [None, None, None, {}, None, None, None]
    assert algorithm.planted_clusters(None, {}, 3) is None  # no clusters at the planted C: no ari_planted
    assert dict(algorithm.ignored_training) == {} and algorithm.keeps_local_bn is False
    assert _Minimal.history_note(pd.DataFrame({"round": [1, 2], "acc_mean": [0.5, 0.6]})) == ""


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
    from fedbench.registry.algorithms import PlanContext

    plan = PlanContext(name="x", entry={}, training={"rounds": 3}, training_set={"momentum": 0.5}, clients={"p": 2})
    assert _Minimal().check_plan(plan) is None and _Minimal().ignored_settings(plan) == {}


def test_ignored_settings_leave_out_what_the_entry_replaces_or_sets_harmlessly():
    from fedbench.registry.algorithms import PlanContext

    pfedme = ALGORITHMS["pfedme"]()
    given = {"local_epochs": 2, "momentum": 0.0}
    plan = PlanContext(name="p", entry={}, training={}, training_set=given)
    assert list(pfedme.ignored_settings(plan)) == ["local_epochs"]  # momentum 0 is what it does anyway
    plan = PlanContext(name="p", entry={"local_steps": 5}, training={}, training_set={**given, "momentum": 0.9})
    assert list(pfedme.ignored_settings(plan)) == ["momentum"]  # local_steps replaces local_epochs knowingly


def test_fedmr_checks_its_place_in_the_plan():
    from fedbench.registry.algorithms import PlanContext

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


@dataclass(frozen=True)
class _NoteOnInstance(_Minimal):
    def history_note(self, history):  # the scorecard calls it on the class, so it must not need self
        return "bound to the instance"


@dataclass(frozen=True)
class _MisspeltResultHook(_Minimal):
    @staticmethod
    def history_notes(history):  # meant: history_note
        return "never shown"


@dataclass(frozen=True)
class _MisspeltPlanHook(_Minimal):
    def check_plans(self, plan):  # meant: check_plan
        return "algorithms.x: never checked"


@dataclass(frozen=True)
class _MisspeltCapability(_Minimal):
    def ignored_setting(self, plan):  # meant: ignored_settings
        return {}


def test_result_and_plan_hooks_and_capabilities_are_checked_like_the_run_hooks():
    """The registration check covers every name the pipeline looks up, not only the run hooks: a
    ``history_note`` defined on the instance is refused (the results layer calls it on the class), and a
    near miss of the result hook, the plan hook or the ``ignored_settings`` capability is refused with
    the name it misses, which would otherwise be switched off silently (the default used instead)."""
    def on_instance() -> _NoteOnInstance:
        return _NoteOnInstance()

    def result_hook() -> _MisspeltResultHook:
        return _MisspeltResultHook()

    def plan_hook() -> _MisspeltPlanHook:
        return _MisspeltPlanHook()

    def capability() -> _MisspeltCapability:
        return _MisspeltCapability()

    with pytest.raises(TypeError, match="history_note is called on the class; make it a staticmethod or classmethod"):
        check_algorithm_builder("on_instance", on_instance)
    for build, misspelt, meant in [(result_hook, "history_notes", "history_note"), (plan_hook, "check_plans", "check_plan"),
                                   (capability, "ignored_setting", "ignored_settings")]:
        with pytest.raises(TypeError, match=f"defines '{misspelt}', which is not a hook; did you mean '{meant}'"):
            check_algorithm_builder(build.__name__, build)


@dataclass(frozen=True)
class _WithHelpers(_Minimal):
    def clusters(self, fed, state):
        return self._clusters(state)

    def _clusters(self, state):  # private: the class's own business, however close to a hook's name
        return state.get("assignment")

    def cluster_sizes(self, state):  # public, shares a word with ``clusters`` without misspelling it
        return None

    def summarise(self, state):  # public, shares a stem with ``summary``
        return None


def test_helpers_named_after_a_hook_without_misspelling_it_are_accepted():
    """Only a public name that is a near miss of a hook's (``cluster`` for ``clusters``, ``artifact``
    for ``artifacts``) is refused: a private helper (``_clusters``) and public helpers that merely share
    a word or a stem with a hook (``cluster_sizes``, ``summarise``) register, as the algorithms' own
    helpers (FeSEM's, FLT's, CFL's) must."""
    def build() -> _WithHelpers:
        return _WithHelpers()

    check_algorithm_builder("helpers", build)
