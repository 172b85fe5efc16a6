# Sourced by ./run and ./test: idempotent venv + pip install, redone only when pyproject.toml changes.
extras="embedded"; [ "${WITH_TEST:-}" = 1 ] && extras="embedded,test"
stamp=".venv/.installed-$extras-$(sha256sum pyproject.toml | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  if [ ! -x .venv/bin/python ]; then
    if ! python3 -m venv .venv 2>/dev/null; then   # Debian's python3 needs python3-venv for ensurepip
      rm -rf .venv
      SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
      $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
      python3 -m venv .venv
    fi
  fi
  .venv/bin/pip install -q --disable-pip-version-check -e ".[$extras]"
  rm -f .venv/.installed-*
  touch "$stamp"
fi
