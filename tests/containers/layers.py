"""No build secret, and no stub of one, in an image's layers:
`python layers.py IMAGE BASE PATH...` (tests/containers/run.sh, after each build).

Every layer that IMAGE adds to its base image BASE is listed (podman's overlay storage: each layer's own `diff`
folder; another storage driver: `podman save`'s OCI archive, each layer a tar) and any entry at or under one of the
PATHs (the secrets' mount targets, the host's pip configuration and the local paths it names) is printed with its
layer. Exits 1 if there is one. A `RUN --mount=type=secret` leaves none; `podman build -v SRC:DST` left an empty
file or folder at each DST.
"""

from __future__ import annotations

import json
import stat
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path, PurePosixPath

WHITEOUT = ".wh."


def podman(*args: str) -> str:
    return subprocess.run(["podman", *args], check=True, capture_output=True, text=True).stdout


def _inspect(image: str) -> dict:
    return json.loads(podman("image", "inspect", image))[0]


def under(entry: str, paths: Iterable[str]) -> str | None:
    """The path of `paths` that layer entry `entry` (`./etc/pip.conf`, `etc/pip.conf`) is or lies under."""
    name = PurePosixPath("/", entry.removeprefix("./"))
    if name.name.startswith(WHITEOUT):  # a deletion, not a file
        return None
    for path in paths:
        path = PurePosixPath(path)
        if name == path or path in name.parents:
            return str(path)
    return None


def tar_layers(archive: Path) -> Iterator[tuple[str, list[str]]]:
    """(digest, entry names) of each layer of an OCI archive (`podman save --format oci-archive`), bottom first."""
    with tarfile.open(archive) as outer:
        def blob(digest: str):
            return outer.extractfile("blobs/sha256/" + digest.split(":", 1)[1])

        index = json.load(blob(json.loads(outer.extractfile("index.json").read())["manifests"][0]["digest"]))
        for layer in index["layers"]:
            with tarfile.open(fileobj=blob(layer["digest"]), mode="r|*") as inner:
                yield layer["digest"], [member.name for member in inner]


def found_in_tars(layers: Iterable[tuple[str, list[str]]], skip: int, paths: list[str]) -> list[str]:
    """`layer: entry (under PATH)` for each entry of the layers after the first `skip` (the base's)."""
    hits = []
    for n, (digest, names) in enumerate(layers):
        if n < skip:
            continue
        hits += [f"layer {n} {digest[:19]}: {name} ({p})" for name in names if (p := under(name, paths))]
    return hits


def _whiteout(path: Path) -> bool:
    """overlay's mark of a deletion: a character device 0:0 (the file a secret was mounted over, removed)."""
    info = path.lstat()
    return stat.S_ISCHR(info.st_mode) and info.st_rdev == 0


def found_in_dirs(dirs: list[Path], paths: list[str]) -> list[str]:
    """The same for unpacked layers (overlay `diff` folders, the base's left out)."""
    hits = []
    for layer in dirs:
        for path in paths:
            entry = layer / path.lstrip("/")
            if (entry.is_symlink() or entry.exists()) and not _whiteout(entry):
                hits.append(f"layer {layer.parent.name[:12]}: {path}")
    return hits


def main(argv: list[str] | None = None) -> int:
    image, base, *paths = argv if argv is not None else sys.argv[1:]
    skip = len(_inspect(base)["RootFS"]["Layers"])
    info = _inspect(image)
    total = len(info["RootFS"]["Layers"])
    driver = info.get("GraphDriver") or {}
    data = driver.get("Data") or {}
    dirs = [data["UpperDir"], *filter(None, data.get("LowerDir", "").split(":"))] if "UpperDir" in data else []
    if driver.get("Name") == "overlay" and len(dirs) == total:
        how = "overlay diff folders"
        hits = found_in_dirs([Path(d) for d in reversed(dirs)][skip:], paths)
    else:
        how = "podman save"
        with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
            archive = Path(tmp) / "image.tar"
            podman("save", "--format", "oci-archive", "--uncompressed", "-o", str(archive), image)
            hits = found_in_tars(tar_layers(archive), skip, paths)
    for hit in hits:
        print(f"{image}: {hit}")
    if hits:
        print(f"{image}: (a layer cached from a build that mounted them with -v? `podman rmi {image}`, "
              "`podman image prune -f`, and build again)")
    print(f"{image}: {total - skip} layer(s) over {base} ({how}): "
          + (f"{len(hits)} build secret path(s) found" if hits else f"none of {len(paths)} build secret paths"))
    return 1 if hits else 0


if __name__ == "__main__":
    sys.exit(main())
