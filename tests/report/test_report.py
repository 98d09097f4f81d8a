"""`rlvr report`: the page's content, the CLI, and the page as a real browser renders it."""

import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from rlvr.cli import main
from rlvr.report import load_run, plots, render_page
from tests.report.conftest import make_run

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]
HEALTH_AND_DISTRIBUTIONS = {"Health gates", "Reward per sample", "Response length per sample",
                            "Advantage per trained sample",
                            "Learner / engine probability per token"}
SAMPLES_PER_EVAL_POINT = 6  # 2 best, 2 worst, 2 random of 6 eval prompts
EVAL_POINTS = 3  # steps 0, 2, 4


class _Page(HTMLParser):
    """The images, the sample rows' cell texts and the headings of a page (or a dumped DOM)."""

    def __init__(self):
        super().__init__()
        self.images, self.sample_rows, self.headings = [], [], []
        self._row, self._in, self._text = None, None, ""

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "img":
            self.images.append(attrs)
        elif tag == "tr" and attrs.get("class") == "sample":
            self._row = []
        elif tag in ("td", "h2", "h3"):
            self._in, self._text = tag, ""

    def handle_data(self, data):
        if self._in:
            self._text += data

    def handle_endtag(self, tag):
        if tag == "td" and self._row is not None:
            self._row.append(self._text)
        elif tag in ("h2", "h3"):
            self.headings.append(self._text)
        elif tag == "tr" and self._row is not None:
            self.sample_rows.append(self._row)
            self._row = None
        if tag == self._in:
            self._in = None


@pytest.fixture
def no_rasterizing(monkeypatch):
    """Figures are built but not drawn to PNG (matplotlib's slow part), for tests of the
    page's text; the browser test draws them."""
    monkeypatch.setattr(plots, "figure_png", lambda fig: b"not drawn")


def _parse(text: str) -> _Page:
    page = _Page()
    page.feed(text)
    return page


def test_the_page_holds_plots_eval_scores_time_and_escaped_samples(fake_run, no_rasterizing):
    html = render_page([load_run(fake_run)])
    page = _parse(html)
    assert {"Health", "Curves", "Distributions", "Eval scores", "Time per step",
            "Sample completions"} <= set(page.headings)
    alts = [img["alt"] for img in page.images]
    assert {"Training reward", "Eval scores", "KL to the reference", "Policy entropy",
            "Completion length", "Clipped ratios", "Throughput",
            "time per step: run_a"} <= set(alts)
    assert HEALTH_AND_DISTRIBUTIONS <= set(alts)
    assert all(img["src"].startswith("data:image/png;base64,") for img in page.images)
    assert len(page.sample_rows) == SAMPLES_PER_EVAL_POINT * EVAL_POINTS
    # Completions are text, never markup: "<b>" in a completion is shown, not rendered.
    assert "&lt;b&gt;step 4&lt;/b&gt;" in html and "<b>step" not in html
    assert "finished, 4 steps" in html


def test_a_run_from_before_distributions_still_reports_with_a_note(tmp_path, no_rasterizing):
    older = make_run(tmp_path, name="older", distributions=False)
    html = render_page([load_run(older)])
    page = _parse(html)
    assert "Distributions" in page.headings and "No distributions.jsonl" in html
    assert not HEALTH_AND_DISTRIBUTIONS - {"Health gates"} & {i["alt"] for i in page.images}
    # Beside a newer run, the newer one's bands are drawn and the older one is named.
    both = render_page([load_run(older), load_run(make_run(tmp_path, name="newer"))])
    assert "Reward per sample" in {i["alt"] for i in _parse(both).images}
    assert "were recorded): older.</p>" in both


def test_without_eval_traces_the_table_shows_training_completions(fake_run, no_rasterizing):
    shutil.rmtree(fake_run / "traces" / "eval")
    html = render_page([load_run(fake_run)])
    assert "run_a: training completions" in html
    assert len(_parse(html).sample_rows) > 0
    shutil.rmtree(fake_run / "traces")
    assert "logging.save_traces=true" in render_page([load_run(fake_run)])


def test_cli_writes_the_report_and_compares_two_runs(tmp_path, capsys, no_rasterizing):
    a, b = make_run(tmp_path, name="lr_1e-5"), make_run(tmp_path, steps=2, name="lr_3e-5")
    config = (b / "config.yaml").read_text().replace("1.0e-05", "3.0e-05")
    (b / "config.yaml").write_text(config)
    assert main(["report", str(a)]) == 0
    assert (a / "report.html").exists() and str(a / "report.html") in capsys.readouterr().out
    assert main(["report", str(a), str(b)]) == 0
    html = (a / "report_compare.html").read_text()
    assert "lr_1e-5: objective/verifiable_reward" not in html  # labels are inside the PNGs
    assert "rlvr report: lr_1e-5 vs lr_3e-5" in html
    assert re.search(r"<tr class='differs'><td>optimizer.learning_rate</td>", html)
    assert "in progress (or stopped), 2 of 4 steps so far" in html
    same = make_run(tmp_path / "seed2", name="lr_1e-5")  # a second run of the same name
    out = tmp_path / "elsewhere" / "cmp.html"
    assert main(["report", str(a), str(same), "--output", str(out)]) == 0
    assert f"rlvr report: {tmp_path.name}/lr_1e-5 vs seed2/lr_1e-5" in out.read_text()


def _chromium(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}",
                           *args], capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(not Path(CHROMIUM).exists(),
                    reason=f"no {CHROMIUM}: apt-get install -y chromium (Debian's package)")
def test_a_real_browser_renders_the_plots_and_the_samples_table(fake_run, tmp_path):
    assert main(["report", str(fake_run)]) == 0
    page = fake_run / "report.html"
    # The page has no script; a copy gets one that records the size each image decoded to.
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace("</body>", (
        "<script>window.addEventListener('load', () => { for (const img of document.images) "
        "img.setAttribute('data-size', img.naturalWidth + 'x' + img.naturalHeight); });"
        "</script></body>")))
    dom = _chromium(["--dump-dom", probe.as_uri()], tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    rendered = _parse(dom.stdout)
    sizes = [tuple(map(int, img["data-size"].split("x"))) for img in rendered.images]
    assert len(sizes) >= 9 and all(w >= 400 and h >= 150 for w, h in sizes), sizes
    # The health panel and the distributions are drawn, not only named.
    assert HEALTH_AND_DISTRIBUTIONS <= {img["alt"] for img in rendered.images}
    assert len(rendered.sample_rows) == SAMPLES_PER_EVAL_POINT * EVAL_POINTS
    best_at_4 = [row for row in rendered.sample_rows if row[0] == "4" and row[2] == "best"]
    assert len(best_at_4) == 2 and all("<b>step 4</b>" in row[4] for row in best_at_4)

    shot = tmp_path / "page.png"
    result = _chromium([f"--screenshot={shot}", "--window-size=1400,3000", page.as_uri()],
                       tmp_path)
    assert result.returncode == 0 and shot.exists(), result.stderr[-2000:]
    from PIL import Image

    image = Image.open(shot).convert("RGB")
    assert image.size == (1400, 3000)
    colours = image.getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 50  # plots drawn, not a blank page


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.skipif(not Path(CHROMIUM).exists(),
                    reason=f"no {CHROMIUM}: apt-get install -y chromium (Debian's package)")
def test_the_quick_starts_report_shows_the_health_panel_and_distributions(tmp_path):
    """The quick start (SmolLM2 on addition, docs/getting-started.md) cut to 2 steps, then
    `rlvr report` on it, as a browser renders the page: the health panel and every step
    distribution are drawn from what the real run wrote."""
    out = tmp_path / "quickstart"
    assert main(["train", "configs/quickstart.yaml", f"experiment.output_dir={out}",
                 "experiment.total_episodes=16", "rollout.num_unique_prompts_rollout=2",
                 "rollout.num_samples_per_prompt_rollout=4", "rollout.response_length=24",
                 # every step updates: advantages and ratios at each
                 "algorithm.filter_zero_std_samples=false", "data.eval_holdout=4",
                 "eval.local_eval_every=1", "logging.progress_bar=false",
                 "rollout.engine=transformers", "checkpoint.save_final=false"]) == 0
    assert main(["report", str(out)]) == 0
    dom = _chromium(["--dump-dom", (out / "report.html").as_uri()], tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    rendered = _parse(dom.stdout)
    assert {"Health", "Distributions"} <= set(rendered.headings)
    assert HEALTH_AND_DISTRIBUTIONS <= {img["alt"] for img in rendered.images}
    assert "No distributions.jsonl" not in dom.stdout


@pytest.mark.parametrize("odd", [{"objective/scores": "n/a"},
                                 {"eval/$\\undefinedmacro$/pass@1": 0.5}],
                         ids=["a_string_value", "a_tex_looking_name"])
def test_an_odd_metric_line_does_not_stop_the_report(tmp_path, capsys, odd):
    """A string where a number belongs, or a metric name matplotlib parsed as TeX, raised an
    uncaught ValueError out of `rlvr report`."""
    import json

    run = make_run(tmp_path)
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    records[2].update(odd)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert main(["report", str(run)]) == 0
    assert (run / "report.html").is_file()
