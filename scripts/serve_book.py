"""Serve the built book on this machine, so its calculators run.

A browser opens the book from disk (``file://``) but will not run the
in-page calculators there: Pyodide's module import and its fetches of
``.wasm`` and ``.zip`` files are refused for ``file://`` pages. This
serves ``_build/html`` (both editions: the Chinese one is ``zh/``) on
127.0.0.1 only, with the types Pyodide needs (``.wasm``, ``.mjs``), and
prints the address; Ctrl-C stops it.

    make serve                       # http://127.0.0.1:8000/
    .venv/bin/python scripts/serve_book.py [--port 8000] [--dir _build/html]
"""
from __future__ import annotations

import argparse
import functools
import http.server
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PORT = 8000   # the address book/_ext/calculators.py SERVED names
TYPES = {".wasm": "application/wasm", ".mjs": "text/javascript",
         ".js": "text/javascript", ".json": "application/json",
         ".zip": "application/zip"}


class Handler(http.server.SimpleHTTPRequestHandler):
    """Static files with Pyodide's types; no access log."""
    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map,
                      **TYPES}

    def log_message(self, *a):
        pass


def server(directory: Path, port: int) -> http.server.ThreadingHTTPServer:
    """A server of ``directory`` on 127.0.0.1:``port`` (0: any free one)."""
    return http.server.ThreadingHTTPServer(
        ("127.0.0.1", port),
        functools.partial(Handler, directory=str(directory)))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument("--dir", type=Path, default=ROOT / "_build" / "html")
    a = p.parse_args(argv)
    if not (a.dir / "index.html").exists():
        print(f"serve_book: no built book at {a.dir} (run `make book`)",
              file=sys.stderr)
        return 2
    try:
        srv = server(a.dir, a.port)
    except OSError as e:
        print(f"serve_book: cannot listen on 127.0.0.1:{a.port} ({e.strerror})"
              "; choose another with PORT=... (make) or --port",
              file=sys.stderr)
        return 2
    port = srv.server_address[1]
    print(f"The book: http://127.0.0.1:{port}/  (the Chinese edition: "
          f"http://127.0.0.1:{port}/zh/); Ctrl-C stops", flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
