"""The reports in a real browser: headless Chromium opens a real sweep's ``compare.html`` and one of
its runs' ``report.html`` (a two-cell sweep against the test database, about 6 s of load).

For each page: every ``<img>`` loaded (complete, naturalWidth > 0), the browser console logged no
error (level SEVERE), the summary table is there, and a full-page screenshot is saved under the
test's tmp_path (``<page>.png``; kept by pytest under its basetemp for a look).

Needs Debian's ``chromium`` and ``chromium-driver`` (``apt-get install chromium chromium-driver``;
``make test`` installs them as root: ``tests/prerequisites.sh``) and selenium (the ``test`` extra). Selenium is given
/usr/bin/chromedriver and /usr/bin/chromium, so Selenium Manager (which downloads drivers and
browsers) never runs; the test fails if it is called. Without Chromium the test fails, saying how
to install it: it is never skipped.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import qbench

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
INSTALL_HINT = "apt-get install chromium chromium-driver (Debian's packages; make test installs them when run as root)"
WIDTH, HEIGHT, MAX_HEIGHT = 1200, 900, 16000
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
WORKERS = (1, 2)

#: Where each page's summary table is: compare.html's cells table has an id; report.html's summary
#: table has none and is the first table after the "Summary" heading.
SUMMARY_TABLE = {
    "report": "//h2[normalize-space()='Summary']/following-sibling::table[1]",
    "compare": "//table[@id='cells']",
}

IMAGES_JS = "return Array.from(document.images, i => ({alt: i.alt, complete: i.complete, width: i.naturalWidth}));"


@pytest.fixture(scope="module")
def pages(dsn, tmp_path_factory) -> dict[str, Path]:
    """{"report": a run's report.html, "compare": the sweep's compare.html} of one real two-cell
    sweep (workers 1 and 2, 2 s measured after 1 s warm-up each)."""
    tmp = tmp_path_factory.mktemp("browser")
    spec = tmp / "workers.toml"
    spec.write_text('description = "browser test"\nworkload = "default"\nrepetitions = 1\n'
                    '[fixed]\nduration = "2s"\nwarmup = "1s"\n'
                    f"[matrix]\nworkers = {list(WORKERS)}\n")
    proc = qbench("sweep", str(spec), "--dsn", dsn, "--results", str(tmp / "results"), timeout=180)
    assert proc.returncode == 0, f"qbench sweep failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    (sweep_dir,) = (tmp / "results" / "sweeps").iterdir()
    reports = sorted(sweep_dir.glob("runs/*/report.html"))
    assert len(reports) == len(WORKERS), reports
    return {"report": reports[0], "compare": sweep_dir / "compare.html"}


def _no_selenium_manager(*_args, **_kwargs):
    raise AssertionError("selenium called Selenium Manager (it downloads drivers): "
                         f"it should have used {CHROMEDRIVER}")


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium (--no-sandbox: the tests run as root) driven through Debian's
    chromedriver, its console log kept at every level; quit after the module."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.is_file()]
    if missing:
        pytest.fail(f"this test needs headless Chromium and {' and '.join(missing)} is missing; "
                    f"install it with: {INSTALL_HINT}", pytrace=False)
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        from selenium.webdriver.common.selenium_manager import SeleniumManager
    except ImportError as err:
        pytest.fail(f"this test needs selenium ({err}); install it with: make test "
                    "(it runs pip install -e '.[test]')", pytrace=False)

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={WIDTH},{HEIGHT}"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(SeleniumManager, "binary_paths", _no_selenium_manager)
        driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    yield driver
    driver.quit()


def _screenshot(driver, path: Path) -> Path:
    """Save a screenshot of the whole page (the window stretched to its height, at most
    MAX_HEIGHT px) to ``path``; returns ``path``."""
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(WIDTH, min(max(height, HEIGHT), MAX_HEIGHT))
    assert driver.save_screenshot(str(path)), f"screenshot not written: {path}"
    return path


@pytest.mark.parametrize("name", sorted(SUMMARY_TABLE))
@pytest.mark.slow
def test_page_loads_in_chromium_with_its_images_and_no_console_error(name, browser, pages, tmp_path):
    """The page opened from disk in headless Chromium: a full-page screenshot saved, then every image
    loaded, no console error, and its summary table shown with its rows."""
    from selenium.webdriver.common.by import By

    page = pages[name]
    browser.get_log("browser")  # drop anything an earlier page left
    browser.set_window_size(WIDTH, HEIGHT)
    browser.get(page.as_uri())
    shot = _screenshot(browser, tmp_path / f"{name}.png")
    assert shot.read_bytes().startswith(PNG_SIGNATURE), f"{shot} is not a PNG"

    images = browser.execute_script(IMAGES_JS)
    assert images, f"{page}: no <img> on the page"
    broken = [i for i in images if not (i["complete"] and i["width"] > 0)]
    assert not broken, f"{page}: {len(broken)} of {len(images)} images did not load: {broken} (screenshot {shot})"

    errors = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert not errors, f"{page}: console errors: {errors} (screenshot {shot})"

    tables = browser.find_elements(By.XPATH, SUMMARY_TABLE[name])
    assert len(tables) == 1 and tables[0].is_displayed(), \
        f"{page}: summary table {SUMMARY_TABLE[name]} missing or hidden (screenshot {shot})"
    rows = tables[0].find_elements(By.XPATH, ".//tr[td]")
    if name == "compare":
        assert len(rows) == len(WORKERS), f"{page}: {len(rows)} cell rows, expected {len(WORKERS)}"
    else:
        heads = [r.find_element(By.TAG_NAME, "th").text for r in rows]
        assert heads[:1] == ["throughput"] and rows[0].find_element(By.TAG_NAME, "td").text.endswith("jobs/s"), \
            f"{page}: summary table rows {heads}"


FIT_WIDTH = 1280


@pytest.mark.parametrize("name", sorted(SUMMARY_TABLE))
@pytest.mark.slow
def test_page_fits_a_1280_px_window(name, browser, pages):
    """No table pushes the page wider than the window: wide tables scroll inside themselves."""
    browser.set_window_size(FIT_WIDTH, HEIGHT)
    browser.get(pages[name].as_uri())
    width = browser.execute_script("return document.documentElement.scrollWidth")
    assert width <= FIT_WIDTH, f"{pages[name]}: the page is {width} px wide"


GREEN, RED = "rgba(46, 125, 50, 1)", "rgba(198, 40, 40, 1)"


@pytest.mark.parametrize("case, item", [("clean", "invariants"), ("suspect", "trust"), ("broken", "invariants"),
                                        ("missed", "SLO")])
@pytest.mark.slow
def test_the_verdict_card_is_green_or_red_with_its_reason(case, item, browser, tmp_path):
    """The report's first block, as Chromium draws it: a clean run's items green; a suspect run's trust, a
    run's broken invariants and a missed SLO red, each with its reason shown."""
    import json
    import shutil

    from selenium.webdriver.common.by import By

    from bench.report.run_page import render_report
    from bench.results import slo

    run_dir = tmp_path / case
    shutil.copytree(Path(__file__).parent / "fixtures" / "verdict", run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    summary["slo"] = slo.judge("claim_p99<=1s", summary)
    if case == "suspect":
        summary["suspect"], summary["suspect_reasons"] = True, ["load generator CPU reached 97 % of a core"]
    elif case == "broken":
        summary["invariants"]["lost_jobs"] = 3
    elif case == "missed":
        summary["slo"] = slo.judge("claim_p99<=100us", summary)
    (run_dir / "summary.json").write_text(json.dumps(summary))
    browser.set_window_size(WIDTH, HEIGHT)
    browser.get(render_report(run_dir).as_uri())
    card = browser.find_element(By.ID, "verdict")
    assert card.location["y"] < browser.find_element(By.TAG_NAME, "h2").location["y"]
    element = card.find_element(By.CSS_SELECTOR, f'[data-name="{item}"]')
    colour = element.value_of_css_property("border-left-color")
    reason = element.find_element(By.CLASS_NAME, "reason")
    assert reason.is_displayed() and reason.text
    if case == "clean":
        assert colour == GREEN and all(e.value_of_css_property("border-left-color") != RED
                                       for e in card.find_elements(By.CLASS_NAME, "item"))
    else:
        assert colour == RED, (case, item, colour)
        assert {"suspect": "97 %", "broken": "3 lost", "missed": "claim_p99<=100us measured"}[case] in reason.text
