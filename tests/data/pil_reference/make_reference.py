"""Makes the PIL reference of tests/data/jpeg_region_test.cpp's comparison with torchvision: a photo-like 375 x 500
JPEG written by PIL at quality 90 (scene.jpg), and for each box in BOXES the box cropped and resized to its
output size as torchvision's resized_crop does it (PIL's crop, then resize with its bilinear filter, which
antialiases when it shrinks), as raw RGB bytes (box_<i>.rgb). Run by hand where Pillow is installed; the test
reads only the files.

    python3 tests/data/pil_reference/make_reference.py
"""
import math
import os

from PIL import Image

# (top, left, height, width, output side)
BOXES = [(10, 20, 80, 90, 112), (100, 333, 120, 160, 112), (0, 0, 375, 500, 160), (37, 61, 300, 400, 64),
         (5, 7, 360, 480, 32)]


def scene(h, w):
    pixels = bytearray(h * w * 3)
    for y in range(h):
        for x in range(w):
            r = 128 + 100 * math.sin(x / 37.0) * math.cos(y / 23.0)
            g = (x + 2 * y) % 255
            b = 200 if (x // 50 + y // 40) % 2 else 60
            pixels[(y * w + x) * 3:(y * w + x) * 3 + 3] = bytes((int(r), g, b))
    return Image.frombytes("RGB", (w, h), bytes(pixels))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    scene(375, 500).save(os.path.join(here, "scene.jpg"), quality=90)
    image = Image.open(os.path.join(here, "scene.jpg")).convert("RGB")
    for i, (top, left, h, w, side) in enumerate(BOXES):
        out = image.crop((left, top, left + w, top + h)).resize((side, side), Image.BILINEAR)
        with open(os.path.join(here, f"box_{i}.rgb"), "wb") as f:
            f.write(out.tobytes())


if __name__ == "__main__":
    main()
