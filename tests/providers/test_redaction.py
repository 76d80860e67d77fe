"""API keys never appear in exception messages, reprs or logs."""

from __future__ import annotations

import logging
import os
import pickle
import subprocess
import sys
import traceback
from pathlib import Path

import pytest

from interlock.providers import (
    HttpEndpoint,
    ModelConfig,
    OpenAIChatProvider,
    ProviderError,
    ProviderLimiter,
    ProviderRegistry,
    RetryPolicy,
    Secret,
    redact,
)
from interlock.providers.redaction import redact_file, safe_url, scrub

from .conftest import RecordingSleep
from .fake_llm_server import FakeServer, Fault
from .helpers import anthropic, openai, request, resolved, run

CANARY = "sk-canary-5f1e2d3c4b5a69788796a5b4"


def _everything_said(error: BaseException) -> str:
    """The message, repr and formatted traceback of an exception and its causes."""
    return "".join(traceback.format_exception(error)) + repr(error) + str(error)


def test_secret_masks_its_value() -> None:
    """A Secret's repr and str show a mask, and it refuses to be pickled."""
    secret = Secret(CANARY)
    assert CANARY not in repr(secret) and CANARY not in str(secret) and CANARY not in f"{secret}"
    assert secret.reveal() == CANARY
    with pytest.raises(TypeError):
        pickle.dumps(secret)


def test_redact_replaces_every_occurrence() -> None:
    """redact removes each occurrence of each key from a text."""
    text = f"key {CANARY} and again {CANARY}"
    assert redact(text, [None, Secret(CANARY)]) == "key [redacted] and again [redacted]"


def test_echoed_key_in_a_401_body_is_redacted(
    server: FakeServer, sleep: RecordingSleep, caplog: pytest.LogCaptureFixture
) -> None:
    """When the server echoes a rejected key, neither the error nor the logs contain it."""
    caplog.set_level(logging.DEBUG)
    provider = openai(server, sleep, key=CANARY)
    with pytest.raises(ProviderError) as caught:
        run(provider, lambda: provider.complete(request()))
    assert server.requests[0].headers["authorization"] == f"Bearer {CANARY}"  # it was sent
    assert "Incorrect API key provided: [redacted]" in str(caught.value)
    assert CANARY not in _everything_said(caught.value)
    assert CANARY not in caplog.text
    assert CANARY not in repr(provider)


def test_retry_logs_do_not_contain_the_key(
    server: FakeServer, sleep: RecordingSleep, caplog: pytest.LogCaptureFixture
) -> None:
    """Retries are logged without the key, even at debug level for the HTTP library."""
    caplog.set_level(logging.DEBUG)
    server.state.api_key = CANARY
    server.fail_next(Fault(status=429, retry_after="1"), Fault(status=500))
    provider = openai(server, sleep, key=CANARY)
    run(provider, lambda: provider.complete(request()))
    assert "retry 1 of 3" in caplog.text
    assert CANARY not in caplog.text


def test_config_and_resolved_model_reprs_hide_the_key(tmp_path: Path) -> None:
    """Printing the configuration, a resolved alias or its key shows no key."""
    (tmp_path / "interlock.toml").write_text(
        '[models.main]\nprovider = "openai"\nmodel = "gpt-test"\n', encoding="utf-8"
    )
    config = ModelConfig.load([tmp_path], env={"OPENAI_API_KEY": CANARY})
    resolved = config.resolve("main")
    key = config.api_key(resolved)
    assert key is not None and key.reveal() == CANARY
    for shown in (repr(config), str(config), repr(resolved), repr(key)):
        assert CANARY not in shown


def test_built_provider_hides_the_key(tmp_path: Path) -> None:
    """A provider built from configuration has no key in its repr or attributes' reprs."""
    (tmp_path / "interlock.toml").write_text(
        '[models.main]\nprovider = "anthropic"\nmodel = "claude-test"\n', encoding="utf-8"
    )
    config = ModelConfig.load([tmp_path], env={"ANTHROPIC_API_KEY": CANARY})
    provider = ProviderRegistry().build(config.resolve("main"), config)
    assert CANARY not in repr(provider)
    assert all(CANARY not in repr(value) for value in vars(provider).values())


ODD_KEY = "local/key+with=odd chars 42"  # a key no credential shape matches


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_a_key_echoed_inside_the_stream_is_redacted(
    server: FakeServer, sleep: RecordingSleep, wire: str
) -> None:
    """An error event in a started stream (OpenAI `data: {"error": ...}`, Anthropic
    `event: error`) that quotes the key is raised with the key masked."""
    server.state.api_key = ODD_KEY
    server.fail_next(Fault(echo="stream"))
    provider = (openai if wire == "openai" else anthropic)(server, sleep, key=ODD_KEY)
    model = "gpt-test" if wire == "openai" else "claude-test"
    with pytest.raises(ProviderError) as caught:
        run(provider, lambda: provider.complete(request(model=model)))
    assert "error during the stream" in str(caught.value) and "[redacted]" in str(caught.value)
    assert ODD_KEY not in _everything_said(caught.value)


def test_scrub_masks_every_spelling_and_shape_of_a_key() -> None:
    """The key as sent, JSON-escaped and URL-encoded is masked, and so are bearer tokens,
    sk- keys and key parameters this process never held; ordinary words stay."""
    secret = Secret('k"ey/with\\odd+chars')
    text = (
        'plain k"ey/with\\odd+chars json k\\"ey/with\\\\odd+chars url k%22ey%2Fwith%5Codd%2Bchars'
        " | Authorization: Bearer abcdefghijklmnop | sk-ant-api03-AAAABBBBCCCCDDDD"
        ' | {"api_key": "zzzzyyyyxxxx"} | https://h/v1?key=AIzaSyQQQQQQQQ&x=1 | tokens: 12'
    )
    masked = scrub(text, [secret])
    for leaked in ("odd+chars", "odd%2B", "abcdefghijklmnop", "AAAABBBB", "zzzzyyyy", "AIzaSyQ"):
        assert leaked not in masked, masked
    assert "Bearer [redacted]" in masked and "tokens: 12" in masked and "&x=1" in masked


def test_messages_show_urls_without_user_info_or_query() -> None:
    """A base URL carrying credentials is shown without them."""
    assert safe_url("https://user:pw@api.example.com:8443/v1/x?key=abc") == (
        "https://api.example.com:8443/v1/x"
    )
    assert safe_url("http://[::1]:8080/v1") == "http://[::1]:8080/v1"


def test_a_key_in_the_base_url_stays_out_of_errors_and_logs(
    sleep: RecordingSleep, caplog: pytest.LogCaptureFixture
) -> None:
    """A key placed in the base URL's query string appears neither in the connection error
    nor in httpx's request log line."""
    caplog.set_level(logging.DEBUG)
    endpoint = HttpEndpoint(
        name="q",
        base_url="http://127.0.0.1:9/v1?key=AIzaSyCANARYCANARY42",
        limiter=ProviderLimiter(max_concurrency=1),
        retry=RetryPolicy(max_attempts=1, sleep=sleep),
    )
    provider = OpenAIChatProvider(endpoint=endpoint, resolved=resolved(), api_key=None)
    with pytest.raises(ProviderError) as caught:
        run(provider, lambda: provider.complete(request()))
    assert "connection to http://127.0.0.1:9/v1/chat/completions failed" in str(caught.value)
    assert "AIzaSyCANARY" not in _everything_said(caught.value) + caplog.text + repr(endpoint)


def test_redact_file_masks_keys_in_a_file_and_leaves_one_without_untouched(
    tmp_path: Path,
) -> None:
    """Every spelling of a key in a log is masked, over many lines; a file without a key is
    not written again."""
    log = tmp_path / "x.stderr"
    lines = [f"line {i}\n".encode() for i in range(50_000)]
    lines[10] = f"token {CANARY} and {CANARY}\n".encode()
    lines[40_000] = b'{"key": "' + CANARY.encode() + b'"}\n'
    log.write_bytes(b"".join(lines))
    assert redact_file(log, [Secret(CANARY), None])
    text = log.read_text()
    assert CANARY not in text and text.count("[redacted]") == 3
    assert text.count("\n") == 50_000 and "line 49999\n" in text
    clean = tmp_path / "clean.stdout"
    clean.write_text("nothing to hide\n")
    before = clean.stat().st_mtime_ns, clean.stat().st_ino
    assert not redact_file(clean, [Secret(CANARY)])
    assert (clean.stat().st_mtime_ns, clean.stat().st_ino) == before
    assert not redact_file(clean, [Secret("short")])  # too short to be a key: ignored


def test_a_command_printing_a_provider_key_leaves_it_nowhere(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """A command worker given a provider key by name (`env:` of the worker or its pipeline)
    that prints the key to stderr and fails, or to its log and succeeds, leaves no trace of the key
    in the ledger, status.json, its logs or what the CLI prints; a `call:` function whose
    exception carries it likewise."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "interlock.toml").write_text(
        '[providers.p]\nkind = "openai"\nbase_url = "http://127.0.0.1:9/v1"\n'
        'api_key_env = "LEAKY_KEY"\n[models.m]\nprovider = "p"\nmodel = "x"\n'
    )
    (project / "leaky.py").write_text(
        "import os\n"
        "def fail(context):\n"
        "    raise RuntimeError('request with ' + os.environ['LEAKY_KEY'] + ' refused')\n"
    )
    say = "import os, sys; print('key', os.environ['LEAKY_KEY'], file=sys.stderr)"
    write = "open(os.environ['INTERLOCK_OUTPUT'], 'w').write('done')"
    (project / "flow.yaml").write_text(
        "ok:\n  phases:\n  - id: a\n    workers:\n"
        f'    - {{role: w, command: [python3, -c, "{say}; {write}"], env: [LEAKY_KEY],\n'
        "       final: true}\n"
        "bad:\n  env: [LEAKY_KEY]\n  phases:\n  - id: a\n    workers:\n"
        f'    - {{role: w, command: [python3, -c, "{say}; sys.exit(1)"], final: true}}\n'
        "raises:\n  phases:\n  - id: a\n    workers:\n"
        "    - {role: w, call: 'leaky:fail', final: true}\n"
    )
    path = os.pathsep.join([str(project), cli_env.get("PYTHONPATH", "")])
    env = {**cli_env, "LEAKY_KEY": CANARY, "PYTHONPATH": path}
    said = ""
    for pipeline, code in (("ok", 0), ("bad", 1), ("raises", 1)):
        result = subprocess.run(
            [sys.executable, "-m", "interlock", "run", "flow.yaml", pipeline, "-t", "t"],
            env=env, cwd=project, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert result.returncode == code, result.stderr
        said += result.stdout + result.stderr
    assert "[redacted]" in said
    home = Path(env["INTERLOCK_HOME"])
    found = [p for p in home.rglob("*") if p.is_file() and CANARY.encode() in p.read_bytes()]
    assert CANARY not in said and found == []
    logs = [p for p in home.rglob("*.stderr")]
    assert logs and all("key [redacted]" in p.read_text() for p in logs)
