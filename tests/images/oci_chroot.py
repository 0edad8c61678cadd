"""Run a command of an OCI image layout the way a kubelet would, without a container runtime.

``unpack`` lays the image's root filesystem out with umoci (layers in order, whiteouts applied) and reads
its config (entrypoint, cmd, user, env, working directory) from the layout's blobs. ``run`` executes a
command in a chroot of that root filesystem, as the image's user, with only the image's environment, the
root mounted read-only and a writable /tmp (what readOnlyRootFilesystem plus an emptyDir give a pod).
Needs root (chroot, mount namespaces).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

# Inside a private mount namespace: the root filesystem bind-mounted onto itself and made read-only, the
# host directory given as /tmp, then chroot as the image's user into the working directory (`env -C`).
_RUN = r"""
set -e
root="$1"; tmp="$2"; user="$3"; workdir="$4"; shift 4
mount --bind "$root" "$root"
mount -o remount,bind,ro "$root"
mount --bind "$tmp" "$root/tmp"
exec chroot --userspec="$user" "$root" /usr/bin/env -i -C "$workdir" "$@"
"""


@dataclass(frozen=True)
class Image:
    rootfs: Path
    config: dict  # the OCI image config's "config" object

    @property
    def user(self) -> str:
        return self.config.get("User", "")

    @property
    def env(self) -> list[str]:
        return list(self.config.get("Env") or [])

    @property
    def entrypoint(self) -> list[str]:
        return list(self.config.get("Entrypoint") or [])

    @property
    def workdir(self) -> str:
        return self.config.get("WorkingDir") or "/"


def _blob(layout: Path, digest: str) -> dict:
    algorithm, value = digest.split(":", 1)
    return json.loads((layout / "blobs" / algorithm / value).read_text())


def unpack(layout: Path, into: Path) -> Image:
    """The layout's only image, unpacked under ``into``."""
    index = json.loads((layout / "index.json").read_text())
    (descriptor,) = index["manifests"]
    tag = descriptor["annotations"]["org.opencontainers.image.ref.name"]
    config = _blob(layout, _blob(layout, descriptor["digest"])["config"]["digest"])["config"]
    rootfs = into / "rootfs"
    subprocess.run(["umoci", "raw", "unpack", "--image", f"{layout}:{tag}", str(rootfs)],
                   check=True, capture_output=True, text=True)
    return Image(rootfs=rootfs, config=config)


def run(image: Image, argv: list[str], tmp: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """``argv`` (the entrypoint's arguments are the caller's to add) in the image, ``tmp`` as its /tmp."""
    tmp.chmod(0o1777)  # the image's user writes there, like an emptyDir
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", _RUN, "sh",
         str(image.rootfs), str(tmp), image.user, image.workdir, *image.env, *argv],
        capture_output=True, text=True, timeout=timeout)
