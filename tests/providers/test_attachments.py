"""Images and PDFs a model worker reads are sent as image and document content."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from interlock import RunStatus

from .fake_llm_server import FakeServer
from .project import app_for, make_project

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
PDF = b"%PDF-1.4\n%fake document\n"


def attach_flow(project: Path, model: str, png_size: int = len(PNG)) -> Path:
    """Two commands write chart.png and paper.pdf; a model worker reads both and notes.md."""
    (project / "chart.bin").write_bytes(PNG + b"\x00" * (png_size - len(PNG)))
    (project / "paper.bin").write_bytes(PDF)
    copy = "import shutil, sys; shutil.copy(sys.argv[1], sys.argv[2])"
    flow = project / "attach.yaml"
    flow.write_text(
        f"""
p:
  phases:
  - id: make
    workers:
    - {{role: chart, output: chart.png,
        command: ["{{python}}", "-c", "{copy}", "{{workflow_dir}}/chart.bin", "{{output}}"]}}
    - {{role: paper, output: paper.pdf,
        command: ["{{python}}", "-c", "{copy}", "{{workflow_dir}}/paper.bin", "{{output}}"]}}
    - {{role: notes, command: ["{{python}}", "-c", "print('plain notes')"]}}
  - id: describe
    workers:
    - {{role: describer, model: {model}, final: true,
        reads: [chart.png, paper.pdf, notes.md]}}
"""
    )
    return flow


def test_openai_gets_an_image_url_and_a_file_part(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The PNG is a data URL image part and the PDF a file part; text files stay text."""
    project = make_project(tmp_path, server, monkeypatch)
    state = app_for(project).run(attach_flow(project, "gpt"), topic="t")
    assert state.status is RunStatus.DELIVERED, state.failure
    text, image, document = server.requests[-1].body["messages"][-1]["content"]
    assert text["type"] == "text" and "plain notes" in text["text"]
    assert "chart.png (image/png)" in text["text"] and "\x89PNG" not in text["text"]
    assert image == {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64," + base64.b64encode(PNG).decode()},
    }
    assert document["type"] == "file" and document["file"]["filename"] == "paper.pdf"
    assert document["file"]["file_data"].startswith("data:application/pdf;base64,")


def test_anthropic_gets_image_and_document_blocks_before_the_text(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Base64 image and document sources, in the Messages API's shape."""
    project = make_project(tmp_path, server, monkeypatch)
    state = app_for(project).run(attach_flow(project, "claude"), topic="t")
    assert state.status is RunStatus.DELIVERED, state.failure
    image, document, text = server.requests[-1].body["messages"][0]["content"]
    assert image["type"] == "image"
    assert image["source"] == {
        "type": "base64",
        "media_type": "image/png",
        "data": base64.b64encode(PNG).decode(),
    }
    assert document["type"] == "document" and document["title"] == "paper.pdf"
    assert base64.b64decode(document["source"]["data"]) == PDF
    assert text["type"] == "text" and "plain notes" in text["text"]


def test_an_image_over_the_providers_limit_fails_before_sending(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 6 MB image for an Anthropic model fails the attempt naming the file, its size and
    the 5 MB limit, and nothing is sent."""
    project = make_project(tmp_path, server, monkeypatch)
    flow = attach_flow(project, "claude", png_size=6 * 1024 * 1024)
    state = app_for(project).run(flow, topic="t")
    assert state.status is RunStatus.FAILED
    assert "reads 'chart.png' (6.0 MB), larger than the 5 MB" in (state.failure or "")
    assert server.requests == []
