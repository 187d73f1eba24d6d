"""uv installs the pins from the indexes pip is configured with, checking every file's hash (env/lock/uv_install.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from env.lock import uv_install
from env.lock.lockfile import requirements_path

# What `pip config list` printed on the development VM: a configuration file and PIP_* variables.
LISTING = """\
:env:.cert='/etc/ssl/certs/ca-certificates.crt'
:env:.default-timeout='180'
:env:.disable-pip-version-check='1'
:env:.find-links='/opt/wheels'
global.cert='/etc/ssl/certs/other.crt'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/srv/overridden'
install.index-url='https://mirror.example/simple'
freeze.exclude='pip'
"""


def test_pips_settings_are_read_with_variables_over_the_install_section_over_global():
    settings = uv_install.parse_pip_config(LISTING)
    assert settings == {
        "cert": "/etc/ssl/certs/ca-certificates.crt",  # PIP_CERT over the file's
        "default-timeout": "180",
        "disable-pip-version-check": "1",
        "find-links": "/opt/wheels",
        "constraint": "/etc/xdg/pip/constraints.txt",
        "extra-index-url": "file:///opt/pypi/simple file:///opt/pypi-more/simple",
        "index-url": "https://mirror.example/simple",
    }  # another command's section (freeze) is not an install's


def test_pips_settings_become_uvs_options_and_variables():
    options, variables = uv_install.uv_arguments(uv_install.parse_pip_config(LISTING))
    pairs = list(zip(options[::2], options[1::2], strict=True))
    assert pairs[0] == ("--index-strategy", "unsafe-best-match")  # pip takes the best match over every index
    assert sorted(pairs[1:]) == [
        ("--constraint", "/etc/xdg/pip/constraints.txt"),
        ("--extra-index-url", "file:///opt/pypi-more/simple"),
        ("--extra-index-url", "file:///opt/pypi/simple"),
        ("--find-links", "/opt/wheels"),
        ("--index-url", "https://mirror.example/simple"),
    ]
    # pip's order of the extra indexes is kept
    extra = [value for option, value in pairs if option == "--extra-index-url"]
    assert extra == ["file:///opt/pypi/simple", "file:///opt/pypi-more/simple"]
    assert variables == {"SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt", "UV_HTTP_TIMEOUT": "180"}
    flags, _ = uv_install.uv_arguments({"no-index": "true", "no-cache-dir": "1", "trusted-host": "a.example"})
    assert "--no-index" in flags and "--no-cache" in flags and flags[-2:] == ["--allow-insecure-host", "a.example"]
    assert "--no-index" not in uv_install.uv_arguments({"no-index": "false"})[0]


def test_a_pip_setting_that_changes_what_is_installed_and_has_no_uv_equivalent_asks_for_pip():
    with pytest.raises(uv_install.Unsupported, match="prefer-binary='1'"):
        uv_install.uv_arguments({"prefer-binary": "1", "find-links": "/opt/wheels"})


@pytest.mark.parametrize("variant", ["cpu", "cuda"])
def test_every_pin_of_the_requirements_files_carries_hashes(variant):
    assert uv_install.requirements_without_hashes(requirements_path(variant).read_text()) == []


def test_a_requirement_without_a_hash_is_named():
    text = (
        "# a comment\n"
        "numpy==2.0.0 \\\n    --hash=sha256:" + "a" * 64 + "\n"
        "    # via torch\n"
        "rich==13.0.0  # no hash\n"
        "--find-links /opt/wheels\n"
        "six==1.16.0 \\\n    --hash=sha256:" + "b" * 64 + " \\\n    --hash=sha256:" + "c" * 64 + "\n"
    )
    assert uv_install.requirements_without_hashes(text) == ["rich==13.0.0"]


def _stand_in(path: Path, body: str) -> Path:
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(0o755)
    return path


def test_main_runs_uv_with_hashes_checked_and_pips_sources(tmp_path):
    # A python whose pip prints the listing above, and a uv that records how it was called.
    python = _stand_in(
        tmp_path / "python", f"import sys\nassert sys.argv[1:] == ['-m', 'pip', 'config', 'list']\nprint({LISTING!r})\n"
    )
    record = tmp_path / "uv.json"
    uv = _stand_in(
        tmp_path / "uv",
        "import json, os, sys\n"
        f"called = {{'argv': sys.argv[1:], 'cert': os.environ.get('SSL_CERT_FILE')}}\n"
        f"json.dump(called, open({str(record)!r}, 'w'))\n",
    )
    requirements = requirements_path("cpu")
    assert uv_install.main([str(uv), str(python), str(requirements)]) == 0
    called = json.loads(record.read_text())
    assert called["argv"][:6] == ["pip", "install", "--python", str(python), "--verify-hashes", "--no-deps"]
    assert called["argv"][-2:] == ["-r", str(requirements)] and "--find-links" in called["argv"]
    assert called["cert"] == "/etc/ssl/certs/ca-certificates.crt"


def test_main_asks_for_pip_where_uv_cannot_honour_a_setting(tmp_path, capsys):
    python = _stand_in(tmp_path / "python", "print(\"global.prefer-binary='1'\")\n")
    uv = _stand_in(tmp_path / "uv", "raise SystemExit('uv must not run')\n")
    assert uv_install.main([str(uv), str(python), str(requirements_path("cpu"))]) == uv_install.FALLBACK_STATUS
    assert "prefer-binary" in capsys.readouterr().err


def test_the_module_runs_with_the_standard_library_alone():
    # create_env.sh runs it with the new environment's python, before anything is installed in it.
    code = (
        "import sys; sys.modules['packaging'] = None; sys.modules['yaml'] = None; "
        "import env.lock.uv_install as m; print(m.FALLBACK_STATUS)"
    )
    result = subprocess.run(
        [sys.executable, "-S", "-c", code],
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(uv_install.__file__).parents[2],
    )
    assert result.returncode == 0 and result.stdout.strip() == "3", result.stderr
