from ops.bench.gate import split_wall


def test_the_shared_wall_time_is_split_by_request_seconds_and_the_rounds_are_kept_apart():
    timings = {
        "target": {"candidate": 30.0, "champion": 10.0},
        "general": {"candidate": 6.0, "champion": 4.0},
        "drift": {"candidate": 12.5},
        "tasks_wall": {"all": 25.0},
        "target_rounds": {"rounds": 3, "tasks": 24},
    }
    by_suite, rounds = split_wall(timings)
    # 50 request-seconds ran in 25 s of wall time: each share is half its request seconds
    assert by_suite == {
        "target": {"candidate": 15.0, "champion": 5.0},
        "general": {"candidate": 3.0, "champion": 2.0},
        "drift": {"candidate": 12.5},
    }
    assert rounds == {"rounds": 3, "tasks": 24}
    assert "tasks_wall" in timings and "target_rounds" in timings  # the gate's own record is left alone
