"""``/openapi.json`` generates clients: openapi-typescript's types check a TypeScript
flow (tsc fails when a write route's body is untyped) that then runs against the live
server in Node; datamodel-code-generator's pydantic models drive a Python flow; and
schemathesis, with all its checks, finds no failure.

The generators run outside the project's environment: ``.ci/run`` installs them and
names them in ``SESSION_ACTORS_OPENAPI_TS``, ``SESSION_ACTORS_TSC`` and
``SESSION_ACTORS_DATAMODEL_CODEGEN``; without them (a local run) these tests skip,
in CI (``SESSION_ACTORS_REQUIRE_PG=1``) they fail.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .client import Server

HERE = Path(__file__).parent / "openapi_clients"
#: Test cases per operation and the seed: bounded, so the run stays some 40 s.
CASES, SEED = 5, 2


def _tool(variable: str, name: str) -> str:
    found = os.environ.get(variable) or shutil.which(name)
    if not found:
        if os.environ.get("SESSION_ACTORS_REQUIRE_PG") == "1":
            pytest.fail(f"{name} is missing: .ci/run installs it and sets {variable}")
        pytest.skip(f"{name} is not installed (set {variable})")
    return found


@pytest.fixture
def ts_tools() -> tuple[str, str, str]:
    """Looked up before the server starts (a skip never races the server's start)."""
    return (
        _tool("SESSION_ACTORS_OPENAPI_TS", "openapi-typescript"),
        _tool("SESSION_ACTORS_TSC", "tsc"),
        _tool("SESSION_ACTORS_NODE", "node"),
    )


@pytest.fixture
def codegen() -> str:
    return _tool("SESSION_ACTORS_DATAMODEL_CODEGEN", "datamodel-codegen")


@pytest.fixture
def schemathesis() -> str:
    return _tool("SESSION_ACTORS_SCHEMATHESIS", "schemathesis")


def _document(server: Server, into: Path) -> Path:
    answer = server.call("GET", "/openapi.json")
    assert answer.status == 200
    path = into / "openapi.json"
    path.write_text(json.dumps(answer.body), encoding="utf-8")
    return path


def _run(args: list[str], **kw) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(args, capture_output=True, text=True, timeout=300, **kw)
    assert done.returncode == 0, f"{args[0]}: {done.stdout[-3000:]} {done.stderr[-3000:]}"
    return done


def test_the_document_names_its_schemas_security_and_errors(server: Server):
    doc = server.call("GET", "/openapi.json").body
    assert doc["openapi"].startswith("3.1")
    schemas = doc["components"]["schemas"]
    assert {"Message", "StoredMessage", "SessionInfo", "Turn", "Outcome", "Error"} <= set(schemas)
    assert doc["components"]["securitySchemes"]["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "a token of the token file",
    }
    for path, operations in doc["paths"].items():
        for method, operation in operations.items():
            if path not in ("/healthz", "/readyz"):
                assert {"401", "403", "503"} <= set(operation["responses"]), (method, path)
    append = doc["paths"]["/v1/sessions/{session_id}/messages"]["post"]
    assert append["requestBody"]["content"]["application/json"]["schema"]["oneOf"][0] == {
        "$ref": "#/components/schemas/Message"
    }


def test_a_typescript_client_from_openapi_typescript_types_every_write_and_runs_a_flow(ts_tools, server, tmp_path):
    generator, tsc, node = ts_tools
    document = _document(server, tmp_path)
    _run([generator, str(document), "-o", str(tmp_path / "api.d.ts")])
    assert "requestBody?: never" in (tmp_path / "api.d.ts").read_text()  # routes without a body say so
    shutil.copy(HERE / "flow.ts", tmp_path / "flow.ts")
    # --skipLibCheck: the generated declarations' recursive metadata type is not ours to check
    options = ["--strict", "--skipLibCheck", "--target", "es2022", "--module", "commonjs", "--lib", "es2022,dom"]
    _run([tsc, *options, "--outDir", str(tmp_path / "out"), str(tmp_path / "flow.ts")])
    done = _run([node, str(tmp_path / "out" / "flow.js"), str(server.port), server.tokens["bot"]])
    assert json.loads(done.stdout)["typed"] == [False] * 5


def test_pydantic_models_from_datamodel_code_generator_drive_a_python_flow(codegen, server, tmp_path):
    generator = codegen
    document = _document(server, tmp_path)
    models = tmp_path / "models.py"
    _run([generator, "--input", str(document), "--input-file-type", "openapi", "--output", str(models)])
    _run(
        [sys.executable, "-m", "tests.serve.openapi_clients.flow", str(models), str(server.port), server.tokens["bot"]]
    )


@pytest.mark.timeout(300)
def test_schemathesis_with_all_checks_finds_no_failure(schemathesis, server, tmp_path):
    args = [
        schemathesis,
        "run",
        f"http://127.0.0.1:{server.port}/openapi.json",
        "--checks",
        "all",
        "--max-examples",
        str(CASES),
        "--seed",
        str(SEED),
        "--phases",
        "examples,coverage,fuzzing",
        "--workers",
        "1",
        "--no-color",
        "--generation-database",
        "none",
        "--header",
        f"Authorization: Bearer {server.tokens['admin']}",
        # an event stream never ends: each case would wait out the request timeout (tests/serve/test_events.py)
        "--exclude-path",
        "/v1/events",
    ]
    done = subprocess.run(args, capture_output=True, text=True, timeout=280, cwd=tmp_path)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-500:]
    print(f"schemathesis: {summary}")
    assert done.returncode == 0, done.stdout[-6000:]
