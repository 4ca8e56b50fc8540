"""A histogram drawn to a PNG file, with no imaging library: RGB pixels, zlib, and the five
chunks a PNG needs (PNG specification, ISO/IEC 15948: signature, IHDR, IDAT, IEND; each chunk
length + type + data + CRC-32 of type and data).

Layer: adapter.export (output helper). Knows pixels and a 3x5 bitmap font for axis labels;
nothing of traces.
"""
from __future__ import annotations

import struct
import zlib

WHITE, BLACK, GREY = (255, 255, 255), (40, 40, 40), (200, 200, 200)
BAR = (66, 114, 196)
MARKS = {"P50": (46, 160, 67), "P90": (230, 140, 20), "P99": (210, 40, 40)}

# 3x5 glyphs, rows top to bottom, 3 bits each (4 = left column).
FONT = {
    "0": (7, 5, 5, 5, 7), "1": (2, 6, 2, 2, 7), "2": (7, 1, 7, 4, 7), "3": (7, 1, 7, 1, 7),
    "4": (5, 5, 7, 1, 1), "5": (7, 4, 7, 1, 7), "6": (7, 4, 7, 5, 7), "7": (7, 1, 2, 2, 2),
    "8": (7, 5, 7, 5, 7), "9": (7, 5, 7, 1, 7), ".": (0, 0, 0, 0, 2), " ": (0, 0, 0, 0, 0),
    "n": (0, 0, 6, 5, 5), "s": (0, 3, 6, 1, 6), "u": (0, 0, 5, 5, 7), "m": (0, 0, 7, 7, 5),
    "P": (6, 5, 6, 4, 4), "=": (0, 7, 0, 7, 0), "k": (4, 5, 6, 5, 5), "M": (5, 7, 7, 5, 5),
    "c": (0, 0, 7, 4, 7), "y": (0, 5, 7, 1, 6), "l": (4, 4, 4, 4, 3), "e": (0, 7, 7, 4, 7),
    "-": (0, 0, 7, 0, 0), "x": (0, 5, 2, 5, 0),
}


class Canvas:
    def __init__(self, width: int, height: int, background=WHITE):
        self.width, self.height = width, height
        self.pixels = bytearray(bytes(background) * (width * height))

    def fill(self, x0: int, y0: int, x1: int, y1: int, color) -> None:
        """Fill the rectangle [x0, x1) x [y0, y1), clipped to the canvas."""
        x0, x1 = max(0, x0), min(self.width, x1)
        y0, y1 = max(0, y0), min(self.height, y1)
        if x0 >= x1:
            return
        row = bytes(color) * (x1 - x0)
        for y in range(y0, y1):
            start = 3 * (y * self.width + x0)
            self.pixels[start:start + len(row)] = row

    def text(self, x: int, y: int, text: str, color=BLACK, scale: int = 2) -> None:
        for char in text:
            for r, bits in enumerate(FONT.get(char, FONT[" "])):
                for c in range(3):
                    if bits & (4 >> c):
                        self.fill(x + c * scale, y + r * scale, x + (c + 1) * scale,
                                  y + (r + 1) * scale, color)
            x += 4 * scale

    def png(self) -> bytes:
        raw = b"".join(b"\x00" + bytes(self.pixels[3 * y * self.width: 3 * (y + 1) * self.width])
                       for y in range(self.height))  # filter type 0 (None) on every row

        def chunk(kind: bytes, data: bytes) -> bytes:
            return (struct.pack(">I", len(data)) + kind + data
                    + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

        header = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)  # 8-bit RGB
        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
                + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def format_ns(ns: float) -> str:
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g}{unit}"
    return f"{ns:.0f}ns"


def histogram_png(values: list[int], marks: dict[str, int], bins: int = 40,
                  width: int = 720, height: int = 400) -> bytes:
    """A histogram of `values` (nanoseconds) with vertical lines at `marks` (name -> value,
    colored as in MARKS) and labelled x axis ends and count axis. Raises ValueError when
    `values` is empty."""
    if not values:
        raise ValueError("no values to draw")
    lo, hi = min(values), max(values)
    span = max(1, hi - lo)
    counts = [0] * bins
    for v in values:
        counts[min(bins - 1, (v - lo) * bins // span)] += 1
    canvas = Canvas(width, height)
    left, right, top, bottom = 60, width - 20, 40, height - 40
    plot_w, plot_h = right - left, bottom - top
    peak = max(counts)
    for y in range(5):  # grid
        gy = bottom - plot_h * y // 4
        canvas.fill(left, gy, right, gy + 1, GREY)
        canvas.text(6, gy - 5, str(peak * y // 4))
    bar_w = plot_w / bins
    for i, count in enumerate(counts):
        if count:
            x0 = left + int(i * bar_w) + 1
            x1 = left + int((i + 1) * bar_w) - 1
            canvas.fill(x0, bottom - plot_h * count // peak, max(x1, x0 + 1), bottom, BAR)
    canvas.fill(left, top, left + 2, bottom, BLACK)
    canvas.fill(left, bottom, right, bottom + 2, BLACK)
    canvas.text(left, bottom + 10, format_ns(lo))
    label = format_ns(hi)
    canvas.text(right - 8 * len(label), bottom + 10, label)
    legend_x = left + 10
    for name, value in marks.items():
        color = MARKS.get(name, BLACK)
        x = left + int((value - lo) * plot_w / span)
        canvas.fill(x - 1, top, x + 1, bottom, color)
        text = f"{name}={format_ns(value)}"
        canvas.text(legend_x, 12, text, color)
        legend_x += 8 * len(text) + 20
    return canvas.png()
