"""The host's pip configuration as the images' build secrets (tests/containers/run.sh):
`python pip_secrets.py DIR` writes the build's pip configuration into DIR (a 0700 folder), then serves, until
killed, the local paths the configuration names.

The Dockerfiles read two BuildKit secrets (`RUN --mount=type=secret`, present during pip's RUNs only, never in a
layer): `pipconf`, a pip configuration, and `cacert`, a certificate bundle. A secret is one file, so the host's
configuration (`pip config list`: its files and PIP_* variables, merged) is rewritten for the build:

- a local path or `file://` URL it names (an index on disk and the files beside its `simple/`, a find-links
  folder, a constraints file) becomes a URL of a server on 127.0.0.1 (the build runs with --network=host) that
  serves those paths and nothing else, read-only, while the builds run;
- `cert` leaves it: the bundle it names (or the system's) is the `cacert` secret, and the Dockerfiles point
  PIP_CERT at it.

DIR/pipconf is that configuration, DIR/secrets one `--secret` argument a line (none when the host has neither a
pip configuration nor a bundle), DIR/served the paths served, one a line; then DIR/ready appears (holding the
server's URL). Without local paths nothing is served and the script exits at once.
"""

from __future__ import annotations

import ast
import functools
import http.server
import os
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

SYSTEM_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
DROPPED = {"cert", "client-cert"}  # what the cacert secret replaces; a client certificate is not passed


def host_config(listing: str) -> dict[str, dict[str, str]]:
    """Sections of `pip config list`'s output (`section.key='value'`, `:env:.key` for PIP_* variables; the
    variables, pip's strongest source, land in `global` over the files' values)."""
    config: dict[str, dict[str, str]] = {}
    env: dict[str, str] = {}
    for line in listing.splitlines():
        name, sep, value = line.partition("=")
        if not sep or "." not in name:
            continue
        section, key = name.rsplit(".", 1)
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            value = value.strip("'\"")
        (env if section == ":env:" else config.setdefault(section, {}))[key] = str(value)
    config.setdefault("global", {}).update(env)
    return {section: keys for section, keys in config.items() if keys}


def _local(token: str) -> Path | None:
    """The local path a configuration value's token names (a `file://` URL or an absolute path), if it exists."""
    path = unquote(urlsplit(token).path) if token.startswith("file://") else token
    return Path(path) if path.startswith("/") and Path(path).exists() else None


def for_build(config: dict[str, dict[str, str]], url: str) -> tuple[dict[str, dict[str, str]], set[Path], str | None]:
    """`config` rewritten for a build that reaches this machine at `url`: its local paths as URLs there.
    Returns the configuration, the paths to serve (an index's `simple/` folder is served with its parent, where
    its relative links lead) and the certificate bundle for the `cacert` secret."""
    served: set[Path] = set()
    cert = next((keys["cert"] for keys in config.values() if "cert" in keys), None)  # global's first
    out: dict[str, dict[str, str]] = {}
    for section, keys in config.items():
        for key, value in keys.items():
            if key in DROPPED:
                continue
            tokens = []
            for token in value.split():
                path = _local(token)
                if path is None:
                    tokens.append(token)
                    continue
                served.add(path.parent if path.name == "simple" else path)
                tokens.append(url + quote(str(path)) + ("/" if path.is_dir() else ""))
            out.setdefault(section, {})[key] = "\n".join(tokens) if len(tokens) > 1 else "".join(tokens)
    if cert is None and Path(SYSTEM_BUNDLE).is_file():
        cert = SYSTEM_BUNDLE
    return out, served, cert


def ini(config: dict[str, dict[str, str]]) -> str:
    """pip's configuration file format (a multi-valued key continues on indented lines)."""
    lines = []
    for section, keys in config.items():
        lines.append(f"[{section}]")
        lines += [f"{key} = {value}".replace("\n", "\n    ") for key, value in keys.items()]
    return "\n".join(lines) + "\n" if lines else ""


class Handler(http.server.SimpleHTTPRequestHandler):
    """Files and folder listings under the served paths only; everything else is 404."""

    def __init__(self, *args, roots: list[Path], **kwargs):
        self.roots = roots
        super().__init__(*args, directory="/", **kwargs)

    def translate_path(self, path: str) -> str:
        real = Path(os.path.realpath(super().translate_path(path)))
        return str(real) if any(real == r or r in real.parents for r in self.roots) else "/nonexistent/"

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass


def main(argv: list[str] | None = None) -> int:
    out = Path((argv or sys.argv[1:])[0])
    out.mkdir(parents=True, exist_ok=True)
    out.chmod(0o700)  # the configuration may hold an index's credentials
    for name in ("ready", "secrets", "pipconf", "served"):
        (out / name).unlink(missing_ok=True)
    listing = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    config = host_config(listing)
    server, roots = None, []  # the port goes into the configuration, which says what to serve
    if any(_local(t) for keys in config.values() for v in keys.values() for t in v.split()):
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, roots=roots))
    url = f"http://127.0.0.1:{server.server_address[1]}" if server else ""
    build, served, cert = for_build(config, url)
    secrets = []
    if build:
        (out / "pipconf").write_text(ini(build))
        secrets.append(f"--secret=id=pipconf,src={out / 'pipconf'}")
    if cert and Path(cert).is_file():
        secrets.append(f"--secret=id=cacert,src={cert}")
    (out / "secrets").write_text("".join(s + "\n" for s in secrets))
    (out / "served").write_text("".join(f"{path}\n" for path in sorted(served)))
    roots += [Path(os.path.realpath(p)) for p in served]
    if server is not None:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    (out / "ready").write_text(url + "\n")
    if server is not None:
        for path in sorted(served):
            print(f"pip_secrets: serving {path} at {url}{quote(str(path))}", flush=True)
        threading.Event().wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
