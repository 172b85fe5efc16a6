"""One SARIF run read once (its tool, rules and base URIs: a location's file as a repository path), and the readers
of the log's untrusted JSON that never trust a type (docs/sarif.md)."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlsplit

from app.kernel.errors import ValidationError
from app.reports.validation import MAX_DESCRIPTION, MAX_PATH_BYTES, canonical_path

ELLIPSIS = "…"
MAX_BASE_CHAIN = 16  # originalUriBaseIds may chain; a cycle must not loop
MAX_BASES = 100  # originalUriBaseIds entries of one run
MAX_RULES_PER_RUN = 25_000  # GitHub code scanning's own upload limit, as MAX_RUNS (app.reports.sarif)
MAX_URI = 4 * MAX_PATH_BYTES  # a URI longer than this cannot name a path of MAX_PATH_BYTES, even percent-encoded
MAX_TEXT = MAX_DESCRIPTION + 1  # every text is read up to here: anything longer is cut to MAX_DESCRIPTION anyway


def fail(path: str, message: str) -> ValidationError:
    return ValidationError({path: [message]})


def as_dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def as_list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def text_of(value: object) -> str | None:
    """`{"text": ...}` (a message or a multiformat string) → its first MAX_TEXT characters, when it is a non-blank
    string (a rule's text is shared by many results: it is never read whole)."""
    text = as_dict(value).get("text")
    if not isinstance(text, str):
        return None
    text = text[:MAX_TEXT]
    return text if text.strip() else None


def capped(value: object) -> object:
    """A string cut to MAX_TEXT characters (rule names and ids are shared by many results); anything else as is."""
    return value[:MAX_TEXT] if isinstance(value, str) else value


def scheme_of(uri: str) -> str | None:
    """The URI's scheme ("" when relative); None when it cannot be parsed (an unmatched `[` in a host)."""
    try:
        return urlsplit(uri).scheme
    except ValueError:
        return None


def shorten(text: str, maximum: int) -> tuple[str, bool]:
    if len(text) <= maximum:
        return text, False
    return text[: maximum - 1].rstrip() + ELLIPSIS, True


class Run:
    """One run's tool, rules and base URIs, looked up once."""

    def __init__(self, run: dict[str, Any], path: str, source_root: str | None = None) -> None:
        self.path = path
        self.source_root = source_root
        tool = as_dict(run.get("tool"))
        self.driver = as_dict(tool.get("driver"))
        self.extensions = [as_dict(e) for e in as_list(tool.get("extensions"))]
        self.artifacts = [as_dict(a) for a in as_list(run.get("artifacts"))]
        self.bases = self._bases(as_dict(run.get("originalUriBaseIds")))
        self.prefixes = {base_id: self._base_prefix(base_id) for base_id in self.bases}
        self.absolute_bases = self._absolute_bases()
        self.rules_by_id: dict[str, dict[str, Any]] = {}
        for component in (*self.extensions, self.driver):  # the driver's own rules win on a shared id
            if len(as_list(component.get("rules"))) > MAX_RULES_PER_RUN:
                raise fail(f"{path}.tool", f"a tool component must hold at most {MAX_RULES_PER_RUN} rules")
            for rule in as_list(component.get("rules")):
                if isinstance(rule, dict) and isinstance(rule.get("id"), str):
                    self.rules_by_id[rule["id"]] = rule

    def rule(self, result: dict[str, Any]) -> dict[str, Any]:
        """The rule (reportingDescriptor) of a result: by index in its tool component, else by id, else none."""
        reference = as_dict(result.get("rule"))
        component = self.driver
        component_index = as_dict(reference.get("toolComponent")).get("index")
        if isinstance(component_index, int) and 0 <= component_index < len(self.extensions):
            component = self.extensions[component_index]
        rules = as_list(component.get("rules"))
        index = result.get("ruleIndex", reference.get("index"))
        if isinstance(index, int) and not isinstance(index, bool) and 0 <= index < len(rules):
            return as_dict(rules[index])
        rule_id = result.get("ruleId", reference.get("id"))
        return self.rules_by_id.get(rule_id, {}) if isinstance(rule_id, str) else {}

    def _bases(self, raw: dict[str, Any]) -> dict[str, dict[str, Any]]:
        where = f"{self.path}.originalUriBaseIds"
        if len(raw) > MAX_BASES:
            raise fail(where, f"must have at most {MAX_BASES} entries")
        for base_id, base in raw.items():
            uri = as_dict(base).get("uri")
            if isinstance(uri, str) and len(uri) > MAX_URI:
                raise fail(f"{where}.{base_id}.uri", f"must be at most {MAX_URI} characters")
        return {k: as_dict(v) for k, v in raw.items()}

    def _base_prefix(self, base_id: str) -> str:
        """The repository-relative prefix a `uriBaseId` stands for: relative base URIs chain up to one that is
        absolute or undefined (`%SRCROOT%`), which is taken as the repository root. Computed once per id; a chain
        longer than MAX_BASE_CHAIN (a cycle) or a prefix longer than a path may be is refused, naming the id."""
        prefix, current, seen = "", base_id, set[str]()
        while current in self.bases:
            if current in seen or len(seen) == MAX_BASE_CHAIN:
                raise fail(
                    f"{self.path}.originalUriBaseIds.{base_id}",
                    f"must reach an absolute or undefined base within {MAX_BASE_CHAIN} steps (no cycle)",
                )
            seen.add(current)
            base = self.bases[current]
            uri = base.get("uri")
            if not isinstance(uri, str) or scheme_of(uri) != "":
                break
            prefix = uri.rstrip("/") + "/" + prefix if uri.strip("/") else prefix
            if len(prefix) > MAX_URI:
                raise fail(f"{self.path}.originalUriBaseIds.{base_id}", f"must stand for at most {MAX_URI} characters")
            next_id = base.get("uriBaseId")
            if not isinstance(next_id, str):
                break
            current = next_id
        return prefix

    def _absolute_bases(self) -> list[str]:
        found = []
        for base in self.bases.values():
            uri = base.get("uri")
            if isinstance(uri, str) and scheme_of(uri):
                found.append(uri if uri.endswith("/") else uri + "/")
        return sorted(found, key=len, reverse=True)

    def _relative(self, uri: str, where: str) -> str:
        """An absolute URI made repository-relative: cut at the longest absolute base URI it starts with, else
        (a `file:` URI) at the checkout root the caller named (`?source_root=`, `--source-root`)."""
        base = next((b for b in self.absolute_bases if uri.startswith(b)), None)
        if base is not None:
            return uri[len(base) :]
        if self.source_root is None or not uri.startswith("file:"):
            raise fail(
                where,
                "must be relative to the repository: no originalUriBaseIds entry is a prefix of it; name the "
                "checkout root it lies under (?source_root=/abs/path on the API, --source-root DIR on the CLI)",
            )
        file_path = unquote(urlsplit(uri).path)
        if not file_path.startswith(self.source_root):
            raise fail(where, f"lies outside the checkout root {self.source_root.rstrip('/')} (source_root)")
        return file_path[len(self.source_root) :]

    def repository_path(self, location: dict[str, Any], path: str) -> str | None:
        """A physical location's file as a repository-relative path; None when it names no file."""
        artifact = as_dict(location.get("artifactLocation"))
        uri, base_id = artifact.get("uri"), artifact.get("uriBaseId")
        index = artifact.get("index")
        if not isinstance(uri, str) and isinstance(index, int) and 0 <= index < len(self.artifacts):
            artifact = as_dict(self.artifacts[index].get("location"))
            uri, base_id = artifact.get("uri"), artifact.get("uriBaseId")
        if not isinstance(uri, str) or not uri.strip():
            return None
        where = f"{path}.artifactLocation.uri"
        if len(uri) > MAX_URI:
            raise fail(where, f"must be at most {MAX_URI} characters")
        scheme = scheme_of(uri)
        if scheme is None:
            raise fail(where, "must be a valid URI reference")
        if scheme:
            relative = self._relative(uri, where)
        else:
            relative = (self.prefixes.get(base_id, "") if isinstance(base_id, str) else "") + uri
        try:
            return canonical_path(unquote(relative.split("?")[0].split("#")[0]))
        except ValueError as exc:
            raise fail(where, str(exc)) from None
