"""`Registry`: one behaviour for every table of named things (losses, advantage normalisations,
engines, verifiers, IFEval constraints): a name is taken once, re-importing is not a clash, and
an unknown name's error lists the known ones."""

import pytest

from rlvr.registry import Registry, origin


def _made(value: int):
    def fn() -> int:  # every call makes a new object of the same origin, as a reload does
        return value

    return fn


def first() -> int:
    return 1


def second() -> int:
    return 2


def test_register_returns_the_object_and_stores_it():
    table: Registry = Registry("widget")
    assert table.register("a")(first) is first
    assert table["a"] is first and table.lookup("a") is first
    assert list(table) == ["a"] and len(table) == 1 and "a" in table and "b" not in table


def test_a_duplicate_is_refused_naming_both_origins():
    table: Registry = Registry("widget")
    table.register("a")(first)
    with pytest.raises(ValueError) as e:
        table.register("a")(second)
    message = str(e.value)
    assert "widget 'a'" in message
    assert f"{__name__}.first" in message and f"{__name__}.second" in message
    assert table["a"] is first  # the refused object did not get in


def test_same_origin_re_registration_replaces_the_entry():
    table: Registry = Registry("widget")
    old, new = _made(1), _made(2)
    assert old is not new and origin(old) == origin(new)
    table.register("a")(old)
    table.register("a")(new)  # a module reload re-running its decorator
    assert table["a"] is new


def test_a_record_clashes_by_the_function_it_wraps():
    table: Registry = Registry("widget")
    table.add("a", ("record", first), defined_by=first)
    table.add("a", ("reloaded", first), defined_by=first)
    assert table["a"] == ("reloaded", first)
    with pytest.raises(ValueError, match=f"{__name__}.first.*{__name__}.second"):
        table.add("a", ("record", second), defined_by=second)


def test_unknown_name_lists_the_known_ones():
    table: Registry = Registry("widget")
    table.register("b")(first)
    table.register("a")(second)
    with pytest.raises(ValueError, match=r"widget 'c' is not one of \['a', 'b'\]"):
        table.lookup("c")
    with pytest.raises(KeyError):
        table["c"]
    assert table.get("c") is None


def test_filled_only_by_registering():
    table: Registry = Registry("widget")
    with pytest.raises(TypeError):
        table["a"] = first  # type: ignore[index]


def test_every_table_of_named_things_is_a_registry():
    from rlvr.algorithm.advantages import ADVANTAGE_NORMALIZATIONS
    from rlvr.algorithm.losses import POLICY_LOSSES
    from rlvr.rewards import VERIFIERS
    from rlvr.rewards.ifeval import CONSTRAINTS
    from rlvr.rollout import ENGINES

    for table in (POLICY_LOSSES, ADVANTAGE_NORMALIZATIONS, ENGINES, VERIFIERS, CONSTRAINTS):
        assert isinstance(table, Registry) and len(table) > 0


def test_a_loss_carries_its_normalization_unit():
    from rlvr.algorithm.losses import normalization_unit, register_policy_loss

    assert (normalization_unit("grpo"), normalization_unit("dapo")) == ("sequence", "token")
    with pytest.raises(ValueError, match="already registered"):
        register_policy_loss("grpo")(lambda inputs, params: None)
    assert normalization_unit("grpo") == "sequence"  # the refused loss changed nothing
    with pytest.raises(ValueError, match="not one of"):
        normalization_unit("nope")
    with pytest.raises(ValueError, match="per='tokens'"):
        register_policy_loss("typo", per="tokens")


def test_a_verifier_carries_its_ground_truth_check():
    from rlvr.rewards.gsm8k import parse_gold_number
    from rlvr.rewards.math import check_ground_truth
    from rlvr.rewards.registry import ground_truth_check, register_verifier

    assert ground_truth_check("gsm8k") is parse_gold_number
    assert ground_truth_check("last_number") is parse_gold_number
    assert ground_truth_check("math") is check_ground_truth  # refuses an empty or list truth
    assert ground_truth_check("some.module:verify") is None  # not imported to find out
    with pytest.raises(ValueError, match="already registered"):
        register_verifier("gsm8k", ground_truth_check=len)(lambda completion, truth: 0.0)
    assert ground_truth_check("gsm8k") is parse_gold_number
