"""Every request Tarakan makes to a forge, in one place (docs/forge.md): the adapters of GitHub, GitLab and
Forgejo (Codeberg, tarakan.lol), the bounded HTTP beneath them, the rate shared by every process, and what a file's
lines say (`lines.py`). Callers use the functions of `app.forge.api`."""
