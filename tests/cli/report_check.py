#!/usr/bin/env python3
"""Checks of hap-report's pages, with the standard library only.

  report_check.py wellformed FILE        the page parses as XML (what xmllint --noout checks)
  report_check.py count FILE TAG [CLASS]  print how many TAG elements (with CLASS among their
                                          classes) the page holds
  report_check.py text FILE TEXT          exit 0 when some element's text is TEXT
  report_check.py png FILE [R,G,B]        the PNG is not blank: at least 1 % of its pixels not
                                          white, at least 8 distinct colours, and (given R,G,B)
                                          some pixel of that colour (a chart's first series)
"""
import struct
import sys
import xml.etree.ElementTree as ET
import zlib

SVG = "{http://www.w3.org/2000/svg}"
XHTML = "{http://www.w3.org/1999/xhtml}"


def elements(path):
    return ET.parse(path).getroot().iter()


def local(tag):
    return tag.split("}", 1)[-1]


def count(path, tag, cls=None):
    n = 0
    for e in elements(path):
        if local(e.tag) != tag:
            continue
        if cls is None or cls in e.get("class", "").split():
            n += 1
    return n


def png_pixels(path):
    """(width, height, channels, rows of bytes) of an 8-bit, non-interlaced RGB(A) or grey PNG."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = ihdr
    channels = {0: 1, 2: 3, 4: 2, 6: 4}.get(colour)
    if depth != 8 or channels is None or interlace != 0:
        raise ValueError("unsupported PNG (depth %d, colour type %d)" % (depth, colour))
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if f == 1:
            for i in range(channels, stride):
                line[i] = (line[i] + line[i - channels]) & 0xFF
        elif f == 2:
            line = bytearray((a + b) & 0xFF for a, b in zip(line, prev))
        elif f == 3:
            for i in range(stride):
                left = line[i - channels] if i >= channels else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 0xFF
        elif f == 4:
            for i in range(stride):
                a = line[i - channels] if i >= channels else 0
                b = prev[i]
                c = prev[i - channels] if i >= channels else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, height, channels, rows


def png_check(path, want=None):
    width, height, channels, rows = png_pixels(path)
    colours, non_white, found = set(), 0, want is None
    for line in rows:
        for x in range(0, len(line), channels):
            px = line[x:x + min(channels, 3)]
            if channels < 3:
                px = bytes([px[0]] * 3)
            colours.add(px)
            if px != b"\xff\xff\xff":
                non_white += 1
            if not found and all(abs(px[i] - want[i]) <= 6 for i in range(3)):
                found = True
    share = non_white / float(width * height)
    print("%s: %dx%d, %.1f%% not white, %d colours%s" %
          (path, width, height, 100 * share, len(colours),
           "" if want is None else (", colour %s %s" % (want, "found" if found else "MISSING"))))
    return share >= 0.01 and len(colours) >= 8 and found


def main(argv):
    if len(argv) < 3:
        print(__doc__)
        return 2
    cmd, path = argv[1], argv[2]
    if cmd == "wellformed":
        ET.parse(path)
        return 0
    if cmd == "count":
        print(count(path, argv[3], argv[4] if len(argv) > 4 else None))
        return 0
    if cmd == "text":
        return 0 if any((e.text or "") == argv[3] for e in elements(path)) else 1
    if cmd == "png":
        want = tuple(int(v) for v in argv[3].split(",")) if len(argv) > 3 else None
        return 0 if png_check(path, want) else 1
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
