"""Rendering a C family's own template: only exact ``int`` values are pasted in."""

from __future__ import annotations

import re
from collections.abc import Mapping

_PLACEHOLDER = re.compile(r"@([A-Z][A-Z0-9_]*)@")


def render_template(template: str, values: Mapping[str, int]) -> str:
    """Replace every ``@NAME@`` in ``template`` by ``str(values[NAME])``.

    Raises TypeError unless every value is exactly an ``int`` (never bool, str or float) and
    ValueError when a placeholder has no value or a value has no placeholder.
    """
    for name, v in values.items():
        if type(v) is not int:
            raise TypeError(f"template value {name}={v!r} is not an int")
    wanted = set(_PLACEHOLDER.findall(template))
    missing = sorted(wanted - set(values))
    extra = sorted(set(values) - wanted)
    if missing or extra:
        raise ValueError(f"template placeholders missing values {missing} / unused values {extra}")
    return _PLACEHOLDER.sub(lambda m: str(int(values[m.group(1)])), template)
