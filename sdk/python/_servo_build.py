"""The build backend of servo-worker (PEP 517, PEP 660): standard library
only, so that ``pip install ./sdk/python`` needs nothing from a package
index (no setuptools, no wheel), like the SDK itself. It builds a pure
wheel of the ``servo_worker`` package (with ``py.typed``), an sdist, and an
editable wheel (a ``.pth`` file)."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile
from typing import Any, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = "servo_worker"


def _project() -> dict[str, Any]:
    with open(os.path.join(HERE, "pyproject.toml"), "rb") as f:
        raw = f.read()
    try:
        import tomllib  # Python >= 3.11
    except ImportError:  # Python 3.10: the few keys needed, by pattern
        text = raw.decode()
        section = text.split("[project]", 1)[1].split("\n[", 1)[0]
        out: dict[str, Any] = {}
        for key in ("name", "version", "description", "requires-python"):
            m = re.search(r'^' + re.escape(key) + r'\s*=\s*"([^"]*)"', section, re.M)
            if m:
                out[key] = m.group(1)
        out["classifiers"] = re.findall(r'^\s*"([^"]+ :: [^"]+)",?$', section, re.M)
        if "\n[project.urls]" in text:
            urls = text.split("\n[project.urls]", 1)[1].split("\n[", 1)[0]
            out["urls"] = dict(re.findall(r'^\s*"?([A-Za-z][\w .-]*?)"?\s*=\s*"([^"]*)"', urls, re.M))
        return out
    return dict(tomllib.loads(raw.decode())["project"])


def _names() -> tuple[dict[str, Any], str, str]:
    p = _project()
    dist = re.sub(r"[-_.]+", "_", p["name"]).lower()
    return p, dist, p["version"]


def _metadata() -> bytes:
    p, _, version = _names()
    lines = ["Metadata-Version: 2.1", f"Name: {p['name']}", f"Version: {version}"]
    if p.get("description"):
        lines.append(f"Summary: {p['description']}")
    if p.get("requires-python"):
        lines.append(f"Requires-Python: {p['requires-python']}")
    lines.append("License: Apache-2.0")
    lines += [f"Classifier: {c}" for c in p.get("classifiers", [])]
    lines += [f"Project-URL: {label}, {url}" for label, url in (p.get("urls") or {}).items()]
    lines.append("Description-Content-Type: text/markdown")
    with open(os.path.join(HERE, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    return ("\n".join(lines) + "\n\n" + readme).encode()


def _package_files() -> list[tuple[str, str]]:
    """(path in the archive, path on disk) of the package's files."""
    out = []
    root = os.path.join(HERE, PACKAGE)
    for name in sorted(os.listdir(root)):
        if name.endswith(".py") or name == "py.typed":
            out.append((f"{PACKAGE}/{name}", os.path.join(root, name)))
    return out


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _wheel(directory: str, files: list[tuple[str, bytes]]) -> str:
    _, dist, version = _names()
    info = f"{dist}-{version}.dist-info"
    files = files + [
        (f"{info}/METADATA", _metadata()),
        (f"{info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: servo-build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"),
    ]
    name = f"{dist}-{version}-py3-none-any.whl"
    record = "".join(f"{path},{_digest(data)},{len(data)}\n" for path, data in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(os.path.join(directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files + [(f"{info}/RECORD", record.encode())]:
            zi = zipfile.ZipInfo(path, date_time=(2020, 1, 1, 0, 0, 0))
            zi.external_attr = 0o644 << 16
            z.writestr(zi, data, zipfile.ZIP_DEFLATED)
    return name


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


# --- PEP 517 ----------------------------------------------------------------

def get_requires_for_build_wheel(config_settings: Optional[dict[str, Any]] = None) -> list[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[dict[str, Any]] = None) -> list[str]:
    return []


def get_requires_for_build_editable(config_settings: Optional[dict[str, Any]] = None) -> list[str]:
    return []


def build_wheel(wheel_directory: str, config_settings: Optional[dict[str, Any]] = None,
                metadata_directory: Optional[str] = None) -> str:
    return _wheel(wheel_directory, [(arc, _read(path)) for arc, path in _package_files()])


def build_editable(wheel_directory: str, config_settings: Optional[dict[str, Any]] = None,
                   metadata_directory: Optional[str] = None) -> str:
    _, dist, _ = _names()
    return _wheel(wheel_directory, [(f"_{dist}_editable.pth", (HERE + "\n").encode())])


def build_sdist(sdist_directory: str, config_settings: Optional[dict[str, Any]] = None) -> str:
    _, dist, version = _names()
    base = f"{dist}-{version}"
    name = base + ".tar.gz"
    files = [(arc, _read(path)) for arc, path in _package_files()]
    files += [(n, _read(os.path.join(HERE, n))) for n in ("pyproject.toml", "README.md", "_servo_build.py")]
    files.append(("PKG-INFO", _metadata()))
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as t:
        for arc, data in files:
            ti = tarfile.TarInfo(f"{base}/{arc}")
            ti.size, ti.mode, ti.mtime = len(data), 0o644, 1577836800
            t.addfile(ti, io.BytesIO(data))
    return name
