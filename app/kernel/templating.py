"""Jinja environment: autoescape for .html, .xml and .svg (titles and repository names are attacker-controlled)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, Template, nodes, select_autoescape
from jinja2.compiler import CodeGenerator, Frame
from jinja2.environment import TemplateModule
from jinja2.runtime import Context
from markupsafe import Markup
from starlette.templating import Jinja2Templates

from app.kernel import urls
from app.kernel.config import settings
from app.kernel.urls import finding_path, infestation_path, path_for, repo_path, static_path

ROOT = Path(__file__).resolve().parents[2]
_DICT_NAMES = frozenset(dir(dict))


def escaped_text(value: object) -> str:
    """What an autoescaped `{{ value }}` writes, as `markupsafe.escape` writes it, without wrapping it in `Markup`:
    an output is joined into the page at once, never escaped again (`_EscapingOutput`)."""
    if type(value) is str:
        text = value
    elif type(value) is int:
        return str(value)  # digits only: nothing to escape
    elif hasattr(value, "__html__"):
        return str(value.__html__())
    else:
        text = str(value)
    if "&" in text or "<" in text or ">" in text or "'" in text or '"' in text:
        return (
            text.replace("&", "&amp;")
            .replace(">", "&gt;")
            .replace("<", "&lt;")
            .replace("'", "&#39;")
            .replace('"', "&#34;")
        )
    return text


class _EscapingOutput(CodeGenerator):
    """Compiles an autoescaped output to `environment.escaped_text(value)` instead of `escape(value)`: markupsafe's
    escape is two Python frames an output (`escape`, then `Markup.__new__`), a quarter of an atlas page's render,
    and the `Markup` it builds is joined into the page as plain text at once. Only outputs change: filters
    (`|e`), `~` joins and macro results still build `Markup`."""

    def _output_child_pre(self, node: nodes.Expr, frame: Frame, finalize: Any) -> None:
        if not frame.eval_ctx.volatile and frame.eval_ctx.autoescape:
            self.write("environment.escaped_text(")
            if finalize.src is not None:
                self.write(finalize.src)
            return
        super()._output_child_pre(node, frame, finalize)


class _Template(Template):
    """At every `{% import %}` / `{% from ... import %}` Jinja compares the importing render's globals with the
    imported template's (a set difference against a ChainMap, key by key in Python) to see whether the module it
    made once may serve: 5 % of a finding page's CPU, a tenth of a repository page's (an import per included
    statement). Every render here takes the environment's globals alone, so the answer is the same each time; it
    is asked only when the render has globals of its own."""

    def _get_default_module(self, ctx: Context | None = None) -> TemplateModule:
        if ctx is not None and not ctx.globals_keys <= self.environment.globals.keys():
            return super()._get_default_module(ctx)
        return super()._get_default_module()


class _Environment(Environment):
    """Jinja's `{{ row.title }}` tries the attribute first and the key after a raised AttributeError: on the plain
    dicts the reads hand to templates, an exception per lookup, a third of a rendered atlas page. A plain dict has
    no attribute but its class's (`_DICT_NAMES`), so a name outside them goes to its key at once: the same value,
    or the same Undefined."""

    code_generator_class = _EscapingOutput
    template_class = _Template
    escaped_text = staticmethod(escaped_text)

    def getattr(self, obj: Any, attribute: str) -> Any:
        if type(obj) is dict and attribute not in _DICT_NAMES:
            try:
                return obj[attribute]
            except KeyError:
                return self.undefined(obj=obj, name=attribute)
        # Environment.getattr, inlined: one frame a lookup, not two (rows, layouts and loops outside plain dicts)
        try:
            return getattr(obj, attribute)
        except AttributeError:
            pass
        try:
            return obj[attribute]
        except (TypeError, LookupError, AttributeError):
            return self.undefined(obj=obj, name=attribute)


environment = _Environment(
    loader=FileSystemLoader(str(ROOT / "templates")),
    autoescape=select_autoescape(enabled_extensions=("html", "xml", "svg", "atom"), default=True),
    trim_blocks=True,
    lstrip_blocks=True,
    # a template is compiled once per process: no stat of its file on every render (a template edited while
    # `tarakan serve` runs is read after a restart)
    auto_reload=False,
)
templates = Jinja2Templates(env=environment)

# A page's layout alone asks for a dozen named routes, and the router answers each by trying its routes in order
# (an exception per miss): a fifth of a rendered atlas page's CPU. A route's path depends only on its name and
# parameters while one router is installed, so each is built once.
_PATHS_KEPT = 4096
_paths: dict[Hashable, str] = {}
_paths_router: object = None


def remembered_path_for(name: str, /, **params: object) -> str:
    """`app.kernel.urls.path_for`, remembered per installed router (errors are raised each time, never kept)."""
    global _paths_router
    if urls._router is not _paths_router:
        _paths.clear()
        _paths_router = urls._router
    key = (name, *params.items())
    try:
        return _paths[key]
    except KeyError:
        pass
    except TypeError:  # an unhashable parameter
        return path_for(name, **params)
    path = path_for(name, **params)
    if len(_paths) >= _PATHS_KEPT:
        _paths.clear()
    _paths[key] = path
    return path


# The layout's links (its scripts, styles, font and icon, and the named routes of its masthead and footer), made
# once per installed router: thirteen calls from the template were each a turn of Jinja's call machinery (a finding
# page's render 0.090 -> 0.076 ms; docs/benchmarks.md "Public pages when the cache misses").
_LAYOUT_FILES = (
    "js/theme.js",
    "fonts/chakra-petch-latin-700-normal.woff2",
    "favicon.svg",
    "css/app.css",
    "js/htmx.min.js",
    "js/site.js",
)
_layout: tuple[object, dict[str, str]] = (None, {})


def layout_links() -> dict[str, str]:
    """`static_path` of each of the layout's files, by file, and `path_for` of its routes, by route name."""
    global _layout
    router, links = _layout
    if router is not urls._router or not links:
        links = {file: static_path(file) for file in _LAYOUT_FILES}
        links["home"] = remembered_path_for("home")
        for name in ("infestations", "search", "disclosures"):
            links[name] = remembered_path_for(name, format="")
        _layout = (urls._router, links)
    return links


# URL builders, registered once (autoescaping still applies to what they return: plain str).
environment.globals.update(
    layout_links=layout_links,
    repo_path=repo_path,
    infestation_path=infestation_path,
    finding_path=finding_path,
    path_for=remembered_path_for,
    static_path=lru_cache(maxsize=256)(static_path),
)


def atlas_delay_seconds() -> int:
    """How long a new report may take to reach the atlas: the hot-key interval (docs/domain.md §5.5)."""
    return settings().hot_key_interval_seconds


environment.globals["atlas_delay_seconds"] = atlas_delay_seconds


def rows_key(rows: Iterable[Mapping[str, Any]]) -> tuple[tuple[Any, ...], ...]:
    """A `Drawn` key for flat rows of scalars (one statement's: the same columns in the same order): their values
    in order. A tuple is hashed and compared in C: a tenth of the CPU of the rows' `repr` (a 64-row key cost 0.24 ms
    as a `repr`, a fifth of a ledger page's render)."""
    return tuple(tuple(row.values()) for row in rows)


class Drawn:
    """A part of a page drawn once per distinct inputs (`key`: what the part shows, e.g. `rows_key` of its rows):
    a page rendered again for a version that moved without changing that part (a report elsewhere) reuses the
    markup drawn for it. A handful kept, dropped all at once when full."""

    def __init__(self, name: str, kept: int = 16) -> None:
        self.name = name
        self.kept = kept
        self._markup: dict[Hashable, Markup] = {}

    def __call__(self, key: Hashable, context: Callable[[], dict[str, Any]]) -> Markup:
        """The template `name` rendered with `context()` (called only when `key` was not drawn yet)."""
        markup = self._markup.get(key)
        if markup is None:
            markup = Markup(environment.get_template(self.name).render(context()))
            if len(self._markup) >= self.kept:
                self._markup.clear()
            self._markup[key] = markup
        return markup
