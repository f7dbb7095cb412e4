"""/GPU-Activity's "Why is it slow?" lines: one line per group of devices with the same
finding (issue 44: the same paragraph said once per GPU pushed the charts 330 px down), the
range of its first figure, and each device's whole finding and what to try on demand."""

from __future__ import annotations

import re

from jupyterlab_nvdashboard.apps.activity import diagnosis_lines
from jupyterlab_nvdashboard.diagnosis import Diagnosis, Figure, Finding

STARVED = "starved: idle gaps of 0.5 s or more between bursts of work"
FIND_THE_WAIT = "find what the GPU waits for between steps"


def diagnosis(row: int, gaps_pct: float | None, label: str = "", cause: str = "starved",
              title: str = STARVED, advice: str = FIND_THE_WAIT) -> Diagnosis:
    finding = Finding(cause, title, (Figure("time in gaps", gaps_pct, "%", 30),
                                     Figure("utilization", 40.0, "%", 30)), "nvml", advice)
    return Diagnosis(row, label or f"SIMULATED GPU {row}", f"GPU-{row}", 30, 120.0, (finding,))


def summaries(text: str) -> list[str]:
    """Each line as it reads folded: its summary's text."""
    return [re.sub(r"<[^>]+>", "", summary)
            for summary in re.findall(r"<summary>(.*?)</summary>", text)]


def test_identical_findings_are_one_line_with_the_details_on_demand() -> None:
    text = diagnosis_lines([diagnosis(0, 12.2), diagnosis(1, 17.0), diagnosis(2, 15.0),
                            diagnosis(3, 13.4)], "2 min")
    assert summaries(text) == ["SIMULATED GPU 0–3: starved, time in gaps 12–17%"]
    assert text.count("<li") == 1 and "<details>" in text
    # Opened: each GPU's whole finding, and what to try, once.
    for row, gaps in ((0, "12%"), (1, "17%"), (2, "15%"), (3, "13%")):
        assert f"<b>SIMULATED GPU {row}</b> {STARVED}: time in gaps {gaps}," in text
    assert text.count(f"Try: {FIND_THE_WAIT}.") == 1


def test_different_findings_keep_their_own_lines_in_device_order() -> None:
    throttled = dict(cause="throttled", title="throttled: software power cap",
                     advice="check the power limit")
    text = diagnosis_lines([diagnosis(0, 30.0), diagnosis(1, 20.0, **throttled),
                            diagnosis(2, 30.0), diagnosis(3, 25.0, **throttled)], "10 min")
    assert summaries(text) == ["SIMULATED GPU 0, 2: starved, time in gaps 30%",
                               "SIMULATED GPU 1, 3: throttled, time in gaps 20–25%"]
    # The same cause with other advice is another line.
    text = diagnosis_lines([diagnosis(0, 30.0), diagnosis(1, 30.0, advice="something else")],
                           "2 min")
    assert len(summaries(text)) == 2


def test_devices_named_otherwise_and_figures_not_known_everywhere() -> None:
    text = diagnosis_lines([diagnosis(0, 10.0, label="GPU 0 · MIG 1"),
                            diagnosis(1, None, label="GPU 0 · MIG 2"),
                            diagnosis(2, 11.0, label="node-b GPU 0")], "2 min")
    # The first figure every device knows: utilization, since one has no time in gaps.
    assert summaries(text) == ["GPU 0 · MIG 1, GPU 0 · MIG 2, node-b GPU 0: starved, "
                               "utilization 40%"]
    assert summaries(diagnosis_lines([diagnosis(5, 10.0)], "2 min")) == [
        "SIMULATED GPU 5: starved, time in gaps 10%"]
