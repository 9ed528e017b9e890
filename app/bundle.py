"""A smaller plotly.js for the page.

The memory chart draws only ``scatter`` traces, which the "basic" distribution of plotly.js (scatter,
bar, pie; 1.2 MB) covers.  Dash loads the full distribution (4.8 MB) otherwise, and on a first visit,
before the browser has cached compiled code, evaluating that script holds the page's main thread for
about a second.  ``dcc.Graph`` uses ``window.Plotly`` when a page script has defined it, so serving
the basic distribution from ``assets/vendor/`` is all it takes; without it (no npm, no registry) the
app loads Dash's full bundle as before.

    python -m app.bundle      # fetch it with npm (``make install`` runs this)

The file is fetched, not committed: it is the exact plotly.js version that the installed ``plotly``
package ships (``plotly.offline.get_plotlyjs_version()``), and ``create_app`` ignores a vendored file
whose version differs, so a plotly upgrade never mixes a new figure schema with an old renderer.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from core.ir.io import atomic_write

VENDOR = Path(__file__).resolve().parents[1] / "assets" / "vendor"
BUNDLE = VENDOR / "plotly-basic.min.js"
PACKAGE = "plotly.js-basic-dist-min"
MEMBER = "package/plotly-basic.min.js"
TRACE_TYPES = frozenset({"scatter", "bar", "pie"})  # what the basic distribution renders
_VERSION = re.compile(r"plotly\.js \(basic - minified\) v(\d+\.\d+\.\d+\S*)")


def wanted_version() -> str:
    """The plotly.js version of the installed plotly package (the one Dash would serve)."""
    from plotly.offline import get_plotlyjs_version

    return get_plotlyjs_version()


def header_version(head: str) -> str | None:
    """The version announced by a basic bundle's header comment (its first few hundred characters)."""
    m = _VERSION.search(head[:400])
    return m.group(1) if m else None


def bundle_version(path: Path = BUNDLE) -> str | None:
    """The version in a basic bundle's header comment, or None if ``path`` is missing or not one."""
    try:
        with path.open("r", encoding="utf-8", errors="replace") as f:
            return header_version(f.read(400))
    except OSError:
        return None


def usable(path: Path = BUNDLE) -> bool:
    """True if ``path`` is a basic bundle of exactly the plotly.js version Dash would serve."""
    return bundle_version(path) == wanted_version()


def fetch(dest: Path = BUNDLE, npm: str = "npm", timeout: float = 180.0) -> Path:
    """Download the basic bundle matching ``wanted_version()`` into ``dest`` (atomically).

    Raises RuntimeError (one line) if npm is missing or the package cannot be had."""
    version = wanted_version()
    if bundle_version(dest) == version:
        return dest
    exe = shutil.which(npm)
    if exe is None:
        raise RuntimeError(f"{npm} not found")
    with tempfile.TemporaryDirectory() as tmp:
        try:
            run = subprocess.run([exe, "pack", f"{PACKAGE}@{version}", "--silent", "--pack-destination", tmp],
                                 capture_output=True, text=True, timeout=timeout, cwd=tmp)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"npm pack {PACKAGE}@{version} timed out after {timeout:.0f} s") from None
        tarballs = sorted(Path(tmp).glob("*.tgz"))
        if run.returncode != 0 or not tarballs:
            why = (run.stderr or run.stdout).strip().splitlines()
            raise RuntimeError(f"npm pack {PACKAGE}@{version} failed: {why[-1] if why else run.returncode}")
        with tarfile.open(tarballs[0], "r:gz") as tar:
            src = tar.extractfile(MEMBER)
            if src is None:
                raise RuntimeError(f"{tarballs[0].name} has no {MEMBER}")
            data = src.read()
    if header_version(data[:400].decode("utf-8", "replace")) != version:
        raise RuntimeError(f"{PACKAGE}@{version} does not announce version {version} in its header")
    return atomic_write(dest, data)


def main() -> int:
    try:
        path = fetch()
    except RuntimeError as e:
        print(f"plotly.js basic bundle not installed ({e}); the app will load the full bundle", file=sys.stderr)
        return 0  # optional: the app works without it
    print(f"plotly.js basic bundle {bundle_version(path)}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
