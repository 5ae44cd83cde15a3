"""bench/routing/encoder_table.py reads only its own runs from the results folder: another
bench's JSON beside them (bench/routing/encoders.py writes fast_encoders_seed0.json there) is not a run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from bench.routing.encoder_table import table_text

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "routing" / "results" / "encoders"


def test_a_foreign_json_in_the_results_folder_is_not_read_as_a_run(tmp_path: Path) -> None:
    for f in RESULTS.glob("llmrouter_standard_s0_minilm.*"):
        shutil.copy(f, tmp_path)
    (tmp_path / "fast_encoders_seed0.json").write_text(json.dumps({"kinds": ["minilm"]}))
    text = table_text(tmp_path)
    assert "llmrouter/standard" in text and "tollgate" in text
