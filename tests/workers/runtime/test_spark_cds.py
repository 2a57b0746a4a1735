"""The class-data-sharing archive of the drivers' JVM (workers/runtime/spark_cds.py): the one the
bootstrap built is really mapped by a Spark session's JVM, turning it off or pointing
elsewhere means no archive, and a failed build leaves no file behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from workers.runtime import spark_cds

ROOT = Path(__file__).resolve().parents[3]

SESSION = """
import sys
from workers.runtime import spark_cds
from workers.runtime.session import spark_session
s = spark_session("cds-check", java_options=spark_cds.java_options() + " " + sys.argv[1])
s.range(3).selectExpr("id * 2").collect()
s.stop()
"""


def _class_sources(tmp_path: Path, env: dict[str, str]) -> dict[str, str]:
    """Start a Spark session in a fresh process with the JVM logging where each class
    came from; {class name: source}."""
    log = tmp_path / "classes.log"
    subprocess.run(
        [sys.executable, "-c", SESSION, f"-Xlog:class+load=info:file={log}"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        check=True,
        capture_output=True,
        timeout=300,
    )
    sources = {}
    for line in log.read_text().splitlines():
        # [0.123s][info][class,load] org.apache.spark.SparkContext source: file:/...jar
        _, _, rest = line.partition("[class,load] ")
        name, _, source = rest.partition(" source: ")
        sources[name] = source
    return sources


def test_a_session_maps_sparks_classes_from_the_built_archive(tmp_path: Path) -> None:
    assert spark_cds.archive_path().is_file(), "no archive: make bootstrap builds it"
    sources = _class_sources(tmp_path, {})
    assert sources["org.apache.spark.SparkContext"] == "shared objects file (top)"
    assert sources["org.apache.spark.sql.SparkSession"] == "shared objects file (top)"


def test_without_the_archive_the_classes_come_from_the_jars(tmp_path: Path) -> None:
    sources = _class_sources(tmp_path, {"SPINDLE_SPARK_CDS": "false"})
    assert sources["org.apache.spark.SparkContext"].endswith(".jar")


def test_off_or_not_built_means_no_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPINDLE_SPARK_CDS", "false")
    assert spark_cds.java_options() == ""
    monkeypatch.setenv("SPINDLE_SPARK_CDS", "true")
    monkeypatch.setenv("SPINDLE_SPARK_CDS_DIR", str(tmp_path))
    assert spark_cds.java_options() == ""
    assert spark_cds.driver_class_path() == ""
    assert spark_cds.archive_path().parent == tmp_path


def test_the_unsigned_copies_hold_every_entry_but_the_signatures(tmp_path: Path) -> None:
    """Janino's jars are signed (so the JVM would not archive their classes); the copies
    hold the same entries, byte for byte, without the signature files."""
    import zipfile

    dest = tmp_path / "jars"
    spark_cds._write_unsigned_copies(dest)
    copies = sorted(dest.glob("*.jar"))
    assert [c.name.rsplit("-", 1)[0] for c in copies] == ["commons-compiler", "janino"]
    for copy in copies:
        with zipfile.ZipFile(spark_cds._spark_jars() / copy.name) as a, zipfile.ZipFile(copy) as b:
            signatures = [n for n in a.namelist() if spark_cds._SIGNATURE.match(n)]
            assert signatures  # the original is signed
            assert sorted(b.namelist()) == sorted(set(a.namelist()) - set(signatures))
            assert all(a.read(n) == b.read(n) for n in b.namelist())


def test_a_failed_build_says_why_and_leaves_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPINDLE_SPARK_CDS_DIR", str(tmp_path / "cds"))
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))  # Spark cannot start
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    with pytest.raises(RuntimeError, match="no class-data archive"):
        spark_cds.build()
    assert list((tmp_path / "cds").iterdir()) == []


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"SPINDLE_SPARK_CDS": "false"},
        {"SPINDLE_SPARK_CDS": "0", "SPINDLE_SPARK_CDS_DIR": "/x/cds"},
        {"SPINDLE_SPARK_CDS": "yes", "SPINDLE_SPARK_CDS_DIR": "/y"},
    ],
)
def test_the_runtime_reads_the_archive_settings_as_the_control_plane_documents_them(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str]
) -> None:
    """The driver reads them without the control plane's Settings (the runtime does not
    import backend); both must agree."""
    from backend.settings import Settings

    monkeypatch.delenv("SPINDLE_SPARK_CDS", raising=False)
    monkeypatch.delenv("SPINDLE_SPARK_CDS_DIR", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    s = Settings()
    default_dir = Path(sys.prefix) / "share" / "spindle"
    assert spark_cds._settings() == (s.spark_cds, s.spark_cds_dir or default_dir)
