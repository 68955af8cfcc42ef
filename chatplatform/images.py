"""Untrusted image bytes: what they really are, bounded before decoding, and the copies a
page and a model are given.

Used by chat attachments (``chat.attachments``) and by ``/v1/chat/completions`` image
parts (``openai_api.validation``), so both refuse the same files the same way.

* **The type comes from the bytes** (Pillow's format detection on the magic bytes), never
  from the file name or the browser's ``Content-Type``: only PNG, JPEG, WebP and GIF are
  accepted; an SVG, an HTML page renamed ``.png`` or a truncated file is refused.
* **Size before pixels**: the header gives the dimensions without decoding; an image over
  ``max_pixels`` (width × height) is refused before any pixel is decoded, so a
  decompression bomb (a 100 KB PNG declaring 50,000 × 50,000 pixels) costs nothing.
  Pillow's own ``MAX_IMAGE_PIXELS`` guard (a process-wide setting, left at its default) stays
  as a second line.
* **Copies**: a thumbnail (WebP, ``THUMBNAIL_EDGE_PX`` on the long edge) for the thread,
  and a model copy no larger than ``model_edge_px`` on its long edge (a JPEG may come out
  smaller: it is decoded at a reduced scale, never below half the edge) (the providers' own
  limits: Anthropic scales anything above ~1568 px down and refuses > 5 MB; OpenAI's high
  detail tiles at 2048 px). An image already within both limits is sent as uploaded.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

from django.utils.formats import number_format
from django.utils.translation import gettext as _

#: Formats accepted, as Pillow names them → the media type sent to a model.
MEDIA_TYPES = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp", "GIF": "image/gif"}
THUMBNAIL_EDGE_PX = 320
MODEL_COPY_MAX_BYTES = 4 * 1024 * 1024  # under Anthropic's 5 MB per image


class ImageRejected(ValueError):
    """The bytes are not an acceptable image. ``code``: ``not_an_image`` | ``unsupported_image``
    | ``image_too_large`` (pixels); the message says which, for the person who sent it."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class ImageInfo:
    media_type: str
    width: int
    height: int


@dataclass(frozen=True)
class PreparedImage:
    """An accepted image: what it is, its thumbnail (``image/webp``) and the copy a model gets
    (``model_data``; ``b""`` when the original is sent as it is)."""

    info: ImageInfo
    thumbnail: bytes
    model_data: bytes = b""
    model_media_type: str = ""


def _pil():
    from PIL import Image

    return Image


def inspect(raw: bytes, *, max_pixels: int) -> ImageInfo:
    """The image's type and size from its header only (nothing decoded). Raises
    :class:`ImageRejected`: not an image Pillow recognises, a format other than PNG, JPEG,
    WebP or GIF, or more than ``max_pixels`` pixels."""
    Image = _pil()
    try:
        with Image.open(io.BytesIO(raw), formats=None) as img:
            fmt, (width, height) = img.format, img.size
    except Image.DecompressionBombError as exc:  # Pillow's own guard, beyond twice its MAX_IMAGE_PIXELS
        raise ImageRejected("image_too_large", _("the image has more than %(max)s pixels — a decompression bomb?") % {
            "max": number_format(max_pixels, force_grouping=True)}) from exc
    except Exception as exc:  # UnidentifiedImageError, a truncated header, …
        raise ImageRejected("not_an_image", _("the file is not a PNG, JPEG, WebP or GIF image "
                                              "(its content does not match an image format)")) from exc
    if fmt not in MEDIA_TYPES:
        raise ImageRejected("unsupported_image", _("%(format)s images are not accepted (use PNG, JPEG, WebP or GIF)") % {
            "format": fmt or "?"})
    if width <= 0 or height <= 0:
        raise ImageRejected("not_an_image", _("the image has no pixels"))
    if width * height > max_pixels:
        raise ImageRejected(
            "image_too_large",
            _("the image is %(width)s × %(height)s pixels (at most %(max)s pixels) — a decompression bomb?") % {
                "width": number_format(width, force_grouping=True), "height": number_format(height, force_grouping=True),
                "max": number_format(max_pixels, force_grouping=True)},
        )
    return ImageInfo(media_type=MEDIA_TYPES[fmt], width=width, height=height)


def prepare(raw: bytes, *, max_pixels: int, model_edge_px: int) -> PreparedImage:
    """:func:`inspect`, then decode once (within the pixel limit) for the thumbnail and, when
    the image is larger than ``model_edge_px`` or ``MODEL_COPY_MAX_BYTES``, a smaller model
    copy (JPEG, or PNG when it has transparency). Raises :class:`ImageRejected` as
    :func:`inspect`, and ``not_an_image`` when the pixel data is broken."""
    info = inspect(raw, max_pixels=max_pixels)
    Image = _pil()
    try:
        with Image.open(io.BytesIO(raw)) as img:
            needs_copy = max(info.width, info.height) > model_edge_px or len(raw) > MODEL_COPY_MAX_BYTES
            if img.format == "JPEG":
                # Decode at a reduced scale (JPEG DCT scaling, 1/2 … 1/8): a fraction of the work.
                # Only the thumbnail needed: down to twice its size; a model copy: down to no
                # less than half its edge on either side (a 12-megapixel photo decodes at 1/2).
                want = model_edge_px // 2 if needs_copy else THUMBNAIL_EDGE_PX * 2
                img.draft("RGB", (want, want))
            img.seek(0)  # the first frame of an animation
            img.load()
            mode = "RGBA" if _has_alpha(img) else "RGB"
            frame = img if img.mode == mode else img.convert(mode)  # no copy when already so
    except ImageRejected:
        raise
    except Exception as exc:  # truncated or corrupt pixel data, a bomb past the header check
        raise ImageRejected("not_an_image", _("the image cannot be read (%(error)s)") % {"error": type(exc).__name__}) from exc
    model_data, model_type, smaller = b"", "", frame
    if needs_copy:
        # One resampling pass from the full image (BICUBIC: LANCZOS costs half as much again
        # for no difference a model sees); the thumbnail then comes from this smaller copy.
        smaller = frame.resize(_fit(frame.size, model_edge_px), Image.Resampling.BICUBIC, reducing_gap=3.0)
        out = io.BytesIO()
        if smaller.mode == "RGBA":
            smaller.save(out, "PNG", compress_level=1)
            model_type = "image/png"
        else:
            smaller.save(out, "JPEG", quality=85)
            model_type = "image/jpeg"
        model_data = out.getvalue()
    thumb = smaller.resize(_fit(smaller.size, THUMBNAIL_EDGE_PX), Image.Resampling.BILINEAR, reducing_gap=2.0)
    out = io.BytesIO()
    thumb.save(out, "WEBP", quality=80)
    return PreparedImage(info=info, thumbnail=out.getvalue(), model_data=model_data, model_media_type=model_type)


def _fit(size: tuple[int, int], edge: int) -> tuple[int, int]:
    """``size`` scaled to ``edge`` on its long side (never enlarged), at least 1 × 1."""
    width, height = size
    scale = min(1.0, edge / max(width, height))
    return max(1, round(width * scale)), max(1, round(height * scale))


def _has_alpha(img) -> bool:
    return img.mode in ("RGBA", "LA", "PA") or (img.mode == "P" and "transparency" in img.info)
