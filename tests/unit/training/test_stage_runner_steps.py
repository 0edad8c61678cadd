"""run_stage's named steps (training/stage_runner.py), each on its own: files, the export's preparation
and publication, the commands, the output report and the servers' stop."""

from __future__ import annotations

import subprocess
import sys

import pytest

from drafter_operator.training import stage_runner as sr


def test_write_files_puts_each_config_file_in_the_files_directory(tmp_path):
    sr.write_files({"files": [{"name": "a.yaml", "text": "x: 1\n"}, {"name": "b.json", "text": "{}"}]},
                   str(tmp_path / "files"))
    assert sorted(p.name for p in (tmp_path / "files").iterdir()) == ["a.yaml", "b.json"]
    assert (tmp_path / "files" / "a.yaml").read_text() == "x: 1\n"


def test_prepare_export_refuses_an_existing_output_without_overwrite(tmp_path):
    (tmp_path / "out").mkdir()
    publish = {"path": str(tmp_path / "out"), "staging": str(tmp_path / ".out.staging"), "overwrite": False}
    with pytest.raises(sr.StageFailed) as failed:
        sr.prepare_export(publish)
    assert failed.value.code == 1 and failed.value.fields["reason"] == "OutputExists"
    sr.prepare_export({**publish, "overwrite": True})  # allowed: no refusal


def test_run_commands_stops_at_the_first_failure_with_its_exit_code_and_output(tmp_path):
    marker = tmp_path / "ran"
    commands = [{"argv": [sys.executable, "-c", "print('first')"]},
                {"argv": [sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"]},
                {"argv": [sys.executable, "-c", f"open({str(marker)!r}, 'w')"]}]
    with pytest.raises(sr.StageFailed) as failed:
        sr.run_commands(commands, [], None, ready_timeout=5)
    assert failed.value.code == 3
    assert failed.value.fields["reason"] == "CommandFailed" and failed.value.fields["tail"] == "boom"
    assert not marker.exists()


def test_run_commands_keeps_a_server_running_and_fails_one_that_exits_before_it_answers():
    servers: list[subprocess.Popen] = []
    sleeper = {"argv": [sys.executable, "-c", "import time; time.sleep(60)"], "server": True}
    sr.run_commands([sleeper], servers, None, ready_timeout=5)
    assert len(servers) == 1 and servers[0].poll() is None
    sr.stop_servers(servers)
    assert servers[0].poll() is not None
    quitter = {"argv": [sys.executable, "-c", "pass"], "server": True, "readyUrl": "http://127.0.0.1:9/health"}
    with pytest.raises(sr.StageFailed) as failed:
        sr.run_commands([quitter], servers, None, ready_timeout=5)
    assert failed.value.fields["reason"] == "ServerNotReady"
    sr.stop_servers(servers)


def test_publish_output_reports_a_failure_to_publish(tmp_path):
    publish = {"path": str(tmp_path / "out"), "staging": str(tmp_path / "missing"), "overwrite": False, "tag": "g1"}
    with pytest.raises(sr.StageFailed) as failed:
        sr.publish_output(publish)
    assert failed.value.fields["reason"] == "PublishFailed" and "wrote nothing" in failed.value.fields["tail"]


def test_output_report_sizes_each_output_and_marks_the_published_one(tmp_path):
    (tmp_path / "a").write_text("12345")
    plan = {"outputs": {"dataset": str(tmp_path / "a"), "drafter": str(tmp_path / "d")}}
    report = sr.output_report(plan, {"path": str(tmp_path / "d")}, "sha256:abc")
    assert report["dataset"] == {"path": str(tmp_path / "a"), "sizeBytes": 5}
    assert report["drafter"] == {"path": str(tmp_path / "d"), "sizeBytes": None, "contentDigest": "sha256:abc"}
    assert "contentDigest" not in sr.output_report(plan, None, None)["drafter"]


def test_stop_servers_kills_one_that_ignores_terminate():
    stubborn = subprocess.Popen([sys.executable, "-c",
                                 "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                                 "print('ready', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    stubborn.stdout.readline()  # the handler is installed
    sr.stop_servers([stubborn], grace=0.2)
    assert stubborn.wait(timeout=5) == -9


def test_a_server_whose_port_already_answers_is_refused_not_mistaken_for_ours():
    """Pods sharing a network namespace (hostNetwork, the local cluster) would otherwise talk to another stage's
    server on the same port, and lose it when that stage ends."""
    import http.server
    import threading

    other = http.server.HTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    servers: list[subprocess.Popen] = []
    ours = {"argv": [sys.executable, "-c", "import time; time.sleep(60)"], "server": True,
            "readyUrl": f"http://127.0.0.1:{other.server_port}/health"}
    try:
        with pytest.raises(sr.StageFailed) as failed:
            sr.run_commands([ours], servers, None, ready_timeout=5)
    finally:
        other.shutdown()
        sr.stop_servers(servers)
    assert failed.value.fields["reason"] == "ServerNotReady" and "another process" in failed.value.fields["tail"]
    assert servers == []  # never started


def test_a_failed_command_names_the_server_that_died_under_it():
    servers = [subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(5)"])]
    servers[0].wait()
    client = {"argv": [sys.executable, "-c", "import sys; print('connection refused'); sys.exit(1)"]}
    with pytest.raises(sr.StageFailed) as failed:
        sr.run_commands([client], servers, None, ready_timeout=5)
    tail = failed.value.fields["tail"]
    assert tail.startswith("connection refused") and tail.endswith("exited with code 5")


def test_each_stage_gets_a_loopback_port_nothing_listens_on():
    import socket

    port = sr.free_loopback_port()
    with socket.socket() as bound:
        bound.bind(("127.0.0.1", port))  # free: binding it succeeds
