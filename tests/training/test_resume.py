import json
import time

import pytest

from bertforge.training.resume import ARGS_FILE, run_wall_seconds


@pytest.mark.parametrize("parts, before", [(None, 0.0), ([{"wall_s_before": 40.0}, {"wall_s_before": 100.0}], 100.0),
                                           ([{"wall_s_before": None}], 0.0)])
def test_a_runs_wall_time_counts_the_parts_before_the_last_resumption(tmp_path, parts, before):
    """The last resumption's record holds what every part before it took (a checkpoint of a version that did not
    record it: None, so this part alone)."""
    record = {"seed": 1} | ({"resumed": parts} if parts else {})
    (tmp_path / ARGS_FILE).write_text(json.dumps(record))
    started = time.perf_counter() - 5.0
    assert before + 5.0 <= run_wall_seconds(tmp_path, started) < before + 6.0
