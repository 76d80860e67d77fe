"""Images and PDFs a model worker reads: sent as image or document content, never as text.

Sizes are checked before anything is sent, against the limits each API documents for one
image or document, so an oversized file fails the attempt at once with its name and size
instead of as a 400 after the upload.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from interlock.providers.failures import ProviderError

MEDIA_TYPES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".webp": "image/webp",
    ".gif": "image/gif",
    ".pdf": "application/pdf",
}
"""File name endings read as attachments, and how they are labelled."""

MB = 1024 * 1024
# Per file, as the APIs document them: Anthropic 5 MB per image and 32 MB per request for
# PDFs; OpenAI 20 MB per image and 32 MB per file.
MAX_BYTES = {
    ("anthropic", "image"): 5 * MB,
    ("anthropic", "pdf"): 32 * MB,
    ("openai", "image"): 20 * MB,
    ("openai", "pdf"): 32 * MB,
}


@dataclass(frozen=True, kw_only=True)
class Attachment:
    """One image or PDF as it is sent."""

    name: str  # the file name the worker reads
    media_type: str
    data: bytes

    @property
    def is_pdf(self) -> bool:
        """Whether it is a document rather than an image."""
        return self.media_type == "application/pdf"

    def base64(self) -> str:
        """The bytes, base64-encoded."""
        return base64.b64encode(self.data).decode("ascii")


def media_type(name: str) -> str | None:
    """The media type of a file read as an attachment, None for a text file."""
    return MEDIA_TYPES.get(Path(name).suffix.lower())


def load_attachment(name: str, path: Path, kind: str, alias: str) -> Attachment:
    """Read an image or a PDF for a model of provider `kind`.

    Raises:
        ProviderError: Not retryable: the provider kind takes no files, or the file is
            larger than it accepts (the message names the file, its size and the limit).
    """
    kind_of_file = "pdf" if path.suffix.lower() == ".pdf" else "image"
    if kind == "cli":
        raise ProviderError(
            f"model {alias!r}: reads {name!r}, an {kind_of_file}, but an agent command gets "
            "only a text prompt; pass the file's path in a command worker instead",
            retryable=False,
        )
    size = path.stat().st_size
    limit = MAX_BYTES.get((kind, kind_of_file))
    if limit is not None and size > limit:
        raise ProviderError(
            f"model {alias!r}: reads {name!r} ({size / MB:.1f} MB), larger than the "
            f"{limit // MB} MB a {kind} model accepts for one {kind_of_file}; make it smaller "
            "(resize or split it) before this worker reads it",
            retryable=False,
        )
    return Attachment(
        name=name, media_type=MEDIA_TYPES[path.suffix.lower()], data=path.read_bytes()
    )


def openai_parts(attachments: tuple[Attachment, ...]) -> list[dict[str, Any]]:
    """Chat-completions content parts: ``image_url`` data URLs and ``file`` parts."""
    parts: list[dict[str, Any]] = []
    for item in attachments:
        url = f"data:{item.media_type};base64,{item.base64()}"
        if item.is_pdf:
            parts.append({"type": "file", "file": {"filename": item.name, "file_data": url}})
        else:
            parts.append({"type": "image_url", "image_url": {"url": url}})
    return parts


def anthropic_parts(attachments: tuple[Attachment, ...]) -> list[dict[str, Any]]:
    """Messages content blocks: ``image`` and ``document`` with base64 sources."""
    return [
        {
            "type": "document" if item.is_pdf else "image",
            "source": {"type": "base64", "media_type": item.media_type, "data": item.base64()},
            **({"title": item.name} if item.is_pdf else {}),
        }
        for item in attachments
    ]
