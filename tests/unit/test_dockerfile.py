"""The Dockerfile's facts, checked without a Docker engine (parsed with dockerfile-parse):
the official Airflow image of the locked version, Java 17, the project from uv.lock, the
Maven jars baked in where the settings look for them, no secret in the image."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from dockerfile_parse import DockerfileParser

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
SECRET_NAME = re.compile(
    r"PASSWORD|SECRET|FERNET|TOKEN|_KEY$|SQL_ALCHEMY_CONN|AIRFLOW_CONN_", re.IGNORECASE
)


@pytest.fixture(scope="module")
def dockerfile() -> DockerfileParser:
    parser = DockerfileParser(str(ROOT / "Dockerfile"))
    parser.content  # noqa: B018 (read the file now: a parse error fails here)
    return parser


def stages(parser: DockerfileParser) -> list[dict[str, Any]]:
    """``[{"name", "image", "instructions": [(instruction, value), ...]}]`` in file order;
    build arguments substituted as Docker does."""
    found: list[dict[str, Any]] = []
    images = iter(parser.parent_images)
    for item in parser.structure:
        if item["instruction"] == "FROM":
            name = item["value"].split()[-1] if " AS " in item["value"].upper() else None
            found.append({"name": name, "image": next(images), "instructions": []})
        elif found:
            found[-1]["instructions"].append((item["instruction"], item["value"]))
    return found


def locked_version(package: str) -> str:
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    return next(p["version"] for p in lock["package"] if p["name"] == package)


def test_based_on_the_official_airflow_image_of_the_locked_version(dockerfile) -> None:
    expected = f"apache/airflow:{locked_version('apache-airflow')}-python3.11"
    assert dockerfile.baseimage == expected
    python = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert "3.11" in python
    # Every Airflow-based stage uses the same image (the requirements are exported there).
    assert {s["image"] for s in stages(dockerfile) if "airflow" in s["image"]} == {expected}


def test_java_17_is_installed_and_found(dockerfile) -> None:
    final = stages(dockerfile)[-1]["instructions"]
    runs = " ".join(value for kind, value in final if kind == "RUN")
    assert "openjdk-17-jre-headless" in runs
    assert "java-17-openjdk" in dockerfile.envs["JAVA_HOME"]


def test_the_maven_jars_are_baked_in_where_the_settings_look(dockerfile) -> None:
    all_stages = stages(dockerfile)
    jars = next(s for s in all_stages if s["name"] == "jars")
    build = " ".join(value for kind, value in jars["instructions"] if kind == "RUN")
    assert "mvn" in build
    assert "include/maven/pom.xml" in build
    copies = [value for kind, value in all_stages[-1]["instructions"] if kind == "COPY"]
    jars_dir = dockerfile.envs["INGEST_JARS_DIR"]
    # spark_jobs.session looks in <INGEST_JARS_DIR>/spark and <INGEST_JARS_DIR>/localfs
    # (spark_jar_paths, local_file_system_jar), and the image's profiles use both; the Delta
    # log store's module writes its jar into the spark folder.
    assert "-pl spark,localfs,logstore " in build
    for folder in ("spark", "localfs"):
        assert any(
            c.startswith("--from=jars ") and c.split()[-1] == f"{jars_dir}/{folder}" for c in copies
        ), copies


def test_the_image_records_the_drivers_class_data_archive_after_installing(dockerfile) -> None:
    runs = [value for kind, value in stages(dockerfile)[-1]["instructions"] if kind == "RUN"]
    installs = next(i for i, run in enumerate(runs) if "pip install" in run and " -e " in run)
    records = [i for i, run in enumerate(runs) if "-m spark_jobs.class_data_archive" in run]
    assert records, runs
    assert records[0] > installs, runs


def test_the_project_is_installed_from_the_lock_file(dockerfile) -> None:
    all_stages = stages(dockerfile)
    export = " ".join(
        value
        for s in all_stages
        for kind, value in s["instructions"]
        if kind == "RUN" and "uv export" in value
    )
    assert "--locked" in export
    assert "--no-dev" in export
    install = " ".join(
        value
        for kind, value in all_stages[-1]["instructions"]
        if kind == "RUN" and "pip install" in value
    )
    assert "--require-hashes" in install
    assert "--no-deps" in install  # exactly the lock's versions, no resolver
    makefile = (ROOT / "Makefile").read_text()
    uv_version = re.search(r"^UV_VERSION\s*:=\s*(\S+)", makefile, re.MULTILINE)
    assert uv_version is not None
    build_args = dict(
        item["value"].split("=", 1)
        for item in dockerfile.structure
        if item["instruction"] == "ARG" and "=" in item["value"]
    )
    assert build_args["UV_VERSION"] == uv_version.group(1)
    copied = " ".join(value for kind, value in all_stages[-1]["instructions"] if kind == "COPY")
    for source in (
        "ingest_core/",
        "ingestctl/",
        "spark_jobs/",
        "plugins/",
        "dags/",
        "include/",
        "uv.lock",
    ):
        assert source in copied


def test_runs_as_airflow_and_holds_no_secret(dockerfile) -> None:
    final = stages(dockerfile)[-1]["instructions"]
    users = [value for kind, value in final if kind == "USER"]
    assert users[-1] == "airflow"
    names = [*dockerfile.envs] + [
        item["value"].split("=")[0] for item in dockerfile.structure if item["instruction"] == "ARG"
    ]
    assert not [n for n in names if SECRET_NAME.search(n)], names
    assert not any(re.search(r"://[^/\s:]+:[^@\s]+@", v) for v in dockerfile.envs.values())
    # nothing installs at container start (the official image's escape hatch stays unused)
    assert "_PIP_ADDITIONAL_REQUIREMENTS" not in dockerfile.content
    assert not [kind for kind, _ in final if kind in ("ENTRYPOINT", "CMD")]


def test_build_context_leaves_out_local_state_and_secrets() -> None:
    ignored = (ROOT / ".dockerignore").read_text().split()
    for entry in (".venv", ".ingest", ".env", ".git"):
        assert entry in ignored


def test_every_module_the_runtime_code_imports_is_a_runtime_dependency() -> None:
    """The image installs the lock's runtime set only (``uv export --no-dev``): a module the
    platform imports at run time from a dev-only package fails there on import (deltalake,
    used by the gates' bookkeeping and by recovery, was dev-only). Every third-party import in
    ingest_core/, ingestctl/, spark_jobs/, plugins/ and dags/ must belong to a distribution of
    that set."""
    import ast
    import subprocess
    import sys
    from importlib.metadata import packages_distributions

    uv = ROOT / ".ingest" / "tools" / "bin" / "uv"
    export = subprocess.run(
        [
            str(uv),
            "export",
            "--locked",
            "--no-dev",
            "--no-emit-project",
            "--no-hashes",
            "--format",
            "requirements-txt",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    lines = [line for line in export.splitlines() if line and not line.startswith((" ", "#"))]
    runtime = {
        re.split(r"[=<>\[ ;]", line, maxsplit=1)[0].lower().replace("_", "-") for line in lines
    }
    ours = {"ingest_core", "ingestctl", "spark_jobs", "ingest_platform", "bench", "tests"}
    owners = packages_distributions()
    missing = {}
    for folder in ("ingest_core", "ingestctl", "spark_jobs", "plugins", "dags"):
        for source in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(source.read_text())):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top in ours or top in sys.stdlib_module_names or top == "__future__":
                        continue
                    distributions = {d.lower().replace("_", "-") for d in owners.get(top, [])}
                    if not distributions & runtime:
                        missing[top] = str(source.relative_to(ROOT))
    assert missing == {}
