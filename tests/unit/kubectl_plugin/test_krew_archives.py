"""The krew archives of `kubectl drafter` (plugins/krew/build-archives, docs/kubectl-plugin.md "krew"), built
here for every platform of the manifest and installed by the pinned krew itself.

- The linux/amd64 archive, installed by `kubectl krew install --manifest --archive`, runs `--help` both as
  kubectl-drafter and as `kubectl drafter` (the pinned kubectl's plugin lookup) under /usr/bin/python3 with
  an environment of its own: no virtualenv, no PYTHONPATH. `python3 -v` shows pydantic-core's compiled
  module loaded from krew's copy of the archive and nothing from this checkout or the test's virtualenv.
- plugins/krew/drafter.yaml, rendered as krew-release-bot renders it (its addURIAndSha and indent, from
  pkg/source/template.go), passes krew-index's validator (validate-krew-manifest), which downloads every
  platform's archive from a loopback server, checks its sha256, installs it with krew for that os/arch
  and looks for the LICENSE.
Needs network access to PyPI the first time (the dependency wheels are cached under the drafter-operator
cache directory) and the pinned kubectl, kubectl-krew and validate-krew-manifest (`drafter-operator
cluster build --only kubernetes,krew`).
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import re
import shutil
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

import pytest
import yaml

from drafter_operator import __version__
from drafter_testbed.versions import bin_dir
from tests.declared_skips import skip_because

ROOT = Path(__file__).resolve().parents[3]
BUILD = ROOT / "plugins" / "krew" / "build-archives"
TEMPLATE = ROOT / "plugins" / "krew" / "drafter.yaml"
TAG = f"v{__version__}"
RELEASE_URL = f"https://github.com/drafter-dev/drafter-operator/releases/download/{TAG}/"
PLATFORMS = ("linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64")
SYSTEM_PYTHON = Path("/usr/bin/python3")

# One worker builds the archives once for the whole module (pytest-xdist --dist loadgroup); a cold build
# downloads 16 sets of wheels from PyPI (measured: 3.5 minutes here), a warm one none.
pytestmark = [pytest.mark.xdist_group("krew-archives"), pytest.mark.timeout(1200)]


def render_like_krew_release_bot(template: str, tag: str, sha256_of) -> str:
    """The bot's rendering (text/template with its two functions), for the two forms the template uses:
    `{{ .TagName }}` and `{{ addURIAndSha "URL" .TagName | indent N }}`. addURIAndSha returns
    "uri: URL\\n    sha256: SHA"; indent drops those 4 spaces, pads each line by N and trims the result."""
    action = re.compile(r'\{\{\s*addURIAndSha\s+"([^"]+)"\s+\.TagName\s*\|\s*indent\s+(\d+)\s*\}\}')

    def uri_and_sha(match: re.Match) -> str:
        url = match[1].replace("{{ .TagName }}", tag)
        text = f"uri: {url}\n    sha256: {sha256_of(url)}".replace("    sha256:", "sha256:")
        pad = " " * int(match[2])
        return (pad + text.replace("\n", "\n" + pad)).strip()

    rendered = action.sub(uri_and_sha, template).replace("{{ .TagName }}", tag)
    leftover = re.search(r"\{\{.*?\}\}", rendered)
    assert leftover is None, f"a template action this renderer does not know: {leftover[0]}"
    return rendered


@pytest.fixture(scope="module")
def tools() -> Path:
    binaries = bin_dir()
    missing = [b for b in ("kubectl", "kubectl-krew", "validate-krew-manifest") if not (binaries / b).is_file()]
    if missing:
        pytest.fail(f"{', '.join(missing)} missing in {binaries}: run `drafter-operator cluster build --only "
                    "kubernetes,krew`")
    return binaries


@pytest.fixture(scope="module")
def archives(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("archives")
    done = subprocess.run([str(BUILD), __version__, str(out), *PLATFORMS], capture_output=True, text=True,
                          timeout=1100)
    assert done.returncode == 0, done.stderr[-4000:]
    printed = dict(line.split("  ")[::-1] for line in done.stdout.splitlines())
    built = {p: out / f"kubectl-drafter_{p.replace('/', '_')}.tar.gz" for p in PLATFORMS}
    for archive in built.values():
        # What the script printed is the file's sha256, in sha256sum's format.
        assert printed[archive.name] == hashlib.sha256(archive.read_bytes()).hexdigest()
    return built


def sha256_of_release_asset(archives: dict[str, Path]):
    by_name = {a.name: a for a in archives.values()}

    def sha256_of(url: str) -> str:
        assert url.startswith(RELEASE_URL), url
        return hashlib.sha256(by_name[url.removeprefix(RELEASE_URL)].read_bytes()).hexdigest()

    return sha256_of


@pytest.fixture(scope="module")
def manifest(archives) -> str:
    return render_like_krew_release_bot(TEMPLATE.read_text(), TAG, sha256_of_release_asset(archives))


@pytest.fixture()
def loopback_release(archives):
    """The archives served over HTTP on loopback, as the GitHub release serves them."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler,
                                directory=str(archives["linux/amd64"].parent))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def clean_env(home: Path, path: str, **more: str) -> dict[str, str]:
    """What a user's shell might hold, minus everything of this checkout: no PYTHONPATH, no virtualenv."""
    return {"HOME": str(home), "PATH": path, "LANG": "C.UTF-8", **more}


def test_the_archive_holds_the_launcher_the_license_and_a_tree_per_python(archives):
    with tarfile.open(archives["linux/amd64"]) as tar:
        names = tar.getnames()
        launcher = tar.getmember("kubectl-drafter")
    assert launcher.mode & 0o111 and launcher.mtime == 0
    assert "LICENSE" in names
    assert any(n.startswith("lib/common/drafter_operator/kubectl_plugin/") for n in names)
    for tag in ("cp311", "cp312", "cp313", "cp314"):
        # pydantic-core is compiled: one build per CPython, none of them in the shared tree.
        assert any(re.fullmatch(rf"lib/{tag}/pydantic_core/_pydantic_core\.cpython-{tag[2:]}-x86_64-linux-gnu\.so", n)
                   for n in names), tag
    assert not any(n.startswith("lib/common/pydantic_core/") for n in names)
    with tarfile.open(archives["darwin/arm64"]) as tar:
        assert any(re.fullmatch(r"lib/cp311/pydantic_core/_pydantic_core\.cpython-311-darwin\.so", n)
                   for n in tar.getnames())


def test_the_build_is_reproducible(archives, tmp_path):
    again = subprocess.run([str(BUILD), __version__, str(tmp_path), "linux/amd64"], capture_output=True, text=True,
                           timeout=600)
    assert again.returncode == 0, again.stderr[-4000:]
    assert (tmp_path / archives["linux/amd64"].name).read_bytes() == archives["linux/amd64"].read_bytes()


def test_a_version_other_than_the_packages_is_refused(tmp_path):
    done = subprocess.run([str(BUILD), "9.9.9", str(tmp_path), "linux/amd64"], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 2
    assert f"VERSION 9.9.9 is not the version the wheel was built with ({__version__}" in done.stderr
    assert not list(tmp_path.iterdir())


def test_krew_installs_the_archive_and_it_runs_from_the_archive_alone(tools, archives, manifest, tmp_path):
    if not SYSTEM_PYTHON.is_file():
        skip_because("no-system-python", f"no {SYSTEM_PYTHON}: the test runs the plugin under the system's python3")
    krew_root, home = tmp_path / "krew", tmp_path / "home"
    home.mkdir()
    (tmp_path / "drafter.yaml").write_text(manifest)
    path = f"{krew_root / 'bin'}:{tools}:/usr/bin:/bin"
    installed = subprocess.run(
        [str(tools / "kubectl"), "krew", "install", f"--manifest={tmp_path / 'drafter.yaml'}",
         f"--archive={archives['linux/amd64']}"],
        env=clean_env(home, path, KREW_ROOT=str(krew_root), KREW_OS="linux", KREW_ARCH="amd64"),
        capture_output=True, text=True, timeout=120)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert "Installed plugin: drafter" in installed.stdout + installed.stderr
    store = krew_root / "store" / "drafter" / TAG
    link = krew_root / "bin" / "kubectl-drafter"
    assert link.is_symlink() and link.resolve() == store / "kubectl-drafter"

    env = clean_env(home, path)
    assert shutil.which("python3", path=path) == str(SYSTEM_PYTHON)
    for command in ([str(link), "--help"], [str(tools / "kubectl"), "drafter", "--help"]):
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.startswith("usage: kubectl drafter"), done.stdout
        for subcommand in ("get", "benchmark", "retry", "rollback"):
            assert subcommand in done.stdout

    # Where every module came from: -v logs each import's file.
    traced = subprocess.run([str(SYSTEM_PYTHON), "-v", str(link), "--help"], env=env, capture_output=True,
                            text=True, timeout=120)
    assert traced.returncode == 0, traced.stderr[-4000:]
    tag = subprocess.run([str(SYSTEM_PYTHON), "-c", "import sys; print('cp%d%d' % sys.version_info[:2])"],
                         env=env, capture_output=True, text=True).stdout.strip()
    extension = re.search(r"extension module 'pydantic_core\._pydantic_core' loaded from '([^']+)'", traced.stderr)
    assert extension, "pydantic-core's compiled module was not loaded"
    assert Path(extension[1]).is_relative_to(store / "lib" / tag), extension[1]
    sources = re.findall(r"(?:code object from|matches) '?(/[^'\s]+)", traced.stderr)
    ours = [s for s in sources if "drafter_operator" in s]
    assert ours and all(Path(s).is_relative_to(store / "lib" / "common") for s in ours), ours[:5]
    for foreign in (str(ROOT), sys.prefix):
        assert not [s for s in sources if s.startswith(foreign + "/")], f"imported from {foreign}"


def test_the_rendered_manifest_passes_krew_index_validation(tools, manifest, loopback_release, tmp_path):
    spec = yaml.safe_load(manifest)["spec"]
    assert spec["version"] == TAG
    assert {(p["selector"]["matchLabels"]["os"], p["selector"]["matchLabels"]["arch"]) for p in spec["platforms"]} \
        == {tuple(p.split("/")) for p in PLATFORMS}
    # The validator downloads each uri: the same archives, from loopback instead of the GitHub release.
    local = tmp_path / "drafter.yaml"  # the validator takes the plugin's name from the file's
    local.write_text(manifest.replace(RELEASE_URL, loopback_release))
    done = subprocess.run([str(tools / "validate-krew-manifest"), f"-manifest={local}"],
                          env=clean_env(tmp_path, f"{tools}:/usr/bin:/bin"), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "structural validation OK" in done.stderr
    assert f"all {len(PLATFORMS)} spec.platforms installed fine" in done.stderr


def test_the_validator_refuses_a_wrong_sha256(tools, manifest, loopback_release, tmp_path):
    # Proof that the passing run above checks the archives: one digit of one sha256 changed.
    sha = re.search(r"sha256: ([0-9a-f]{64})", manifest)[1]
    broken = manifest.replace(sha, sha[:-1] + ("0" if sha[-1] != "0" else "1"), 1)
    local = tmp_path / "drafter.yaml"
    local.write_text(broken.replace(RELEASE_URL, loopback_release))
    done = subprocess.run([str(tools / "validate-krew-manifest"), f"-manifest={local}"],
                          env=clean_env(tmp_path, f"{tools}:/usr/bin:/bin"), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode != 0
    assert "checksum does not match" in done.stderr
