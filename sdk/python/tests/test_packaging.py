"""The package's metadata and README: project URLs in the built metadata
(both pyproject readers of the build backend), and what the README
promises about serve's bind address."""

from __future__ import annotations

import os
import sys
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)

import _servo_build  # noqa: E402

import servo_worker as sw  # noqa: E402

URLS = {
    "Homepage": "https://github.com/servo-dev/servo",
    "Documentation": "https://github.com/servo-dev/servo/tree/main/sdk/python",
}


class TestMetadata(unittest.TestCase):
    def test_project_urls(self) -> None:
        for reader in ("tomllib", "the Python 3.10 fallback"):
            with self.subTest(reader):
                with mock.patch.dict(sys.modules, {"tomllib": None} if reader != "tomllib" else {}):
                    if reader == "tomllib" and sys.version_info < (3, 11):
                        continue
                    head = _servo_build._metadata().decode().split("\n\n", 1)[0].splitlines()
                for label, url in URLS.items():
                    self.assertIn(f"Project-URL: {label}, {url}", head)


class TestReadme(unittest.TestCase):
    def test_serve_bind_address_is_documented(self) -> None:
        with open(os.path.join(HERE, "README.md"), encoding="utf-8") as f:
            readme = f.read()
        self.assertTrue('host="127.0.0.1"' in readme, "the README says how to bind serve to one address")
        self.assertTrue("0.0.0.0" in readme, "the README says serve binds every interface by default")

    def test_serve_binds_the_given_host(self) -> None:
        srv = sw.make_server(sw.App(lambda t: 1), port=0, host="127.0.0.1")
        try:
            self.assertEqual(srv.server_address[0], "127.0.0.1")
        finally:
            srv.server_close()


if __name__ == "__main__":
    unittest.main()
