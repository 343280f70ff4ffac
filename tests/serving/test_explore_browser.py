"""The attention explorer in a real headless browser: Debian's chromium driven by Playwright.

`vaswani-explore` runs as a subprocess on 127.0.0.1 with a tiny model (make_model_folder in tests/conftest.py);
each test types into the page, presses its buttons and reads what the page shows, and compares it with `generate()`
called here. Screenshots go to tests/artifacts/ (git-ignored) for a person to look at.

Where chromium or Playwright is missing the tests are skipped with the reason; under CI=true that is a failure of
the CI setup instead (.ci/browser_deps.sh installs both).
"""

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from hf_vaswani_training.serving.attention_plot import display_tokens
from tests.conftest import CHROMIUM, CHROMIUM_ARGS, MAX_SOURCE_TOKENS, REPO_ROOT, SENTENCE, free_port, make_model_folder

pytest.importorskip("gradio", reason='the explorer needs gradio: pip install -e ".[dev]"')


ARTIFACTS = REPO_ROOT / "tests" / "artifacts"
STEP_TIMEOUT_MS = 120_000  # a busy 2-core machine decodes slowly; the page shows progress meanwhile


def unavailable(reason: str):
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but the browser cannot run: {reason} (.ci/browser_deps.sh should have installed it)")
    pytest.skip(f"browser test skipped: {reason}")


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as error:
        unavailable(f"Playwright is not installed ({error}); pip install playwright")
    if not Path(CHROMIUM).is_file():
        unavailable(f"{CHROMIUM} not found; apt-get install chromium")
    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as playwright:
        try:
            context = playwright.chromium.launch_persistent_context(
                str(profile),
                executable_path=CHROMIUM,
                args=CHROMIUM_ARGS,
                headless=True,
                viewport={"width": 1280, "height": 900},
            )
        except Exception as error:
            unavailable(f"chromium did not start: {str(error).splitlines()[0]}")
        yield context
        context.close()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_model_folder(tmp_path_factory.mktemp("browser-model"))


@pytest.fixture(scope="module")
def server(model_dir, browser, tmp_path_factory):
    """`python -m hf_vaswani_training.explore MODEL --port N`, until the page answers."""
    port = free_port()
    log = tmp_path_factory.mktemp("server") / "explore.log"
    with open(log, "wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "hf_vaswani_training.explore", str(model_dir), "--port", str(port)],
            cwd=REPO_ROOT,
            stdout=output,
            stderr=subprocess.STDOUT,
            env={**os.environ, "GRADIO_ANALYTICS_ENABLED": "False"},
        )
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 300
    try:
        while True:
            if process.poll() is not None:
                pytest.fail(f"vaswani-explore exited with {process.returncode}: {log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"vaswani-explore did not answer on {url} within 300 s: {log.read_text()[-2000:]}")
            time.sleep(1)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.fixture(scope="module")
def reference(model_dir):
    return AutoModelForSeq2SeqLM.from_pretrained(model_dir).eval(), AutoTokenizer.from_pretrained(model_dir)


@pytest.fixture
def page(browser, server):
    page = browser.new_page()
    page.set_default_timeout(STEP_TIMEOUT_MS)
    page.goto(server)
    page.wait_for_selector("#translate-button")
    yield page
    page.close()


def screenshot(page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def translate(page, sentence: str, *, greedy: bool = False, n_best: int | None = None) -> None:
    """Type the sentence, set the options, press Translate and wait until this press's answer is in the page."""
    page.fill("#sentence textarea", sentence)
    if greedy:
        page.check("#greedy input[type=checkbox]")
    if n_best is not None:
        page.fill("#n-best input[type=number]", str(n_best))
        page.press("#n-best input[type=number]", "Enter")
    # The page counts its answers (a hidden number): wait for this press's, not the previous one.
    answers = int(page.input_value("#answers input"))
    page.click("#translate-button")
    page.wait_for_function("(n) => Number(document.querySelector('#answers input').value) > n", arg=answers)


def translation_text(page) -> str:
    return page.input_value("#translation textarea")


def notice_text(page) -> str:
    return page.inner_text("#notice")


def open_look(page) -> None:
    page.get_by_role("tab", name="Look").click()
    page.wait_for_selector("#heatmap svg")


def heatmap(page) -> dict:
    """What the heatmap shows, read from the DOM: its axis labels, its cell values and its title."""
    return page.evaluate(
        """() => {
        const box = document.querySelector('#heatmap');
        const texts = (cls) => [...box.querySelectorAll(cls)].map((e) => e.textContent);
        return {
            rows: texts('.vx-row-label'),
            columns: texts('.vx-column-label'),
            cells: [...box.querySelectorAll('.vx-cell')].map((e) => parseFloat(e.dataset.value)),
            masked: box.querySelectorAll('.vx-masked').length,
            title: box.querySelector('.vx-title').textContent,
        };
    }"""
    )


def choose(page, element_id: str, value: str) -> None:
    """Click a radio button of a gr.Radio and wait for the heatmap to be redrawn."""
    before = page.inner_html("#heatmap")
    page.locator(f"#{element_id} input[type=radio][value='{value}']").check()
    page.wait_for_function("(before) => document.querySelector('#heatmap').innerHTML !== before", arg=before)


def best_tokens(reference, sentence: str, **generate_kwargs) -> tuple[str, list[str], list[str]]:
    """generate()'s text of the best hypothesis, with the source tokens and the generated tokens (as row labels)."""
    model, tokenizer = reference
    inputs = tokenizer(sentence, return_tensors="pt", truncation=True)
    generated = model.generate(**inputs, **generate_kwargs)[0].tolist()
    text = tokenizer.decode(generated, skip_special_tokens=True)
    target = generated[1:]
    while target and target[-1] == tokenizer.pad_token_id:
        target.pop()
    source_tokens = tokenizer.convert_ids_to_tokens(inputs["input_ids"][0].tolist())
    return text, display_tokens(source_tokens), display_tokens(tokenizer.convert_ids_to_tokens(target))


def test_translate_equals_generate_and_heatmap_axes_carry_the_tokens(page, reference):
    translate(page, SENTENCE)
    expected, source_tokens, target_tokens = best_tokens(reference, SENTENCE)  # the paper's beam 4, GNMT 0.6
    assert expected.strip()
    assert translation_text(page) == expected
    assert notice_text(page).startswith("Translated in")  # and no warning
    screenshot(page, "1-translate")

    open_look(page)
    shown = heatmap(page)
    assert shown["rows"] == target_tokens and shown["columns"] == source_tokens
    assert len(shown["cells"]) == len(source_tokens) * len(target_tokens)
    for row in range(len(target_tokens)):  # each output token's attention is a distribution over the source
        weights = shown["cells"][row * len(source_tokens) : (row + 1) * len(source_tokens)]
        assert sum(weights) == pytest.approx(1.0, abs=len(weights) * 1e-4)
    assert "decoder layer 1, mean over heads" in shown["title"]
    screenshot(page, "2-look-cross")


def test_switching_layer_head_and_kind_changes_the_picture(page, reference):
    translate(page, SENTENCE)
    _, source_tokens, target_tokens = best_tokens(reference, SENTENCE)
    open_look(page)
    mean = heatmap(page)
    choose(page, "head", "2")
    head2 = heatmap(page)
    assert "head 2 of 4" in head2["title"] and head2["cells"] != mean["cells"]
    assert head2["rows"] == mean["rows"] and head2["columns"] == mean["columns"]
    choose(page, "layer", "0")
    layer0 = heatmap(page)
    assert "decoder layer 0, head 2" in layer0["title"] and layer0["cells"] != head2["cells"]

    choose(page, "kind", "encoder self-attention")
    encoder = heatmap(page)
    assert encoder["rows"] == source_tokens and encoder["columns"] == source_tokens
    assert "encoder layer 0" in encoder["title"]
    screenshot(page, "3-look-encoder")

    choose(page, "kind", "decoder masked self-attention")
    decoder = heatmap(page)
    length = len(target_tokens)
    assert decoder["rows"] == target_tokens and decoder["columns"][1:] == target_tokens[:-1]
    assert decoder["masked"] == length * (length - 1) // 2  # §3.2.3: no position attends to a later one
    assert len(decoder["cells"]) == length * (length + 1) // 2
    screenshot(page, "4-look-decoder")

    # An output token's source alignment: pick the third output token in the dropdown.
    choose(page, "kind", "encoder-decoder attention")
    page.click("#output-token input")
    page.locator("ul[role=listbox] li", has_text=f"2: {target_tokens[2]}").first.click()
    page.wait_for_function("document.querySelector('#alignment')?.dataset.position === '2'")
    assert page.get_attribute("#alignment", "data-target") == target_tokens[2]
    alignment = page.inner_text("#alignment")
    assert f"Output token 2 {target_tokens[2]} attends to" in alignment
    chips = page.evaluate("[...document.querySelectorAll('#alignment .vx-chip')].map((e) => e.textContent)")
    assert chips == source_tokens
    highlighted = page.evaluate("document.querySelector('#heatmap .vx-row-label[font-weight=\"700\"]').textContent")
    assert highlighted == target_tokens[2]
    screenshot(page, "5-look-alignment")


def test_greedy_and_n_best(page, reference):
    model, tokenizer = reference
    translate(page, SENTENCE, greedy=True)
    expected, _, _ = best_tokens(reference, SENTENCE, num_beams=1)
    assert translation_text(page) == expected

    page.uncheck("#greedy input[type=checkbox]")
    translate(page, SENTENCE, n_best=3)
    inputs = tokenizer(SENTENCE, return_tensors="pt")
    expected = tokenizer.batch_decode(
        model.generate(**inputs, num_beams=4, num_return_sequences=3), skip_special_tokens=True
    )
    rows = page.evaluate(  # Gradio's table draws its body rows as div role=row (a virtual list)
        "[...document.querySelectorAll('#hypotheses div[role=row]')].map((row) => "
        "[...row.querySelectorAll('[role=gridcell]')].map((cell) => cell.innerText.trim()))"
    )
    assert [row[1] for row in rows] == [text.strip() for text in expected]
    assert translation_text(page) == expected[0]
    scores = [float(row[2]) for row in rows]
    assert scores == sorted(scores, reverse=True)
    screenshot(page, "6-n-best")


def test_bad_inputs_get_a_message_in_the_page(page, reference, tmp_path):
    translate(page, "   ")
    assert "empty" in notice_text(page)
    assert translation_text(page) == ""

    long = " ".join([SENTENCE] * 8)
    translate(page, long)
    assert f"cut to its first {MAX_SOURCE_TOKENS} tokens" in notice_text(page)
    expected, source_tokens, _ = best_tokens(reference, long)  # truncation=True: the tokenizer's 40 tokens
    assert translation_text(page) == expected
    screenshot(page, "7-too-long")
    open_look(page)
    assert heatmap(page)["columns"] == source_tokens
    screenshot(page, "8-too-long-look")

    page.fill("#model-source input, #model-source textarea", str(tmp_path))
    page.click("#load-model")
    page.wait_for_function("document.querySelector('#model-status').innerText.includes('not a model folder')")
    status = page.inner_text("#model-status")
    assert str(tmp_path) in status and "no config.json, so it is not a model folder" in status
    screenshot(page, "9-not-a-model")
    # The model loaded before is still the one in use.
    page.get_by_role("tab", name="Translate").click()
    translate(page, SENTENCE)
    assert translation_text(page) == best_tokens(reference, SENTENCE)[0]


def test_position_encoding_tab(page):
    page.get_by_role("tab", name="Position encoding").click()
    page.wait_for_selector("#pe-matrix svg image")
    shapes = page.evaluate(
        "['#pe-matrix', '#pe-similarity'].map((id) => { const s = document.querySelector(id + ' svg'); "
        "return [s.dataset.rows, s.dataset.columns]; })"
    )
    assert shapes == [[str(MAX_SOURCE_TOKENS), "32"], [str(MAX_SOURCE_TOKENS), str(MAX_SOURCE_TOKENS)]]
    screenshot(page, "10-position-encoding")
