"""A headless stand-in for the user's browser, for tests that let a real client sign in with
``--auth oauth``: run as ``$BROWSER URL`` (xdg-open runs ``$BROWSER`` when no desktop is found),
it does what the user does.

It follows the authorization URL to rag-mcp's consent page, reads the one-time code the server
printed on its terminal (the file named by ``RAG_TEST_TERMINAL``), types it in, and follows the
redirect back to the client's own callback address. Exit 0 when the client's callback answered.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path
from urllib.parse import urljoin

import httpx

CODE = re.compile(r"enter (\d{3}-\d{3}) on the page")


def printed_code(terminal: Path, timeout: float = 30) -> str:
    """The newest one-time code on the server's terminal (it is printed before the redirect)."""
    deadline = time.monotonic() + timeout
    while True:
        codes = CODE.findall(terminal.read_text(encoding="utf-8", errors="replace"))
        if codes or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    if not codes:
        raise SystemExit(f"no one-time code on the server's terminal ({terminal})")
    return str(codes[-1])


def sign_in(url: str, terminal: Path) -> int:
    with httpx.Client(timeout=30, follow_redirects=False) as web:
        r = web.get(url)  # the authorization endpoint sends the browser to the consent page
        if r.status_code != 302:
            raise SystemExit(f"authorize answered {r.status_code}: {r.text[:500]}")
        consent_url = urljoin(url, r.headers["location"])
        page = web.get(consent_url)
        found = re.search(r'name="request" value="([^"]+)"', page.text)
        if page.status_code != 200 or found is None:
            raise SystemExit(f"consent page {page.status_code}: {page.text[:500]}")
        r = web.post(urljoin(consent_url, "/consent"),
                     data={"request": found.group(1), "code": printed_code(terminal)})
        if r.status_code != 302:
            raise SystemExit(f"consent answered {r.status_code}: {r.text[:500]}")
        back = web.get(r.headers["location"])  # the client's callback: it takes the code
        print(f"consent_browser: callback answered {back.status_code}", file=sys.stderr)
        return 0 if back.status_code < 400 else 1


if __name__ == "__main__":
    sys.exit(sign_in(sys.argv[1], Path(os.environ["RAG_TEST_TERMINAL"])))
