"""Remake docs/explorer.png: the attention explorer on a trained model, in headless Debian chromium.

    python docs/explorer_screenshot.py outputs/toy            # after `vaswani-train toy`

Translates the sentence below with the model's own decoding, opens the Look tab on the encoder-decoder attention
of the last decoder layer with output token 8 chosen (for the toy model: "gruoner", the adjective that the target
language puts after its noun), and saves the top of the page as a 256-colour PNG.
"""

import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, for tests/

from hf_vaswani_training.serving.explore import build_app, launch_options  # noqa: E402
from tests.conftest import CHROMIUM, CHROMIUM_ARGS, free_port  # noqa: E402

SENTENCE = "The old dog does not sleep in the green garden ."
OUTPUT_TOKEN = 8


def main(model: str, path: str = "docs/explorer.png") -> None:
    from PIL import Image

    port = free_port()
    app = build_app(model)
    app.launch(server_port=port, prevent_thread_lock=True, quiet=True, **launch_options())
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1200, "height": 1000})
            page.goto(f"http://127.0.0.1:{port}/")
            page.fill("#sentence textarea", SENTENCE)
            page.click("#translate-button")
            page.wait_for_function("Number(document.querySelector('#answers input').value) > 0")
            print(page.input_value("#translation textarea"))
            page.get_by_role("tab", name="Look").click()
            page.click("#output-token input")
            page.locator("ul[role=listbox] li").nth(OUTPUT_TOKEN).click()
            page.wait_for_function(f"document.querySelector('#alignment')?.dataset.position === '{OUTPUT_TOKEN}'")
            page.screenshot(path="/tmp/explorer-full.png", full_page=True)
            browser.close()
    finally:
        app.close()
    image = Image.open("/tmp/explorer-full.png").convert("RGB")
    image = image.crop((100, 0, 1100, min(1175, image.height)))  # the page down to the alignment's source tokens
    image.quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(path, optimize=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
