"""``python demo.py`` end to end: the page served on 127.0.0.1, driven in a headless Chromium
(the system's, with its chromedriver): typed text gets translate.py's translation and an
attention heatmap whose cells name their token pair and weight on hover; an empty box gets a
message, and the page keeps answering."""

import re
import socket
import subprocess
import time
import urllib.request

import pytest

from tests.helpers.commands import run_script, script_command, script_environment
from tests.helpers.run_if import chromium_location, run_if

pytestmark = [pytest.mark.slow, run_if(chromium=True)]

SEARCH = ("search.beam_size=3", "search.length_penalty=1.0", "search.max_len_b=12")
STARTUP_SECONDS = 120


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until_served(process: subprocess.Popen, url: str) -> None:
    """Return once ``url`` answers; fail with the server's output if it exits or takes long."""
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"demo.py exited with {process.returncode}:\n{process.stderr.read()}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.3)
    pytest.fail(f"demo.py did not serve {url} in {STARTUP_SECONDS} s")


@pytest.fixture
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    chromium, chromedriver = chromium_location()
    options = Options()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", "--window-size=1280,1500"):  # fmt: skip
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(chromedriver), options=options)
    yield driver
    driver.quit()


def test_the_page_translates_as_translate_py_and_draws_the_attention(tmp_path, toys, browser):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    toy = toys["post"]
    text = toy.val_texts[0]
    ckpt = f"ckpt_path={toy.checkpoint.path}"
    port = free_port()
    server = subprocess.Popen(
        script_command("demo.py", ckpt, f"port={port}", *SEARCH),
        cwd=tmp_path, env=script_environment(), stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        expected = run_script("translate.py", ckpt, *SEARCH, cwd=tmp_path, stdin=text + "\n")
        assert expected.returncode == 0, expected.stderr
        url = f"http://127.0.0.1:{port}/"
        wait_until_served(server, url)
        browser.get(url)
        wait = WebDriverWait(browser, 60)
        box = wait.until(lambda page: page.find_element(By.CSS_SELECTOR, "#source textarea"))

        def answer(expected_text: str | None = None):
            """The translation box's text once it is filled, or the message once it shows."""
            browser.find_element(By.CSS_SELECTOR, "#translate").click()
            if expected_text is None:
                return wait.until(lambda page: page.find_element(By.ID, "message").text)
            return wait.until(
                lambda page: page.find_element(
                    By.CSS_SELECTOR, "#translation textarea"
                ).get_attribute("value")
            )

        box.send_keys(text)
        assert answer(text) == expected.stdout.strip()
        assert expected.stdout.strip()
        drawn = wait.until(
            lambda page: page.execute_script(
                "const plot = document.querySelector('#attention .js-plotly-plot');"
                "const trace = plot && plot._fullData && plot._fullData[0];"
                "return trace && [trace.type, trace.z.length, trace.z[0].length,"
                " plot.querySelectorAll('.hm image').length, plot.layout.title.text];"
            )
        )
        source_tokens = len(toy.checkpoint.tokenizer(text)["input_ids"]) + 1  # and EOS
        kind, rows, columns, images, title = drawn
        assert (kind, columns, images) == ("heatmap", source_tokens, 1)
        assert rows >= 1 and title == "cross attention, layer 1, mean over heads"
        cell = browser.find_element(By.CSS_SELECTOR, "#attention .nsewdrag")
        ActionChains(browser).move_to_element(cell).perform()  # the middle cell's hover label
        hover = wait.until(
            lambda page: page.execute_script(
                "const label = document.querySelector('#attention .hoverlayer .hovertext');"
                "return label && label.textContent;"
            )
        )
        assert re.fullmatch(r".+ → .+weight [01]\.\d{3}", hover), hover
        nbest = browser.find_element(By.ID, "nbest").text
        assert expected.stdout.strip() in nbest
        browser.save_screenshot(str(tmp_path / "demo.png"))
        assert (tmp_path / "demo.png").read_bytes()[:4] == b"\x89PNG"

        box.send_keys(Keys.CONTROL, "a", Keys.DELETE)  # as typed: clear() sends no input event
        assert answer().startswith("error: the input box is empty")
        assert "Traceback" not in browser.find_element(By.TAG_NAME, "body").text
        box.send_keys(text)
        assert answer(text) == expected.stdout.strip()
        assert server.poll() is None
    finally:
        server.terminate()
        server.wait(timeout=30)
