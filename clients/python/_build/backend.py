"""An in-tree PEP 517 build backend, standard library only, so that
``pip install ./clients/python`` needs nothing from a package index (not even
setuptools or wheel): it writes a pure-Python wheel of ``lineage_guard``."""

from __future__ import annotations

import base64
import hashlib
import os
import zipfile
from typing import Any, Dict, List, Optional

NAME, DIST, VERSION = "lineage-guard", "lineage_guard", "0.1.0"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

METADATA = f"""Metadata-Version: 2.1
Name: {NAME}
Version: {VERSION}
Summary: A client of the lineage guard service for Python agents (standard library only)
License: Apache-2.0
Requires-Python: >=3.10
"""

WHEEL = """Wheel-Version: 1.0
Generator: lineage_guard _build/backend.py
Root-Is-Purelib: true
Tag: py3-none-any
"""


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def _files() -> List[str]:
    pkg = os.path.join(ROOT, "lineage_guard")
    return sorted(f for f in os.listdir(pkg) if f.endswith(".py") or f == "py.typed")


def get_requires_for_build_wheel(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def build_wheel(wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None,
                metadata_directory: Optional[str] = None) -> str:
    name = f"{DIST}-{VERSION}-py3-none-any.whl"
    info = f"{DIST}-{VERSION}.dist-info"
    records = []
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        entries = [(f"lineage_guard/{f}", open(os.path.join(ROOT, "lineage_guard", f), "rb").read()) for f in _files()]
        entries += [(f"{info}/METADATA", METADATA.encode()), (f"{info}/WHEEL", WHEEL.encode())]
        for path, data in entries:
            z.writestr(path, data)
            records.append(_record_line(path, data))
        records.append(f"{info}/RECORD,,")
        z.writestr(f"{info}/RECORD", "\n".join(records) + "\n")
    return name


def build_sdist(sdist_directory: str, config_settings: Optional[Dict[str, Any]] = None) -> str:
    import tarfile
    base = f"{DIST}-{VERSION}"
    name = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        for rel in ["pyproject.toml", "README.md", "_build/backend.py"] + [f"lineage_guard/{f}" for f in _files()]:
            t.add(os.path.join(ROOT, rel), arcname=f"{base}/{rel}")
        pkg_info = os.path.join(sdist_directory, ".PKG-INFO.tmp")
        with open(pkg_info, "w") as f:
            f.write(METADATA)
        t.add(pkg_info, arcname=f"{base}/PKG-INFO")
        os.remove(pkg_info)
    return name
