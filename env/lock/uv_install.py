"""Install a hashed requirements file with uv, from the indexes pip is configured with.

    python -m env.lock.uv_install UV PYTHON REQUIREMENTS

scripts/create_env.sh installs the pins with uv where it can: uv installs
wheels in parallel and keeps them unpacked in its cache, so the 59 pins take
1-4 s instead of pip's 21 s on the 2-core VM. The install is the one pip would
make: ``--no-deps`` with every file's sha256 checked, and the same sources:
uv does not read pip's configuration, so pip's own view of it (``pip config
list``: its files and PIP_* variables) is handed over as uv's options and
variables. pip takes a pin from whichever of its indexes has the best match,
hence uv's ``unsafe-best-match`` strategy; the hashes pin every file, so a name
on a second index cannot slip in.

Hashes: uv's ``--require-hashes`` also refuses a constraint that is not an
exact pin (pip's configuration may name a constraints file, ``torch<=2.14.1``),
so this module checks that every requirement of the file carries hashes and
runs uv with ``--verify-hashes``, which checks each of them: every file is
checked, as with pip's ``--require-hashes``.

A pip setting uv cannot honour (one that changes what is installed: a
platform, prefer-binary, ...) makes this exit with FALLBACK_STATUS after
naming it; the script then installs with pip, as it did before uv. Runs with
the standard library alone: nothing is installed yet.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Sequence

# The exit status that asks create_env.sh to install with pip instead.
FALLBACK_STATUS = 3

# pip settings (config keys, as `pip config list` names them) and what stands for them in uv.
_REPEATED_OPTIONS = {  # whitespace-separated lists in pip, one option per value in uv
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraint",
    "trusted-host": "--allow-insecure-host",
}
_SINGLE_OPTIONS = {"index-url": "--index-url"}
_FLAGS = {"no-index": "--no-index", "no-cache-dir": "--no-cache"}  # pip's booleans that are true
_VARIABLES = {  # pip settings uv reads from its environment
    "cert": "SSL_CERT_FILE",
    "client-cert": "SSL_CLIENT_CERT",
    "timeout": "UV_HTTP_TIMEOUT",
    "default-timeout": "UV_HTTP_TIMEOUT",
    "proxy": "HTTPS_PROXY",
}
# pip settings that change nothing uv installs: its output, its own upgrade check, where its cache is.
_NEUTRAL = frozenset(
    {
        "disable-pip-version-check",
        "no-color",
        "progress-bar",
        "quiet",
        "verbose",
        "root-user-action",
        "cache-dir",
        "no-input",
        "retries",
        "require-virtualenv",
        "break-system-packages",
        "log",
        "require-hashes",
    }
)
# Sections whose settings a `pip install` reads, the later overriding the earlier (environment variables last).
_SECTIONS = ("global", "install", ":env:")


class Unsupported(Exception):
    """A pip setting with no uv equivalent: the install falls back to pip."""


def parse_pip_config(listing: str) -> dict[str, str]:
    """``pip config list``'s lines (``section.key='value'``) as the settings a `pip install` uses."""
    found: dict[str, dict[str, str]] = {section: {} for section in _SECTIONS}
    for line in listing.splitlines():
        name, sep, value = line.partition("=")
        section, dot, key = name.rpartition(".")
        if not (sep and dot) or section not in found:
            continue  # another command's section
        found[section][key] = str(ast.literal_eval(value))
    settings: dict[str, str] = {}
    for section in _SECTIONS:
        settings.update(found[section])
    return settings


def pip_settings(python: str) -> dict[str, str]:
    """The settings a `pip install` run by ``python`` uses: its configuration files and PIP_* variables."""
    listing = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True)
    return parse_pip_config(listing.stdout)


def _true(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "on")


def uv_arguments(settings: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """uv's options and environment variables for pip's ``settings``; Unsupported names a setting uv lacks."""
    options: list[str] = ["--index-strategy", "unsafe-best-match"]
    variables: dict[str, str] = {}
    unsupported = []
    for key, value in sorted(settings.items()):
        if key in _REPEATED_OPTIONS:
            for item in value.split():
                options += [_REPEATED_OPTIONS[key], item]
        elif key in _SINGLE_OPTIONS:
            options += [_SINGLE_OPTIONS[key], value]
        elif key in _FLAGS:
            options += [_FLAGS[key]] if _true(value) else []
        elif key in _VARIABLES:
            variables[_VARIABLES[key]] = value
        elif key not in _NEUTRAL:
            unsupported.append(f"{key}={value!r}")
    if unsupported:
        raise Unsupported(", ".join(unsupported))
    return options, variables


def requirements_without_hashes(text: str) -> list[str]:
    """The requirements of a requirements file's ``text`` that carry no ``--hash``: none, for uv's hash check to
    cover every file."""
    logical, current = [], ""
    for line in text.splitlines():
        stripped = line.split(" #", 1)[0].rstrip() if not line.lstrip().startswith("#") else ""
        current += " " + stripped.removesuffix("\\")
        if not stripped.endswith("\\"):
            logical.append(current.strip())
            current = ""
    logical.append(current.strip())
    return [entry.split()[0] for entry in logical if entry and not entry.startswith("-") and "--hash=" not in entry]


def install_command(uv: str, python: str, requirements: str, options: Sequence[str]) -> list[str]:
    return [uv, "pip", "install", "--python", python, "--verify-hashes", "--no-deps", *options, "-r", requirements]


def main(argv: Sequence[str]) -> int:
    if len(argv) != 3:
        print("usage: python -m env.lock.uv_install UV PYTHON REQUIREMENTS", file=sys.stderr)
        return 2
    uv, python, requirements = argv
    with open(requirements, encoding="utf-8") as file:
        if unhashed := requirements_without_hashes(file.read()):
            print(f"create_env: {requirements} has requirements without hashes: {', '.join(unhashed)}", file=sys.stderr)
            return 1
    try:
        options, variables = uv_arguments(pip_settings(python))
    except Unsupported as settings:
        print(f"create_env: pip settings uv cannot honour ({settings}): installing with pip", file=sys.stderr)
        return FALLBACK_STATUS
    return subprocess.run(
        install_command(uv, python, requirements, options), env={**os.environ, **variables}
    ).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
