"""The templates' autoescaped outputs write what markupsafe's `escape` writes (docs/security.md: titles and
repository names are attacker-controlled), though compiled to `escaped_text` (app.kernel.templating)."""

from __future__ import annotations

import enum

from jinja2 import DictLoader, StrictUndefined, UndefinedError
from markupsafe import Markup, escape

from app.kernel.templating import environment, escaped_text


class Word(enum.StrEnum):
    HOSTILE = "<b>'&\""


class Html:
    def __html__(self) -> str:
        return "<i>kept</i>"


VALUES: list[object] = [
    "",
    "plain title",
    "<script>alert('x')</script> & \"quoted\"",
    "&amp; already",
    "ünïcødé <",
    0,
    -12,
    True,
    None,
    1.5,
    Markup("<em>safe</em>"),
    Word.HOSTILE,
    Html(),
    ["<a>", 1],
    {"k": "<v>"},
]


def test_escaped_text_is_markupsafes_escape() -> None:
    for value in VALUES:
        assert escaped_text(value) == str(escape(value)), value


def test_templates_escape_outputs_and_keep_markup_and_filters() -> None:
    template = environment.from_string(
        "{{ v }}|{{ m }}|{{ v|e }}|{{ v ~ m }}|{% macro k(x) %}<{{ x }}>{% endmacro %}{{ k(v) }}|"
        "{% set b %}{{ v }}{% endset %}{{ b }}|{{ n }}|{{ missing }}"
    )
    hostile = "<x y='1'>&\""
    out = template.render(v=hostile, m=Markup("<br>"), n=42)
    esc = str(escape(hostile))
    assert out == f"{esc}|<br>|{esc}|{esc}<br>|<{esc}>|{esc}|42|"
    strict = environment.overlay(undefined=StrictUndefined).from_string("{{ missing }}")
    try:
        strict.render()
    except UndefinedError:
        pass
    else:
        raise AssertionError("a strict undefined still raises")


def test_an_import_sees_the_globals_of_the_render_that_imports_it() -> None:
    """An imported template's module is made once and reused, except where the importing render has globals the
    environment lacks: those still reach the import, as in Jinja's own rule."""
    overlay = environment.overlay(loader=DictLoader({"m.html": "{% macro who() %}{{ name }}{% endmacro %}"}))
    source = '{% from "m.html" import who %}[{{ who() }}]'
    assert overlay.from_string(source).render(name="ignored") == "[]"  # a variable is not a global
    assert overlay.from_string(source, globals={"name": "<g>"}).render() == "[&lt;g&gt;]"
    assert overlay.from_string(source).render() == "[]"  # the module made for the globals was not kept
