"""Fetch the project's assets: download them, or copy them from a local folder.

    python crf_project fetch-assets [--data-dir DIR]

Reads the ``assets`` of ``project.yml``. Each asset's ``dest`` is
``assets/<path>``; with ``--data-dir DIR`` the file is copied from
``DIR/<path>`` (the layout of the offline data folder), else it is downloaded
from its ``url``. Every file is checked against its md5 ``checksum``.

Assets whose description starts with ``[test]`` (held-back test files) or
``[online]`` (files only available from the internet) may be absent from the
local folder: they are reported and skipped. Zip archives are unpacked into
their folder, each member checked against :data:`ZIP_MEMBERS`; offline, the
members are copied directly (the folder holds them unpacked).
"""

import hashlib
import shutil
import sys
import urllib.request
import zipfile
from pathlib import Path

import srsly
import typer

from crf_project.script_cli import run_app, script_app

ROOT = Path(__file__).resolve().parent.parent
OPTIONAL = ("[test]", "[online]")
#: Members of zip assets: {zip dest: {member: (md5, optional offline)}}
ZIP_MEMBERS = {
    "assets/ner/msra/MSRA.zip": {
        "msra_train_bio": ("40f4961d2b38352689103b8aa8f30b97", False),
        "msra_test_bio": ("3aaf7ffe7e6f9efdc08b128dfa11003b", True),
    },
}


def md5(path: Path) -> str:
    h = hashlib.md5()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def resolve_data_dir(value: str) -> Path:
    """A relative ``--data-dir`` is looked up from the current directory, then
    from the project directory, then from the repository root (so that
    ``../shared/data`` works both from the repository root and from ``project/``)."""
    path = Path(value)
    if path.is_absolute():
        return path
    for base in (Path.cwd(), ROOT, ROOT.parent):
        if (base / path).is_dir():
            return (base / path).resolve()
    sys.exit(f"data dir {value!r} not found (looked in {Path.cwd()}, {ROOT}, {ROOT.parent})")


def check(path: Path, checksum: str) -> None:
    if checksum and md5(path) != checksum:
        sys.exit(f"checksum mismatch for {path}: {md5(path)} != {checksum}")


def copy_or_absent(src: Path, dest: Path, checksum: str, optional: bool, status: dict) -> None:
    if not src.exists():
        if optional:
            print(f"  absent  {dest.relative_to(ROOT)} (not in the local data folder: held back or online only)")
            status[str(dest)] = "absent"
            return
        sys.exit(f"missing {src}: needed for {dest}")
    if dest.exists() and (not checksum or md5(dest) == checksum):
        print(f"  ok      {dest.relative_to(ROOT)} (already there)")
    else:
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)
        check(dest, checksum)
        print(f"  copied  {dest.relative_to(ROOT)}")
    status[str(dest)] = "ok"


def download(url: str, dest: Path, checksum: str, optional: bool, status: dict) -> None:
    if dest.exists() and checksum and md5(dest) == checksum:
        print(f"  ok      {dest.relative_to(ROOT)} (already there)")
        status[str(dest)] = "ok"
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        with urllib.request.urlopen(url, timeout=120) as r, open(dest, "wb") as f:
            shutil.copyfileobj(r, f)
    except OSError as err:
        if optional:
            print(f"  absent  {dest} (download failed: {err})")
            status[str(dest)] = "absent"
            return
        sys.exit(f"download of {url} failed: {err}")
    check(dest, checksum)
    print(f"  fetched {dest}")
    status[str(dest)] = "ok"


app = script_app()


@app.command(help=__doc__.split("\n\n")[0])
def fetch_assets_cli(
    data_dir: str = typer.Option("", "--data-dir", help="local folder with the data (empty: download)"),
    status_path: str = typer.Option("assets/status.json", "--status", help="where to write what was found"),
) -> None:
    project = srsly.read_yaml(ROOT / "project.yml")
    data_dir = resolve_data_dir(data_dir) if data_dir else None
    print(f"assets from {data_dir if data_dir else 'their public URLs'}")
    status: dict = {}
    for asset in project["assets"]:
        dest = ROOT / asset["dest"]
        rel = Path(asset["dest"]).relative_to("assets")
        checksum = asset.get("checksum", "")
        optional = asset.get("description", "").startswith(OPTIONAL)
        members = ZIP_MEMBERS.get(asset["dest"])
        if members:
            for member, (member_md5, member_optional) in members.items():
                mdest = dest.parent / member
                if data_dir:
                    copy_or_absent(data_dir / rel.parent / member, mdest, member_md5, member_optional, status)
            if not data_dir:
                download(asset["url"], dest, checksum, optional, status)
                if status.get(str(dest)) == "ok":
                    with zipfile.ZipFile(dest) as z:
                        for member, (member_md5, _) in members.items():
                            name = next(n for n in z.namelist() if Path(n).name == member)
                            (dest.parent / member).write_bytes(z.read(name))
                            check(dest.parent / member, member_md5)
                            status[str(dest.parent / member)] = "ok"
                            print(f"  unzipped {dest.parent / member}")
        elif data_dir:
            copy_or_absent(data_dir / rel, dest, checksum, optional, status)
        else:
            download(asset["url"], dest, checksum, optional, status)
    out = ROOT / status_path
    out.parent.mkdir(parents=True, exist_ok=True)
    srsly.write_json(out, {str(Path(k).relative_to(ROOT)): v for k, v in status.items()})
    absent = [k for k, v in status.items() if v != "ok"]
    print(f"{len(status) - len(absent)} files ready, {len(absent)} absent")


def main() -> None:
    run_app(app)
