"""The one Registry class behind verifiers, algorithms and environments (reasoning_rl.registry)."""

from __future__ import annotations

import types
from importlib.metadata import EntryPoint

import pytest

from reasoning_rl import registry
from reasoning_rl.errors import UserError
from reasoning_rl.registry import NotRegisteredError, Registry


def shout(text: str) -> str:
    return text.upper()


def whisper(text: str) -> str:
    return text.lower()


def test_register_get_and_names() -> None:
    things: Registry = Registry("thing", "reasoning_rl.test_things")
    things.register("shout")(shout)
    assert things.get("shout") is shout
    assert things.names() == ["shout"]
    things.register("shout")(shout)  # the same object again (a module imported twice) is fine
    with pytest.raises(ValueError, match=r"already registered by .*shout; pick another name for .*whisper"):
        things.register("shout")(whisper)
    things.remove("shout")
    assert things.names() == []


def test_unknown_name_is_a_user_error_with_close_matches() -> None:
    things: Registry = Registry("thing", "reasoning_rl.test_things", how_to_add="Add one with @things.register.")
    things.register("shout")(shout)
    with pytest.raises(NotRegisteredError) as info:
        things.get("shuot")
    assert isinstance(info.value, UserError)
    assert str(info.value) == ("unknown thing 'shuot'. Did you mean 'shout'? Known things: shout. "
                               "Add one with @things.register.")


def test_builtins_are_imported_on_first_use(monkeypatch: pytest.MonkeyPatch) -> None:
    things: Registry = Registry("thing", "reasoning_rl.test_things", {"lazy": "registry_test_builtin"})
    module = types.ModuleType("registry_test_builtin")
    imported = []

    def import_module(name: str) -> types.ModuleType:
        imported.append(name)
        things.register("lazy")(shout)
        return module

    monkeypatch.setattr(registry.importlib, "import_module", import_module)
    assert things.names() == ["lazy"]  # listed before it is imported
    assert imported == []
    assert things.get("lazy") is shout
    assert imported == ["registry_test_builtin"]


def test_check_refuses_an_object_of_another_kind() -> None:
    def only_functions(name: str, obj: object) -> None:
        if not callable(obj):
            raise TypeError(f"thing {name!r} must be callable")

    things: Registry = Registry("thing", "reasoning_rl.test_things", check=only_functions)
    with pytest.raises(TypeError, match="must be callable"):
        things.register("number")(3)


def test_entry_points_are_read_and_a_broken_plugin_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    group = "reasoning_rl.test_things"
    good = EntryPoint(name="plugged", value=f"{__name__}:whisper", group=group)
    broken = EntryPoint(name="broken", value="no_such_module_anywhere:thing", group=group)
    monkeypatch.setattr(registry, "entry_points", lambda group: [broken, good])
    things: Registry = Registry("thing", group)
    with pytest.warns(RuntimeWarning, match="could not load thing plugin 'broken'"):
        assert things.get("plugged") is whisper
    assert things.names() == ["plugged"]
