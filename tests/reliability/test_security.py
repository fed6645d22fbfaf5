"""Security: files stay inside the chosen directories, no unsafe loaders, TLS on a Dask cluster.

* Stratum values and layer names never become file names: a run with strata like
  ``../../x`` and ``/etc/passwd`` and a layer name with slashes writes only inside its
  output and work directories (single-process CLI and the distributed runner).
* The sources of ``evalcore`` and ``flows`` never unpickle, ``eval`` or ``exec`` anything,
  and read configuration only with safe loaders (an AST scan, so comments do not count).
* One evaluation with TLS between client, scheduler and workers on loopback
  (``distributed.security.Security`` with a CA and certificate made here) gives the
  single-process answer.
"""

from __future__ import annotations

import ast
import datetime as dt
import ipaddress
import json
import os
import re
from pathlib import Path

import geopandas
import numpy as np
import pytest
from shapely.geometry import box

import evalcore
from evalcore.cli import main

ROOT = Path(__file__).resolve().parents[2]
X0, Y0 = 500_000.0, 4_400_000.0

HOSTILE_STRATA = ["../../x", "/etc/passwd", "..\\..\\y", "a/b/../../../z", ".", "..", "", "~root/.ssh/authorized_keys", "CON", "名前 with spaces"]
HOSTILE_LAYER = "../../escaped/layer"


def _layers(tmp: Path) -> tuple[Path, Path]:
    """A reference GeoPackage whose layer name has slashes and whose strata are path-like."""
    n = len(HOSTILE_STRATA)
    squares = [box(X0 + 200 * i, Y0, X0 + 200 * i + 100, Y0 + 100) for i in range(n)]
    ref = geopandas.GeoDataFrame({"county": HOSTILE_STRATA}, geometry=squares, crs="EPSG:32613")
    pred = geopandas.GeoDataFrame({"score": np.linspace(0, 1, n)}, geometry=[g.buffer(3, join_style="mitre") for g in squares], crs="EPSG:32613")
    (tmp / "in").mkdir(parents=True)
    ref_path, pred_path = tmp / "in" / "reference.gpkg", tmp / "in" / "predicted.gpkg"
    _write_gpkg_layer(ref, ref_path, HOSTILE_LAYER)
    _write_gpkg_layer(pred, pred_path, "/etc/passwd")
    return pred_path, ref_path


def _write_gpkg_layer(gdf: geopandas.GeoDataFrame, path: Path, layer: str) -> None:
    """A GeoPackage layer with any name: GDAL refuses special characters when it creates a
    layer but reads them, so the table is renamed afterwards (without a spatial index,
    whose triggers would name the old table)."""
    import sqlite3

    gdf.to_file(path, layer="tmp_layer", layer_options={"SPATIAL_INDEX": "NO"})
    con = sqlite3.connect(path)
    try:
        con.execute(f'ALTER TABLE tmp_layer RENAME TO "{layer}"')
        for table in ("gpkg_contents", "gpkg_geometry_columns", "gpkg_ogr_contents"):
            con.execute(f"UPDATE {table} SET table_name = ? WHERE table_name = 'tmp_layer'", (layer,))
        con.execute("UPDATE gpkg_contents SET identifier = ? WHERE identifier = 'tmp_layer'", (layer,))
        con.commit()
    finally:
        con.close()


def _tree(root: Path) -> dict[Path, tuple[int, float]]:
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            p = Path(dirpath) / name
            try:
                st = p.stat()
            except FileNotFoundError:
                continue
            out[p] = (st.st_size, st.st_mtime)
    return out


def _outside(changed: set[Path], allowed: list[Path]) -> list[Path]:
    return sorted(p for p in changed if not any(p.is_relative_to(a) for a in allowed))


def _root_state() -> tuple[set[str], set[str], float]:
    return set(os.listdir("/")), set(os.listdir("/etc")), os.stat("/etc/passwd").st_mtime


@pytest.fixture()
def watched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Run from ``tmp_path/a/b/cwd`` so that a relative ``../../x`` would land inside the watched tree."""
    cwd = tmp_path / "a" / "b" / "cwd"
    cwd.mkdir(parents=True)
    monkeypatch.chdir(cwd)
    pred, ref = _layers(tmp_path)
    watched_root = tmp_path.parent
    before, root_before = _tree(watched_root), _root_state()

    def changed() -> set[Path]:
        after = _tree(watched_root)
        assert _root_state() == root_before, "something changed in / or /etc"
        return {p for p, v in after.items() if before.get(p) != v}

    return pred, ref, changed


def test_cli_writes_only_its_outputs(watched, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    pred, ref, changed = watched
    out, frame = tmp_path / "out" / "metrics.json", tmp_path / "out" / "fields.parquet"
    out.parent.mkdir()  # evalcore creates no missing parent directory (a directory is no file: not a change here)
    status = main(["evaluate", "-q", "-p", str(pred), "--pred-layer", "/etc/passwd", "-r", str(ref), "--ref-layer", HOSTILE_LAYER,
                   "--strata-column", "county", "--frame-out", str(frame), "-o", str(out)])
    assert status == 0, capsys.readouterr().err
    metrics = json.loads(out.read_text())
    # Every stratum is there, as text in the JSON, and as nothing else.
    assert set(metrics["per_stratum"]) == {s for s in HOSTILE_STRATA}
    assert sorted(changed()) == sorted([out, frame])


@pytest.mark.cluster
def test_distributed_run_writes_only_inside_its_directories(watched, tmp_path: Path):
    from distributed import Client, LocalCluster

    from evalcore.api import check_options
    from evalcore.distributed.runner import run_distributed

    pred, ref, changed = watched
    work, frames = tmp_path / "work", tmp_path / "frames"
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, Client(cluster) as client:
        before_cluster = changed()  # the cluster itself writes nothing into the watched tree
        metrics = run_distributed(str(pred), str(ref), client, check_options(partition_size_m=500.0), strata="county", workdir=work,
                                  frame_dir=frames, pred_layer="/etc/passwd", ref_layer=HOSTILE_LAYER, chunk_rows=3)
    assert set(metrics["per_stratum"]) == set(HOSTILE_STRATA)
    new = changed() - before_cluster
    assert new and not _outside(new, [work, frames])
    # Every file is named by evalcore (partition keys are integers), never by a stratum or layer name.
    for path in new:
        rel = str(path.relative_to(work if path.is_relative_to(work) else frames))
        assert re.fullmatch(r"[A-Za-z0-9_.\-/]+", rel), rel
        assert not any(word in rel for word in ("passwd", "escaped", "ssh", "authorized", "CON")), rel


# --------------------------------------------------------------------------------------
# No pickle, eval, exec or unsafe YAML on anything a user gives
# --------------------------------------------------------------------------------------

FORBIDDEN_MODULES = {"pickle", "cPickle", "dill", "cloudpickle", "marshal", "shelve", "joblib"}
FORBIDDEN_CALLS = {"eval", "exec", "compile", "__import__"}
FORBIDDEN_ATTRS = {
    ("yaml", "load"), ("yaml", "unsafe_load"), ("yaml", "full_load"), ("yaml", "load_all"), ("yaml", "unsafe_load_all"),
    ("pd", "read_pickle"), ("pandas", "read_pickle"), ("torch", "load"),
}


def _sources() -> list[Path]:
    files = sorted((ROOT / "evalcore").rglob("*.py")) + sorted((ROOT / "flows").rglob("*.py"))
    assert len(files) > 10
    return files


def _violations(path: Path, text: str | None = None) -> list[str]:
    """Unsafe calls and imports in one source file (``text`` stands in for its contents)."""
    tree = ast.parse(path.read_text(encoding="utf-8") if text is None else text, filename=str(path))
    found = []
    for node in ast.walk(tree):
        where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Import):
            found += [f"{where} imports {a.name}" for a in node.names if a.name.split(".")[0] in FORBIDDEN_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in FORBIDDEN_MODULES:
            found.append(f"{where} imports from {node.module}")
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in FORBIDDEN_CALLS:
                found.append(f"{where} calls {func.id}()")
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and (func.value.id, func.attr) in FORBIDDEN_ATTRS:
                found.append(f"{where} calls {func.value.id}.{func.attr}()")
            if isinstance(func, ast.Attribute) and func.attr == "load" and isinstance(func.value, ast.Name) and func.value.id in ("np", "numpy"):
                allow = [k for k in node.keywords if k.arg == "allow_pickle"]
                if not (allow and isinstance(allow[0].value, ast.Constant) and allow[0].value.value is False):
                    found.append(f"{where} calls np.load without allow_pickle=False")
            if isinstance(func, ast.Attribute) and func.attr.startswith("read_") and any(
                k.arg == "allow_pickle" and not (isinstance(k.value, ast.Constant) and k.value.value is False) for k in node.keywords
            ):
                found.append(f"{where} allows pickles")
    return found


def test_no_pickle_eval_or_unsafe_yaml_in_the_sources():
    problems = [v for path in _sources() for v in _violations(path)]
    assert not problems, problems


def test_the_scan_finds_what_it_looks_for():
    text = "import pickle\nimport yaml\nimport numpy as np\nx = eval('1')\ny = yaml.load(open('c'))\nz = np.load('a.npz')\n"
    text += "ok = yaml.safe_load(open('c'))\nok = np.load('a.npz', allow_pickle=False)\n# pickle.loads(eval(x)) in a comment\n"
    found = _violations(ROOT / "evalcore" / "probe.py", text)
    assert len(found) == 4, found


# --------------------------------------------------------------------------------------
# TLS between client, scheduler and workers
# --------------------------------------------------------------------------------------


def _certificates(directory: Path) -> tuple[Path, Path]:
    """A self-signed CA and a certificate for 127.0.0.1/localhost signed by it (key in the same file)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "evalcore test CA")])
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH, x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    ca_file, cert_file = directory / "ca.pem", directory / "node.pem"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_file.write_bytes(
        cert.public_bytes(serialization.Encoding.PEM)
        + key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    cert_file.chmod(0o600)
    return ca_file, cert_file


@pytest.mark.cluster
def test_tls_cluster_gives_the_single_process_answer(tmp_path: Path):
    from distributed import Client, LocalCluster
    from distributed.security import Security

    from evalcore.synth import make_layers

    ca, cert = _certificates(tmp_path / "tls")
    security = Security(
        tls_ca_file=str(ca),
        tls_client_cert=str(cert),
        tls_scheduler_cert=str(cert),
        tls_worker_cert=str(cert),
        require_encryption=True,
    )
    other_ca, other_cert = _certificates(tmp_path / "other")  # a valid certificate from another CA
    stranger = Security(tls_ca_file=str(other_ca), tls_client_cert=str(other_cert), require_encryption=True)
    pred, ref = make_layers(800, 3)
    options = dict(strata="stratum", boundary_tolerance_m=5.0, bootstrap=10, partition_size_m=20_000.0)
    expected = evalcore.evaluate(pred, ref, **options)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, protocol="tls://", host="127.0.0.1",
                      security=security, dashboard_address=None) as cluster:
        address = cluster.scheduler_address
        assert address.startswith("tls://127.0.0.1:")
        with Client(cluster, security=security) as client:
            assert client.scheduler_info()["workers"] and all(a.startswith("tls://") for a in client.scheduler_info()["workers"])
            got = evalcore.evaluate(pred, ref, client=client, workdir=tmp_path / "work", **options)
        # A certificate the cluster's CA did not sign does not get in, nor does plain TCP.
        with pytest.raises((OSError, TimeoutError)):
            Client(address, security=stranger, timeout="3s")
        with pytest.raises((OSError, TimeoutError)):
            Client(address.replace("tls://", "tcp://"), timeout="3s")
    for key, value in expected.items():
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            assert got[key] == value, key
    assert got["precision"] == pytest.approx(expected["precision"], rel=1e-9)
    assert got["iou_mean"] == pytest.approx(expected["iou_mean"], rel=1e-9)
    assert got["boundary_f1"] == pytest.approx(expected["boundary_f1"], rel=1e-9)
    assert got["bootstrap"]["ci"]["f1"] == pytest.approx(expected["bootstrap"]["ci"]["f1"], rel=1e-9)
