"""``autotune.service`` exports exactly its public names."""

from __future__ import annotations

import types

import autotune.service as service


def test_all_is_exactly_the_public_names() -> None:
    public = {
        name
        for name, value in vars(service).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public == set(service.__all__)
