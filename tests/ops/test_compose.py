"""compose.yaml makes the operator name the public address and the proxies to trust: BASE_URL and
FORWARDED_ALLOW_IPS have no default (compose refuses to start without them), so neither a localhost origin
(cookies without Secure) nor a loopback-only trust (every client looks like the proxy) is deployed silently."""

from __future__ import annotations

import re

from tests.harness import ROOT

REQUIRED = re.compile(r"^\$\{(?P<name>[A-Z_]+):\?(?P<message>[^}]+)\}$")  # compose's `${VAR:?message}`


def app_environment() -> dict[str, str]:
    """The `environment:` of the `x-app` anchor every app service shares."""
    anchor = (ROOT / "compose.yaml").read_text().split("x-app: &app\n", 1)[1].split("\n  depends_on:", 1)[0]
    block = anchor.split("  environment:\n", 1)[1]
    return dict(re.findall(r"^    ([A-Z_]+): (.*)$", block, re.MULTILINE))


def test_compose_requires_base_url_and_the_proxies_to_trust() -> None:
    environment = app_environment()
    assert {"DATABASE_URL", "SECRET_KEY", "BASE_URL", "FORWARDED_ALLOW_IPS"} <= set(environment)
    for name in ("BASE_URL", "FORWARDED_ALLOW_IPS"):
        match = REQUIRED.match(environment[name])
        assert match is not None and match["name"] == name, environment[name]
        assert name in match["message"]
